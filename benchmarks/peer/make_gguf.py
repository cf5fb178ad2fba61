#!/usr/bin/env python3
"""Writes a Llama GGUF file (llama.cpp's format) with random fp32 weights in
the shape of a `switchyard synth` preset (its mixture-of-experts presets
as Llama with expert tensors, Mixtral's form), for the peer benchmark: the same
architecture and sizes for both engines, so their tokens/s compare.

The shape comes from `switchyard synth --help` (one table of presets, in
tools/synth), not from a copy here. The vocabulary is a placeholder of the
preset's size (llama.cpp's SentencePiece loader needs its byte tokens);
llama-bench feeds random token ids and never tokenizes text.

  make_gguf.py --switchyard build/switchyard --preset 110m --out /tmp/peer-110m-f32.gguf
"""
import argparse
import re
import subprocess
import sys

import numpy as np
import gguf


def preset_shape(switchyard, preset):
    usage = subprocess.run([switchyard, "synth", "--help"], capture_output=True, text=True, check=True).stdout
    pattern = (re.escape(preset) + r": dim (\d+), (\d+) layers, (\d+) heads \((\d+) kv\), ffn (\d+), vocab (\d+)"
               r"(?:, experts (\d+) \(top (\d+)\))?")
    m = re.search(pattern, usage)
    if not m:
        sys.exit(f"make_gguf: no preset '{preset}' in `{switchyard} synth --help`")
    dim, layers, heads, kv_heads, hidden, vocab, experts, used = (int(g or 0) for g in m.groups())
    return dict(dim=dim, layers=layers, heads=heads, kv_heads=kv_heads, hidden=hidden, vocab=vocab, experts=experts,
                experts_used=used)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--switchyard", required=True, help="the switchyard binary (for the preset table)")
    ap.add_argument("--preset", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--context", type=int, default=2048)
    a = ap.parse_args()
    s = preset_shape(a.switchyard, a.preset)
    dim, heads, kv_heads, hidden, vocab = s["dim"], s["heads"], s["kv_heads"], s["hidden"], s["vocab"]
    head_dim = dim // heads
    rng = np.random.default_rng(a.seed)

    def weight(rows, cols):  # numpy (out, in): GGUF stores it as ne = [in, out]
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float32)

    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name(f"switchyard-peer-{a.preset}")
    w.add_context_length(a.context)
    w.add_embedding_length(dim)
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(hidden)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(head_dim)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    if s["experts"]:
        # llama.cpp's Llama architecture with experts (Mixtral's form):
        # softmax gating, the top experts_used renormalised, as synth's.
        w.add_expert_count(s["experts"])
        w.add_expert_used_count(s["experts_used"])

    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    tokens += [f"\u2581t{i}" for i in range(vocab - len(tokens))]
    types += [gguf.TokenType.NORMAL] * (vocab - len(types))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * vocab)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    ones = np.ones(dim, dtype=np.float32)
    w.add_tensor("token_embd.weight", weight(vocab, dim))
    for i in range(s["layers"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "attn_q.weight", weight(dim, dim))
        w.add_tensor(p + "attn_k.weight", weight(kv_heads * head_dim, dim))
        w.add_tensor(p + "attn_v.weight", weight(kv_heads * head_dim, dim))
        w.add_tensor(p + "attn_output.weight", weight(dim, dim))
        w.add_tensor(p + "ffn_norm.weight", ones)
        if s["experts"]:
            E = s["experts"]
            w.add_tensor(p + "ffn_gate_inp.weight", weight(E, dim))
            # numpy (E, out, in): GGUF ne = [in, out, E]
            w.add_tensor(p + "ffn_gate_exps.weight", np.stack([weight(hidden, dim) for _ in range(E)]))
            w.add_tensor(p + "ffn_up_exps.weight", np.stack([weight(hidden, dim) for _ in range(E)]))
            w.add_tensor(p + "ffn_down_exps.weight", np.stack([weight(dim, hidden) for _ in range(E)]))
        else:
            w.add_tensor(p + "ffn_gate.weight", weight(hidden, dim))
            w.add_tensor(p + "ffn_up.weight", weight(hidden, dim))
            w.add_tensor(p + "ffn_down.weight", weight(dim, hidden))
    w.add_tensor("output_norm.weight", ones)
    # An untied LM head whatever the preset: both engines then read a
    # [vocab, dim] classifier per token (Switchyard's tied presets read the
    # embedding table as theirs).
    w.add_tensor("output.weight", weight(vocab, dim))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {a.out}: {a.preset} {s}")


if __name__ == "__main__":
    main()
