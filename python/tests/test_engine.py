"""The Python package against the real engine: outputs equal the CLI's,
streams equal whole results, asyncio streams run concurrently, errors carry
the engine's message, and memory stays bounded."""
import asyncio
import gc
import json
import re
import subprocess

import numpy as np
import pytest

import switchyard
from conftest import MODEL, REAL, SHARED, TOKENIZER

PROMPTS = ["Once upon a time", "Lily and Tom went to the park.", "The little dog"]


def cli_generate(cli, model, prompt, max_tokens, *extra):
    out = subprocess.run(
        [cli, "generate", "--model", model, "--prompt", prompt, "-n", str(max_tokens), "--json", *extra],
        check=True, capture_output=True, text=True, timeout=300,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_generate_equals_the_cli(engine, cli, prompt):
    ref = cli_generate(cli, MODEL, prompt, 48, "--tokenizer", TOKENIZER)
    got = engine.generate(prompt, max_tokens=48)
    assert got.text == ref["text"]
    assert got.token_ids == ref["ids"]
    assert got.finish_reason in ("stop", "length")


def test_a_real_export_with_a_tokenizer_json_equals_the_cli(cli):
    folder = str(REAL / "qwen2-optimum")
    ref = cli_generate(cli, folder + "/model.onnx", "Hello, my name is", 24)
    with switchyard.Engine(model=folder + "/model.onnx", threads=1) as e:
        got = e.generate("Hello, my name is", max_tokens=24)
    assert got.text == ref["text"]


def test_streaming_equals_non_streaming(engine):
    for prompt in PROMPTS:
        whole = engine.generate(prompt, max_tokens=40)
        chunks = list(engine.stream(prompt, max_tokens=40))
        assert "".join(c.text for c in chunks) == whole.text
        assert [t for c in chunks for t in c.token_ids] == whole.token_ids
        assert chunks[-1].finish_reason == whole.finish_reason
        assert all(c.finish_reason is None for c in chunks[:-1])
    # A stop string: the text ends before it, in the stream too.
    whole = engine.generate("Once upon a time", max_tokens=60, stop=["park"])
    assert whole.finish_reason == "stop" and "park" not in whole.text
    assert "".join(c.text for c in engine.stream("Once upon a time", max_tokens=60, stop=["park"])) == whole.text


def test_sixteen_concurrent_asyncio_streams_equal_their_sequential_results(engine):
    prompts = [f"{PROMPTS[i % 3]} {i}" for i in range(16)]
    expected = [engine.generate(p, max_tokens=32) for p in prompts]

    async def one(p):
        pieces = []
        async for chunk in engine.astream(p, max_tokens=32):
            pieces.append(chunk.text)
        return "".join(pieces)

    async def all_of_them():
        return await asyncio.gather(*(one(p) for p in prompts))

    texts = asyncio.run(all_of_them())
    assert texts == [r.text for r in expected]
    # The engine ran them together (more than one sequence in a step at some point).
    assert asyncio.run(engine.agenerate(prompts[0], max_tokens=32)).text == expected[0].text


def test_a_bad_model_path_raises_with_the_engines_message():
    with pytest.raises(switchyard.NotFound) as e:
        switchyard.Engine(model="/nonexistent/model.onnx")
    assert "/nonexistent/model.onnx" in str(e.value)
    assert isinstance(e.value, FileNotFoundError) and isinstance(e.value, switchyard.Error)


def test_bad_requests_raise_and_the_engine_serves_on(engine, tmp_path):
    with pytest.raises(switchyard.InvalidArgument, match="top_p must be in"):
        engine.generate("Once upon a time", top_p=2.0)
    with pytest.raises(ValueError, match="empty"):
        engine.generate("")
    with pytest.raises(TypeError, match="tempreature"):
        engine.generate("Once", tempreature=1.0)
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(switchyard.Error, match="bad.yaml"):
        switchyard.Engine(manifest=str(bad))
    assert engine.generate("Once upon a time", max_tokens=4).completion_tokens == 4


def test_closing_a_stream_early_cancels_the_request(engine):
    before = engine.metrics()["cancelled"]
    stream = engine.stream("Once upon a time", max_tokens=200, ignore_eos=True)
    next(stream)
    stream.close()
    for _ in range(200):
        if engine.metrics()["cancelled"] > before:
            break
        import time

        time.sleep(0.01)
    assert engine.metrics()["cancelled"] == before + 1


def test_logits_are_the_references_and_a_numpy_array(engine):
    ref = json.loads((SHARED / "models" / "stories260K.ref.json").read_text())
    for case in ref["cases"][:3]:
        logits = engine.logits(case["prompt_ids"])
        assert isinstance(logits, np.ndarray) and logits.dtype == np.float32
        assert logits.shape == (len(case["prompt_ids"]), engine.vocab_size)
        np.testing.assert_allclose(logits[-1], np.array(case["last_logits"], dtype=np.float32), atol=1e-3)


def test_tokenizer_metrics_and_kv_events(engine):
    tok = engine.tokenizer
    ids = tok.encode("Once upon a time")
    assert tok.decode(ids) == "Once upon a time"
    standalone = switchyard.Tokenizer(TOKENIZER)
    assert standalone.encode("Once upon a time") == ids and standalone.vocab_size == 512
    m = engine.metrics()
    for key in ("running", "waiting", "kv_blocks_total", "kv_blocks_used", "generated_tokens"):
        assert key in m
    with switchyard.Engine(model=MODEL, tokenizer=TOKENIZER, profile="prefix", threads=1) as e:
        e.enable_kv_events()
        prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside."
        e.generate(prompt, max_tokens=4)
        stored = [ev for ev in e.poll_kv_events() if ev.kind == "stored"]
        hashes = e.block_hashes(prompt)
        assert len(hashes) >= 1
        assert [ev.block_hash for ev in stored[: len(hashes)]] == hashes
        assert switchyard.block_hashes(tok.encode(prompt), e.kv_block_size) == hashes


def test_kv_export_import_between_engines_gives_the_same_output(engine):
    prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."
    with switchyard.Engine(model=MODEL, tokenizer=TOKENIZER, profile="prefix", threads=1) as prefill, \
            switchyard.Engine(model=MODEL, tokenizer=TOKENIZER, profile="prefix", threads=1) as decode:
        prefill.generate(prompt, max_tokens=1)
        data = prefill.export_kv(prompt)
        assert decode.import_kv(data) > 0
        got = decode.generate(prompt, max_tokens=32)
        assert got.cached_tokens > 0
        assert got.text == engine.generate(prompt, max_tokens=32).text
        with pytest.raises(switchyard.InvalidArgument, match="SYKV"):
            decode.import_kv(b"not kv")


def rss_mb():
    with open("/proc/self/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024


def test_no_leak_over_a_thousand_requests(engine):
    for _ in range(100):
        engine.generate("Once upon a time", max_tokens=2)
    gc.collect()
    before = rss_mb()
    for i in range(1000):
        if i % 2:
            engine.generate("Once upon a time", max_tokens=2)
        else:
            for _ in engine.stream("Once upon a time", max_tokens=2):
                pass
    gc.collect()
    grown = rss_mb() - before
    print(f"RSS {before:.1f} MB -> +{grown:.1f} MB over 1000 requests")
    assert grown < 24, f"RSS grew {grown:.1f} MB over 1000 requests"


def test_the_type_stubs_cover_the_extension():
    import inspect
    import pathlib

    stub = (pathlib.Path(switchyard.__file__).parent / "_core.pyi").read_text()
    for name, obj in vars(switchyard._core).items():
        if name.startswith("_"):
            continue
        assert re.search(rf"\b{name}\b", stub), f"_core.pyi lacks {name}"
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for member in vars(obj):
                if not member.startswith("_"):
                    assert re.search(rf"def {member}\b|\b{member}:", stub), f"_core.pyi lacks {name}.{member}"


def test_structured_output_through_python(engine):
    # Bounded (an unbounded integer may run past max_tokens and end cut off).
    schema = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
              "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 120}}}
    try:
        r = engine.generate("Once upon a time", max_tokens=128, temperature=0.8, seed=3, constraint=("json_schema", schema))
    except switchyard.InvalidArgument as e:
        if "logits processor" in str(e):
            pytest.skip("this build has no logits processor (xgrammar not found)")
        raise
    assert r.finish_reason == "stop", r
    value = json.loads(r.text)
    assert isinstance(value["name"], str) and len(value["name"]) <= 12 and 0 <= value["age"] <= 120
    with pytest.raises(switchyard.InvalidArgument):
        engine.generate("Once", constraint=("json_schema", "{not json"))


def test_chat_through_a_template_equals_the_cli(cli):
    folder = str(REAL / "qwen2-optimum")
    template = str(REAL.parent.parent / "text" / "chat" / "templates" / "chatml_tools.jinja")
    out = subprocess.run([cli, "generate", "--model", folder + "/model.onnx", "--chat", "--chat-template", template,
                          "--system", "You are terse.", "--prompt", "Name a color.", "-n", "16", "--json"],
                         check=True, capture_output=True, text=True, timeout=300).stdout
    ref = json.loads(out.strip().splitlines()[-1])
    with switchyard.Engine(model=folder + "/model.onnx", chat_template=template, threads=1) as e:
        messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a color."}]
        ids = e.render_chat(messages)
        assert ids == ref["prompt_ids"]
        got = e.chat(messages, max_tokens=16)
    assert got.token_ids == ref["ids"] and got.text == ref["text"]


@pytest.mark.parametrize("export", ["qwen2-optimum", "mistral-torchscript", "llama3-dynamo"])
def test_kv_transfer_and_events_on_real_exports(export):
    model = str(REAL / export / "model.onnx")
    prompt = "Hello, my name is Lily and I like to play in the park with my friends every day after school because it is fun."
    with switchyard.Engine(model=model, profile="prefix", threads=1) as prefill, \
            switchyard.Engine(model=model, profile="prefix", threads=1) as decode, \
            switchyard.Engine(model=model, profile="paged", threads=1) as single:
        prefill.generate(prompt, max_tokens=1)
        imported = decode.import_kv(prefill.export_kv(prompt))
        got = decode.generate(prompt, max_tokens=24)
        assert imported > 0 and got.cached_tokens == imported
        assert got.token_ids == single.generate(prompt, max_tokens=24).token_ids
        decode.enable_kv_events()
        stored = {e.block_hash for e in decode.poll_kv_events() if e.kind == "stored"}
        assert set(decode.block_hashes(prompt)) <= stored
