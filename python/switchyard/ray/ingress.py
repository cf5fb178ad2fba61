"""The HTTP ingress of the Ray deployment: `switchyard serve`'s API, answered
by the engine replicas through serve's own protocol (switchyard.OpenAIProtocol).

The ingress is a door, like serve's HTTP layer: it checks the API key,
forwards each request (its path and body, untouched) to a replica chosen by
the router, and sends back what the replica's protocol answered, streamed or
whole. For the prefix-aware router it estimates the prompt's prefix-cache
block hashes with the model's tokenizer (a routing hint: a request the
estimate gets wrong is still answered exactly, only perhaps on a colder
replica). A replica that dies is survived: non-streaming requests are
retried on another replica (generation has no side effects); a stream that
already sent text ends with an error event saying the request can be
retried (a stream that sent nothing is retried).
"""

import asyncio
import json
from collections import defaultdict
from typing import Any, Dict, List, Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from ray import serve
from ray.exceptions import RayActorError

import switchyard

from .metrics import merge_replica_metrics
from .registry import live_replica_stats

try:  # newer Ray names it; older ones raise RayActorError subclasses only
    from ray.exceptions import ActorUnavailableError
except ImportError:  # pragma: no cover
    ActorUnavailableError = RayActorError

REPLICA_GONE = (RayActorError, ActorUnavailableError)
COMPLETIONS = {"/v1/completions": "completions", "/v1/chat/completions": "chat", "/v1/responses": "responses"}
API_PATHS = ("/tokenize", "/detokenize", "/tokenizer_info")

app = FastAPI()


def _error(status: int, message: str, code: Optional[str] = None, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": code}}, status_code=status)


def _gone(e: Exception) -> JSONResponse:
    return _error(503, f"no engine replica could serve the request ({type(e).__name__}); retry it", "replica_unavailable",
                  "server_error")


# (Helpers come before the class: @serve.ingress copies its methods with
# the module's globals as they are when the class is decorated.)


def _streams(body: str) -> bool:
    try:
        parsed = json.loads(body)
    except ValueError:
        return False
    return isinstance(parsed, dict) and parsed.get("stream") is True


def _routing_ids(body: bytes, endpoint: str, tokenizer: switchyard.Tokenizer) -> List[int]:
    """The prompt's token ids as far as the ingress can tell (the first
    prompt; [] when it cannot): only where the request goes depends on it."""
    try:
        req = json.loads(body)
        if endpoint == "responses":  # instructions and a text input; other shapes route by load
            instructions = [{"role": "system", "content": req["instructions"]}] if req.get("instructions") else []
            req = {"messages": instructions + [{"role": "user", "content": req["input"]}]}
            endpoint = "chat"
        if endpoint == "chat":
            messages = [m if not isinstance(m.get("content"), list) else
                        {**m, "content": "".join(p.get("text", "") for p in m["content"] if isinstance(p, dict))}
                        for m in req["messages"]]
            return tokenizer.encode(tokenizer.apply_chat_template(messages, add_generation_prompt=True), add_bos=False)
        prompt = req["prompt"]
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, list):
            return [int(t) for t in prompt]
        return tokenizer.encode(prompt, add_bos=True)
    except Exception:  # noqa: BLE001 - a hint only; the replica judges the request
        return []


@serve.ingress(app)
class OpenAIIngress:
    def __init__(self, engine, tokenizer: str, chat_template: Optional[str] = None, prefill=None, max_retries: int = 3,
                 api_key: Optional[str] = None, deployments: Optional[List[str]] = None) -> None:
        self.engine = engine
        self.prefill = prefill
        self.tokenizer = switchyard.Tokenizer(tokenizer, chat_template)
        self.max_retries = max_retries
        self.api_key = api_key
        self.deployments = deployments or ["SwitchyardEngine"]
        self.block_size: Optional[int] = None
        self.counters = defaultdict(int)

    # ---- routing hints

    async def _block_hashes(self, path: str, body: bytes) -> List[int]:
        if path not in COMPLETIONS:
            return []
        if self.block_size is None:
            self.block_size = (await self.engine.info.remote())["kv_block_size"]
        ids = _routing_ids(body, COMPLETIONS[path], self.tokenizer)
        return switchyard.block_hashes(ids, self.block_size) if self.block_size and ids else []

    # ---- routes

    @app.get("/health")
    async def health(self):
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics(self):
        replicas = {}
        for deployment in self.deployments:
            for replica, stats in live_replica_stats(deployment).items():
                if stats.get("metrics"):
                    replicas[replica] = stats["metrics"]
        ingress = {f"switchyard:ingress_{name}_total": self.counters[name] for name in ("requests", "retries", "streams_failed")}
        return PlainTextResponse(merge_replica_metrics(replicas, ingress), media_type="text/plain; version=0.0.4")

    @app.api_route("/{path:path}", methods=["GET", "POST"])
    async def api(self, path: str, request: Request):
        path = "/" + path
        if not (path.startswith("/v1/") or path in API_PATHS):
            return _error(404, "no such endpoint", "not_found")
        if self.api_key is not None and request.headers.get("authorization") != f"Bearer {self.api_key}":
            missing = "authorization" not in request.headers
            return _error(401, "Missing API key: send 'Authorization: Bearer <key>'" if missing else "Incorrect API key provided",
                          "invalid_api_key")
        body = (await request.body()).decode("utf-8", errors="replace")
        self.counters["requests"] += 1
        hashes = await self._block_hashes(path, body.encode())
        if path in COMPLETIONS and _streams(body):
            return await self._stream(path, body, hashes)
        try:
            done = await self._with_retries(lambda prefilled: self.engine.openai.remote(request.method, path, body, block_hashes=hashes,
                                                                                       prefilled=prefilled), path, body, hashes)
        except REPLICA_GONE as e:
            return _gone(e)
        headers = {"x-switchyard-replica": done["replica"]}
        content = done["body"]
        if done["status"] == 200 and path in COMPLETIONS:
            # Where it ran, beside OpenAI's fields (clients keep unknown members).
            out = json.loads(content)
            out["switchyard"] = {"replica": done["replica"], **({"disaggregation": done["disaggregation"]} if "disaggregation" in done else {})}
            content = json.dumps(out)
        return Response(content, status_code=done["status"], media_type=done["media_type"], headers=headers)

    async def _prefilled(self, path: str, body: str, hashes) -> Any:
        if self.prefill is None or path not in COMPLETIONS:
            return None
        return self.prefill.prefill.remote(path, body, block_hashes=hashes)

    async def _with_retries(self, call, path: str, body: str, hashes) -> Dict[str, Any]:
        for attempt in range(self.max_retries + 1):
            try:
                return await call(await self._prefilled(path, body, hashes))
            except REPLICA_GONE:
                if attempt == self.max_retries:
                    raise
                self.counters["retries"] += 1
                await asyncio.sleep(0.2 * (attempt + 1))

    async def _stream(self, path: str, body: str, hashes):
        # The replica's first item says whether the request was accepted: a
        # refused one is an error response, not a stream.
        for attempt in range(self.max_retries + 1):
            try:
                prefilled = await self._prefilled(path, body, hashes)
                gen = self.engine.options(stream=True).openai_stream.remote(path, body, block_hashes=hashes, prefilled=prefilled)
                head = await gen.__anext__()
                break
            except REPLICA_GONE as e:
                if attempt == self.max_retries:
                    return _gone(e)
                self.counters["retries"] += 1
                await asyncio.sleep(0.2 * (attempt + 1))
        headers = {"x-switchyard-replica": head["replica"], "Cache-Control": "no-cache"}
        if "body" in head:
            return Response(head["body"], status_code=head["status"], media_type=head["media_type"], headers=headers)
        return StreamingResponse(self._events(gen), media_type="text/event-stream", headers=headers)

    async def _events(self, gen):
        try:
            async for item in gen:
                yield item["events"]
        except REPLICA_GONE as e:
            self.counters["streams_failed"] += 1
            err = {"error": {"message": f"the engine replica serving this stream went away ({type(e).__name__}) after part of the "
                                        "output was sent; the request is safe to retry",
                             "type": "server_error", "code": "replica_unavailable", "retriable": True}}
            yield f"data: {json.dumps(err)}\n\n"
