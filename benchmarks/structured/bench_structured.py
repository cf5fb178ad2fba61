#!/usr/bin/env python3
"""Structured output's cost, through the real server: decode tokens/s of
requests under a JSON schema against the same requests unconstrained, at
batch 1 and batch 16, and the time to first token with a cold grammar cache
(a schema the server has not seen: xgrammar compiles it) and a warm one (the
same schema again). Prints a table and writes JSON.

The model is a synth export (default: the 110m preset) with a 32000-token
byte-level BPE tokenizer trained here on generated text, so the masks have a
realistic vocabulary to sweep (the synth presets have no tokenizer of their
own).

    python3 benchmarks/structured/bench_structured.py --cli build/switchyard \\
        [--preset 110m] [--threads 2] [--tokens 64] [--out bench-structured.json]
"""
import argparse
import concurrent.futures
import json
import os
import random
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request

import openai

API_KEY = "bench"
# Decode speed: a string that cannot end within the request's tokens, so
# constrained and unconstrained requests run the same number of tokens (a
# random model closes a free string after a few tokens).
SCHEMA = {"type": "object", "properties": {"story": {"type": "string", "minLength": 4000}}, "required": ["story"]}
# Time to first token: a schema with some structure to compile (a fresh
# property name each time makes it new to the cache).
RICH = {"type": "object", "properties": {
    "name": {"type": "string", "pattern": "^[A-Z][a-z]{1,12}$"},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "mood": {"enum": ["happy", "sad", "sleepy", "angry"]},
    "friends": {"type": "array", "maxItems": 5, "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "since": {"type": "string", "pattern": "^20[0-9]{2}$"}}, "required": ["name"]}},
    "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}}},
    "required": ["name", "age", "mood"]}


def train_tokenizer(path, vocab=32000, seed=0):
    """A byte-level BPE tokenizer of `vocab` tokens (ids 0-2: <unk> <s> </s>)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    rng = random.Random(seed)
    syllables = [a + b for a in "bcdfghjklmnprstvwz" for b in "aeiouy"] + list("aeiou")
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(120000)]
    punct = [" ", " ", " ", " ", ", ", ". ", "\n", ": ", "\"", "{", "}", "[", "]", " 0", " 12", " 345"]
    lines = []
    for _ in range(60000):
        lines.append("".join(rng.choice(words) + rng.choice(punct) for _ in range(12)))
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(lines, trainer)
    tok.save(path)
    return tok.get_vocab_size()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(cli, model_dir, threads):
    port = free_port()
    log = open(os.path.join(model_dir, "serve.log"), "w")
    proc = subprocess.Popen([cli, "serve", "--model", model_dir, "--profile", "paged", "--threads", str(threads),
                             "--port", str(port), "--api-key", API_KEY], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                return proc, port
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("server exited; see " + log.name)
            time.sleep(0.2)
    raise RuntimeError("server did not come up")


MODEL = None  # the name the server serves (its model folder's)


def one(client, tokens, seed, schema=None):
    """Streams one completion: (ttft s, decode tok/s, tokens)."""
    extra = {"ignore_eos": True}
    if schema is not None:
        extra["response_format"] = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    t0 = time.perf_counter()
    first = last = None
    chunks = 0
    stream = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=tokens, temperature=1.0, seed=seed,
                                       stream=True, stream_options={"include_usage": True}, extra_body=extra)
    n = 0
    for c in stream:
        now = time.perf_counter()
        if c.usage:
            n = c.usage.completion_tokens
        if c.choices and c.choices[0].text:
            chunks += 1
            first = first or now
            last = now
    ttft = (first or time.perf_counter()) - t0
    rate = (n - 1) / (last - first) if n > 1 and last > first else 0.0
    if schema is SCHEMA:
        assert n == tokens, f"a constrained request ended after {n} of {tokens} tokens: the rates would not compare"
    return ttft, rate, n


def batch(client, size, tokens, schema, rounds):
    """Aggregate decode tokens/s with `size` concurrent streams."""
    rates = []
    for r in range(rounds):
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(size) as pool:
            out = list(pool.map(lambda i: one(client, tokens, 1000 * r + i, schema), range(size)))
        wall = time.perf_counter() - t0
        rates.append(sum(n for _, _, n in out) / wall if size > 1 else out[0][1])
    return statistics.median(rates)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default="build/switchyard")
    ap.add_argument("--preset", default="110m")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="bench-structured.json")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="sy-structured-")
    subprocess.run([a.cli, "synth", "--preset", a.preset, "--out", os.path.join(work, "model.onnx")], check=True,
                   stdout=subprocess.DEVNULL)
    vocab = train_tokenizer(os.path.join(work, "tokenizer.json"))
    proc, port = start_server(a.cli, work, a.threads)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY, max_retries=0, timeout=600)
    global MODEL
    try:
        MODEL = client.models.list().data[0].id
        one(client, 4, 0)  # warm up the engine
        rows = {}
        for size in (1, 16):
            # Interleaved: unconstrained, constrained, per round, so drift hits both.
            plain, constrained = [], []
            for r in range(a.rounds):
                plain.append(batch(client, size, a.tokens, None, 1))
                constrained.append(batch(client, size, a.tokens, SCHEMA, 1))
            rows[f"batch{size}"] = {"unconstrained_tok_s": statistics.median(plain),
                                    "constrained_tok_s": statistics.median(constrained)}
            rows[f"batch{size}"]["ratio"] = rows[f"batch{size}"]["constrained_tok_s"] / rows[f"batch{size}"]["unconstrained_tok_s"]
        def compile_seconds():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
                for line in r.read().decode().splitlines():
                    if line.startswith("switchyard:structured_output_compile_seconds_total"):
                        return float(line.split()[1])
            return 0.0

        cold, warm, cold_compile, warm_compile = [], [], [], []
        for i in range(a.rounds + 2):
            schema = dict(RICH, properties=dict(RICH["properties"], **{f"field{i}": {"type": "integer"}}))
            c0 = compile_seconds()
            cold.append(one(client, 1, i, schema)[0])
            c1 = compile_seconds()
            warm.append(one(client, 1, i, schema)[0])
            c2 = compile_seconds()
            cold_compile.append(c1 - c0)
            warm_compile.append(c2 - c1)
        plain_ttft = [one(client, 1, i)[0] for i in range(a.rounds + 2)]
        rows["ttft_ms"] = {"unconstrained": 1000 * statistics.median(plain_ttft), "cold_grammar": 1000 * statistics.median(cold),
                           "warm_grammar": 1000 * statistics.median(warm)}
        rows["compile_ms"] = {"cold_grammar": 1000 * statistics.median(cold_compile), "warm_grammar": 1000 * statistics.median(warm_compile)}
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
            metrics = r.read().decode()
        rows["server_metrics"] = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
                                  if line.startswith("switchyard:structured_output")}
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    rows["setup"] = {"preset": a.preset, "vocab": vocab, "threads": a.threads, "tokens": a.tokens, "rounds": a.rounds}
    print(f"structured output on synth {a.preset} (vocab {vocab}), {a.threads} threads, {a.tokens} tokens per request")
    print(f"{'':10} {'unconstrained tok/s':>20} {'json_schema tok/s':>18} {'ratio':>7}")
    for size in (1, 16):
        r = rows[f"batch{size}"]
        print(f"batch {size:<4} {r['unconstrained_tok_s']:>20.1f} {r['constrained_tok_s']:>18.1f} {r['ratio']:>7.3f}")
    t = rows["ttft_ms"]
    print(f"TTFT ms: unconstrained {t['unconstrained']:.1f}, cold grammar {t['cold_grammar']:.1f}, warm grammar {t['warm_grammar']:.1f}")
    c = rows["compile_ms"]
    print(f"grammar compile ms (server): cold {c['cold_grammar']:.2f}, warm (cache hit) {c['warm_grammar']:.2f}")
    with open(a.out, "w") as f:
        json.dump(rows, f, indent=2)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
