"""Starts the real `switchyard serve` on a free loopback port for the tests."""
import os
import socket
import subprocess
import time
import urllib.request

import pytest

CLI = os.environ["SWITCHYARD_CLI"]
MANIFEST = os.environ["SWITCHYARD_STORIES_MANIFEST"]
API_KEY = "test-key"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(extra=(), manifest=MANIFEST, profile="paged"):
    """manifest None: the default manifest beside the binary (give --model in extra)."""
    port = free_port()
    source = ["--manifest", manifest] if manifest else []
    proc = subprocess.Popen(
        [CLI, "serve", *source, "--profile", profile, "--port", str(port), "--api-key", API_KEY,
         "--max-body-bytes", "65536", "--max-tokens-limit", "512", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("server exited: " + proc.stdout.read())
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not come up")


@pytest.fixture(scope="module")
def server():
    proc, port = start_server()
    yield {"proc": proc, "port": port, "base": f"http://127.0.0.1:{port}"}
    proc.terminate()
    proc.wait(timeout=30)
