"""Shared set-up for the Python package's tests.

SWITCHYARD_PREFIX: where `cmake --install` put the engine the package was
built against (its bin/switchyard is the CLI the outputs are compared with);
SWITCHYARD_SHARED: the shared models folder (default: ../shared beside the
repository).
"""
import os
import pathlib
import socket
import subprocess
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SHARED = pathlib.Path(os.environ.get("SWITCHYARD_SHARED", REPO.parent / "shared"))
MODEL = str(SHARED / "models" / "stories260K.onnx")
TOKENIZER = str(SHARED / "models" / "tok512.bin")
REAL = REPO / "tests" / "models" / "real"
# The key of the direct server and of the Ray "prefix" application: both
# doors guard the API the same way.
API_KEY = "sy-test-key"


def prefix() -> pathlib.Path:
    p = os.environ.get("SWITCHYARD_PREFIX")
    if not p:
        pytest.skip("SWITCHYARD_PREFIX (the engine's install prefix) is not set")
    return pathlib.Path(p)


def drafting_manifest(tmp_path, model: str, plugins, drafter: str = "", options: str = "", settings: str = "") -> str:
    """A paged-cache manifest of the installed engine's `plugins` for the
    drafting tests; with `drafter` (its options a YAML flow mapping) at fixed
    draft lengths: the adaptive policy may decline every draft on a slow
    (sanitized) build. `settings`: more top-level lines (threads, tokenizer)."""
    lib = prefix() / "lib" / "switchyard" / "plugins"
    text = f"model: {model}\n{settings}plugins:\n" + "".join(f"  - {lib}/{p}/libswitchyard_{p}.so\n" for p in plugins)
    text += "passes: [attention-fusion]\ncache: {name: paged, options: {block_size: 16, budget_mb: 64}}\n"
    if drafter:
        text += f"drafter: {{name: {drafter}, draft_length: fixed, options: {options}}}\n"
    path = tmp_path / ("drafting.yaml" if drafter else "plain.yaml")
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="session")
def cli() -> str:
    return str(prefix() / "bin" / "switchyard")


@pytest.fixture(scope="session")
def engine():
    import switchyard

    with switchyard.Engine(model=MODEL, tokenizer=TOKENIZER, threads=1) as e:
        yield e


def has_grammar() -> bool:
    return (prefix() / "lib" / "switchyard" / "plugins" / "grammar" / "libswitchyard_grammar.so").exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def manifest(tmp_path_factory):
    """The prefix-caching profile with a cache of 48 blocks of 16 tokens: one
    replica holds two of the four system prompts, not four, so where requests
    go decides what stays cached."""
    plugins = prefix() / "lib" / "switchyard" / "plugins"
    path = tmp_path_factory.mktemp("ray") / "manifest.yaml"
    grammar = plugins / "grammar" / "libswitchyard_grammar.so"  # built with xgrammar only
    path.write_text(
        f"model: {MODEL}\ntokenizer: {TOKENIZER}\nthreads: 1\nplugins:\n"
        f"  - {plugins}/attention/libswitchyard_attention.so\n  - {plugins}/cache/libswitchyard_cache.so\n"
        + (f"  - {grammar}\nlogits_processor: xgrammar\n" if grammar.exists() else "")
        + "passes: [attention-fusion]\ncache: {name: prefix-caching, options: {block_size: 16, num_blocks: 48}}\n"
    )
    return str(path)


@pytest.fixture(scope="session")
def direct(manifest):
    """A direct `switchyard serve` of the same manifest, to compare with."""
    port = free_port()
    proc = subprocess.Popen([str(prefix() / "bin" / "switchyard"), "serve", "--manifest", manifest, "--port", str(port),
                             "--threads", "1", "--api-key", API_KEY], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    import openai

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY, max_retries=0, timeout=120)
    for _ in range(600):
        try:
            client.models.list()
            break
        except openai.APIConnectionError:
            time.sleep(0.1)
    yield client
    proc.terminate()
    proc.wait(timeout=30)


def start_local_ray(attempts=3):
    """A local Ray instance. Its raylet must register with the GCS within
    Ray's fixed 30 s; on a loaded 2-core CI machine that first call has
    timed out once (RPC deadline exceeded, nothing wrong with the engine),
    so a failed start is shut down and retried before the tests fail.

    Its CPUs are logical, Serve's scheduling tokens: the applications'
    replicas (0.25 each) and the autoscaling test's two filled 2 exactly,
    and once (stop 54) the added replica waited the test's whole minute to
    be scheduled while the replicas the fault tests killed were still
    releasing theirs. 4 leaves room; the processes share the real cores
    either way."""
    import ray

    for attempt in range(attempts):
        try:
            ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
            return
        except Exception as e:  # Ray raises a bare Exception for this timeout
            ray.shutdown()
            if attempt + 1 == attempts:
                raise
            print(f"\n[ray] local instance did not start ({e}); retrying")


@pytest.fixture(scope="session")
def cluster(manifest):
    """Three Ray Serve applications on a local Ray instance: "prefix" (two
    replicas, the prefix-aware router, the API key), "rr" (round robin) and
    "disagg" (prefill and decode deployments)."""
    ray = pytest.importorskip("ray")
    serve = pytest.importorskip("ray.serve")
    import openai
    from switchyard.ray import build_app

    start_local_ray()
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    common = dict(model=MODEL, manifest=manifest, profile=None, tokenizer=TOKENIZER, model_name="stories260K",
                  replica_cpus=0.25)
    started = time.perf_counter()
    serve.run(build_app(num_replicas=2, router="prefix", api_key=API_KEY, **common), name="prefix", route_prefix="/prefix")
    serve.run(build_app(num_replicas=2, router="round_robin", **common), name="rr", route_prefix="/rr")
    serve.run(build_app(disaggregated=True, num_replicas=1, prefill_replicas=1, **common), name="disagg",
              route_prefix="/disagg")
    print(f"\n[ray] three applications (6 engine replicas) up in {time.perf_counter() - started:.1f} s")
    clients = {name: openai.OpenAI(base_url=f"http://127.0.0.1:{port}/{name}/v1", api_key=API_KEY, max_retries=0,
                                   timeout=120) for name in ("prefix", "rr", "disagg")}
    clients["port"] = port
    yield clients
    serve.shutdown()
    ray.shutdown()


