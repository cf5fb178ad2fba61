#!/usr/bin/env python3
"""The prefix cache's disk tier across a restart of `switchyard serve`.

A 4k-token prompt (token ids, greedy, 16 tokens) is sent to a fresh server
with an empty disk tier (cold: every block computed and written), the
server is stopped and started again (RAM empty), and the same prompt is
sent twice more (the blocks read back from disk, then from RAM). TTFT is
measured from the request to the first streamed token; the outputs must
equal the cold one. Then one tier file is corrupted, the server restarted,
and the prompt sent again: the file is dropped with its reason logged and
the output is still the cold one. Prints a table and writes JSON.

  python3 benchmarks/kv/disk_tier_restart.py --model $(scripts/fetch-smollm2.sh)
"""
import argparse, atexit, json, os, pathlib, random, shutil, signal, subprocess, sys, time, urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVERS = []  # stopped at exit, whatever happened
atexit.register(lambda: [p.kill() for p in SERVERS if p.poll() is None])


def start(cli, model, port, env, log):
    p = subprocess.Popen([cli, "serve", "--manifest", str(ROOT / "benchmarks/kv/kv-dtypes.yaml"), "--profile", "disk",
                          "--model", model, "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT)
    SERVERS.append(p)
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return p
        except Exception:
            if p.poll() is not None:
                sys.exit("serve exited: see the log")
            time.sleep(0.2)
    sys.exit("serve did not become ready")


def stop(p):
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=120)


def ask(port, prompt):
    model = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models"))["data"][0]["id"]
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 16, "temperature": 0, "stream": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    ttft, text = None, ""
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                sys.exit(f"the server answered an error: {chunk['error']}")
            if not chunk.get("choices"):
                continue  # a usage chunk
            piece = chunk["choices"][0].get("text", "")
            if piece and ttft is None:
                ttft = time.perf_counter() - t0
            text += piece
    return ttft, text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--cli", default=str(ROOT / "build/switchyard"))
    ap.add_argument("--tokens", type=int, default=4000)
    ap.add_argument("--port", type=int, default=8731)
    ap.add_argument("--out", default="disk-tier-restart.json")
    a = ap.parse_args()
    disk = pathlib.Path(os.environ.get("KV_DISK_DIR", "/tmp/switchyard-kv-disk-bench"))
    shutil.rmtree(disk, ignore_errors=True)
    env = dict(os.environ, KV_DISK_DIR=str(disk), SWITCHYARD_PLUGIN_DIR=str(pathlib.Path(a.cli).parent / "plugins"))
    rng = random.Random(1)
    prompt = [1] + [rng.randrange(100, 40000) for _ in range(a.tokens - 1)]
    log = open("disk-tier-restart.log", "w")
    rows = []
    p = start(a.cli, a.model, a.port, env, log)
    cold, expect = ask(a.port, prompt)
    rows.append(("cold (computed, written to disk)", cold, True))
    stop(p)
    files = sorted(disk.rglob("*.kv"))
    p = start(a.cli, a.model, a.port, env, log)
    t, out = ask(a.port, prompt)
    rows.append(("after a restart (read from disk)", t, out == expect))
    t, out = ask(a.port, prompt)
    rows.append(("again (in RAM)", t, out == expect))
    stop(p)
    victim = files[len(files) // 2]
    data = bytearray(victim.read_bytes())
    data[-5] ^= 0x5A
    victim.write_bytes(bytes(data))
    log.flush()
    before = pathlib.Path("disk-tier-restart.log").read_text()
    p = start(a.cli, a.model, a.port, env, log)
    t, out = ask(a.port, prompt)
    rows.append(("after corrupting one block file", t, out == expect))
    stop(p)
    log.close()
    logged = [l for l in pathlib.Path("disk-tier-restart.log").read_text()[len(before):].splitlines() if "KV disk tier" in l]
    print(f"{'run':40s} {'TTFT s':>8s} {'output = cold':>14s}")
    for name, t, same in rows:
        print(f"{name:40s} {t:8.3f} {str(same):>14s}")
    print(f"cold / after restart: {cold / rows[1][1]:.1f}x; {len(files)} block files; corrupted file: {victim.name}")
    print("logged:", logged[0] if logged else "NOTHING")
    json.dump({"tokens": a.tokens, "block_files": len(files), "runs": [{"run": n, "ttft_s": t, "output_equals_cold": s} for n, t, s in rows],
               "ttft_ratio_cold_over_restart": cold / rows[1][1], "corrupt_file_log": logged}, open(a.out, "w"), indent=2)
    ok = all(s for _, _, s in rows) and bool(logged) and not victim.exists()
    sys.exit(0 if ok else 1)


main()
