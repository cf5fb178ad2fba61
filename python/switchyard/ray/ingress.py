"""The OpenAI-compatible ingress of the Ray deployment: /v1/completions and
/v1/chat/completions (streaming too), /v1/models, /metrics.

It tokenizes (a switchyard.Tokenizer: no model in this process), computes
the prompt's prefix-cache block hashes for the router, and calls the engine
replicas through a deployment handle. A replica that dies is survived:
non-streaming requests are retried on another replica (generation has no
side effects); a stream that already sent text ends with an error event
saying the request can be retried (a stream that sent nothing is retried).
"""

import asyncio
import time
import uuid
from collections import defaultdict
from typing import Any, Dict, Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from ray import serve
from ray.exceptions import RayActorError

import switchyard

from .openai_protocol import BadRequest, parse, sse, usage

try:  # newer Ray names it; older ones raise RayActorError subclasses only
    from ray.exceptions import ActorUnavailableError
except ImportError:  # pragma: no cover
    ActorUnavailableError = RayActorError

REPLICA_GONE = (RayActorError, ActorUnavailableError)

app = FastAPI()


def _error(status: int, message: str, param: Optional[str] = None, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": None}}, status_code=status)


@serve.ingress(app)
class OpenAIIngress:
    def __init__(self, engine, tokenizer: str, model_name: str, chat_template: Optional[str] = None, prefill=None,
                 max_retries: int = 3) -> None:
        self.engine = engine
        self.prefill = prefill
        self.tokenizer = switchyard.Tokenizer(tokenizer, chat_template)
        self.model_name = model_name
        self.max_retries = max_retries
        self.block_size: Optional[int] = None
        self.replica_metrics: Dict[str, Dict[str, Any]] = {}
        self.counters = defaultdict(int)

    async def _block_hashes(self, ids):
        if self.block_size is None:
            self.block_size = (await self.engine.info.remote())["kv_block_size"]
        return switchyard.block_hashes(ids, self.block_size) if self.block_size else []

    def _note(self, done: Dict[str, Any]) -> None:
        self.replica_metrics[done["replica"]] = done["metrics"]
        self.counters["requests"] += 1

    # ---- routes

    @app.get("/v1/models")
    async def models(self):
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "owned_by": "switchyard"}]}

    @app.get("/metrics")
    async def metrics(self):
        lines = []
        for name in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc", "prompt_tokens_total",
                     "generation_tokens_total", "prefix_cache_queries_total", "prefix_cache_hits_total", "num_preemptions_total"):
            kind = "counter" if name.endswith("_total") else "gauge"
            lines.append(f"# TYPE switchyard:{name} {kind}")
            for replica, m in sorted(self.replica_metrics.items()):
                lines.append(f'switchyard:{name}{{replica="{replica}"}} {m[name]}')
        for name in ("requests", "retries", "streams_failed"):
            lines.append(f"# TYPE switchyard:ingress_{name}_total counter")
            lines.append(f"switchyard:ingress_{name}_total {self.counters[name]}")
        return PlainTextResponse("\n".join(lines) + "\n")

    @app.post("/v1/completions")
    async def completions(self, request: Request):
        return await self._handle(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(self, request: Request):
        return await self._handle(request, chat=True)

    async def _handle(self, request: Request, chat: bool):
        try:
            body = await request.json()
        except Exception:
            return _error(400, "the request body is not JSON")
        try:
            p = parse(body, chat, self.tokenizer)
        except BadRequest as e:
            return _error(400, str(e), e.param)
        hashes = await self._block_hashes(p.ids)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        if p.stream:
            return StreamingResponse(self._stream(rid, chat, p, hashes), media_type="text/event-stream")
        try:
            done = await self._generate(p, hashes)
        except switchyard.Error as e:
            return _error(400, str(e))
        except REPLICA_GONE as e:
            return _error(503, f"no engine replica could serve the request ({type(e).__name__}); retry it", kind="server_error")
        self._note(done)
        created = int(time.time())
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": done["text"]}, "finish_reason": done["finish_reason"]}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": done["text"], "finish_reason": done["finish_reason"], "logprobs": None}
            obj = "text_completion"
        out = {"id": rid, "object": obj, "created": created, "model": self.model_name, "choices": [choice], "usage": usage(done)}
        extra = {"replica": done["replica"]}
        if "disaggregation" in done:
            extra["disaggregation"] = done["disaggregation"]
        out["switchyard"] = extra
        return JSONResponse(out, headers={"x-switchyard-replica": done["replica"]})

    async def _generate(self, p, hashes) -> Dict[str, Any]:
        for attempt in range(self.max_retries + 1):
            try:
                if self.prefill is not None:
                    prefilled = self.prefill.prefill.remote(p.ids, p.params, block_hashes=hashes)
                    return await self.engine.decode.remote(p.ids, p.params, prefilled, block_hashes=hashes)
                return await self.engine.generate.remote(p.ids, p.params, block_hashes=hashes)
            except REPLICA_GONE:
                if attempt == self.max_retries:
                    raise
                self.counters["retries"] += 1
                await asyncio.sleep(0.2 * (attempt + 1))

    async def _stream(self, rid: str, chat: bool, p, hashes):
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(text: Optional[str], finish: Optional[str] = None, role: bool = False) -> Dict[str, Any]:
            if chat:
                delta = {"role": "assistant", "content": ""} if role else ({"content": text} if text is not None else {})
                c = {"index": 0, "delta": delta, "finish_reason": finish}
            else:
                c = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
            return {"id": rid, "object": obj, "created": created, "model": self.model_name, "choices": [c]}

        if chat:
            yield sse(chunk(None, role=True))
        sent = False
        for attempt in range(self.max_retries + 1):
            try:
                if self.prefill is not None:
                    prefilled = self.prefill.prefill.remote(p.ids, p.params, block_hashes=hashes)
                    gen = self.engine.options(stream=True).decode_stream.remote(p.ids, p.params, prefilled, block_hashes=hashes)
                else:
                    gen = self.engine.options(stream=True).stream.remote(p.ids, p.params, block_hashes=hashes)
                async for piece in gen:
                    if piece["text"]:
                        sent = True
                        yield sse(chunk(piece["text"]))
                    if "done" in piece:
                        done = piece["done"]
                        self._note(done)
                        yield sse(chunk(None if chat else "", done["finish_reason"]))
                        if p.include_usage:
                            u = {"id": rid, "object": obj, "created": created, "model": self.model_name, "choices": [],
                                 "usage": usage(done), "switchyard": {"replica": done["replica"]}}
                            yield sse(u)
                        yield "data: [DONE]\n\n"
                        return
                return
            except REPLICA_GONE as e:
                if not sent and attempt < self.max_retries:
                    self.counters["retries"] += 1
                    await asyncio.sleep(0.2 * (attempt + 1))
                    continue
                self.counters["streams_failed"] += 1
                yield sse({"error": {"message": f"the engine replica serving this stream went away ({type(e).__name__}) after "
                                                "part of the output was sent; the request is safe to retry",
                                     "type": "server_error", "code": "replica_unavailable", "retriable": True}})
                return
            except switchyard.Error as e:
                yield sse({"error": {"message": str(e), "type": "invalid_request_error", "code": None}})
                return
