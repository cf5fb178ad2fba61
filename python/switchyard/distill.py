"""Distillation: drafters trained from the target model itself.

    python -m switchyard.distill heads --model MODEL --out heads.onnx
    python -m switchyard.distill draft --model MODEL.gguf --out draft.gguf

`draft` writes a small draft model for the built-in `draft-model` drafter:
the target's first blocks, the last fine-tuned on KL from the target's top-k
logits (switchyard/distill_draft.py says how). `heads`:

Medusa-style heads: head i maps the target's final hidden state at a
position (the LM head's input) through one residual block,
r = h + SiLU([h, e] A_i + c_i), and scores r with the target's own LM head;
it learns the token i + 1 places past the one the target chooses there. e is
the embedding of that chosen token (as EAGLE feeds it: the head then knows
what it drafts after; `--condition none` leaves it out, as Medusa does),
read from the LM head's rows: the input embedding itself when the model ties
them. The
data are the target's own generations (self-distillation: the labels are
what the target itself writes, so nothing outside the model is needed),
read back through the engine: `Engine.hidden_states` gives the hidden
states, `Engine.lm_head` the head's weights (the engine's LM head applied to
unit rows), whatever the model's format or quantization.

The heads start as the identity (A = 0, c = 0: every head first predicts
what the target's LM head does) and are trained with Adam on cross-entropy,
in numpy: no torch needed, small enough for a laptop CPU (SmolLM2-135M:
three heads in a few minutes on two cores). The file is ONNX: inputs
`hidden_states` [rows, hidden] (and `input_ids` [rows] with conditioning),
output `head_states` [rows, heads, hidden], which the engine's built-in
`heads` drafter loads
(`drafter: {name: heads, options: {model: heads.onnx}}`).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

# Prompts the heads learn from when none are given: varied requests, none of
# them the ones benchmarks/spec/make_chat_workload.py measures with.
DEFAULT_PROMPTS = [
    "Tell me about the history of the bicycle.",
    "How does a refrigerator keep food cold?",
    "Write a poem about the ocean at night.",
    "What are some healthy breakfast ideas?",
    "Explain what a computer program is.",
    "Describe a busy market in a small town.",
    "How do birds know where to migrate?",
    "Give me advice for my first day at a new job.",
    "What is the capital of France, and what is it known for?",
    "Write a short story about a lost puppy finding its way home.",
    "Why do leaves change color in autumn?",
    "How can I save money on groceries?",
    "Explain the rules of chess briefly.",
    "What makes a good friend?",
    "Describe how bread is made.",
    "What is gravity?",
    "Write a thank-you note to a teacher.",
    "How do airplanes stay in the air?",
    "What are the planets in our solar system?",
    "Tell me a fun fact about elephants.",
    "How should I prepare for a job interview?",
    "Explain what electricity is to a child.",
    "Write a short dialogue between a cat and a mouse.",
    "What are the benefits of regular exercise?",
    "Describe a sunrise in the mountains.",
    "How do plants grow from seeds?",
    "What is the difference between a virus and bacteria?",
    "Give three tips for better sleep.",
    "Write a story about a dragon who is afraid of fire.",
    "How does the internet work?",
    "What is a rainbow and how does it form?",
    "Explain why we need to drink water.",
    "Write a short review of an imaginary restaurant.",
    "How do bees make honey?",
    "What should I know before adopting a dog?",
    "Describe your ideal weekend.",
    "How do volcanoes erupt?",
    "What are some ways to reduce stress?",
    "Write a letter to your future self.",
    "Why is reading important?",
    "How do you make a paper airplane?",
    "What is the moon made of?",
    "Tell me about the life of a honeybee colony.",
    "Explain how a bank works.",
    "Write a short mystery story set in a library.",
    "What are clouds made of?",
    "How can I become a better writer?",
    "Describe the sound of rain on a roof.",
]

# Prompts for a model without a chat template (a story model): openings.
DEFAULT_OPENINGS = [
    "Once upon a time", "One day", "There was a little", "Lily and Ben", "The sun was", "Tom had a", "In a small house",
    "A big dog", "Mom said", "The little bird", "Sara wanted to", "Max was a", "The cat", "It was a sunny day",
    "Once there was a girl named", "The boy saw", "Tim and his mom", "Anna found a", "The old man", "One night",
]


# ---------------------------------------------------------------- data


def generate_data(engine, prompts: Sequence[List[int]], max_tokens: int, temperature: float, samples: int, seed: int,
                  workers: int) -> List[Tuple[List[int], int]]:
    """The target's own continuations: (ids, prompt length) per sample."""
    jobs = [(p, s) for p in prompts for s in range(samples)]

    def run(job):
        ids, s = job
        r = engine.generate(ids, max_tokens=max_tokens, temperature=temperature, seed=seed + s)
        return ids + list(r.token_ids), len(ids)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(run, jobs))


def positions(engine, data, heads: int):
    """Hidden states h_t at every generated position and, per head i, the
    token at t + 2 + i (-1 past the end): X [n, hidden], Y [n, heads],
    which generation each position comes from, and the token t + 1 that
    h_t chose (what the drafter knows beside h_t when it drafts)."""
    xs, ys, seqs, toks = [], [], [], []
    for k, (ids, prompt_len) in enumerate(data):
        h = engine.hidden_states(ids)  # h[t] chose ids[t + 1]
        n = len(ids)
        for t in range(prompt_len - 1, n - 2):
            xs.append(h[t])
            toks.append(ids[t + 1])
            ys.append([ids[t + 2 + i] if t + 2 + i < n else -1 for i in range(heads)])
            seqs.append(k)
    return (np.asarray(xs, dtype=np.float32), np.asarray(ys, dtype=np.int64), np.asarray(seqs, dtype=np.int64),
            np.asarray(toks, dtype=np.int64))


def lm_head_weights(engine, hidden: int) -> Tuple[np.ndarray, np.ndarray]:
    """The target's LM head as the engine runs it, read through the engine:
    logits = h W + b. Refused when the head is not affine (a soft-capping
    tail), which the heads' loss assumes."""
    b = engine.lm_head(np.zeros((1, hidden), np.float32))[0]
    w = engine.lm_head(np.eye(hidden, dtype=np.float32)) - b
    probe = np.random.default_rng(0).standard_normal((4, hidden)).astype(np.float32)
    got, want = engine.lm_head(probe), probe @ w + b
    err = float(np.max(np.abs(got - want)) / (np.max(np.abs(want)) + 1e-9))
    # A quantized head rounds its input rows (a few 1e-3 of the largest
    # logit); a soft-capping tail bends the large ones far more.
    if err > 3e-2:
        raise SystemExit(f"the model's LM head is not affine (relative deviation {err:.2e}): heads cannot be trained against it")
    return w.astype(np.float32), b.astype(np.float32)


# ---------------------------------------------------------------- training


def silu(z):
    return z / (1.0 + np.exp(-z))


def block_input(h, tok, emb):
    """The residual block's input: the hidden state, and with token
    conditioning the embedding of the token it chose beside it."""
    return h if emb is None else np.concatenate([h, emb[tok]], axis=1)


def head_forward(h, tok, emb, a, c):
    z = block_input(h, tok, emb) @ a + c
    return h + silu(z), z


def train_head(h, tok, y, emb, w, b, epochs: int, batch: int, lr: float, rng) -> Tuple[np.ndarray, np.ndarray]:
    hidden = h.shape[1]
    a = np.zeros((hidden * (1 if emb is None else 2), hidden), np.float32)
    c = np.zeros(hidden, np.float32)
    keep = y >= 0
    h, tok, y = h[keep], tok[keep], y[keep]
    m = [np.zeros_like(a), np.zeros_like(c)]
    v = [np.zeros_like(a), np.zeros_like(c)]
    step = 0
    for _ in range(epochs):
        order = rng.permutation(len(h))
        for s in range(0, len(h), batch):
            idx = order[s:s + batch]
            yb = y[idx]
            u = block_input(h[idx], tok[idx], emb)
            z = u @ a + c
            logits = (h[idx] + silu(z)) @ w + b
            logits -= logits.max(axis=1, keepdims=True)
            p = np.exp(logits)
            p /= p.sum(axis=1, keepdims=True)
            p[np.arange(len(yb)), yb] -= 1.0
            p /= len(yb)
            dr = p @ w.T
            sig = 1.0 / (1.0 + np.exp(-z))
            dz = dr * (sig * (1.0 + z * (1.0 - sig)))
            grads = [u.T @ dz, dz.sum(axis=0)]
            step += 1
            for i, (param, g) in enumerate(zip((a, c), grads)):
                m[i] = 0.9 * m[i] + 0.1 * g
                v[i] = 0.999 * v[i] + 0.001 * g * g
                mh, vh = m[i] / (1 - 0.9 ** step), v[i] / (1 - 0.999 ** step)
                param -= (lr * mh / (np.sqrt(vh) + 1e-8)).astype(np.float32)
    return a, c


def accuracy(h, tok, y, emb, a, c, w, b) -> float:
    keep = y >= 0
    if not keep.any():
        return 0.0
    r, _ = head_forward(h[keep], tok[keep], emb, a, c)
    return float(np.mean(np.argmax(r @ w + b, axis=1) == y[keep]))


# ---------------------------------------------------------------- the file


def write_onnx(path: str, heads: List[Tuple[np.ndarray, np.ndarray]], emb: Optional[np.ndarray], vocab: int,
               meta: Dict[str, str]) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    hidden = heads[0][0].shape[1]
    nodes, inits, rows = [], [], []
    inputs = [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, ["rows", hidden])]
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "axis1"))
    block_in = "hidden_states"
    if emb is not None:
        # Token conditioning: the chosen token's embedding beside the hidden state.
        inputs.append(helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["rows"]))
        inits.append(numpy_helper.from_array(emb, "token_embedding"))
        nodes += [helper.make_node("Gather", ["token_embedding", "input_ids"], ["token_rows"], axis=0),
                  helper.make_node("Concat", ["hidden_states", "token_rows"], ["block_in"], axis=1)]
        block_in = "block_in"
    for i, (a, c) in enumerate(heads):
        inits += [numpy_helper.from_array(a, f"head{i}.a"), numpy_helper.from_array(c, f"head{i}.c")]
        nodes += [
            helper.make_node("MatMul", [block_in, f"head{i}.a"], [f"head{i}.xa"]),
            helper.make_node("Add", [f"head{i}.xa", f"head{i}.c"], [f"head{i}.z"]),
            helper.make_node("Sigmoid", [f"head{i}.z"], [f"head{i}.s"]),
            helper.make_node("Mul", [f"head{i}.z", f"head{i}.s"], [f"head{i}.silu"]),
            helper.make_node("Add", ["hidden_states", f"head{i}.silu"], [f"head{i}.r"]),
            helper.make_node("Unsqueeze", [f"head{i}.r", "axis1"], [f"head{i}.row"]),
        ]
        rows.append(f"head{i}.row")
    nodes.append(helper.make_node("Concat", rows, ["head_states"], axis=1))
    graph = helper.make_graph(
        nodes, "switchyard_heads", inputs,
        [helper.make_tensor_value_info("head_states", TensorProto.FLOAT, ["rows", len(heads), hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="switchyard.distill")
    model.ir_version = 8
    meta = dict(meta, **{"switchyard.heads.vocab_size": str(vocab)})
    for k, v in meta.items():
        model.metadata_props.add(key=k, value=v)
    onnx.checker.check_model(model)
    onnx.save(model, path)


# ---------------------------------------------------------------- command


def encode_prompts(engine, prompts: Optional[Sequence[str]], chat: Optional[bool]) -> List[List[int]]:
    """Token ids of the prompts: rendered with the chat template when the
    model has one (or --chat), else encoded as text; without --prompts, the
    built-in requests for a chat model and story openings for another."""
    tok = engine.tokenizer
    if tok is None:
        raise SystemExit("the model has no tokenizer: give --tokenizer")
    if chat is None:
        try:
            engine.render_chat([{"role": "user", "content": "hi"}])
            chat = True
        except Exception:
            chat = False
    if prompts is None:
        prompts = DEFAULT_PROMPTS if chat else DEFAULT_OPENINGS
    if chat:
        return [engine.render_chat([{"role": "user", "content": p}]) for p in prompts]
    return [tok.encode(p) for p in prompts]


def held_out(seq_of: np.ndarray, generations: int) -> np.ndarray:
    """Which positions are measured on, not trained on: those of whole
    generations, the last tenth (none with fewer than four)."""
    if generations < 4:
        return np.zeros(len(seq_of), bool)
    return seq_of >= generations - max(1, generations // 10)


def open_and_generate(a):
    """The target opened as the data arguments say, and its generations:
    (engine, prompt ids, [(ids, prompt length)])."""
    from switchyard import Engine

    engine = Engine(model=a.model, manifest=a.manifest, profile=a.profile, threads=a.threads, tokenizer=a.tokenizer)
    prompts = None if a.prompts is None else [l.strip() for l in open(a.prompts, encoding="utf-8") if l.strip()]
    ids = encode_prompts(engine, prompts, a.chat)
    ids = ids[:a.max_prompts] if a.max_prompts else ids
    return engine, ids, generate_data(engine, ids, a.tokens, a.temperature, a.samples, a.seed, a.workers)


def heads_command(a) -> int:
    t0 = time.time()
    engine, ids, data = open_and_generate(a)
    t_gen = time.time()
    x, y, seq_of, tok = positions(engine, data, a.heads)
    if len(x) == 0:
        raise SystemExit("the generations are too short to learn from: raise --tokens")
    w, b = lm_head_weights(engine, x.shape[1])
    engine.close()
    t_read = time.time()
    # Whole generations held out (the last tenth) to measure the heads on.
    rng = np.random.default_rng(a.seed)
    held = held_out(seq_of, len(data))
    trained = []
    report = {"model": a.model, "positions": int(len(x)), "held_out": int(held.sum()), "hidden": int(x.shape[1]),
              "vocab": int(w.shape[1]), "heads": []}
    # The token embedding the heads see beside the hidden state: the LM
    # head's rows (the input embedding itself for a model that ties them).
    emb = np.ascontiguousarray(w.T) if a.condition == "token" else None
    report["condition"] = a.condition
    hidden = x.shape[1]
    zeros = (np.zeros((hidden * (1 if emb is None else 2), hidden), np.float32), np.zeros(hidden, np.float32))
    for i in range(a.heads):
        train = (x[~held], tok[~held], y[~held, i])
        ai, ci = train_head(train[0], train[1], train[2], emb, w, b, a.epochs, a.batch, a.lr, rng)
        trained.append((ai, ci))
        ev = (x[held], tok[held], y[held, i]) if held.any() else train
        row = {"head": i + 1, "untrained_top1": accuracy(*ev, emb, *zeros, w, b), "top1": accuracy(*ev, emb, ai, ci, w, b)}
        report["heads"].append(row)
    t_train = time.time()
    report["seconds"] = {"generate": round(t_gen - t0, 1), "read_back": round(t_read - t_gen, 1), "train": round(t_train - t_read, 1)}
    meta = {"switchyard.heads.trained_on": os.path.basename(a.model), "switchyard.heads.recipe": json.dumps(
        {"prompts": len(ids), "samples": a.samples, "tokens": a.tokens, "temperature": a.temperature, "epochs": a.epochs,
         "lr": a.lr, "batch": a.batch, "seed": a.seed, "condition": a.condition})}
    write_onnx(a.out, trained, emb, int(w.shape[1]), meta)
    report["file"] = a.out
    report["bytes"] = os.path.getsize(a.out)
    print(f"{len(x)} positions ({report['held_out']} held out) from {len(data)} generations; hidden {x.shape[1]}, vocab {w.shape[1]}")
    print(f"{'head':>4}  {'predicts':>9}  {'top-1 untrained':>15}  {'top-1 trained':>13}")
    for r in report["heads"]:
        print(f"{r['head']:>4}  {'t+' + str(r['head'] + 1):>9}  {r['untrained_top1']:>15.3f}  {r['top1']:>13.3f}")
    print(f"wrote {a.out} ({report['bytes']} bytes); seconds: {report['seconds']}")
    if a.report:
        with open(a.report, "w") as f:
            json.dump(report, f, indent=1)
    return 0


def teacher_positions(engine, data, top_k: int):
    """Per generated position t (the logits that chose ids[t + 1]): the
    target's top-k token ids and their probabilities renormalised over the
    k, its greedy token, which sequence and position."""
    top_ids, top_p, want, where = [], [], [], []
    for k, (ids, prompt_len) in enumerate(data):
        lg = engine.logits(ids)
        rows = lg[prompt_len - 1:len(ids) - 1].astype(np.float64)
        # A copy: the slice of argpartition's [rows, vocab] result would keep
        # all of it alive (50 MB a generation of SmolLM2).
        idx = np.ascontiguousarray(np.argpartition(-rows, top_k - 1, axis=1)[:, :top_k])
        sel = np.take_along_axis(rows, idx, axis=1)
        p = np.exp(sel - rows.max(axis=1, keepdims=True))
        top_ids.append(idx)
        top_p.append((p / p.sum(axis=1, keepdims=True)).astype(np.float32))
        want.append(np.argmax(rows, axis=1))
        where += [(k, t) for t in range(prompt_len - 1, len(ids) - 1)]
    return np.concatenate(top_ids), np.concatenate(top_p), np.concatenate(want), where


def draft_command(a) -> int:
    from switchyard import distill_draft as dd

    t0 = time.time()
    target = dd.GgufTarget(a.model)
    hp = target.hp
    if not 1 <= a.layers < hp.blocks:
        raise SystemExit(f"--layers {a.layers}: the student keeps 1 to {hp.blocks - 1} of the target's {hp.blocks} blocks")
    if a.head_type != "keep":
        target.requantize(target.lm_head_name(), a.head_type)
    engine, ids, data = open_and_generate(a)
    t_gen = time.time()
    top_ids, top_p, want, where = teacher_positions(engine, data, a.top_k)
    if len(where) == 0:
        raise SystemExit("the generations are too short to learn from: raise --tokens")
    vocab = engine.vocab_size
    engine.close()
    head = target.lm_head()
    if head.shape[0] != vocab:
        raise SystemExit(f"{a.model}: the LM head has {head.shape[0]} rows, the engine's vocabulary {vocab}")
    adapter_from = a.layers - 1  # the cut's own last block (see distill_draft)
    rs, cs = [], []
    for seq, prompt_len in data:  # the positions teacher_positions took, in its order
        if len(seq) - 1 > prompt_len - 1:
            r, c = dd.student_inputs(target, seq, a.layers, adapter_from)
            rs.append(r[prompt_len - 1:len(seq) - 1])
            cs.append(c[prompt_len - 1:len(seq) - 1])
    r, c = np.concatenate(rs).astype(np.float32), np.concatenate(cs).astype(np.float32)
    seq_of = np.asarray([s for s, _ in where])
    t_read = time.time()
    held = held_out(seq_of, len(data))
    ev = held if held.any() else ~held
    adapter = dd.Adapter.from_target(target, adapter_from)
    untrained = dd.agreement(adapter, head, r[ev], c[ev], want[ev])
    losses = dd.train(adapter, head, r[~held], c[~held], top_ids[~held], top_p[~held], a.epochs, a.batch, a.lr,
                      np.random.default_rng(a.seed))
    trained_top1 = dd.agreement(adapter, head, r[ev], c[ev], want[ev])
    t_train = time.time()
    recipe = {"trained_on": os.path.basename(a.model), "recipe": json.dumps(
        {"layers": a.layers, "adapter_from": adapter_from, "head_type": a.head_type, "prompts": len(ids), "samples": a.samples, "tokens": a.tokens,
         "temperature": a.temperature, "top_k": a.top_k, "epochs": a.epochs, "lr": a.lr, "batch": a.batch, "seed": a.seed})}
    dd.write_student(target, a.out, a.layers, adapter_from, adapter.params, recipe)
    report = {"model": a.model, "file": a.out, "bytes": os.path.getsize(a.out), "target_bytes": os.path.getsize(a.model),
              "layers": a.layers, "target_layers": hp.blocks, "positions": int(len(r)), "held_out": int(held.sum()),
              "untrained_top1": untrained, "top1": trained_top1, "kl_per_epoch": [round(x, 4) for x in losses],
              "seconds": {"generate": round(t_gen - t0, 1), "read_back": round(t_read - t_gen, 1),
                          "train": round(t_train - t_read, 1)}}
    print(f"{len(r)} positions ({report['held_out']} held out) from {len(data)} generations; "
          f"student: the first {a.layers} of {hp.blocks} blocks, the last trained as the adapter")
    print(f"held-out top-1 agreement with the target: untrained {untrained:.3f}, trained {trained_top1:.3f}; "
          f"KL per epoch {report['kl_per_epoch']}")
    print(f"wrote {a.out} ({report['bytes'] / 1e6:.1f} MB, the target {report['target_bytes'] / 1e6:.1f} MB); "
          f"seconds: {report['seconds']}")
    if a.report:
        with open(a.report, "w") as f:
            json.dump(report, f, indent=1)
    return 0


def add_data_args(p) -> None:
    """What the target generates to learn from, shared by every student."""
    p.add_argument("--model", required=True, help="the target model")
    p.add_argument("--manifest", default=None, help="engine manifest (default: the built-in default)")
    p.add_argument("--profile", default=None, help="manifest profile (needs the step engine; default: the manifest's top level)")
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--report", default=None, help="write the figures as JSON here")
    p.add_argument("--prompts", default=None, help="a text file, one prompt per line (default: a built-in set)")
    p.add_argument("--chat", dest="chat", action="store_true", default=None, help="render prompts with the chat template")
    p.add_argument("--no-chat", dest="chat", action="store_false")
    p.add_argument("--max-prompts", type=int, default=0)
    p.add_argument("--samples", type=int, default=1, help="generations per prompt")
    p.add_argument("--tokens", type=int, default=128, help="tokens generated per sample")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (the continuation verification checks)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=8, help="generations in flight at once")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m switchyard.distill", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    h = sub.add_parser("heads", help="train Medusa-style drafting heads from the model's own generations")
    add_data_args(h)
    h.add_argument("--out", required=True, help="the heads file to write (.onnx)")
    h.add_argument("--heads", type=int, default=3)
    h.add_argument("--condition", choices=["token", "none"], default="token",
                   help="token: each head also sees the embedding of the token the hidden state chose (EAGLE's insight); "
                        "none: the hidden state only (Medusa)")
    h.add_argument("--epochs", type=int, default=3)
    h.add_argument("--batch", type=int, default=256)
    h.add_argument("--lr", type=float, default=3e-3)
    d = sub.add_parser("draft", help="distill a small draft model (the target's first blocks, the last trained) "
                                     "from a GGUF target, KL on its top-k logits")
    add_data_args(d)
    d.add_argument("--out", required=True, help="the draft model to write (.gguf)")
    d.add_argument("--layers", type=int, default=4, help="the target's first LAYERS blocks the student keeps, the last trained")
    d.add_argument("--head-type", default="Q4_1",
                   help="GGML type of the student's LM head (most of its bytes), or 'keep' for the target's own")
    d.add_argument("--top-k", type=int, default=32, help="the target's top-k probabilities the KL divergence is taken over")
    d.add_argument("--epochs", type=int, default=3)
    d.add_argument("--batch", type=int, default=128)
    d.add_argument("--lr", type=float, default=1e-3)
    a = ap.parse_args(argv)
    return heads_command(a) if a.command == "heads" else draft_command(a)


if __name__ == "__main__":
    sys.exit(main())
