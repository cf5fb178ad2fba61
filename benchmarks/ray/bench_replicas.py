#!/usr/bin/env python3
"""Switchyard on Ray Serve: 1 replica against 2 on this machine, and the
prefix router against round robin, measured in one run.

    SWITCHYARD_PREFIX=<install prefix> python3 benchmarks/ray/bench_replicas.py [--json out.json]

Each configuration is deployed on a local Ray cluster and driven through its
OpenAI ingress with the official async openai client: shared-prefix prompts
(4 system prompts), streaming, concurrency 8. Printed: output tokens/s,
TTFT and TPOT percentiles, prefix-cache hit rate. On a 2-core machine the
replicas share the cores with each other, the ingress, Ray's own processes
and the load generator: compare the ratios, not the absolute figures.
"""
import argparse
import asyncio
import json
import os
import pathlib
import socket
import statistics
import sys
import tempfile
import time

import openai
import ray
from ray import serve

from switchyard.ray import build_app

REPO = pathlib.Path(__file__).resolve().parents[2]
SHARED = pathlib.Path(os.environ.get("SWITCHYARD_SHARED", REPO.parent / "shared"))
MODEL = str(SHARED / "models" / "stories260K.onnx")
TOKENIZER = str(SHARED / "models" / "tok512.bin")
sys.path.insert(0, str(REPO / "python" / "tests"))
from test_ray_serve import QUESTIONS, SYSTEM  # noqa: E402  (the same prompts as the test)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def drive(url, prompts, concurrency, max_tokens):
    client = openai.AsyncOpenAI(base_url=url, api_key="none", max_retries=0, timeout=300)
    sem = asyncio.Semaphore(concurrency)
    rows = []

    async def one(p):
        async with sem:
            start = time.perf_counter()
            first = None
            n = 0
            stream = await client.completions.create(model="m", prompt=p, max_tokens=max_tokens, temperature=0,
                                                     stream=True, stream_options={"include_usage": True},
                                                     extra_body={"ignore_eos": True})
            async for c in stream:
                if c.choices and c.choices[0].text:
                    first = first or time.perf_counter()
                if c.usage:
                    n = c.usage.completion_tokens
                    rows.append({"ttft": first - start, "e2e": time.perf_counter() - start, "tokens": n,
                                 "prompt": c.usage.prompt_tokens, "cached": c.usage.prompt_tokens_details.cached_tokens})

    start = time.perf_counter()
    await asyncio.gather(*(one(p) for p in prompts))
    wall = time.perf_counter() - start
    await client.close()
    return rows, wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--num-blocks", type=int, default=48,
                    help="KV blocks (16 tokens) per replica: 48 holds two of the four system prompts, 256 all of them")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    prefix = pathlib.Path(os.environ["SWITCHYARD_PREFIX"])
    plugins = prefix / "lib" / "switchyard" / "plugins"
    manifest = pathlib.Path(tempfile.mkdtemp()) / "bench.yaml"
    manifest.write_text(
        f"model: {MODEL}\ntokenizer: {TOKENIZER}\nplugins:\n  - {plugins}/attention/libswitchyard_attention.so\n"
        f"  - {plugins}/cache/libswitchyard_cache.so\npasses: [attention-fusion]\n"
        f"cache: {{name: prefix-caching, options: {{block_size: 16, num_blocks: {args.num_blocks}}}}}\n")
    prompts = [f"{SYSTEM[i % 4]} {QUESTIONS[i % len(QUESTIONS)]} ({i})" for i in range(args.requests)]
    configs = [
        ("1 replica x 1 thread", dict(num_replicas=1, threads=1, router="prefix")),
        ("1 replica x 2 threads", dict(num_replicas=1, threads=2, router="prefix")),
        ("2 replicas x 1 thread, prefix router", dict(num_replicas=2, threads=1, router="prefix")),
        ("2 replicas x 1 thread, round robin", dict(num_replicas=2, threads=1, router="round_robin")),
    ]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    results = []
    for i, (name, cfg) in enumerate(configs):
        app = f"c{i}"
        serve.run(build_app(model=MODEL, manifest=str(manifest), profile=None, tokenizer=TOKENIZER, model_name="m",
                            replica_cpus=0.25, **cfg), name=app, route_prefix=f"/{app}")
        url = f"http://127.0.0.1:{port}/{app}/v1"
        asyncio.run(drive(url, prompts[:4], 4, 4))  # the system prompts once (warm caches, as a running service has)
        rows, wall = asyncio.run(drive(url, prompts, args.concurrency, args.max_tokens))
        serve.delete(app)
        tokens = sum(r["tokens"] for r in rows)
        tpot = [(r["e2e"] - r["ttft"]) / max(1, r["tokens"] - 1) for r in rows]
        res = {"config": name, "requests": len(rows), "output_tokens_per_s": tokens / wall,
               "ttft_ms_p50": statistics.median(r["ttft"] for r in rows) * 1000, "ttft_ms_p99": pct([r["ttft"] for r in rows], 0.99) * 1000,
               "tpot_ms_p50": statistics.median(tpot) * 1000, "tpot_ms_p99": pct(tpot, 0.99) * 1000,
               "prefix_hit_rate": sum(r["cached"] for r in rows) / sum(r["prompt"] for r in rows)}
        results.append(res)
    serve.shutdown()
    ray.shutdown()
    base = results[0]["output_tokens_per_s"]
    print(f"\n{args.requests} streamed requests, concurrency {args.concurrency}, {args.max_tokens} tokens each, stories260K, "
          f"{args.num_blocks} KV blocks per replica, {os.cpu_count()} CPUs\n")
    print(f"| configuration | output tok/s | vs 1x1 | TTFT p50 / p99 ms | TPOT p50 / p99 ms | prefix hit rate |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['config']} | {r['output_tokens_per_s']:.0f} | {r['output_tokens_per_s'] / base:.2f}x | "
              f"{r['ttft_ms_p50']:.0f} / {r['ttft_ms_p99']:.0f} | {r['tpot_ms_p50']:.1f} / {r['tpot_ms_p99']:.1f} | "
              f"{r['prefix_hit_rate']:.3f} |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"cpus": os.cpu_count(), "num_blocks": args.num_blocks, "results": results}, indent=2))


if __name__ == "__main__":
    main()
