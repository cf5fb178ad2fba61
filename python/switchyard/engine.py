"""The engine, its results and streams, over switchyard._core."""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import AsyncIterator, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

from . import _core

Prompt = Union[str, Sequence[int]]

KV_BLOCK_STORED = 1
KV_BLOCK_REMOVED = 2
KV_ALL_CLEARED = 3
KV_EVENTS_LOST = 4
_KV_KINDS = {KV_BLOCK_STORED: "stored", KV_BLOCK_REMOVED: "removed", KV_ALL_CLEARED: "all_cleared", KV_EVENTS_LOST: "lost"}


@dataclass
class Result:
    """A finished request: the generated text (stop strings trimmed, as the
    CLI's JSON `text`), its token ids, why it ended, and its metrics."""

    text: str
    token_ids: List[int]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    ttft_ms: float
    e2e_ms: float
    error: str = ""


@dataclass
class Chunk:
    """What a stream delivers: new text and token ids; the last chunk has
    finish_reason set (and the request's Result in `result`)."""

    text: str
    token_ids: List[int]
    finish_reason: Optional[str] = None
    result: Optional[Result] = None


@dataclass
class KvEvent:
    """A change to an engine's prefix cache (switchyard.h, sy_kv_event):
    kind "stored" (block_hash, parent_hash, tokens), "removed" (block_hash),
    "all_cleared", or "lost" (events were dropped: resynchronise)."""

    kind: str
    sequence: int
    block_hash: int
    parent_hash: int
    tokens: List[int] = field(default_factory=list)
    device: int = 0
    timestamp: float = 0.0


class Tokenizer:
    """Text <-> token ids and chat templates. Opened from a tokenizer file or
    a model folder (no engine needed: what a router or an ingress uses), or
    an engine's own (Engine.tokenizer)."""

    def __init__(self, path: str, chat_template: Optional[str] = None, *, _core_tokenizer=None) -> None:
        self._t = _core_tokenizer if _core_tokenizer is not None else _core.Tokenizer(path, chat_template)

    @property
    def vocab_size(self) -> int:
        return self._t.vocab_size

    def encode(self, text: str, add_bos: bool = True) -> List[int]:
        return self._t.encode(text, add_bos)

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        return self._t.decode_bytes(list(ids), skip_special).decode("utf-8", errors="replace")

    def apply_chat_template(self, messages: List[Dict], add_generation_prompt: bool = True, **kwargs) -> str:
        """The conversation rendered by the chat template (as transformers
        renders it); kwargs: tools, documents, continue_final_message,
        chat_template_kwargs."""
        request = {"messages": messages, "add_generation_prompt": add_generation_prompt, **kwargs}
        return self._t.chat_render(json.dumps(request))


class Engine:
    """A model served by Switchyard's step engine.

    model: an ONNX file or a model folder; manifest: a YAML manifest (None:
    the default one installed beside libswitchyard, which serves any model);
    profile: the manifest profile; threads: 0 for the manifest's.
    """

    def __init__(
        self,
        model: Optional[str] = None,
        manifest: Optional[str] = None,
        profile: Optional[str] = None,
        threads: int = 0,
        tokenizer: Optional[str] = None,
        chat_template: Optional[str] = None,
    ) -> None:
        self._e = _core.Engine(model, manifest, profile, threads, tokenizer, chat_template)
        core_tok = self._e.tokenizer()
        self._tokenizer = Tokenizer("", _core_tokenizer=core_tok) if core_tok is not None else None

    # ---- lifetime

    def close(self) -> None:
        """Cancels what runs and frees the engine (also on garbage collection)."""
        self._e.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- facts

    @property
    def tokenizer(self) -> Optional[Tokenizer]:
        return self._tokenizer

    @property
    def model_name(self) -> str:
        return self._e.model_name()

    @property
    def model_path(self) -> str:
        return self._e.model_path()

    @property
    def max_context(self) -> int:
        return self._e.max_context()

    @property
    def vocab_size(self) -> int:
        return self._e.vocab_size()

    @property
    def kv_block_size(self) -> int:
        return self._e.kv_block_size()

    @property
    def sampling_defaults(self) -> Dict:
        """What the model folder recommends (generation_config.json)."""
        return json.loads(self._e.sampling_defaults())

    # ---- requests

    def _ids(self, prompt: Prompt) -> List[int]:
        if isinstance(prompt, str):
            if self._tokenizer is None:
                raise _core.InvalidArgument("a text prompt needs a tokenizer; give token ids")
            if not prompt:
                raise _core.InvalidArgument("the prompt is empty")
            return self._tokenizer.encode(prompt, True)
        return [int(t) for t in prompt]

    _SAMPLING = (
        "max_tokens", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
        "repetition_penalty", "seed", "stop", "stop_token_ids", "ignore_eos", "priority", "timeout", "constraint",
    )

    def _submit(self, prompt: Prompt, async_io: bool, **kw) -> "_core.Request":
        unknown = sorted(set(kw) - set(self._SAMPLING))
        if unknown:
            raise TypeError(f"unknown generation argument(s): {', '.join(unknown)}")
        kind, spec = None, None
        if kw.get("constraint") is not None:
            kind, spec = kw["constraint"]
            if spec is not None and not isinstance(spec, str):
                spec = json.dumps(spec)
        return self._e.submit(
            self._ids(prompt),
            int(kw.get("max_tokens", 16)),
            float(kw.get("temperature", 0.0)),
            float(kw.get("top_p", 1.0)),
            int(kw.get("top_k", 0)),
            float(kw.get("min_p", 0.0)),
            float(kw.get("presence_penalty", 0.0)),
            float(kw.get("frequency_penalty", 0.0)),
            float(kw.get("repetition_penalty", 1.0)),
            int(kw.get("seed", 0)),
            list(kw.get("stop") or []),
            [int(t) for t in (kw.get("stop_token_ids") or [])],
            bool(kw.get("ignore_eos", False)),
            int(kw.get("priority", 0)),
            float(kw.get("timeout") or 0.0) * 1000.0,
            kind,
            spec,
            async_io,
        )

    @staticmethod
    def _result(text: str, ids: List[int], info: Dict) -> Result:
        return Result(
            text=text,
            token_ids=ids,
            finish_reason=info["finish_reason"],
            prompt_tokens=info["prompt_tokens"],
            completion_tokens=info["completion_tokens"],
            cached_tokens=info["cached_tokens"],
            ttft_ms=info["ttft_ms"],
            e2e_ms=info["e2e_ms"],
            error=info["error"],
        )

    def generate(self, prompt: Prompt, **sampling) -> Result:
        """Runs one request to its end (the GIL released while it waits).

        sampling: max_tokens (16), temperature (0: greedy), top_p, top_k,
        min_p, presence_penalty, frequency_penalty, repetition_penalty, seed,
        stop (strings), stop_token_ids, ignore_eos, priority, timeout
        (seconds), constraint ((kind, spec): "json_schema" with a schema,
        "json_object", "regex", "grammar").
        """
        chunks = list(self.stream(prompt, **sampling))
        return chunks[-1].result

    def _chunk(self, req: "_core.Request", ids: List[int], update) -> Optional[Chunk]:
        """One chunk from a request's (new ids, new text, finished) update;
        None when nothing new arrived. The engine already holds back an
        incomplete UTF-8 character, so every piece decodes on its own."""
        new_ids, new_bytes, finished = update
        piece = new_bytes.decode("utf-8", errors="replace")
        ids.extend(new_ids)
        if finished:
            result = self._result(req.text().decode("utf-8", errors="replace"), ids, req.info())
            return Chunk(piece, list(new_ids), result.finish_reason, result)
        return Chunk(piece, list(new_ids)) if piece or new_ids else None

    def stream(self, prompt: Prompt, **sampling) -> Iterator[Chunk]:
        """Yields chunks as the engine produces tokens (blocking waits release
        the GIL). Closing the iterator early cancels the request."""
        req = self._submit(prompt, False, **sampling)
        ids: List[int] = []
        try:
            while True:
                chunk = self._chunk(req, ids, req.next(-1.0))
                if chunk is not None:
                    yield chunk
                    if chunk.result is not None:
                        return
        finally:
            if not req.finished:
                req.cancel()

    async def astream(self, prompt: Prompt, **sampling) -> AsyncIterator[Chunk]:
        """stream() for asyncio: waits on the request's eventfd in the event
        loop (no thread per request, no Python on engine threads)."""
        req = self._submit(prompt, True, **sampling)
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()
        fd = req.fileno()
        loop.add_reader(fd, ready.set)
        ids: List[int] = []
        try:
            while True:
                await ready.wait()
                ready.clear()
                req.ack()
                chunk = self._chunk(req, ids, req.take())
                if chunk is not None:
                    yield chunk
                    if chunk.result is not None:
                        return
        finally:
            loop.remove_reader(fd)
            if not req.finished:
                req.cancel()

    async def agenerate(self, prompt: Prompt, **sampling) -> Result:
        """generate() for asyncio."""
        last = None
        async for chunk in self.astream(prompt, **sampling):
            last = chunk
        return last.result

    def chat(self, messages: List[Dict], **sampling) -> Result:
        """Renders the conversation with the model's chat template, then generates."""
        return self.generate(self.render_chat(messages), **sampling)

    def render_chat(self, messages: List[Dict], **kwargs) -> List[int]:
        """The token ids of a conversation rendered by the chat template (no
        BOS added: templates write their own)."""
        if self._tokenizer is None:
            raise _core.InvalidArgument("chat needs a tokenizer")
        text = self._tokenizer.apply_chat_template(messages, **kwargs)
        return self._tokenizer.encode(text, False)

    # ---- model outputs, metrics

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """[len(ids), vocab] float32 logits at every position (one forward
        pass, teacher forcing), written by the engine into the array."""
        return self._e.logits([int(t) for t in ids])

    def hidden_states(self, ids: Sequence[int]) -> np.ndarray:
        """[len(ids), hidden] float32: every position's final hidden state
        (the LM head's input), teacher-forced."""
        return self._e.hidden_states([int(t) for t in ids])

    def lm_head(self, rows: np.ndarray) -> np.ndarray:
        """Rows [n, hidden] through the model's own LM head: [n, vocab]
        float32 logits (its weights and quantization)."""
        return self._e.lm_head(np.ascontiguousarray(rows, dtype=np.float32))

    def metrics(self) -> Dict:
        """The engine's counters (queue depth, KV blocks, tokens, ...)."""
        return self._e.metrics()

    # ---- prefix cache: KV events, hashes, transfer

    def enable_kv_events(self, capacity: int = 65536) -> None:
        """Start queueing KV-cache events (a snapshot of the cached blocks first)."""
        self._e.kv_events_enable(capacity)

    def poll_kv_events(self, max_events: int = 4096) -> List[KvEvent]:
        return [
            KvEvent(_KV_KINDS.get(k, str(k)), seq, h, p, toks, dev, ts)
            for (k, seq, h, p, toks, dev, ts) in self._e.kv_events_poll(max_events)
        ]

    def block_hashes(self, prompt: Prompt) -> List[int]:
        """The prefix-cache hashes of the prompt's full blocks (what the events name)."""
        return _core.block_hashes(self._ids(prompt), self.kv_block_size)

    def export_kv(self, prompt: Prompt) -> bytes:
        """The KV of the longest cached prefix of prompt (whole blocks)."""
        return self._e.kv_export(self._ids(prompt))

    def import_kv(self, data: bytes) -> int:
        """Puts an export into this engine's prefix cache; returns the tokens now cached."""
        return self._e.kv_import(data)
