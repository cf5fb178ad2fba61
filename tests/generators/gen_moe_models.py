#!/usr/bin/env python3
"""Tiny random-weight mixture-of-experts and latent-attention decoders from
Hugging Face transformers' own model classes (Qwen3-MoE, Mixtral,
DeepSeek-V3 with MLA, GLM-4.7-Flash's glm4_moe_lite and MiniCPM3 with MLA,
gpt-oss), exported the ways people get ONNX LLMs, with
torch references beside them, for tests/model/test_real_models.cpp.

The same folder layout, reference checks and ONNX Runtime cross-check as
gen_hf_models.py (whose helpers this reuses); only the configs and the cache
wrapper differ: transformers 5 has no legacy cache tuples, so the flat
past/present tensors go through DynamicCache's layers. The experts run as
transformers' "batched_mm" (expert weights gathered per token), the form
that exports; TorchScript traces the masks as transformers 5 builds them.
Every export is checked by ONNX Runtime against torch (logits, greedy
decode through the cache, a padded batch) before it is written.

Usage (once, by hand; the outputs are committed, so CI needs no torch):
  python3 -m venv /tmp/gen && /tmp/gen/bin/pip install torch transformers onnx onnxruntime onnxscript
  /tmp/gen/bin/python tests/generators/gen_moe_models.py tests/models/real [ARCH ...]
(made with torch 2.15 and transformers 5.25).
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_hf_models as hf  # noqa: E402


def configs():
    c = transformers
    common = dict(vocab_size=hf.VOCAB, hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                  max_position_embeddings=256, bos_token_id=1, eos_token_id=2, initializer_range=0.15,
                  tie_word_embeddings=False)
    return {
        # Qwen3-MoE: softmax top-k routing with the top-k weights
        # renormalised, q/k norms, GQA.
        "qwen3moe": c.Qwen3MoeConfig(**common, num_key_value_heads=2, head_dim=16, intermediate_size=128,
                                     moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                                     norm_topk_prob=True, decoder_sparse_step=1),
        # Mixtral: softmax over the top-k logits, a sliding window off.
        "mixtral": c.MixtralConfig(**common, num_key_value_heads=2, intermediate_size=32, num_local_experts=4,
                                   num_experts_per_tok=2),
        # DeepSeek-V3: MLA (compressed KV and a shared rope key), sigmoid
        # scores with a correction bias, group-limited top-k, a shared expert,
        # the first layer dense.
        "deepseekv3": c.DeepseekV3Config(**common, num_key_value_heads=4, intermediate_size=128,
                                         moe_intermediate_size=32, n_routed_experts=8, n_shared_experts=1,
                                         num_experts_per_tok=2, n_group=2, topk_group=1, first_k_dense_replace=1,
                                         routed_scaling_factor=2.5, norm_topk_prob=True, q_lora_rank=32,
                                         kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
                                         rope_interleave=True),
        # GLM-4.7-Flash (glm4_moe_lite): DeepSeek's latent attention and
        # routing in another family's code (a second MLA export the fusion
        # was not written against).
        "glm4moelite": c.Glm4MoeLiteConfig(**common, num_key_value_heads=4, intermediate_size=128, moe_intermediate_size=32,
                                           n_routed_experts=8, num_experts_per_tok=2, kv_lora_rank=16, q_lora_rank=32,
                                           qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, n_shared_experts=1,
                                           n_group=2, topk_group=1),
        # MiniCPM3: latent attention in a dense model.
        "minicpm3": c.MiniCPM3Config(**common, num_key_value_heads=4, intermediate_size=128, kv_lora_rank=16, q_lora_rank=32,
                                     qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, head_dim=16),
        # gpt-oss: attention sinks, alternating sliding windows, clamped
        # SwiGLU experts with biases, top-k then softmax.
        "gptoss": c.GptOssConfig(**common, num_key_value_heads=2, head_dim=16, intermediate_size=32,
                                 num_local_experts=4, num_experts_per_tok=2, sliding_window=6,
                                 layer_types=["sliding_attention", "full_attention"]),
    }


def build(arch, cfg, seed):
    """The experts as batched matmuls over gathered expert weights
    (transformers' "batched_mm"): the form that exports, since the eager
    per-expert loop runs only the experts the example input hits."""
    torch.manual_seed(seed)
    attn = "eager" if arch == "gptoss" else "sdpa"  # sinks: eager only
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, experts_implementation="batched_mm")
    model.eval()
    return model


hf.build = build  # build_with_margin's seeds go through this build


class WithPast(torch.nn.Module):
    """The decoder-with-past interface over transformers 5's DynamicCache."""

    def __init__(self, model, n_layers):
        super().__init__()
        self.model, self.n = model, n_layers

    def forward(self, input_ids, attention_mask, position_ids, *past):
        from transformers import DynamicCache
        # No config: every layer keeps every position (transformers would
        # otherwise give sliding layers a window-sized cache, which the
        # decoder-with-past interface does not have).
        cache = DynamicCache()
        for i in range(self.n):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=cache, use_cache=True)
        flat = []
        for layer in out.past_key_values.layers:
            flat += [layer.keys, layer.values]
        return (out.logits, *flat)


def past_shapes(model):
    """[kv heads, key size, value size] of a layer's cache, as the model
    itself fills it (transformers 5 caches latent attention compressed: one
    "head" whose key is the normalised latent, kv_lora_rank, and whose value
    is the shared rope key)."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([[3, 4, 5]]), use_cache=True)
    layer = out.past_key_values.layers[0]
    return layer.keys.shape[1], layer.keys.shape[3], layer.values.shape[3]


def export(model, path, dynamo):
    n = model.config.num_hidden_layers
    kvh, kd, vd = past_shapes(model)
    wrapper = WithPast(model, n).eval()
    B, S, P = 2, 3, 4
    ids = torch.randint(0, hf.VOCAB, (B, S))
    mask = torch.ones((B, P + S), dtype=torch.long)
    pos = torch.arange(P, P + S).unsqueeze(0).expand(B, S).contiguous()
    past = []
    for _ in range(n):
        past += [torch.randn(B, kvh, P, kd), torch.randn(B, kvh, P, vd)]
    names_in = ["input_ids", "attention_mask", "position_ids"]
    names_past, names_present = [], []
    for i in range(n):
        names_past += [f"past_key_values.{i}.key", f"past_key_values.{i}.value"]
        names_present += [f"present.{i}.key", f"present.{i}.value"]
    if not dynamo:
        axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
                "position_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
        for nm in names_past:
            axes[nm] = {0: "batch", 2: "past"}
        for nm in names_present:
            axes[nm] = {0: "batch", 2: "total"}
        # transformers 5 builds masks without vmap by default: the tracer
        # follows them as they are.
        if True:
            torch.onnx.export(wrapper, (ids, mask, pos, *past), path, dynamo=False, opset_version=17,
                              input_names=names_in + names_past, output_names=["logits"] + names_present,
                              dynamic_axes=axes)
    else:
        from torch.export import Dim
        d = Dim.DYNAMIC
        ds = {"input_ids": {0: d, 1: d}, "attention_mask": {0: d, 1: d},
              "position_ids": {0: d, 1: d}, "past": tuple({0: d, 2: d} for _ in range(2 * n))}
        prog = torch.onnx.export(wrapper, (ids, mask, pos, *past), None, dynamo=True,
                                 input_names=names_in + names_past, output_names=["logits"] + names_present,
                                 dynamic_shapes=ds)
        prog.save(path, external_data=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("archs", nargs="*")
    ap.add_argument("--styles", default="torchscript,dynamo")
    args = ap.parse_args()
    cfgs = configs()
    for arch in args.archs or list(cfgs):
        cfg = cfgs[arch]
        model, ref = hf.build_with_margin(arch, cfg, lambda m: m.config.num_hidden_layers)
        ref.update(arch=arch, transformers=transformers.__version__, torch=torch.__version__,
                   config=json.loads(cfg.to_json_string()))
        print(f"{arch}: greedy {ref['greedy']} (min top-2 margin {ref['greedy_min_margin']:.3g})", flush=True)
        hf_dir = tempfile.mkdtemp()
        model.save_pretrained(hf_dir)
        hf.save_tokenizer(hf_dir)
        for style in args.styles.split(","):
            folder = os.path.join(args.out, f"{arch}-{style}")
            shutil.rmtree(folder, ignore_errors=True)
            os.makedirs(folder)
            path = os.path.join(folder, "model.onnx")
            try:
                export(model, path, dynamo=style == "dynamo")
                hf.single_file(path)
                for f in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                          "special_tokens_map.json"):
                    if os.path.exists(os.path.join(hf_dir, f)):
                        shutil.copy(os.path.join(hf_dir, f), folder)
            except Exception as e:  # noqa: BLE001 - report and go on with the other styles
                print(f"  {style}: export FAILED: {type(e).__name__}: {str(e)[:400]}", flush=True)
                shutil.rmtree(folder, ignore_errors=True)
                continue
            r = dict(ref, style=style)
            try:
                r["onnxruntime"] = hf.ort_references(path, ref, style)
            except Exception as e:  # noqa: BLE001
                print(f"  {style}: ONNX Runtime cannot run the export: {str(e)[:400]}", flush=True)
                shutil.rmtree(folder, ignore_errors=True)
                continue
            dev = hf.deviation(r["onnxruntime"], ref)
            r["onnxruntime_vs_torch"] = dev
            faithful = dev["logits"] <= 1e-4 and dev["batch_last_logits"] <= 1e-4 and dev["greedy_equal"]
            r["reference"] = "torch" if faithful else "onnxruntime"
            if not faithful:
                print(f"  {style}: the export differs from torch ({dev}); ONNX Runtime is its reference", flush=True)
            r["op_histogram"] = hf.op_histogram(path)
            with open(os.path.join(folder, "ref.json"), "w") as f:
                json.dump(r, f)
            print(f"  {style}: {os.path.getsize(path)} bytes, ORT vs torch {dev['logits']:.2e}; "
                  f"ops {sorted(r['op_histogram'])}", flush=True)
        shutil.rmtree(hf_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
