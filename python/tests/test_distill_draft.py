"""A small draft model distilled from the trained SmolLM2 GGUF (python -m
switchyard.distill draft): the student (the target's first blocks and a
trained adapter) agrees with the target more often than the same cut
untrained, loads in the engine's built-in draft-model drafter, leaves greedy
outputs as they are and gets drafts accepted. Needs the GGUF
(SWITCHYARD_SMOLLM2_GGUF, scripts/fetch-smollm2.sh); skipped without it
unless SWITCHYARD_REQUIRE_TRAINED_MODEL=1."""
import json
import os
import pathlib

import pytest

from conftest import MODEL, drafting_manifest

QUESTIONS = ["What is the tallest mountain in the world?", "Give me two tips for learning to cook.",
             "Why is the sky blue?"]


def smollm2() -> str:
    path = os.environ.get("SWITCHYARD_SMOLLM2_GGUF", "")
    if not path or not pathlib.Path(path).is_file():
        if os.environ.get("SWITCHYARD_REQUIRE_TRAINED_MODEL") == "1":
            pytest.fail("SWITCHYARD_REQUIRE_TRAINED_MODEL=1 but SWITCHYARD_SMOLLM2_GGUF names no file")
        pytest.skip("SWITCHYARD_SMOLLM2_GGUF is not set (scripts/fetch-smollm2.sh prints the file)")
    return path


def manifest(tmp_path, model, draft=None):
    return drafting_manifest(tmp_path, model, ["attention", "cache", "quantize"], "draft-model" if draft else "",
                             f"{{model: {draft}, k: 3}}", "threads: 2\n")


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    from switchyard import distill

    gguf = smollm2()
    d = tmp_path_factory.mktemp("draft")
    out, report = d / "draft.gguf", d / "report.json"
    rc = distill.main(["draft", "--model", gguf, "--manifest", manifest(d, gguf), "--out", str(out), "--report", str(report),
                       "--layers", "4", "--max-prompts", "30", "--tokens", "96", "--epochs", "3", "--workers", "8"])
    assert rc == 0
    return gguf, out, json.loads(report.read_text())


def test_distilled_student_agrees_with_the_target_more_than_the_untrained_cut(student):
    _, out, report = student
    assert report["layers"] == 4 and report["target_layers"] == 30 and report["held_out"] > 0, report
    # The cut alone (three blocks, then the target's last) rarely picks the
    # target's token; the adapter trained on the target's top-k learns to.
    assert report["top1"] > report["untrained_top1"] + 0.08, report
    assert report["kl_per_epoch"][-1] < report["kl_per_epoch"][0], report
    # Four blocks of thirty and the LM head: well under half the target's bytes.
    assert report["bytes"] < 0.5 * report["target_bytes"], report


def test_student_drafts_for_the_target_and_greedy_outputs_stay_the_targets(student, tmp_path):
    import switchyard

    gguf, out, _ = student
    with switchyard.Engine(manifest=manifest(tmp_path, gguf)) as plain:
        prompts = [plain.render_chat([{"role": "user", "content": q}]) for q in QUESTIONS]
        want = [plain.generate(p, max_tokens=40).token_ids for p in prompts]
    with switchyard.Engine(manifest=manifest(tmp_path, gguf, draft=str(out))) as e:
        got = [e.generate(p, max_tokens=40).token_ids for p in prompts]
        m = e.metrics()
    assert got == want
    assert m["spec_draft_tokens"] > 0 and m["spec_accepted_tokens"] > 0, m


def with_output_bias(tmp_path) -> str:
    """The tiny llama GGUF with one block tensor more (an output-projection
    bias, which the llama family does not have and the forward does not add)."""
    import gguf
    import numpy as np

    src = gguf.GGUFReader(str(REAL / "llama-gguf" / "model.gguf"))
    out = tmp_path / "bias.gguf"
    w = gguf.GGUFWriter(str(out), "llama")
    for key, f in src.fields.items():
        if not key.startswith("GGUF.") and key != "general.architecture":
            w.add_key_value(key, f.contents(), f.types[0], sub_type=f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None)
    for t in src.tensors:
        w.add_tensor(t.name, np.ascontiguousarray(t.data), raw_dtype=t.tensor_type)
    w.add_tensor("blk.0.attn_output.bias", np.zeros(int(src.fields["llama.embedding_length"].contents()), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(out)


def test_draft_refuses_a_target_it_cannot_cut_naming_the_problem(tmp_path):
    from switchyard import distill

    with pytest.raises(SystemExit, match="not a GGUF file"):
        distill.main(["draft", "--model", MODEL, "--out", str(tmp_path / "x.gguf")])
    with pytest.raises(SystemExit, match="mixture-of-experts blocks"):
        distill.main(["draft", "--model", str(REAL / "mixtral-gguf" / "model.gguf"), "--out", str(tmp_path / "x.gguf")])
    with pytest.raises(SystemExit, match="this file's is 'gemma2'"):
        distill.main(["draft", "--model", str(REAL / "gemma2-gguf" / "model.gguf"), "--out", str(tmp_path / "x.gguf")])
    with pytest.raises(SystemExit, match="block tensor 'blk.0.attn_output.bias' is not one distill draft's forward computes"):
        distill.main(["draft", "--model", with_output_bias(tmp_path), "--out", str(tmp_path / "x.gguf")])
    gguf = smollm2()
    with pytest.raises(SystemExit, match="keeps 1 to 29 of the target's 30 blocks"):
        distill.main(["draft", "--model", gguf, "--out", str(tmp_path / "x.gguf"), "--layers", "30"])


REAL = pathlib.Path(__file__).resolve().parents[2] / "tests" / "models" / "real"


@pytest.mark.parametrize("family", ["llama-gguf", "llama-gguf-q8_0", "qwen2-gguf", "qwen3-gguf"])
def test_numpy_forward_matches_each_familys_reference(family):
    # Each rotary layout (llama's pairs, Qwen's halves), q/k/v biases (qwen2)
    # and per-head q/k norms (qwen3), against transformers' logits.
    import numpy as np
    from switchyard import distill_draft as dd

    ref = json.loads((REAL / family / "ref.json").read_text())
    t = dd.GgufTarget(str(REAL / family / "model.gguf"))
    x = t.weight("token_embd.weight")[np.asarray(ref["prompt"])]
    for layer in range(t.hp.blocks):
        x = dd.block_forward(t, layer, x)
    logits = dd.rms_norm(x, t.weight("output_norm.weight"), t.hp.eps) @ t.lm_head().T
    np.testing.assert_allclose(logits, np.asarray(ref["logits"]).reshape(logits.shape), atol=1e-4)


@pytest.mark.parametrize("family", ["qwen2-gguf", "llama-gguf-q4_1"])
def test_a_student_of_another_family_drafts_for_its_target(family, tmp_path):
    import switchyard
    from switchyard import distill

    target, out = str(REAL / family / "model.gguf"), tmp_path / "student.gguf"
    assert distill.main(["draft", "--model", target, "--manifest", manifest(tmp_path, target), "--out", str(out),
                         "--layers", "1", "--max-prompts", "6", "--tokens", "16", "--head-type", "keep"]) == 0
    prompts = ["Once upon a time", "The weather today", "def main():"]
    with switchyard.Engine(manifest=manifest(tmp_path, target)) as plain:
        want = [plain.generate(p, max_tokens=16).token_ids for p in prompts]
    with switchyard.Engine(manifest=manifest(tmp_path, target, draft=str(out))) as e:
        got = [e.generate(p, max_tokens=16).token_ids for p in prompts]
        assert e.metrics()["spec_draft_tokens"] > 0
    assert got == want


def test_numpy_forward_of_the_gguf_matches_transformers_reference():
    # The student's frozen part is computed in numpy from the file: all 30
    # blocks of it give transformers' logits (tests/models/smollm2/ref.json).
    import numpy as np
    from switchyard import distill_draft as dd

    ref = json.loads((REAL.parent / "smollm2" / "ref.json").read_text())
    t = dd.GgufTarget(smollm2())
    case = ref["continuations"][0]
    x = t.weight("token_embd.weight")[np.asarray(case["prompt"])]
    for layer in range(t.hp.blocks):
        x = dd.block_forward(t, layer, x)
    logits = dd.rms_norm(x[-1], t.weight("output_norm.weight"), t.hp.eps) @ t.lm_head().T
    top = case["top_logits"]
    np.testing.assert_allclose(logits[top["ids"]], top["logits"], atol=1e-4)


def test_adapter_gradients_match_finite_differences():
    import numpy as np
    from switchyard import distill_draft as dd

    rng = np.random.default_rng(0)
    hidden, ff, ctx, vocab, rows = 8, 12, 6, 20, 5
    params = {"attn_output.weight": rng.standard_normal((hidden, ctx)), "ffn_norm.weight": 1 + 0.1 * rng.standard_normal(hidden),
              "ffn_gate.weight": rng.standard_normal((ff, hidden)), "ffn_up.weight": rng.standard_normal((ff, hidden)),
              "ffn_down.weight": rng.standard_normal((hidden, ff)), "output_norm.weight": 1 + 0.1 * rng.standard_normal(hidden)}
    adapter = dd.Adapter(params, 1e-5)
    r, c, head = rng.standard_normal((rows, hidden)), rng.standard_normal((rows, ctx)), rng.standard_normal((vocab, hidden))
    ids = np.stack([rng.choice(vocab, 4, replace=False) for _ in range(rows)])
    p = rng.random((rows, 4))
    p /= p.sum(axis=1, keepdims=True)

    def loss():
        h, _ = adapter.forward(r, c)
        return dd.kl_grad(h @ head.T, ids, p)[0]

    h, cache = adapter.forward(r, c)
    _, dlogits = dd.kl_grad(h @ head.T, ids, p)
    grads = adapter.backward(dlogits @ head, cache)
    assert set(grads) == set(params)
    for name, value in params.items():
        numeric = np.zeros_like(value)
        for i in np.ndindex(value.shape):
            old = value[i]
            value[i] = old + 1e-6
            up = loss()
            value[i] = old - 1e-6
            down = loss()
            value[i] = old
            numeric[i] = (up - down) / 2e-6
        np.testing.assert_allclose(grads[name], numeric, rtol=1e-5, atol=1e-7, err_msg=name)
