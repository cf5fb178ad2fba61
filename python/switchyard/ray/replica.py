"""One engine per Ray Serve replica, answering through `switchyard serve`'s
own OpenAI protocol (switchyard.OpenAIProtocol): the deployment's API is
serve's, field for field.

The replica keeps the set of block hashes its prefix cache holds, from the
engine's KV-cache events, and reports it to routers through Ray Serve's
routing stats (record_routing_stats), with its queue depth, KV usage and
its Prometheus metrics (the ingress's /metrics shows them per replica).
"""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any, AsyncIterator, Dict, List, Optional

import switchyard


def _replica_name() -> str:
    try:
        from ray import serve

        return serve.get_replica_context().replica_id.unique_id
    except Exception:  # outside a replica (tests, direct use)
        return "local"


class SwitchyardReplica:
    """engine: switchyard.Engine's arguments (model, manifest, profile,
    threads, tokenizer, chat_template). protocol: switchyard.OpenAIProtocol's
    (model_name, max_tokens_limit, max_n). max_reported_blocks bounds the
    hashes sent to routers (the most recently stored ones)."""

    def __init__(self, engine: Dict[str, Any], protocol: Optional[Dict[str, Any]] = None,
                 max_reported_blocks: int = 65536) -> None:
        self.engine = switchyard.Engine(**engine)
        self.protocol = switchyard.OpenAIProtocol(self.engine, **(protocol or {}))
        self.name = _replica_name()
        self.max_reported = max_reported_blocks
        self.cached: "OrderedDict[int, None]" = OrderedDict()
        self.events = True
        try:
            self.engine.enable_kv_events()
        except switchyard.Unsupported:
            self.events = False  # a cache without prefix caching: nothing to report

    # ---- KV events -> the set of cached block hashes

    def _drain_events(self) -> None:
        if not self.events:
            return
        for ev in self.engine.poll_kv_events(1 << 16):
            if ev.kind == "stored":
                self.cached[ev.block_hash] = None
                self.cached.move_to_end(ev.block_hash)
            elif ev.kind == "removed":
                self.cached.pop(ev.block_hash, None)
            elif ev.kind == "all_cleared":
                self.cached.clear()
            elif ev.kind == "lost":
                self.cached.clear()
                self.engine.enable_kv_events()  # starts over with a snapshot

    # ---- Ray Serve hooks

    def record_routing_stats(self) -> Dict[str, Any]:
        self._drain_events()
        m = self.engine.metrics()
        return {
            "replica": self.name,
            "block_hashes": list(self.cached)[-self.max_reported:],
            "queue_depth": m["running"] + m["waiting"],
            "kv_cache_usage_perc": m["kv_blocks_used"] / (m["kv_blocks_total"] or 1),
            "metrics": self.protocol.metrics(),
        }

    def check_health(self) -> None:
        self.engine.metrics()  # raises once the engine is gone

    def info(self) -> Dict[str, Any]:
        return {"kv_block_size": self.engine.kv_block_size, "model": self.protocol.model_name, "replica": self.name}

    # ---- the OpenAI API (block_hashes: read by the router, not here)

    async def openai(self, method: str, path: str, body: str, block_hashes: Optional[List[int]] = None,
                     prefilled: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """The answer to one request: status, body, media_type, replica."""
        extra = self._import(prefilled) if prefilled is not None else None
        answer = await self.protocol.answer(method, path, body)
        self._drain_events()
        out = {"status": answer.status, "body": answer.body, "media_type": answer.media_type, "replica": self.name}
        if extra is not None:
            out["disaggregation"] = extra
        return out

    async def openai_stream(self, path: str, body: str, block_hashes: Optional[List[int]] = None,
                            prefilled: Optional[Dict[str, Any]] = None) -> AsyncIterator[Dict[str, Any]]:
        """A streamed request: first {status, replica} (with the error body
        when it is refused), then {"events": server-sent events text}."""
        extra = self._import(prefilled) if prefilled is not None else None
        answer = await self.protocol.answer("POST", path, body)
        head = {"status": answer.status, "replica": self.name, "media_type": answer.media_type}
        if extra is not None:
            head["disaggregation"] = extra
        if answer.events is None:
            yield {**head, "body": answer.body}
            return
        yield head
        async for text in answer.events:
            yield {"events": text}
        self._drain_events()

    # ---- prefill/decode disaggregation

    async def prefill(self, path: str, body: str, block_hashes: Optional[List[int]] = None) -> Dict[str, Any]:
        """Computes the request's prompts (one token each) and returns their
        KV blocks. A request the protocol refuses moves nothing: the decode
        replica answers it with the same error."""
        start = time.perf_counter()
        try:
            prompts = self.protocol.prompts(path, body)
        except switchyard.ProtocolError:
            prompts = []
        blobs, seen = [], set()
        for ids in prompts:
            if tuple(ids) in seen or not ids:
                continue
            seen.add(tuple(ids))
            await self.engine.agenerate(ids, max_tokens=1, temperature=0.0)
            blobs.append(self.engine.export_kv(ids))
        self._drain_events()
        return {"kv": blobs, "prefill_ms": (time.perf_counter() - start) * 1000, "replica": self.name}

    def _import(self, prefilled: Dict[str, Any]) -> Dict[str, Any]:
        start = time.perf_counter()
        imported = sum(self.engine.import_kv(kv) for kv in prefilled["kv"])
        return {
            "kv_bytes": sum(len(kv) for kv in prefilled["kv"]),
            "kv_import_ms": (time.perf_counter() - start) * 1000,
            "imported_tokens": imported,
            "prefill_ms": prefilled["prefill_ms"],
            "prefill_replica": prefilled["replica"],
        }
