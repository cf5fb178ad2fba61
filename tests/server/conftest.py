"""Starts the real `switchyard serve` on a free loopback port for the tests."""
import os
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest

CLI = os.environ["SWITCHYARD_CLI"]
MANIFEST = os.environ["SWITCHYARD_STORIES_MANIFEST"]
API_KEY = "test-key"


def trained_model(needs_grammar=False):
    """The trained model's GGUF (SWITCHYARD_SMOLLM2_GGUF, scripts/fetch-smollm2.sh),
    called at a module's top: skips the module when the file is not fetched
    (an error when SWITCHYARD_REQUIRE_TRAINED_MODEL=1, as in CI) or, with
    needs_grammar, when the build has no grammar processor."""
    gguf = os.environ.get("SWITCHYARD_SMOLLM2_GGUF", "")
    if not gguf:
        if os.environ.get("SWITCHYARD_REQUIRE_TRAINED_MODEL") == "1":
            raise RuntimeError("SWITCHYARD_SMOLLM2_GGUF is not set (scripts/fetch-smollm2.sh)")
        pytest.skip("the trained model is not fetched (SWITCHYARD_SMOLLM2_GGUF)", allow_module_level=True)
    if needs_grammar and not os.environ.get("SWITCHYARD_HAS_GRAMMAR"):
        pytest.skip("this module needs the grammar processor (a build with xgrammar)", allow_module_level=True)
    return gguf


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(extra=(), manifest=MANIFEST, profile="paged"):
    """manifest None: the default manifest beside the binary (give --model in extra)."""
    port = free_port()
    source = ["--manifest", manifest] if manifest else []
    # The server's output goes to a file: a pipe nobody reads would block the
    # server once it filled, and the file is shown when the server fails.
    log = tempfile.NamedTemporaryFile(prefix="switchyard-serve-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [CLI, "serve", *source, "--profile", profile, "--port", str(port), "--api-key", API_KEY,
         "--max-body-bytes", "65536", "--max-tokens-limit", "512", *extra],
        stdout=log, stderr=subprocess.STDOUT, text=True)
    proc.log_path = log.name
    log.close()
    # Loading a 135M-parameter GGUF and probing its passes takes a while
    # under the sanitizers.
    deadline = time.time() + 240
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("server exited: " + server_output(proc))
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not come up: " + server_output(proc))


def server_output(proc):
    with open(proc.log_path, errors="replace") as f:
        return f.read()


def stop_server(proc, timeout=30):
    """SIGTERM, as an orchestrator stops it: the server must drain and exit 0
    (a crash or a sanitizer report at shutdown fails the test)."""
    if proc.poll() is None:
        proc.terminate()
    code = proc.wait(timeout=timeout)
    out = server_output(proc)
    os.unlink(proc.log_path)
    assert code == 0, f"server exited with {code}:\n{out[-4000:]}"


@pytest.fixture(scope="session")
def smollm2_prefix():
    """The trained model (SWITCHYARD_SMOLLM2_GGUF), served once for every
    module that asks (prefix profile), as an openai client: its load is the
    slow part under the sanitizers. Modules skip before asking when the
    file is not fetched."""
    from openai import OpenAI
    proc, port = start_server(["--model", os.environ["SWITCHYARD_SMOLLM2_GGUF"]], manifest=None, profile="prefix")
    yield OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY)
    stop_server(proc)


@pytest.fixture(scope="module")
def server():
    proc, port = start_server()
    yield {"proc": proc, "port": port, "base": f"http://127.0.0.1:{port}"}
    stop_server(proc)
