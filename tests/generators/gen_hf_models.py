#!/usr/bin/env python3
"""Builds tiny random-weight decoder models from Hugging Face transformers' own
model classes, exports each the ways people get ONNX LLMs, and writes torch
references beside them, for tests/model/test_real_models.cpp.

Export styles (each a folder <arch>-<style>/ with model.onnx and ref.json):
  torchscript  torch.onnx.export(dynamo=False), decoder-with-past interface
  dynamo       torch.onnx.export(dynamo=True), the same interface
  dynamo23     the same at opset 23, where the exporter emits ONNX's own
               Attention, RotaryEmbedding and RMSNormalization ops
  optimum      optimum-onnx's main_export, task text-generation-with-past
  genai        onnxruntime-genai's model builder, fp32 (and genai-int4: int4)
  alibi        (llama3 only) TorchScript with an ALiBi bias added to the
               scores: a construct the fused op cannot express
  fp16, bf16   (qwen2 only) the model in half precision (weights and
               activations), TorchScript (fp16) and dynamo (bf16) exports,
               against the fp32 reference

References (ref.json) come from torch, never from this engine: the logits of
every position of a prompt, greedy ids generated through the KV cache, and a
left-padded batch of two prompts (last-position logits per row). Every export
is cross-checked by ONNX Runtime against them before it is written; a model
that ONNX Runtime cannot run or that disagrees is an error of this script.

Usage (once, by hand; the outputs are committed, so CI needs no torch):
  python3 -m venv /tmp/gen && /tmp/gen/bin/pip install torch optimum-onnx onnxscript onnxruntime
  python3 -m venv /tmp/gen5 && /tmp/gen5/bin/pip install torch transformers onnxruntime-genai
  GENAI_PYTHON=/tmp/gen5/bin/python /tmp/gen/bin/python tests/generators/gen_hf_models.py tests/models/real [ARCH ...]
(made with torch 2.15, transformers 4.57.6 + optimum-onnx 0.1.0, and
transformers 5.24 + onnxruntime-genai 0.18 for the builder).
"""
import argparse
import contextlib
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers
from transformers import AutoModelForCausalLM

VOCAB = 320
PROMPT = [1, 17, 93, 4, 250, 31, 77, 12, 160, 5, 42, 201, 9, 66, 133, 7, 280, 19, 54, 3]  # 20 tokens
BATCH = [[1, 17, 93, 4, 250, 31, 77, 12, 160, 5, 42, 201], [1, 300, 8, 61]]
GREEDY_NEW = 12
SEED = 1234
# The model builder needs a newer transformers than optimum-onnx accepts: it
# runs from its own environment (a saved model folder is all it reads).
GENAI_PYTHON = os.environ.get("GENAI_PYTHON", sys.executable)


def configs():
    """Small shapes that still exercise what each family does differently."""
    c = transformers
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                  max_position_embeddings=256, bos_token_id=1, eos_token_id=2, initializer_range=0.15)
    return {
        # Llama-3: rope scaling ("llama3" frequencies), GQA, tied embeddings.
        "llama3": c.LlamaConfig(**common, num_hidden_layers=2, num_key_value_heads=2, rope_theta=500000.0,
                                tie_word_embeddings=True,
                                rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                              "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
        # Qwen2: QKV bias, GQA.
        "qwen2": c.Qwen2Config(**common, num_hidden_layers=2, num_key_value_heads=2, tie_word_embeddings=False),
        # Mistral: a sliding window shorter than the test prompts.
        "mistral": c.MistralConfig(**common, num_hidden_layers=2, num_key_value_heads=2, sliding_window=6,
                                   tie_word_embeddings=False),
        # Phi-3: fused qkv and gate/up projections.
        "phi3": c.Phi3Config(**common, num_hidden_layers=2, num_key_value_heads=4, pad_token_id=0,
                             original_max_position_embeddings=256, tie_word_embeddings=False),
        # GPT-NeoX: partial rotary, parallel residual, LayerNorm, fused qkv.
        "gptneox": c.GPTNeoXConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                   num_hidden_layers=2, max_position_embeddings=256, rotary_pct=0.25,
                                   use_parallel_residual=True, bos_token_id=1, eos_token_id=2,
                                   initializer_range=0.15, tie_word_embeddings=False),
        # Gemma2: soft-capping (attention and final; small caps so that they
        # matter at these scales), alternating local/global
        # layers, scaled embeddings, (1 + w) norms, query_pre_attn_scalar.
        "gemma2": c.Gemma2Config(**{**common, "initializer_range": 0.05}, num_hidden_layers=4, num_key_value_heads=2,
                                 head_dim=16, sliding_window=6, attn_logit_softcapping=1.0,
                                 final_logit_softcapping=8.0, query_pre_attn_scalar=24, pad_token_id=0),
        # GPT-2: learned positions, Conv1D projections, the causal-bias buffer.
        "gpt2": c.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=256,
                             bos_token_id=1, eos_token_id=2, initializer_range=0.15),
    }


def build(arch, cfg, seed):
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager" if arch == "gemma2" else "sdpa")
    model.eval()
    return model


def build_with_margin(arch, cfg, n_layers_of):
    """The first seed from SEED whose greedy continuation has no near-tie (a
    top-2 margin under 0.01 anywhere would make "identical" fragile) and is
    not one token repeated (which would test little)."""
    for seed in range(SEED, SEED + 50):
        model = build(arch, cfg, seed)
        ref = torch_references(model, n_layers_of(model))
        if ref["greedy_min_margin"] >= 0.01 and len(set(ref["greedy"])) >= 4:
            ref["seed"] = seed
            return model, ref
    raise SystemExit(f"{arch}: no seed in 50 gives a greedy margin >= 0.01")


TOKENIZER_TEXT = """Once upon a time, there was a little girl named Lily. She loved to play outside in the park.
One day, she saw a big red ball. The sun was warm and the sky was blue. Tom said: "Can I play too?"
def add(a, b):\n    return a + b  # 12 + 34 = 46\n\tprint('done')"""


def save_tokenizer(folder):
    """A byte-level BPE with VOCAB entries (<unk> 0, <s> 1, </s> 2), trained
    with the tokenizers library: the model builder copies a model folder's
    tokenizer, and a folder with one is what users download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([TOKENIZER_TEXT] * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(folder)


# ---------------------------------------------------------------- references

def torch_references(model, n_layers):
    with torch.no_grad():
        ids = torch.tensor([PROMPT])
        out = model(input_ids=ids, use_cache=False)
        logits = out.logits[0].float().numpy()
        gen = model.generate(ids, max_new_tokens=GREEDY_NEW, do_sample=False, use_cache=True,
                             pad_token_id=0, eos_token_id=None)
        greedy = gen[0, len(PROMPT):].tolist()
        full = model(input_ids=gen[:, :-1], use_cache=False).logits[0, len(PROMPT) - 1:].float()
        top2 = torch.topk(full, 2, dim=-1).values
        margin = float((top2[:, 0] - top2[:, 1]).min())
        # Left-padded batch: HF's own padding rules (positions from the mask).
        L = max(len(p) for p in BATCH)
        pad_ids = torch.zeros((len(BATCH), L), dtype=torch.long)
        mask = torch.zeros((len(BATCH), L), dtype=torch.long)
        for r, p in enumerate(BATCH):
            pad_ids[r, L - len(p):] = torch.tensor(p)
            mask[r, L - len(p):] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        bl = model(input_ids=pad_ids, attention_mask=mask, position_ids=pos, use_cache=False).logits[:, -1].float().numpy()
    return {
        "prompt": PROMPT, "logits": logits.tolist(), "greedy": greedy, "greedy_min_margin": margin,
        "batch": BATCH, "batch_last_logits": bl.tolist(), "num_layers": n_layers,
    }


# ---------------------------------------------------------------- exports

class WithAlibi(torch.nn.Module):
    """A model whose attention carries something the fused op cannot express:
    an ALiBi bias (-slope_h * distance, per head) added to the scores, passed
    as a 4-D float mask. Its fusion must be refused, naming the layer."""

    def __init__(self, model, n_layers):
        super().__init__()
        self.model, self.n = model, n_layers
        heads = model.config.num_attention_heads
        self.register_buffer("slopes", torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)]))

    def forward(self, input_ids, attention_mask, position_ids, *past):
        from transformers import DynamicCache
        cache = DynamicCache.from_legacy_cache(tuple((past[2 * i], past[2 * i + 1]) for i in range(self.n)))
        S, T = input_ids.shape[1], attention_mask.shape[1]
        q_pos = (torch.arange(S) + (T - S)).view(1, 1, S, 1)
        k_pos = torch.arange(T).view(1, 1, 1, T)
        dist = (q_pos - k_pos).float()
        bias = -self.slopes.view(1, -1, 1, 1) * dist
        allowed = (dist >= 0) & (attention_mask[:, None, None, :] > 0)
        mask = torch.where(allowed, bias, torch.finfo(torch.float32).min)
        out = self.model(input_ids=input_ids, attention_mask=mask, position_ids=position_ids,
                         past_key_values=cache, use_cache=True)
        flat = []
        for k, v in out.past_key_values.to_legacy_cache():
            flat += [k, v]
        return (out.logits, *flat)


class WithPast(torch.nn.Module):
    """The decoder-with-past interface: flat past/present tensors, so
    torch.onnx.export names them past_key_values.N.key/value and present.N.*."""

    def __init__(self, model, n_layers):
        super().__init__()
        self.model, self.n = model, n_layers

    def forward(self, input_ids, attention_mask, position_ids, *past):
        from transformers import DynamicCache
        cache = DynamicCache.from_legacy_cache(tuple((past[2 * i], past[2 * i + 1]) for i in range(self.n)))
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=cache, use_cache=True)
        flat = []
        for k, v in out.past_key_values.to_legacy_cache():
            flat += [k, v]
        return (out.logits, *flat)


def kv_geometry(model):
    cfg = model.config
    heads = cfg.num_attention_heads
    kvh = getattr(cfg, "num_key_value_heads", None) or heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    return cfg.num_hidden_layers, kvh, hd


@contextlib.contextmanager
def traceable_masks():
    """transformers >= 4.53 builds masks with torch.vmap, which the TorchScript
    tracer cannot follow; its own non-vmap path (the one for torch < 2.6) can
    be traced. This is the change a user makes to export with TorchScript."""
    from transformers import masking_utils as mu

    def broadcast_mask(batch_size, cache_position, kv_length, kv_offset=0, mask_function=mu.causal_mask_function,
                       attention_mask=None, **kwargs):
        padding = mu.prepare_padding_mask(attention_mask, kv_length, kv_offset)
        kv = torch.arange(kv_length, device=cache_position.device) + kv_offset
        mask = mask_function(None, None, cache_position[:, None], kv[None, :])
        mask = mask[None, None, :, :].expand(batch_size, -1, -1, -1)
        return mask if padding is None else mask * padding[:, None, None, :]

    saved = mu.sdpa_mask, mu.ALL_MASK_ATTENTION_FUNCTIONS["sdpa"]
    mu.sdpa_mask = broadcast_mask
    mu.ALL_MASK_ATTENTION_FUNCTIONS.register("sdpa", broadcast_mask)
    try:
        yield
    finally:
        mu.sdpa_mask = saved[0]
        mu.ALL_MASK_ATTENTION_FUNCTIONS.register("sdpa", saved[1])


def torch_export(model, path, dynamo, alibi=False, dtype=torch.float32, opset=None):
    n, kvh, hd = kv_geometry(model)
    if dtype != torch.float32:
        model = copy.deepcopy(model).to(dtype)
    wrapper = (WithAlibi if alibi else WithPast)(model, n).eval()
    B, S, P = 2, 3, 4
    ids = torch.randint(0, VOCAB, (B, S))
    mask = torch.ones((B, P + S), dtype=torch.long)
    pos = torch.arange(P, P + S).unsqueeze(0).expand(B, S).contiguous()
    past = [torch.randn(B, kvh, P, hd, dtype=dtype) for _ in range(2 * n)]
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
        with traceable_masks():
            torch.onnx.export(wrapper, (ids, mask, pos, *past), path, dynamo=False, opset_version=17,
                              input_names=names_in + names_past, output_names=["logits"] + names_present,
                              dynamic_axes=axes)
    else:
        from torch.export import Dim
        d = Dim.DYNAMIC
        ds = {"input_ids": {0: d, 1: d}, "attention_mask": {0: d, 1: d},
              "position_ids": {0: d, 1: d}, "past": tuple({0: d, 2: d} for _ in range(2 * n))}
        prog = torch.onnx.export(wrapper, (ids, mask, pos, *past), None, dynamo=True, opset_version=opset,
                                 input_names=names_in + names_past, output_names=["logits"] + names_present,
                                 dynamic_shapes=ds)
        prog.save(path, external_data=False)


def optimum_export(model_dir, out_dir):
    from optimum.exporters.onnx import main_export
    main_export(model_dir, output=out_dir, task="text-generation-with-past", opset=17, no_post_process=True,
                do_validation=False)


def genai_export(model_dir, out_dir, precision):
    cache = tempfile.mkdtemp()
    subprocess.run([GENAI_PYTHON, "-m", "onnxruntime_genai.models.builder", "-i", model_dir, "-o", out_dir,
                    "-p", precision, "-e", "cpu", "-c", cache,
                    # Window-sized ring-buffer caches are a genai-runtime feeding convention;
                    # the plain decoder-with-past interface keeps every position.
                    "--extra_options", "windowed_kv_cache=false"], check=True, stdout=subprocess.DEVNULL)
    shutil.rmtree(cache, ignore_errors=True)


# ---------------------------------------------------------------- ORT cross-check

class OrtModel:
    """An export on ONNX Runtime, fed by the decoder-with-past rules (the
    builder's models: no position_ids, right padding)."""

    def __init__(self, path):
        self.sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        self.inputs = {i.name: i for i in self.sess.get_inputs()}
        self.outputs = [o.name for o in self.sess.get_outputs()]
        self.head_dim = None
        cfg = os.path.join(os.path.dirname(path), "genai_config.json")
        if os.path.exists(cfg):
            with open(cfg) as f:
                self.head_dim = json.load(f)["model"]["decoder"]["head_size"]
        self.pasts = [n for n in self.inputs if "past" in n]

    def run(self, ids, mask, past=None):
        B = ids.shape[0]
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "position_ids" in self.inputs:
            feeds["position_ids"] = np.clip(mask.cumsum(-1) - 1, 0, None)[:, -ids.shape[1]:]
        for name in self.pasts:
            if past is not None:
                feeds[name] = past[name]
                continue
            i = self.inputs[name]
            # [batch, kv_heads, past, head_dim] with an empty past (the
            # builder leaves head_dim symbolic: genai_config.json has it).
            hd = i.shape[3] if not isinstance(i.shape[3], str) else self.head_dim
            feeds[name] = np.zeros([B, i.shape[1], 0, hd], dtype=np.float16 if "float16" in i.type else np.float32)
        extra = set(self.inputs) - set(feeds)
        if extra:
            raise SystemExit(f"unexpected inputs {sorted(extra)}")
        out = dict(zip(self.outputs, self.sess.run(None, feeds)))
        present = {n: out[n.replace("past_key_values", "present")] for n in self.pasts}
        return out["logits"].astype(np.float32), present

    def prompt_logits(self, prompt):
        ids = np.array([prompt], dtype=np.int64)
        return self.run(ids, np.ones_like(ids))[0][0]

    def greedy(self, prompt, n):
        ids = np.array([prompt], dtype=np.int64)
        mask = np.ones_like(ids)
        logits, past = self.run(ids, mask)
        out = []
        for _ in range(n):
            tok = int(np.argmax(logits[0, -1]))
            out.append(tok)
            ids = np.array([[tok]], dtype=np.int64)
            mask = np.ones((1, mask.shape[1] + 1), dtype=np.int64)
            logits, past = self.run(ids, mask, past)
        return out

    def batch_last_logits(self, batch, left_pad):
        L = max(len(p) for p in batch)
        ids = np.zeros((len(batch), L), dtype=np.int64)
        mask = np.zeros((len(batch), L), dtype=np.int64)
        for r, p in enumerate(batch):
            if left_pad:
                ids[r, L - len(p):], mask[r, L - len(p):] = p, 1
            else:
                ids[r, :len(p)], mask[r, :len(p)] = p, 1
        logits = self.run(ids, mask)[0]
        return np.stack([logits[r, -1] if left_pad else logits[r, len(p) - 1] for r, p in enumerate(batch)])


def ort_references(path, ref, style):
    """ONNX Runtime's outputs for the same checks as the torch references."""
    m = OrtModel(path)
    return {"logits": m.prompt_logits(ref["prompt"]).tolist(), "greedy": m.greedy(ref["prompt"], GREEDY_NEW),
            "batch_last_logits": m.batch_last_logits(ref["batch"], left_pad=not style.startswith("genai")).tolist()}


def deviation(a, b):
    return {"logits": float(np.abs(np.array(a["logits"]) - np.array(b["logits"])).max()),
            "batch_last_logits": float(np.abs(np.array(a["batch_last_logits"]) - np.array(b["batch_last_logits"])).max()),
            "greedy_equal": a["greedy"] == b["greedy"]}


def op_histogram(path):
    m = onnx.load(path, load_external_data=False)
    hist = {}
    for n in m.graph.node:
        key = (n.domain + "::" if n.domain and n.domain != "ai.onnx" else "") + n.op_type
        hist[key] = hist.get(key, 0) + 1
    return hist


def single_file(path):
    """Folds external data back into the model file (small models only)."""
    m = onnx.load(path)
    folder = os.path.dirname(path)
    for f in os.listdir(folder):
        if f.endswith(".data") or f.endswith(".onnx_data") or f.endswith(".onnx.data"):
            os.remove(os.path.join(folder, f))
    onnx.save(m, path, save_as_external_data=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("archs", nargs="*")
    ap.add_argument("--styles", default="torchscript,dynamo,dynamo23,optimum,genai,genai-int4,alibi,fp16,bf16")
    args = ap.parse_args()
    styles = args.styles.split(",")
    cfgs = configs()
    archs = args.archs or list(cfgs)
    os.makedirs(args.out, exist_ok=True)
    summary = {}
    for arch in archs:
        cfg = cfgs[arch]
        model, ref = build_with_margin(arch, cfg, lambda m: kv_geometry(m)[0])
        ref.update(arch=arch, transformers=transformers.__version__, torch=torch.__version__,
                   config=json.loads(cfg.to_json_string()))
        print(f"{arch}: greedy {ref['greedy']} (min top-2 margin {ref['greedy_min_margin']:.3g})", flush=True)
        hf_dir = tempfile.mkdtemp()
        model.save_pretrained(hf_dir)
        save_tokenizer(hf_dir)
        for style in styles:
            if style.startswith("genai") and arch in ("gpt2", "gptneox"):
                continue  # the model builder does not support these families
            if style == "dynamo23" and arch not in ("qwen2", "llama3", "mistral", "phi3"):
                continue  # the opset-23 forms (Attention, RotaryEmbedding, RMSNormalization): the SDPA families
            if style == "alibi" and arch != "llama3":
                continue  # one model with a bias the fused op cannot express is enough
            if style in ("fp16", "bf16") and arch != "qwen2":
                continue  # half-precision weights and activations: one family is enough
            folder = os.path.join(args.out, f"{arch}-{style}")
            shutil.rmtree(folder, ignore_errors=True)
            os.makedirs(folder)
            path = os.path.join(folder, "model.onnx")
            try:
                if style == "torchscript":
                    torch_export(model, path, dynamo=False)
                elif style == "alibi":
                    torch_export(model, path, dynamo=False, alibi=True)
                elif style == "fp16":
                    torch_export(model, path, dynamo=False, dtype=torch.float16)
                elif style == "bf16":
                    # The TorchScript exporter fails on bfloat16 (torch 2.15); the dynamo one does not.
                    torch_export(model, path, dynamo=True, dtype=torch.bfloat16)
                elif style == "dynamo":
                    torch_export(model, path, dynamo=True)
                elif style == "dynamo23":
                    torch_export(model, path, dynamo=True, opset=23)
                elif style == "optimum":
                    tmp = tempfile.mkdtemp()
                    optimum_export(hf_dir, tmp)
                    shutil.copy(os.path.join(tmp, "model.onnx"), path)
                    for f in os.listdir(tmp):
                        if f.startswith("model.onnx_data"):
                            shutil.copy(os.path.join(tmp, f), folder)
                    shutil.rmtree(tmp)
                elif style in ("genai", "genai-int4"):
                    tmp = tempfile.mkdtemp()
                    genai_export(hf_dir, tmp, "int4" if style == "genai-int4" else "fp32")
                    shutil.copy(os.path.join(tmp, "model.onnx"), path)
                    for f in os.listdir(tmp):
                        if f.startswith("model.onnx.data") or f == "genai_config.json":
                            shutil.copy(os.path.join(tmp, f), folder)
                    shutil.rmtree(tmp)
                single_file(path)
                # A model folder as users download one: config and tokenizer beside the graph.
                for f in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                          "special_tokens_map.json"):
                    if os.path.exists(os.path.join(hf_dir, f)):
                        shutil.copy(os.path.join(hf_dir, f), folder)
            except Exception as e:  # noqa: BLE001 - report and go on with the other styles
                print(f"  {style}: export FAILED: {type(e).__name__}: {str(e)[:300]}", flush=True)
                shutil.rmtree(folder, ignore_errors=True)
                continue
            r = dict(ref, style=style)
            if style in ("fp16", "bf16"):
                # Half-precision exports are held to the fp32 torch reference
                # within a bound (ONNX Runtime's CPU lacks bf16 kernels).
                r["reference"] = "torch-fp32"
                r["op_histogram"] = op_histogram(path)
                with open(os.path.join(folder, "ref.json"), "w") as f:
                    json.dump(r, f)
                print(f"  {style}: {os.path.getsize(path)} bytes; reference: torch fp32", flush=True)
                continue
            try:
                r["onnxruntime"] = ort_references(path, ref, style)
            except Exception as e:  # noqa: BLE001
                print(f"  {style}: ONNX Runtime cannot run the export: {str(e)[:300]}", flush=True)
                shutil.rmtree(folder, ignore_errors=True)
                continue
            dev = deviation(r["onnxruntime"], ref)
            r["onnxruntime_vs_torch"] = dev
            faithful = dev["logits"] <= 1e-4 and dev["batch_last_logits"] <= 1e-4 and dev["greedy_equal"]
            # The engine must compute what the file says. Where the export
            # itself differs from torch (quantized weights; the builder drops
            # Mistral's sliding window), ONNX Runtime's output is the reference.
            r["reference"] = "torch" if faithful else "onnxruntime"
            if not faithful and style != "genai-int4":
                print(f"  {style}: the export differs from torch ({dev}); ONNX Runtime is its reference", flush=True)
            err, berr = dev["logits"], dev["batch_last_logits"]
            hist = op_histogram(path)
            r["op_histogram"] = hist
            with open(os.path.join(folder, "ref.json"), "w") as f:
                json.dump(r, f)
            size = os.path.getsize(path)
            summary[f"{arch}-{style}"] = {"bytes": size, "ort_vs_torch": err, "ort_batch_vs_torch": berr}
            print(f"  {style}: {size} bytes, ORT vs torch {err:.2e} / batch {berr}; ops {sorted(hist)}", flush=True)
        shutil.rmtree(hf_dir, ignore_errors=True)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
