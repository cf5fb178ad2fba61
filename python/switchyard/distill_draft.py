"""A small draft model distilled from a GGUF target: `distill draft`.

The student is the target cut short (an early exit, as in Kangaroo and
LayerSkip): the target's first L blocks, then its own output norm and LM head
(tied embedding or `output.weight`). The first L - 1 blocks stay as they
are, byte for byte, in the file's own block quantization; the last kept
block is the adapter: its attention output projection, its MLP and the two
norms it feeds are trained to make the student's next-token distribution the
target's: KL divergence from the target's top-k probabilities
(`Engine.logits`, renormalised over the k) to the student's full softmax, on
the target's own generations. Everything below the adapter's output
projection is frozen, so its inputs are computed once (a numpy forward of
the kept blocks) and training is a small MLP problem: numpy and Adam,
minutes on two cores, no torch. (Starting the adapter from the target's last
block instead, which the cut drops, measured worse on SmolLM2: held-out
top-1 0.19 against 0.26.)

The file is a GGUF of the target's architecture with block_count L, the
target's tokenizer and metadata, loadable by the engine's built-in
`draft-model` drafter (`drafter: {name: draft-model, options: {model:
draft.gguf}}`). The trained tensors are written in the type
the target's block used (Q4_1 for the SmolLM2 file), so the student reads what
L of the target's blocks read plus the LM head per drafted token.

Architectures: llama (and the families written as llama: Mistral, SmolLM),
qwen2 (q/k/v biases) and qwen3 (q/k norms), each with its rotary layout
(llama's adjacent pairs after convert_hf_to_gguf's permutation, NeoX halves
for Qwen). Another architecture is refused, naming it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

SUPPORTED = {"llama": "pairs", "qwen2": "halves", "qwen3": "halves"}
# What the adapter trains (the rest of it, q/k/v and its attention norm, is
# frozen: its attention context is an input computed once).
BLOCK_TENSORS = {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q.bias", "attn_k.bias",
                 "attn_v.bias", "attn_q_norm.weight", "attn_k_norm.weight", "attn_output.weight", "ffn_norm.weight",
                 "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"}
TRAINED = ("attn_output.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")


def _gguf():
    try:
        import gguf
    except ImportError as e:  # pragma: no cover - named for the user
        raise SystemExit("distill draft reads and writes GGUF with the `gguf` package: pip install gguf") from e
    return gguf


# ---------------------------------------------------------------- the target


@dataclass
class Hparams:
    arch: str
    blocks: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    rope_dim: int
    rope_base: float
    eps: float
    rotary: str  # "pairs" (llama) or "halves" (NeoX)


class GgufTarget:
    """The target's weights as numpy, read with the gguf package (each
    tensor dequantized on first use) and enough of a forward pass to compute
    the student's frozen part exactly as the file defines it."""

    def __init__(self, path: str):
        gguf = _gguf()
        self.path = path
        try:
            self.reader = gguf.GGUFReader(path)
        except Exception as e:
            raise SystemExit(f"{path}: not a GGUF file the gguf package can read ({e})") from e
        self.fields = self.reader.fields
        arch = self._field("general.architecture")
        if arch not in SUPPORTED:
            raise SystemExit(f"{path}: distill draft supports GGUF architectures {sorted(SUPPORTED)}; this file's is '{arch}'")
        hidden = int(self._field(f"{arch}.embedding_length"))
        heads = int(self._field(f"{arch}.attention.head_count"))
        kv = self._field(f"{arch}.attention.head_count_kv", heads)
        head_dim = int(self._field(f"{arch}.attention.key_length", hidden // heads))
        self.hp = Hparams(arch=arch, blocks=int(self._field(f"{arch}.block_count")), hidden=hidden, heads=heads,
                          kv_heads=int(kv), head_dim=head_dim,
                          rope_dim=int(self._field(f"{arch}.rope.dimension_count", head_dim)),
                          rope_base=float(self._field(f"{arch}.rope.freq_base", 10000.0)),
                          eps=float(self._field(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
                          rotary=SUPPORTED[arch])
        if self._field(f"{arch}.rope.scaling.type", "none") not in ("none", None):
            raise SystemExit(f"{path}: rope scaling '{self._field(f'{arch}.rope.scaling.type')}' is not supported by distill draft")
        self.tensors = {t.name: t for t in self.reader.tensors}
        for name in ("token_embd.weight", "output_norm.weight"):
            if name not in self.tensors:
                raise SystemExit(f"{path}: tensor '{name}' is missing")
        if "blk.0.ffn_gate_inp.weight" in self.tensors:
            raise SystemExit(f"{path}: mixture-of-experts blocks (blk.0.ffn_gate_inp.weight) are not supported by distill draft")
        # The numpy forward computes exactly these; a block tensor it does not
        # know (a bias, a post-norm, sinks) would be silently left out.
        for name in self.tensors:
            if name.startswith("blk.") and name.split(".", 2)[2] not in BLOCK_TENSORS:
                raise SystemExit(f"{path}: block tensor '{name}' is not one distill draft's forward computes")
        self._cache: Dict[str, np.ndarray] = {}
        # Tensors the student stores in another type than the target: name ->
        # (type, bytes); their float view in _cache is what the student computes with.
        self.requantized: Dict[str, Tuple[object, np.ndarray]] = {}

    def _field(self, key: str, default=None):
        f = self.fields.get(key)
        if f is None:
            if default is None:
                raise SystemExit(f"{self.path}: metadata '{key}' is missing")
            return default
        v = f.contents()
        return v

    def has(self, name: str) -> bool:
        return name in self.tensors

    def weight(self, name: str) -> np.ndarray:
        """A tensor as float32 in numpy's row-major view of GGUF's order:
        a matrix is [out, in] (y = x W^T)."""
        if name not in self._cache:
            gguf = _gguf()
            t = self.tensors.get(name)
            if t is None:
                raise SystemExit(f"{self.path}: tensor '{name}' is missing")
            w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
            self._cache[name] = w.reshape([int(d) for d in reversed(t.shape)])
        return self._cache[name]

    def lm_head_name(self) -> str:
        return "output.weight" if self.has("output.weight") else "token_embd.weight"

    def lm_head(self) -> np.ndarray:
        """[vocab, hidden]: `output.weight`, or the tied embedding."""
        return self.weight(self.lm_head_name())

    def requantize(self, name: str, type_name: str) -> None:
        """Store `name` in the student as GGML type `type_name` (the LM head
        is most of a small student's bytes); the student is trained with it."""
        gguf = _gguf()
        try:
            qtype = gguf.GGMLQuantizationType[type_name.upper()]
        except KeyError:
            raise SystemExit(f"unknown GGML type '{type_name}'") from None
        w = self.weight(name)
        try:
            data = gguf.quants.quantize(w, qtype)
        except (NotImplementedError, gguf.quants.QuantError, ValueError) as e:
            raise SystemExit(f"the gguf package cannot write {name} as {type_name}: {e}") from None
        self.requantized[name] = (qtype, data)
        self._cache[name] = gguf.quants.dequantize(data, qtype).astype(np.float32).reshape(w.shape)


def rms_norm(x: np.ndarray, g: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def rotary(x: np.ndarray, positions: np.ndarray, hp: Hparams, freq_factors: Optional[np.ndarray] = None) -> np.ndarray:
    """x [T, heads, head_dim] rotated by position, in the file's layout;
    `rope_freqs.weight` (Llama 3's long-context scaling) divides the
    frequencies where the file has it."""
    d = hp.rope_dim
    inv = hp.rope_base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    if freq_factors is not None:
        inv = inv / freq_factors.astype(np.float64)
    ang = positions[:, None].astype(np.float64) * inv[None, :]
    cos, sin = np.cos(ang).astype(np.float32)[:, None, :], np.sin(ang).astype(np.float32)[:, None, :]
    out = x.copy()
    if hp.rotary == "pairs":
        a, b = x[..., 0:d:2], x[..., 1:d:2]
        out[..., 0:d:2], out[..., 1:d:2] = a * cos - b * sin, a * sin + b * cos
    else:
        a, b = x[..., :d // 2], x[..., d // 2:d]
        out[..., :d // 2], out[..., d // 2:d] = a * cos - b * sin, a * sin + b * cos
    return out


def attention_context(t: GgufTarget, layer: int, x: np.ndarray) -> np.ndarray:
    """Block `layer`'s causal self-attention over x [T, hidden] (the residual
    stream of one sequence from position 0) up to, not including, its output
    projection: [T, heads * head_dim]."""
    hp, p = t.hp, f"blk.{layer}."
    h = rms_norm(x, t.weight(p + "attn_norm.weight"), hp.eps)

    def proj(kind, n):
        y = h @ t.weight(p + f"attn_{kind}.weight").T
        if t.has(p + f"attn_{kind}.bias"):
            y = y + t.weight(p + f"attn_{kind}.bias")
        y = y.reshape(len(x), n, hp.head_dim)
        if t.has(p + f"attn_{kind}_norm.weight"):  # qwen3's per-head q/k norms
            y = rms_norm(y, t.weight(p + f"attn_{kind}_norm.weight"), hp.eps)
        return y

    pos = np.arange(len(x))
    factors = t.weight("rope_freqs.weight") if t.has("rope_freqs.weight") else None
    q = rotary(proj("q", hp.heads), pos, hp, factors)
    k = rotary(proj("k", hp.kv_heads), pos, hp, factors)
    v = proj("v", hp.kv_heads)
    group = hp.heads // hp.kv_heads
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hp.head_dim)
    s = s + np.triu(np.full((len(x), len(x)), -np.inf, np.float32), 1)[None]
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    s /= s.sum(axis=-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", s, v).reshape(len(x), hp.heads * hp.head_dim)


def mlp(u: np.ndarray, gate: np.ndarray, up: np.ndarray, down: np.ndarray) -> np.ndarray:
    z = u @ gate.T
    return ((z / (1.0 + np.exp(-z))) * (u @ up.T)) @ down.T


def block_forward(t: GgufTarget, layer: int, x: np.ndarray) -> np.ndarray:
    p = f"blk.{layer}."
    x = x + attention_context(t, layer, x) @ t.weight(p + "attn_output.weight").T
    u = rms_norm(x, t.weight(p + "ffn_norm.weight"), t.hp.eps)
    return x + mlp(u, t.weight(p + "ffn_gate.weight"), t.weight(p + "ffn_up.weight"), t.weight(p + "ffn_down.weight"))


def student_inputs(t: GgufTarget, ids: Sequence[int], layers: int, adapter_from: int) -> Tuple[np.ndarray, np.ndarray]:
    """The frozen part of the student on one sequence: the residual stream
    after its first layers - 1 blocks (r) and the adapter's attention context
    (c), every position."""
    x = t.weight("token_embd.weight")[np.asarray(ids)]
    for layer in range(layers - 1):
        x = block_forward(t, layer, x)
    return x, attention_context(t, adapter_from, x)


# ---------------------------------------------------------------- training


class Adapter:
    """The trained tensors of the adapter block and the student's output
    norm, forward and backward in numpy."""

    def __init__(self, params: Dict[str, np.ndarray], eps: float):
        self.params, self.eps = params, eps

    @classmethod
    def from_target(cls, t: GgufTarget, adapter_from: int) -> "Adapter":
        """Starts as the target's block `adapter_from` and its output norm."""
        p = f"blk.{adapter_from}."
        params = {name: t.weight(p + name).copy() for name in TRAINED}
        params["output_norm.weight"] = t.weight("output_norm.weight").copy()
        return cls(params, t.hp.eps)

    def forward(self, r, c):
        P, eps = self.params, self.eps
        a = r + c @ P["attn_output.weight"].T
        inv_a = 1.0 / np.sqrt(np.mean(a * a, axis=1, keepdims=True) + eps)
        u = a * inv_a * P["ffn_norm.weight"]
        zg, zu = u @ P["ffn_gate.weight"].T, u @ P["ffn_up.weight"].T
        sig = 1.0 / (1.0 + np.exp(-zg))
        m = zg * sig * zu
        o = a + m @ P["ffn_down.weight"].T
        inv_o = 1.0 / np.sqrt(np.mean(o * o, axis=1, keepdims=True) + eps)
        h = o * inv_o * P["output_norm.weight"]
        return h, (c, a, inv_a, u, zg, zu, sig, m, o, inv_o)

    def backward(self, dh, cache) -> Dict[str, np.ndarray]:
        """Gradients of every trained tensor from dL/dh (h: the LM head's input)."""
        P = self.params
        c, a, inv_a, u, zg, zu, sig, m, o, inv_o = cache
        g = {}

        def norm_back(dy, x, inv, w, key):
            g[key] = np.sum(dy * x * inv, axis=0)
            dyw = dy * w
            return inv * dyw - x * inv ** 3 * np.mean(dyw * x, axis=1, keepdims=True)

        do = norm_back(dh, o, inv_o, P["output_norm.weight"], "output_norm.weight")
        g["ffn_down.weight"] = do.T @ m
        dm = do @ P["ffn_down.weight"]
        dzu = dm * zg * sig
        dzg = dm * zu * sig * (1.0 + zg * (1.0 - sig))
        g["ffn_gate.weight"], g["ffn_up.weight"] = dzg.T @ u, dzu.T @ u
        du = dzg @ P["ffn_gate.weight"] + dzu @ P["ffn_up.weight"]
        da = do + norm_back(du, a, inv_a, P["ffn_norm.weight"], "ffn_norm.weight")
        g["attn_output.weight"] = da.T @ c
        return g


def kl_grad(logits: np.ndarray, top_ids: np.ndarray, top_p: np.ndarray) -> Tuple[float, np.ndarray]:
    """KL(teacher top-k || student) per row, averaged, and its gradient in the
    student's logits: softmax(s) - p (p: the teacher's renormalised top-k)."""
    s = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(s)
    z = e.sum(axis=1, keepdims=True)
    logq = s - np.log(z)
    rows = np.arange(len(s))[:, None]
    loss = float(np.mean(np.sum(top_p * (np.log(np.maximum(top_p, 1e-12)) - logq[rows, top_ids]), axis=1)))
    grad = e / z
    grad[rows, top_ids] -= top_p
    return loss, grad / len(s)


def train(adapter: Adapter, head: np.ndarray, r, c, top_ids, top_p, epochs: int, batch: int, lr: float,
          rng) -> List[float]:
    P = adapter.params
    m = {k: np.zeros_like(v) for k, v in P.items()}
    v2 = {k: np.zeros_like(v) for k, v in P.items()}
    step, losses = 0, []
    for _ in range(epochs):
        order = rng.permutation(len(r))
        total = 0.0
        for s in range(0, len(r), batch):
            idx = order[s:s + batch]
            h, cache = adapter.forward(r[idx], c[idx])
            loss, dlogits = kl_grad(h @ head.T, top_ids[idx], top_p[idx])
            total += loss * len(idx)
            grads = adapter.backward(dlogits @ head, cache)
            step += 1
            for k, gk in grads.items():
                m[k] = 0.9 * m[k] + 0.1 * gk
                v2[k] = 0.999 * v2[k] + 0.001 * gk * gk
                mh, vh = m[k] / (1 - 0.9 ** step), v2[k] / (1 - 0.999 ** step)
                P[k] -= (lr * mh / (np.sqrt(vh) + 1e-8)).astype(np.float32)
        losses.append(total / max(1, len(r)))
    return losses


def agreement(adapter: Adapter, head: np.ndarray, r, c, want: np.ndarray, batch: int = 512) -> float:
    """Top-1 agreement of the student with the target's greedy token."""
    hits = 0
    for s in range(0, len(r), batch):
        h, _ = adapter.forward(r[s:s + batch], c[s:s + batch])
        hits += int(np.sum(np.argmax(h @ head.T, axis=1) == want[s:s + batch]))
    return hits / max(1, len(r))


# ---------------------------------------------------------------- the file


def write_student(t: GgufTarget, path: str, layers: int, adapter_from: int, trained: Dict[str, np.ndarray],
                  recipe: Dict[str, str]) -> None:
    """The student as a GGUF of the target's architecture: every metadata
    key of the target (block_count changed), its first layers - 1 blocks
    copied as they are, block layers - 1 the adapter (the target's block
    `adapter_from` with the trained tensors in their own type, or Q8_0 where
    the gguf package cannot write that type)."""
    gguf = _gguf()
    GT = gguf.GGUFValueType
    arch = t.hp.arch
    w = gguf.GGUFWriter(path, arch)
    skip = {"general.architecture", "general.name", f"{arch}.block_count"}
    for key, f in t.fields.items():
        if key.startswith("GGUF.") or key in skip:
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == GT.ARRAY else None
        w.add_key_value(key, f.contents(), vtype, sub_type=sub)
    w.add_block_count(layers)
    w.add_name(f"{t._field('general.name', 'model')} draft ({layers} blocks, distilled)")
    for k, v in recipe.items():
        w.add_string(f"switchyard.draft.{k}", v)

    def copy(name, out_name=None):
        if name in t.requantized:
            qtype, data = t.requantized[name]
            w.add_tensor(out_name or name, data, raw_dtype=qtype)
            return
        src = t.tensors[name]
        w.add_tensor(out_name or name, np.ascontiguousarray(src.data), raw_dtype=src.tensor_type)

    for name in t.tensors:
        if name == "output_norm.weight" and name in trained:  # the student's own, trained
            w.add_tensor(name, np.ascontiguousarray(trained[name], np.float32))
        elif not name.startswith("blk."):
            copy(name)
    for layer in range(layers - 1):
        for name in t.tensors:
            if name.startswith(f"blk.{layer}."):
                copy(name)
    adapter = f"blk.{layers - 1}."
    for name in t.tensors:
        if not name.startswith(f"blk.{adapter_from}."):
            continue
        short = name[len(f"blk.{adapter_from}."):]
        if short not in trained:
            copy(name, adapter + short)
            continue
        src = t.tensors[name]
        value = np.ascontiguousarray(trained[short], np.float32)
        if src.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            w.add_tensor(adapter + short, value.astype(np.float32 if src.tensor_type == gguf.GGMLQuantizationType.F32 else np.float16))
            continue
        try:
            qtype = src.tensor_type
            data = gguf.quants.quantize(value, qtype)
        except (NotImplementedError, gguf.quants.QuantError, ValueError):
            qtype = gguf.GGMLQuantizationType.Q8_0
            data = gguf.quants.quantize(value, qtype)
        w.add_tensor(adapter + short, data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
