"""One engine per Ray Serve replica.

The replica keeps the set of block hashes its prefix cache holds, from the
engine's KV-cache events, and reports it to routers through Ray Serve's
routing stats (record_routing_stats), with its queue depth and KV usage.
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
    threads, tokenizer, chat_template). max_reported_blocks bounds the hashes
    sent to routers (the most recently stored ones)."""

    def __init__(self, engine: Dict[str, Any], max_reported_blocks: int = 65536) -> None:
        self.engine = switchyard.Engine(**engine)
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

    def _metrics(self) -> Dict[str, Any]:
        m = self.engine.metrics()
        total = m["kv_blocks_total"] or 1
        return {
            "num_requests_running": m["running"],
            "num_requests_waiting": m["waiting"],
            "kv_cache_usage_perc": m["kv_blocks_used"] / total,
            "prompt_tokens_total": m["prompt_tokens"],
            "generation_tokens_total": m["generated_tokens"],
            "prefix_cache_queries_total": m["prompt_tokens"],
            "prefix_cache_hits_total": m["cached_tokens"],
            "num_preemptions_total": m["preemptions"],
        }

    # ---- Ray Serve hooks

    def record_routing_stats(self) -> Dict[str, Any]:
        self._drain_events()
        hashes = list(self.cached)[-self.max_reported:]
        m = self._metrics()
        return {
            "replica": self.name,
            "block_hashes": hashes,
            "queue_depth": m["num_requests_running"] + m["num_requests_waiting"],
            "kv_cache_usage_perc": m["kv_cache_usage_perc"],
        }

    def check_health(self) -> None:
        self.engine.metrics()  # raises once the engine is gone

    # ---- requests (block_hashes: read by the router, not here)

    def info(self) -> Dict[str, Any]:
        return {"kv_block_size": self.engine.kv_block_size, "model": self.engine.model_name, "replica": self.name}

    def _done(self, result: switchyard.Result, extra: Optional[Dict] = None) -> Dict[str, Any]:
        self._drain_events()
        out = {
            "text": result.text,
            "token_ids": result.token_ids,
            "finish_reason": result.finish_reason,
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "cached_tokens": result.cached_tokens,
            "ttft_ms": result.ttft_ms,
            "error": result.error,
            "replica": self.name,
            "metrics": self._metrics(),
        }
        out.update(extra or {})
        return out

    async def generate(self, ids: List[int], params: Dict[str, Any], block_hashes: Optional[List[int]] = None) -> Dict[str, Any]:
        return self._done(await self.engine.agenerate(ids, **params))

    async def stream(self, ids: List[int], params: Dict[str, Any], block_hashes: Optional[List[int]] = None) -> AsyncIterator[Dict]:
        async for chunk in self.engine.astream(ids, **params):
            if chunk.result is not None:
                yield {"text": chunk.text, "done": self._done(chunk.result)}
            else:
                yield {"text": chunk.text}

    # ---- prefill/decode disaggregation

    async def prefill(self, ids: List[int], params: Dict[str, Any], block_hashes: Optional[List[int]] = None) -> Dict[str, Any]:
        """Computes the prompt (one token) and returns its KV blocks."""
        start = time.perf_counter()
        first = await self.engine.agenerate(ids, **{**params, "max_tokens": 1})
        kv = self.engine.export_kv(ids)
        self._drain_events()
        return {"kv": kv, "prefill_ms": (time.perf_counter() - start) * 1000, "ttft_ms": first.ttft_ms, "replica": self.name}

    def _import(self, prefilled: Dict[str, Any]) -> Dict[str, Any]:
        start = time.perf_counter()
        cached = self.engine.import_kv(prefilled["kv"]) if prefilled["kv"] else 0
        return {
            "kv_bytes": len(prefilled["kv"]),
            "kv_import_ms": (time.perf_counter() - start) * 1000,
            "imported_tokens": cached,
            "prefill_ms": prefilled["prefill_ms"],
            "prefill_replica": prefilled["replica"],
        }

    async def decode(self, ids: List[int], params: Dict[str, Any], prefilled: Dict[str, Any],
                     block_hashes: Optional[List[int]] = None) -> Dict[str, Any]:
        extra = self._import(prefilled)
        return self._done(await self.engine.agenerate(ids, **params), {"disaggregation": extra})

    async def decode_stream(self, ids: List[int], params: Dict[str, Any], prefilled: Dict[str, Any],
                            block_hashes: Optional[List[int]] = None) -> AsyncIterator[Dict]:
        extra = self._import(prefilled)
        async for chunk in self.engine.astream(ids, **params):
            if chunk.result is not None:
                yield {"text": chunk.text, "done": self._done(chunk.result, {"disaggregation": extra})}
            else:
                yield {"text": chunk.text}
