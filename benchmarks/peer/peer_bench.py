#!/usr/bin/env python3
"""Switchyard against llama.cpp on the same machine, in the same run.

For each preset (a `switchyard synth` shape) and each precision (fp32, int8
vs llama.cpp's Q8_0, int4 vs Q4_0) and thread count, batch-1 decode and
128-token prefill tokens/s of both engines, rounds interleaved (the order
flips every round) so drift on a shared machine hits both; medians over the
rounds, ratios within them. Decode MBU for both: the weight bytes one token
reads over the memory-read bandwidth bench_quant measures next to its run.

A mixture-of-experts preset (moe-small, qwen3-30b-a3b-2l) is Llama with
expert tensors for llama.cpp; both engines' decode MBU counts the weights
of the experts a token selects, not the whole stack.

Both engines hold their weights in anonymous memory (llama.cpp with
--load-mode none, the newer spelling of -mmp 0). Both quantize every
matrix the same way (llama-quantize --pure: no Q6_K head).
llama.cpp comes from PyPI's llama-cpp-python source package
(scripts/build-llama-cpp.sh builds its llama-bench and llama-quantize).

  benchmarks/peer/peer_bench.py --build build --llama $(scripts/build-llama-cpp.sh) \\
      --presets 110m,tinyllama-1.1b --threads 1,2 --rounds 2 --out peer.json

--depths 4096,16384 measures decode after that many tokens of context instead
(llama.cpp with flash attention on), rounds interleaved as above; both engines
keep the cache in the same type (--kv-dtype fp16, llama.cpp's default and
Switchyard's cache option; or int8 against llama.cpp's q8_0 cache), and
--block-size sets Switchyard's cache block.

--batches 8,32 measures batched generation instead: that many sequences of a
--prefill-token prompt each, then --decode tokens, against llama.cpp's
llama-batched-bench (flash attention on, -npp/-ntg/-npl): the generation
phase's output tokens/s (its S_TG), the KV cache in --kv-dtype on both sides.

--gguf FILE runs one GGUF file in both engines instead of the synth presets:
Switchyard loads it directly (its Q8_0/Q4_0/Q4_1 blocks as they are), llama.cpp
as always; the weight bytes are what each reads per token (Switchyard's
inspect; llama.cpp's file size, the embedding table included when it is
tied to the head, as SmolLM2's is).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from make_gguf import preset_shape

HERE = os.path.dirname(os.path.abspath(__file__))
PEER_TYPE = {"fp32": None, "int8": "Q8_0", "int4": "Q4_0"}


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"peer_bench: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r.stdout


def prepare(a, preset):
    """The ONNX model for Switchyard and the GGUF files for llama.cpp."""
    onnx = os.path.join(a.workdir, f"{preset}.onnx")
    if not os.path.exists(onnx):
        run([os.path.join(a.build, "switchyard"), "synth", "--preset", preset, "--out", onnx])
    gguf = {"fp32": os.path.join(a.workdir, f"{preset}-f32.gguf")}
    if not os.path.exists(gguf["fp32"]):
        run([sys.executable, os.path.join(HERE, "make_gguf.py"), "--switchyard", os.path.join(a.build, "switchyard"), "--preset", preset,
             "--out", gguf["fp32"], "--context", str(32768)])
    for precision, peer_type in PEER_TYPE.items():
        if peer_type is None:
            continue
        gguf[precision] = os.path.join(a.workdir, f"{preset}-{peer_type.lower()}.gguf")
        if not os.path.exists(gguf[precision]):
            # --pure: every matrix in the one type (no Q6_K head), as
            # Switchyard's quantize pass does.
            run([os.path.join(a.llama, "llama-quantize"), "--pure", gguf["fp32"], gguf[precision], peer_type])
    return onnx, gguf


def llama_cpp(a, gguf, threads):
    out = run([os.path.join(a.llama, "llama-bench"), "-m", gguf, "-p", str(a.prefill), "-n", str(a.decode), "-t", str(threads),
               "-lm", "none", "-r", "3", "-o", "json"])
    rows = json.loads(out)
    decode = next(r for r in rows if r["n_gen"] > 0 and r["n_prompt"] == 0)
    prefill = next(r for r in rows if r["n_prompt"] > 0 and r["n_gen"] == 0)
    return {"decode_tps": decode["avg_ts"], "prefill_tps": prefill["avg_ts"], "model_bytes": decode["model_size"]}


def switchyard(a, onnx, precision, threads):
    out_json = os.path.join(a.workdir, "bench-quant-run.json")
    env = dict(os.environ)
    env["SWITCHYARD_PLUGIN_DIR"] = os.path.join(a.build, "plugins")
    log = run([os.path.join(a.build, "benchmarks", "bench_quant"), "--model", onnx, "--schemes", precision, "--threads", str(threads),
               "--decode", str(a.decode), "--prefill", str(a.prefill), "--out", out_json] + ([] if a.fuse_pointwise else ["--no-fuse-pointwise"]),
              env=env)
    row = json.load(open(out_json))["rows"][0]
    return {"decode_tps": row["decode_tokens_per_s"], "prefill_tps": row["prefill_tokens_per_s"],
            "weight_bytes": row["weight_bytes_per_token"], "bandwidth_gbs": row["read_bandwidth_gbs"], "log": log}


# The KV cache type on each side: Switchyard's cache dtype option and
# llama.cpp's -ctk/-ctv (llama.cpp refuses a float32 cache with flash attention).
KV_TYPES = {"fp16": ("fp16", "f16"), "int8": ("int8", "q8_0")}


def llama_cpp_depth(a, gguf, threads, depth):
    """Decode tokens/s after `depth` tokens of context, flash attention on."""
    kv = KV_TYPES[a.kv_dtype][1]
    out = run([os.path.join(a.llama, "llama-bench"), "-m", gguf, "-p", "0", "-n", str(a.decode), "-d", str(depth), "-t", str(threads),
               "-fa", "on", "-ctk", kv, "-ctv", kv, "-lm", "none", "-r", "1", "-o", "json"])
    decode = next(r for r in json.loads(out) if r["n_gen"] > 0)
    return {"decode_tps": decode["avg_ts"]}


def switchyard_depth(a, onnx, precision, threads, depth):
    out_json = os.path.join(a.workdir, "bench-quant-run.json")
    env = dict(os.environ)
    env["SWITCHYARD_PLUGIN_DIR"] = os.path.join(a.build, "plugins")
    run([os.path.join(a.build, "benchmarks", "bench_quant"), "--model", onnx, "--schemes", precision, "--threads", str(threads),
         "--decode", str(a.decode), "--prefill", "0", "--depth", str(depth), "--kv-dtype", KV_TYPES[a.kv_dtype][0],
         "--block-size", str(a.block_size), "--out", out_json], env=env)
    return {"decode_tps": json.load(open(out_json))["rows"][0]["decode_tokens_per_s"]}


def depth_rows(a):
    """Long contexts: batch-1 decode after each --depths context, where
    attention over the cache, not the weights, sets much of the cost."""
    rows = []
    for preset in a.presets.split(","):
        onnx, gguf = prepare(a, preset)
        for precision in a.precisions.split(","):
            for threads in map(int, a.threads.split(",")):
                for depth in map(int, a.depths.split(",")):
                    sy, lc = [], []
                    for r in range(a.rounds):
                        for who in ([0, 1] if r % 2 == 0 else [1, 0]):
                            if who == 0:
                                sy.append(switchyard_depth(a, onnx, precision, threads, depth))
                            else:
                                lc.append(llama_cpp_depth(a, gguf[precision], threads, depth))
                    row = {"preset": preset, "precision": precision, "threads": threads, "depth": depth, "rounds": a.rounds,
                           "kv_dtype": a.kv_dtype, "block_size": a.block_size,
                           "switchyard_decode_tps": statistics.median(x["decode_tps"] for x in sy),
                           "llama_cpp_decode_tps": statistics.median(x["decode_tps"] for x in lc)}
                    row["decode_ratio"] = row["switchyard_decode_tps"] / row["llama_cpp_decode_tps"]
                    print(f"{preset:>15} {precision:>5} t={threads} depth {depth:>6}: decode {row['switchyard_decode_tps']:7.1f} vs "
                          f"{row['llama_cpp_decode_tps']:7.1f} tok/s ({row['decode_ratio']:.2f}x)", flush=True)
                    rows.append(row)
    return rows


def llama_cpp_batched(a, gguf, threads, batch):
    """llama-batched-bench's S_TG: `batch` sequences generating together."""
    kv = KV_TYPES[a.kv_dtype][1]
    cmd = [os.path.join(a.llama, "llama-batched-bench"), "-m", gguf, "-c", str(batch * (a.prefill + a.decode) + 64), "-b", "2048",
           "-npp", str(a.prefill), "-ntg", str(a.decode), "-npl", str(batch), "-t", str(threads), "-fa", "on", "-ctk", kv, "-ctv", kv,
           "--output-format", "jsonl"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [line for line in r.stdout.splitlines() if line.startswith('{"n_kv_max"')]
    if r.returncode != 0 or not lines:
        sys.exit(f"peer_bench: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-3000:]}")
    row = json.loads(lines[0])
    return {"decode_tps": row["speed_tg"], "prefill_tps": row["speed_pp"]}


def switchyard_batched(a, onnx, precision, threads, batch):
    out_json = os.path.join(a.workdir, "bench-quant-run.json")
    env = dict(os.environ)
    env["SWITCHYARD_PLUGIN_DIR"] = os.path.join(a.build, "plugins")
    run([os.path.join(a.build, "benchmarks", "bench_quant"), "--model", onnx, "--schemes", precision, "--threads", str(threads),
         "--batch", str(batch), "--depth", str(a.prefill), "--decode", str(a.decode), "--prefill", "0",
         "--kv-dtype", KV_TYPES[a.kv_dtype][0], "--block-size", str(a.block_size), "--out", out_json], env=env)
    row = json.load(open(out_json))["rows"][0]
    return {"decode_tps": row["decode_tokens_per_s"], "prefill_tps": row["prefill_tokens_per_s"]}


def batched_rows(a):
    """Batched generation: output tokens/s with `batch` sequences at once."""
    rows = []
    for preset in a.presets.split(","):
        onnx, gguf = prepare(a, preset)
        for precision in a.precisions.split(","):
            for threads in map(int, a.threads.split(",")):
                for batch in map(int, a.batches.split(",")):
                    sy, lc = [], []
                    for r in range(a.rounds):
                        for who in ([0, 1] if r % 2 == 0 else [1, 0]):
                            if who == 0:
                                sy.append(switchyard_batched(a, onnx, precision, threads, batch))
                            else:
                                lc.append(llama_cpp_batched(a, gguf[precision], threads, batch))
                    med = lambda xs, k: statistics.median(x[k] for x in xs)  # noqa: E731
                    row = {"preset": preset, "precision": precision, "threads": threads, "batch": batch, "rounds": a.rounds,
                           "prompt": a.prefill, "generated": a.decode, "kv_dtype": a.kv_dtype,
                           "switchyard_output_tps": med(sy, "decode_tps"), "llama_cpp_output_tps": med(lc, "decode_tps"),
                           "switchyard_prompt_tps": med(sy, "prefill_tps"), "llama_cpp_prompt_tps": med(lc, "prefill_tps")}
                    row["output_ratio"] = row["switchyard_output_tps"] / row["llama_cpp_output_tps"]
                    print(f"{preset:>15} {precision:>5} t={threads} batch {batch:>3}: output {row['switchyard_output_tps']:8.1f} vs "
                          f"{row['llama_cpp_output_tps']:8.1f} tok/s ({row['output_ratio']:.2f}x); prompts {row['switchyard_prompt_tps']:.0f} "
                          f"vs {row['llama_cpp_prompt_tps']:.0f} tok/s", flush=True)
                    rows.append(row)
    return rows


def gguf_rows(a):
    rows = []
    for threads in map(int, a.threads.split(",")):
        sy, lc = [], []
        for r in range(a.rounds):
            for who in ([0, 1] if r % 2 == 0 else [1, 0]):
                if who == 0:
                    sy.append(switchyard(a, a.gguf, "fp32", threads))  # "fp32": no quantize pass; the file's blocks as stored
                else:
                    lc.append(llama_cpp(a, a.gguf, threads))
        med = lambda xs, k: statistics.median(x[k] for x in xs)  # noqa: E731
        bw = med(sy, "bandwidth_gbs")
        row = {"preset": os.path.basename(a.gguf), "precision": "file", "peer_type": "file", "threads": threads,
               "switchyard_decode_tps": med(sy, "decode_tps"), "llama_cpp_decode_tps": med(lc, "decode_tps"),
               "switchyard_prefill_tps": med(sy, "prefill_tps"), "llama_cpp_prefill_tps": med(lc, "prefill_tps"),
               "switchyard_weight_bytes": sy[0]["weight_bytes"], "llama_cpp_weight_bytes": lc[0]["model_bytes"], "bandwidth_gbs": bw,
               "rounds": a.rounds}
        row["decode_ratio"] = row["switchyard_decode_tps"] / row["llama_cpp_decode_tps"]
        row["prefill_ratio"] = row["switchyard_prefill_tps"] / row["llama_cpp_prefill_tps"]
        row["switchyard_mbu"] = row["switchyard_weight_bytes"] * row["switchyard_decode_tps"] / (bw * 1e9)
        # Both engines read the same file's blocks: a token reads what
        # Switchyard counts for it (in a mixture of experts, the experts it
        # selects; llama-bench's model size is the whole file).
        row["llama_cpp_mbu"] = row["switchyard_weight_bytes"] * row["llama_cpp_decode_tps"] / (bw * 1e9)
        print(f"{row['preset']} t={threads}: decode {row['switchyard_decode_tps']:.1f} vs {row['llama_cpp_decode_tps']:.1f} tok/s "
              f"({row['decode_ratio']:.2f}x), prefill {row['switchyard_prefill_tps']:.1f} vs {row['llama_cpp_prefill_tps']:.1f} "
              f"({row['prefill_ratio']:.2f}x)", flush=True)
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", help="one GGUF file in both engines (instead of --presets)")
    ap.add_argument("--build", default="build", help="Switchyard's build folder (switchyard, bench_quant, plugins)")
    ap.add_argument("--llama", required=True, help="folder with llama-bench and llama-quantize")
    ap.add_argument("--presets", default="110m,tinyllama-1.1b")
    ap.add_argument("--precisions", default="fp32,int8,int4")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--prefill", type=int, default=128)
    ap.add_argument("--workdir", default="/tmp/switchyard-peer")
    ap.add_argument("--out", default="peer.json")
    ap.add_argument("--no-fuse-pointwise", dest="fuse_pointwise", action="store_false",
                    help="Switchyard runs RMSNorm, SiLU*up and rotary as the export's nodes (default: fused, bit-exact)")
    ap.add_argument("--depths", default="",
                    help="comma-separated context lengths: decode after that many tokens instead of the prefill/decode rows "
                         "(llama.cpp with flash attention)")
    ap.add_argument("--kv-dtype", choices=sorted(KV_TYPES), default="fp16",
                    help="the KV cache type in both engines for --depths and --batches (int8: llama.cpp's q8_0)")
    ap.add_argument("--block-size", type=int, default=16, help="Switchyard's KV cache block for --depths and --batches")
    ap.add_argument("--batches", default="",
                    help="comma-separated batch sizes: batched generation against llama-batched-bench instead of the batch-1 rows")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    cpu = run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo; grep -m1 -o -w -E 'avx512_vnni|avx512vnni' /proc/cpuinfo;"
               "grep -m1 -o -w avx512f /proc/cpuinfo; grep -m1 -o -w avx2 /proc/cpuinfo; true"]).split("\n")
    print("machine:", " ".join(x.strip() for x in cpu if x.strip()))
    if a.batches:
        results = batched_rows(a)
        json.dump({"fuse_pointwise": a.fuse_pointwise, "results": results}, open(a.out, "w"), indent=2)
        print(f"wrote {a.out}")
        return
    if a.depths:
        results = depth_rows(a)
        json.dump({"fuse_pointwise": a.fuse_pointwise, "results": results}, open(a.out, "w"), indent=2)
        print(f"wrote {a.out}")
        return
    results = gguf_rows(a) if a.gguf else []
    for preset in ([] if a.gguf else a.presets.split(",")):
        onnx, gguf = prepare(a, preset)
        for precision in a.precisions.split(","):
            for threads in map(int, a.threads.split(",")):
                sy, lc = [], []
                for r in range(a.rounds):
                    order = [0, 1] if r % 2 == 0 else [1, 0]
                    for who in order:
                        if who == 0:
                            sy.append(switchyard(a, onnx, precision, threads))
                        else:
                            lc.append(llama_cpp(a, gguf[precision], threads))
                med = lambda xs, k: statistics.median(x[k] for x in xs)
                bw = med(sy, "bandwidth_gbs")
                # llama.cpp reads its whole model per token but for the token
                # embedding table, of which it reads one row.
                shape = preset_shape(os.path.join(a.build, "switchyard"), preset)
                bpw = {"fp32": 4.0, "int8": 34 / 32, "int4": 18 / 32}[precision]
                embd_bytes = shape["vocab"] * shape["dim"] * bpw
                if shape["experts"]:
                    # ... and of a mixture of experts, the experts each token selects.
                    unused = shape["experts"] - shape["experts_used"]
                    embd_bytes += shape["layers"] * unused * 3 * shape["dim"] * shape["hidden"] * bpw
                row = {"preset": preset, "precision": precision, "peer_type": PEER_TYPE[precision] or "F32", "threads": threads,
                       "switchyard_decode_tps": med(sy, "decode_tps"), "llama_cpp_decode_tps": med(lc, "decode_tps"),
                       "switchyard_prefill_tps": med(sy, "prefill_tps"), "llama_cpp_prefill_tps": med(lc, "prefill_tps"),
                       "switchyard_weight_bytes": sy[0]["weight_bytes"], "llama_cpp_weight_bytes": lc[0]["model_bytes"] - embd_bytes,
                       "bandwidth_gbs": bw, "rounds": a.rounds}
                row["decode_ratio"] = row["switchyard_decode_tps"] / row["llama_cpp_decode_tps"]
                row["prefill_ratio"] = row["switchyard_prefill_tps"] / row["llama_cpp_prefill_tps"]
                row["switchyard_mbu"] = row["switchyard_weight_bytes"] * row["switchyard_decode_tps"] / (bw * 1e9)
                row["llama_cpp_mbu"] = row["llama_cpp_weight_bytes"] * row["llama_cpp_decode_tps"] / (bw * 1e9)
                results.append(row)
                print(f"{preset:>15} {precision:>5} vs {row['peer_type']:<5} t={threads}: decode {row['switchyard_decode_tps']:7.1f} vs "
                      f"{row['llama_cpp_decode_tps']:7.1f} tok/s ({row['decode_ratio']:.2f}x), prefill {row['switchyard_prefill_tps']:7.1f} vs "
                      f"{row['llama_cpp_prefill_tps']:7.1f} ({row['prefill_ratio']:.2f}x), MBU {row['switchyard_mbu']:.0%} vs "
                      f"{row['llama_cpp_mbu']:.0%} (read bw {bw:.1f} GB/s)", flush=True)
    print()
    print(f"{'preset':>15} {'prec':>5} {'thr':>3} {'decode SY':>10} {'decode LC':>10} {'ratio':>6} {'prefill SY':>11} {'prefill LC':>11} "
          f"{'ratio':>6} {'MBU SY':>7} {'MBU LC':>7}")
    for r in results:
        print(f"{r['preset']:>15} {r['precision']:>5} {r['threads']:>3} {r['switchyard_decode_tps']:>10.1f} {r['llama_cpp_decode_tps']:>10.1f} "
              f"{r['decode_ratio']:>6.2f} {r['switchyard_prefill_tps']:>11.1f} {r['llama_cpp_prefill_tps']:>11.1f} {r['prefill_ratio']:>6.2f} "
              f"{r['switchyard_mbu']:>7.0%} {r['llama_cpp_mbu']:>7.0%}")
    json.dump({"fuse_pointwise": a.fuse_pointwise, "results": results}, open(a.out, "w"), indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
