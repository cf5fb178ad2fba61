#!/usr/bin/env python3
"""Perplexity of one GGUF model under every weight scheme, Switchyard and
llama.cpp side by side on the same text, the same tokens (the tokenizers
agree: tests/model/test_trained_model.cpp) and the same windows
(llama-perplexity's: chunks of --ctx tokens, each scored on its second half).

Switchyard (examples/manifests/gguf.yaml): fp32 (the file dequantized), the
file's own blocks, the engine's int8 / int4 / int4-asym over the float32
weights. llama.cpp: llama-perplexity on the file and on its requantizations
(llama-quantize --allow-requantize: Q8_0, Q4_0, Q4_K_M). Weight bytes: what
one token reads (Switchyard's inspect; llama.cpp's model size).

  benchmarks/gguf/quality.py --build build --llama $(scripts/build-llama-cpp.sh) \\
      --model $(scripts/fetch-smollm2.sh) --text /usr/share/common-licenses/GPL-3 --out gguf-quality.json
"""
import argparse
import json
import os
import re
import subprocess
import sys


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"quality: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r.stdout + r.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--llama", required=True, help="folder with llama-perplexity and llama-quantize")
    ap.add_argument("--model", required=True, help="the GGUF file")
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3", help="a real text of several thousand tokens")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", default="/tmp/switchyard-gguf-quality")
    ap.add_argument("--out", default="gguf-quality.json")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    manifest = os.path.join(root, "examples/manifests/gguf.yaml")
    env = dict(os.environ, SWITCHYARD_PLUGIN_DIR=os.path.abspath(os.path.join(a.build, "plugins")))
    cli = os.path.join(a.build, "switchyard")
    rows = []
    for profile in ["fp32", "file", "int8", "int4", "int4-asym", "int4-min"]:
        out = os.path.join(a.workdir, f"eval-{profile}.json")
        run([cli, "eval", "--manifest", manifest, "--profile", profile, "--baseline", "fp32", "--model", a.model, "--text", a.text,
             "--max-tokens", str(a.ctx * a.chunks), "--ctx", str(a.ctx), "--threads", str(a.threads), "--out", out], env)
        j = json.load(open(out))
        info = json.loads(run([cli, "inspect", "--manifest", manifest, "--profile", profile, "--model", a.model, "--json"], env))
        rows.append({"engine": "switchyard", "scheme": profile, "perplexity": j["perplexity_profile"], "kl_vs_fp32": j["kl_mean"],
                     "top1_vs_fp32": j["top1_agreement"], "weight_bytes": info["weight_bytes"], "tokens": j["predicted_tokens"]})
        print(f"switchyard {profile:>10}: ppl {j['perplexity_profile']:.4f}  KL {j['kl_mean']:.2e}  weights {info['weight_bytes'] / 1e6:.1f} MB",
              flush=True)
    files = {"file": a.model}
    for t in ["Q8_0", "Q4_0", "Q4_K_M"]:
        path = os.path.join(a.workdir, f"requant-{t}.gguf")
        if not os.path.exists(path):
            run([os.path.join(a.llama, "llama-quantize"), "--allow-requantize", a.model, path, t])
        files[t] = path
    for name, path in files.items():
        out = run([os.path.join(a.llama, "llama-perplexity"), "-m", path, "-f", a.text, "-c", str(a.ctx), "--chunks", str(a.chunks),
                   "-t", str(a.threads), "-b", str(a.ctx)])
        m = re.search(r"Final estimate: PPL = ([0-9.]+)", out)
        if not m:
            sys.exit(f"quality: no perplexity in llama-perplexity's output:\n{out[-2000:]}")
        rows.append({"engine": "llama.cpp", "scheme": name, "perplexity": float(m.group(1)), "weight_bytes": os.path.getsize(path)})
        print(f"llama.cpp  {name:>10}: ppl {float(m.group(1)):.4f}  file {os.path.getsize(path) / 1e6:.1f} MB", flush=True)
    print()
    print(f"{'engine':<11} {'scheme':<10} {'perplexity':>10} {'KL vs fp32':>11} {'top-1':>7} {'MB':>8}")
    for r in rows:
        kl = f"{r['kl_vs_fp32']:.2e}" if "kl_vs_fp32" in r else ""
        top1 = f"{r['top1_vs_fp32']:.4f}" if "top1_vs_fp32" in r else ""
        print(f"{r['engine']:<11} {r['scheme']:<10} {r['perplexity']:>10.4f} {kl:>11} {top1:>7} {r['weight_bytes'] / 1e6:>8.1f}")
    json.dump({"model": a.model, "text": a.text, "ctx": a.ctx, "chunks": a.chunks, "rows": rows}, open(a.out, "w"), indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
