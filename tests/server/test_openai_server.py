"""The OpenAI-compatible server, driven by the official `openai` client and
by curl: completions, chat, streaming, stop strings, n, errors, 64
concurrent streaming clients, client disconnects, graceful shutdown."""
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.request

import openai
import pytest

from conftest import API_KEY, CLI, MANIFEST, start_server, stop_server

STORY = "Once upon a time"


def client(server, key=API_KEY):
    return openai.OpenAI(base_url=server["base"] + "/v1", api_key=key, max_retries=0, timeout=60)


def reference_text(prompt, n):
    """Greedy text from the CLI's baseline mode: the server must match it."""
    out = subprocess.check_output([CLI, "generate", "--manifest", MANIFEST, "--profile", "baseline", "--prompt", prompt,
                                   "-n", str(n), "--ignore-eos", "--json"], text=True)
    return json.loads(out)["text"]


def curl(server, path, body=None, key=API_KEY, raw=None):
    cmd = ["curl", "-s", "-w", "\n%{http_code}", server["base"] + path]
    if key:
        cmd += ["-H", f"Authorization: Bearer {key}"]
    if body is not None or raw is not None:
        cmd += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
    r = subprocess.run(cmd, input=raw if raw is not None else (json.dumps(body) if body is not None else None),
                       capture_output=True, text=True, timeout=60)
    text, status = r.stdout.rsplit("\n", 1)
    return int(status), text


def metrics(server):
    with urllib.request.urlopen(server["base"] + "/metrics", timeout=5) as r:
        text = r.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def wait_idle(server, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = metrics(server)
        if m["switchyard:num_requests_running"] == 0 and m["switchyard:kv_cache_usage_perc"] == 0:
            return m
        time.sleep(0.05)
    raise AssertionError("the engine did not go idle: " + str(metrics(server)))


def test_completion_matches_the_engine(server):
    r = client(server).completions.create(model="stories260K", prompt=STORY, max_tokens=24, temperature=0)
    assert r.object == "text_completion"
    assert r.choices[0].text == reference_text(STORY, 24)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == 5 and r.usage.completion_tokens == 24 and r.usage.total_tokens == 29


def test_chat_completion(server):
    r = client(server).chat.completions.create(model="stories260K", messages=[{"role": "user", "content": STORY}],
                                               max_tokens=12, temperature=0)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == reference_text(STORY, 12)
    assert r.usage.completion_tokens == 12


def test_streaming_equals_non_streaming(server):
    c = client(server)
    full = c.completions.create(model="stories260K", prompt=STORY, max_tokens=30, temperature=0).choices[0].text
    pieces, reasons = [], []
    for chunk in c.completions.create(model="stories260K", prompt=STORY, max_tokens=30, temperature=0, stream=True):
        for ch in chunk.choices:
            pieces.append(ch.text)
            reasons.append(ch.finish_reason)
    assert "".join(pieces) == full
    assert reasons[-1] == "length"
    chat = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
        model="stories260K", messages=[{"role": "user", "content": STORY}], max_tokens=30, temperature=0, stream=True)
        if ch.choices)
    assert chat == full


def test_stop_strings_and_n(server):
    c = client(server)
    r = c.completions.create(model="stories260K", prompt=STORY, max_tokens=40, temperature=0, stop=[" girl"])
    assert r.choices[0].text == ", there was a little"
    assert r.choices[0].finish_reason == "stop"
    streamed = "".join(ch.choices[0].text for ch in c.completions.create(
        model="stories260K", prompt=STORY, max_tokens=40, temperature=0, stop=[" girl"], stream=True) if ch.choices)
    assert streamed == ", there was a little"
    r = c.completions.create(model="stories260K", prompt=STORY, max_tokens=16, temperature=1.0, seed=5, n=3)
    assert [ch.index for ch in r.choices] == [0, 1, 2]
    again = c.completions.create(model="stories260K", prompt=STORY, max_tokens=16, temperature=1.0, seed=5, n=3)
    assert [ch.text for ch in r.choices] == [ch.text for ch in again.choices]  # seeded


def test_errors_through_the_client(server):
    with pytest.raises(openai.AuthenticationError):
        client(server, key="wrong").completions.create(model="stories260K", prompt=STORY, max_tokens=4)
    with pytest.raises(openai.NotFoundError) as e:
        client(server).completions.create(model="gpt-17", prompt=STORY, max_tokens=4)
    assert "gpt-17" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client(server).completions.create(model="stories260K", prompt=STORY, max_tokens=-3)
    assert e.value.body["param"] == "max_tokens"


def test_errors_with_curl(server):
    status, body = curl(server, "/v1/completions", raw="{not json")
    assert status == 400 and "not valid JSON" in json.loads(body)["error"]["message"]
    status, body = curl(server, "/v1/completions", {"prompt": STORY, "max_tokens": "ten"})
    assert status == 400 and json.loads(body)["error"]["param"] == "max_tokens"
    status, body = curl(server, "/v1/completions", {"prompt": 42})
    assert status == 400 and json.loads(body)["error"]["type"] == "invalid_request_error"
    status, body = curl(server, "/v1/completions", {"prompt": "x" * 100000, "max_tokens": 4})
    assert status == 413 and json.loads(body)["error"]["code"] == "body_too_large"
    status, body = curl(server, "/v1/completions", {"prompt": STORY, "max_tokens": 100000})
    assert status == 400
    status, body = curl(server, "/v1/completions", {"prompt": STORY}, key=None)
    assert status == 401 and json.loads(body)["error"]["code"] == "invalid_api_key"
    status, body = curl(server, "/v1/chat/completions", {"messages": []})
    assert status == 400
    status, body = curl(server, "/v1/nothing", {})
    assert status == 404
    status, body = curl(server, "/health", key=None)
    assert status == 200
    status, body = curl(server, "/v1/models")
    assert status == 200 and json.loads(body)["data"][0]["id"] == "stories260K"
    # The server still serves after all of that.
    assert client(server).completions.create(model="stories260K", prompt=STORY, max_tokens=3).usage.completion_tokens == 3


def test_completions_chat_and_streaming_with_curl(server):
    status, body = curl(server, "/v1/completions", {"model": "stories260K", "prompt": STORY, "max_tokens": 10, "temperature": 0})
    assert status == 200
    j = json.loads(body)
    assert j["choices"][0]["text"] == reference_text(STORY, 10) and j["usage"]["completion_tokens"] == 10
    status, body = curl(server, "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": STORY}], "max_tokens": 6, "temperature": 0})
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == reference_text(STORY, 6)
    for include_usage in (True, False, None):
        request = {"prompt": STORY, "max_tokens": 10, "temperature": 0, "stream": True}
        if include_usage is not None:
            request["stream_options"] = {"include_usage": include_usage}
        status, body = curl(server, "/v1/completions", request)
        assert status == 200
        events = [line[len("data: "):] for line in body.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == reference_text(STORY, 10)
        # OpenAI's rule: a usage chunk only when stream_options asks for it.
        usage = [c for c in chunks if c.get("usage")]
        if include_usage:
            assert usage == [chunks[-1]] and chunks[-1]["usage"]["completion_tokens"] == 10 and chunks[-1]["choices"] == []
        else:
            assert usage == []
    # vLLM's continuous_usage_stats: every chunk says how far the usage has come.
    status, body = curl(server, "/v1/completions", {"prompt": STORY, "max_tokens": 10, "temperature": 0, "stream": True,
                                                    "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    chunks = [json.loads(line[len("data: "):]) for line in body.splitlines() if line.startswith("data: {")]
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert all(c.get("usage") for c in chunks) and counts == sorted(counts) and counts[-1] == 10
    assert all(c["usage"]["prompt_tokens"] == chunks[-1]["usage"]["prompt_tokens"] for c in chunks)


def test_sixty_four_concurrent_streaming_clients(server):
    prompts = [STORY, "Lily and Tim", "The little dog", "One day, a bird"]
    expected = {p: reference_text(p, 40) for p in prompts}

    def run(i, results):
        p = prompts[i % len(prompts)]
        try:
            text = "".join(ch.choices[0].text for ch in client(server).completions.create(
                model="stories260K", prompt=p, max_tokens=40, temperature=0, stream=True) if ch.choices)
            results[i] = (p, text)
        except Exception as e:  # noqa: BLE001 - reported below
            results[i] = (p, e)

    def wave():
        results = [None] * 64
        threads = [threading.Thread(target=run, args=(i, results)) for i in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        return results

    wave()  # warm up: pools and caches reach their working size
    wait_idle(server)
    rss = [rss_kib(server["proc"].pid)]
    for _ in range(3):
        results = wave()
        for p, text in results:
            assert not isinstance(text, Exception), text
            assert text == expected[p]
        m = wait_idle(server)
        rss.append(rss_kib(server["proc"].pid))
    growth = [b - a for a, b in zip(rss, rss[1:])]
    print(f"RSS after warm-up and each wave of 64 streams {rss} KiB, growth {growth} KiB")
    # A leak grows the heap by the same amount every wave; a higher peak of
    # requests in flight (a loaded machine admits them differently) raises it
    # once and stays (seen under CI's load: +23 MiB in one wave, then under
    # 1 MiB each). The smallest growth of three waves is what the streams keep:
    # 8 MiB is 128 KiB a stream.
    # ThreadSanitizer's shadow memory grows with every new thread and access:
    # RSS says nothing about leaks there (LeakSanitizer checks them in the ASan build).
    if not os.environ.get("SWITCHYARD_TSAN"):
        assert min(growth) < 8 * 1024, rss
    assert m["switchyard:num_requests_waiting"] == 0


def test_ten_million_stop_strings_are_refused_before_the_body_is_read(server):
    # 10^7 stop strings is a ~50 MB body: the server answers 413 from the
    # Content-Length alone, quickly, without buffering it; a small body with
    # too many stop strings gets a 400 naming 'stop'.
    stops = '"a",' * 10_000_000
    body = ('{"prompt": "x", "max_tokens": 4, "stop": [' + stops[:-1] + ']}').encode()
    s = socket.create_connection(("127.0.0.1", server["port"]))
    t0 = time.time()
    s.settimeout(10)
    s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode())
    try:
        s.sendall(body)  # the server may close before it has all of it
    except OSError:
        pass
    reply = s.recv(65536).decode(errors="replace")
    s.close()
    print(f"413 after {time.time() - t0:.2f} s")
    assert reply.startswith("HTTP/1.1 413"), reply[:200]
    assert time.time() - t0 < 5
    status, out = curl(server, "/v1/completions", {"prompt": STORY, "max_tokens": 4, "stop": ["a"] * 1000})
    assert status == 400 and json.loads(out)["error"]["param"] == "stop"


def test_client_disconnect_cancels_and_frees_the_cache(server):
    aborted = metrics(server)['switchyard:request_success_total{finished_reason="abort"}']
    # ignore_eos: the request must still be running when the client goes away
    # (an early end-of-sequence would finish it as "stop" first on a slow run).
    body = json.dumps({"model": "stories260K", "prompt": STORY, "max_tokens": 500, "temperature": 0, "stream": True,
                       "ignore_eos": True})
    s = socket.create_connection(("127.0.0.1", server["port"]))
    s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
    received = b""
    while b"data:" not in received:  # headers first, then the first event
        chunk = s.recv(4096)
        assert chunk, "connection closed before any event"
        received += chunk
    s.close()  # mid-stream
    m = wait_idle(server)
    assert m['switchyard:request_success_total{finished_reason="abort"}'] >= aborted + 1
    assert client(server).completions.create(model="stories260K", prompt=STORY, max_tokens=5).choices[0].finish_reason == "length"


def test_a_client_gone_before_a_whole_answer_cancels_it(server):
    """Not streamed: nothing is written until the answer is ready, so the
    server watches the connection itself and cancels the request when the
    client closes it (an agent's timeout, a closed tab)."""
    aborted = metrics(server)['switchyard:request_success_total{finished_reason="abort"}']
    body = json.dumps({"model": "stories260K", "prompt": STORY, "max_tokens": 480, "n": 8, "temperature": 0.8, "seed": 1,
                       "ignore_eos": True})
    s = socket.create_connection(("127.0.0.1", server["port"]))
    s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
    time.sleep(0.02)
    s.close()  # before the 8 x 480 tokens are written
    m = wait_idle(server)
    assert m['switchyard:request_success_total{finished_reason="abort"}'] >= aborted + 8
    assert client(server).completions.create(model="stories260K", prompt=STORY, max_tokens=5).choices[0].finish_reason == "length"


def test_sigterm_finishes_in_flight_requests():
    proc, port = start_server(["--shutdown-timeout", "20"])
    srv = {"base": f"http://127.0.0.1:{port}", "port": port}
    result = {}

    def long_request():
        result["r"] = client(srv).completions.create(model="stories260K", prompt=STORY, max_tokens=400, temperature=0,
                                                     extra_body={"ignore_eos": True})

    t = threading.Thread(target=long_request)
    t.start()
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    t.join(timeout=60)
    stop_server(proc, timeout=60)
    assert result["r"].choices[0].finish_reason in ("length", "stop")
    assert result["r"].usage.completion_tokens > 0


def test_bench_url_drives_a_running_server_and_counts_what_it_served(server, tmp_path):
    """`switchyard bench --url`: the figures it reports are the server's (its
    token counter grows by exactly the output tokens bench counted)."""
    wait_idle(server)
    before = metrics(server)["switchyard:generation_tokens_total"]
    out = tmp_path / "bench.json"
    r = subprocess.run([CLI, "bench", "--url", server["base"], "--api-key", API_KEY, "--requests", "6", "--input-len", "8:16",
                        "--output-len", "4:8", "--rate", "50", "--quiet", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    profile = json.loads(out.read_text())["profiles"][0]
    assert profile["metrics"]["completed requests"] == 6 and profile["metrics"]["failed requests"] == 0
    reqs = profile["requests"]
    assert len(reqs) == 6
    for q in reqs:
        assert 4 <= q["output_tokens"] <= 8 and q["finish_reason"] in ("length", "stop"), q
        assert 0 < q["ttft_ms"] <= q["e2e_ms"], q
    m = wait_idle(server)
    assert m["switchyard:generation_tokens_total"] - before == sum(q["output_tokens"] for q in reqs)
