"""Drafting heads distilled from the target itself (python -m switchyard.distill
heads), then loaded by the engine's built-in `heads` drafter: the heads learn
(held-out top-1 above the untrained identity heads), the engine's greedy
outputs with them are the outputs without them, drafts are accepted, and
heads made for another model are refused at load naming both sizes."""
import json

import numpy as np
import pytest

from conftest import MODEL, SHARED, TOKENIZER, drafting_manifest

PROMPTS = ["Once upon a time", "Lily and Ben", "The little bird", "One day, Tom", "The sun was hot"]


def manifest(tmp_path, heads=None, model=MODEL):
    return drafting_manifest(tmp_path, model, ["attention", "cache"], "heads" if heads else "",
                             f"{{model: {heads}, k: 3, top: 3}}", f"tokenizer: {TOKENIZER}\nthreads: 1\n")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from switchyard import distill

    d = tmp_path_factory.mktemp("distill")
    out, report = d / "heads.onnx", d / "report.json"
    rc = distill.main(["heads", "--model", MODEL, "--tokenizer", TOKENIZER, "--manifest", manifest(d), "--out", str(out),
                       "--report", str(report), "--heads", "2", "--tokens", "128", "--epochs", "30", "--workers", "4"])
    assert rc == 0
    return out, json.loads(report.read_text())


def test_engine_reads_hidden_states_and_projects_them_through_its_lm_head(tmp_path):
    import switchyard

    with switchyard.Engine(manifest=manifest(tmp_path)) as e:
        ids = e.tokenizer.encode("Once upon a time")
        h = e.hidden_states(ids)
        assert h.shape == (len(ids), 64)
        # The LM head applied to the hidden states is the model's logits.
        np.testing.assert_allclose(e.lm_head(h), e.logits(ids), rtol=1e-4, atol=1e-4)
        with pytest.raises(switchyard.InvalidArgument, match="hidden size is 64"):
            e.lm_head(np.zeros((1, 65), np.float32))


def test_distilled_heads_learn_the_targets_continuations(trained):
    _, report = trained
    assert report["held_out"] > 0 and report["hidden"] == 64 and report["vocab"] == 512
    first = report["heads"][0]
    # Untrained heads are the identity: they predict the next token again.
    assert first["top1"] > first["untrained_top1"] + 0.2, report


def test_heads_drafter_keeps_greedy_outputs_and_gets_drafts_accepted(trained, tmp_path):
    import switchyard

    heads, _ = trained
    with switchyard.Engine(manifest=manifest(tmp_path)) as plain:
        want = [plain.generate(p, max_tokens=48).token_ids for p in PROMPTS]
    with switchyard.Engine(manifest=manifest(tmp_path, heads=str(heads))) as e:
        got = [e.generate(p, max_tokens=48).token_ids for p in PROMPTS]
        m = e.metrics()
    assert got == want
    assert m["spec_draft_tokens"] > 0 and m["spec_accepted_tokens"] > 0, m


def test_heads_of_another_hidden_size_are_refused_naming_both(trained, tmp_path):
    import switchyard

    heads, _ = trained
    other = str(SHARED / "models" / "llama_mha_tiny_random.onnx")  # hidden 96
    with pytest.raises(switchyard.Error, match="hidden states of 64 values; the target's are 96"):
        switchyard.Engine(manifest=manifest(tmp_path, heads=str(heads), model=other))


def test_heads_trained_against_another_vocabulary_are_refused_naming_both(trained, tmp_path):
    import onnx
    import switchyard

    heads, _ = trained
    m = onnx.load(str(heads))
    for p in m.metadata_props:
        if p.key == "switchyard.heads.vocab_size":
            p.value = "1000"
    other = tmp_path / "other_vocab.onnx"
    onnx.save(m, str(other))
    with pytest.raises(switchyard.Error, match="trained against a vocabulary of 1000 tokens; the target's has 512"):
        switchyard.Engine(manifest=manifest(tmp_path, heads=str(other)))
