"""`switchyard serve`'s OpenAI protocol, from Python, without a transport.

The protocol is the C++ one serve runs (tools/server/openai_protocol.h,
compiled into this package): the same parsing, defaults, refusals, tool
calls, logprobs and metrics. A door (the Ray deployment, your own server)
passes it a path and a body and sends back what it answers:

    protocol = switchyard.OpenAIProtocol(engine, model_name="smollm2")
    answer = await protocol.answer("POST", "/v1/chat/completions", body)
    if answer.events is not None:          # a stream: server-sent events
        async for text in answer.events: ...
    else:
        send(answer.status, answer.body, answer.media_type)
"""
from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import AsyncIterator, Optional, Union

from . import _core
from ._core import ProtocolError

# The generation endpoints, by path, as the protocol names them.
COMPLETIONS = {"/v1/completions": "completions", "/v1/chat/completions": "chat", "/v1/responses": "responses"}
JSON = "application/json"


@dataclass
class Answer:
    status: int
    body: str = ""
    media_type: str = JSON
    events: Optional[AsyncIterator[str]] = None  # a stream's server-sent events ("data: ...\n\n")


def _error(status: int, message: str, code: Optional[str] = None) -> Answer:
    return Answer(status, json.dumps({"error": {"message": message, "type": "invalid_request_error" if status < 500 else "server_error",
                                                "param": None, "code": code}}))


class OpenAIProtocol:
    """engine: a switchyard.Engine. model_name: the id clients must send
    ("": the model's name). max_tokens_limit and max_n: as serve's
    --max-tokens-limit and --max-n. Waiting for the engine happens in a pool
    of `threads` threads (the GIL released), never on the event loop."""

    def __init__(self, engine, model_name: str = "", max_tokens_limit: int = 4096, max_n: int = 8, threads: int = 64) -> None:
        self._p = engine._e.openai_protocol(model_name, max_tokens_limit, max_n)
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="switchyard-openai")

    @property
    def model_name(self) -> str:
        return self._p.model_name

    @property
    def in_flight(self) -> int:
        return self._p.in_flight

    def metrics(self) -> str:
        """Prometheus text: switchyard:* and vllm:* names, as serve's /metrics."""
        return self._p.metrics()

    def prompts(self, path: str, body: Union[str, bytes]):
        """The token ids of each prompt the request would run (ProtocolError
        when it is malformed)."""
        return self._p.prompts(_text(body), COMPLETIONS[path])

    async def answer(self, method: str, path: str, body: Union[str, bytes] = "") -> Answer:
        try:
            return await self._answer(method, path, _text(body))
        except ProtocolError as e:
            return Answer(e.status, e.body)
        except UnicodeDecodeError:
            return _error(400, "the request body is not valid UTF-8")

    async def _answer(self, method: str, path: str, body: str) -> Answer:
        loop = asyncio.get_running_loop()
        if method == "POST" and path in COMPLETIONS:
            call = await loop.run_in_executor(self._pool, self._p.start, body, COMPLETIONS[path])
            if call.streaming:
                return Answer(200, media_type="text/event-stream", events=self._events(call))
            return Answer(200, await loop.run_in_executor(self._pool, call.whole))
        if method == "GET" and path == "/v1/models":
            return Answer(200, self._p.models())
        if method == "GET" and path.startswith("/v1/models/"):
            return Answer(200, self._p.model(path[len("/v1/models/"):]))
        if method == "GET" and path == "/metrics":
            return Answer(200, self._p.metrics(), "text/plain; version=0.0.4")
        if method == "GET" and path == "/tokenizer_info":
            return Answer(200, self._p.tokenizer_info())
        if method == "POST" and path == "/tokenize":
            return Answer(200, self._p.tokenize(body))
        if method == "POST" and path == "/v1/embeddings":
            return Answer(200, await loop.run_in_executor(self._pool, self._p.embeddings, body))
        if method == "POST" and path == "/detokenize":
            return Answer(200, self._p.detokenize(body))
        return _error(404, f"no such endpoint: {method} {path}", "not_found")

    async def _events(self, call) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        done = False
        try:
            while not done:
                text, done = await loop.run_in_executor(self._pool, call.next_events, 100)
                if text:
                    yield text
        finally:
            del call  # a stream abandoned early releases (cancels) its requests


def _text(body: Union[str, bytes]) -> str:
    return body.decode("utf-8") if isinstance(body, (bytes, bytearray)) else body


__all__ = ["Answer", "OpenAIProtocol", "ProtocolError"]
