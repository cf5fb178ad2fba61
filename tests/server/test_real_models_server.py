"""The OpenAI server on real exports (tests/models/real): a Qwen2 and a
Mistral TorchScript export and an onnxruntime-genai builder model, served
from the default manifest's paged profile, queried with token-id prompts by
the official openai client: greedy ids equal the references, streamed or
not, alone or concurrent (continuous batching in the step engine)."""
import json
import os
import threading

import openai
import pytest

from conftest import API_KEY, start_server, stop_server

REAL = os.path.join(os.path.dirname(__file__), "..", "models", "real")
MODELS = ["qwen2-torchscript", "mistral-torchscript", "qwen2-genai", "mistral-genai"]


def reference(model):
    with open(os.path.join(REAL, model, "ref.json")) as f:
        ref = json.load(f)
    return ref if ref["reference"] == "torch" else dict(ref, **ref["onnxruntime"])


@pytest.fixture(scope="module", params=MODELS)
def served(request):
    proc, port = start_server(["--model", os.path.join(REAL, request.param)], manifest=None, profile="paged")
    yield request.param, openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY, max_retries=0, timeout=60)
    stop_server(proc)


def complete(client, prompt, n, stream=False):
    kwargs = dict(model=client.models.list().data[0].id, prompt=prompt, max_tokens=n, temperature=0,
                  extra_body={"return_token_ids": True, "ignore_eos": True})
    if not stream:
        choice = client.completions.create(**kwargs).choices[0]
        assert choice.model_extra["prompt_token_ids"] == prompt
        return choice.model_extra["token_ids"]
    ids = []
    for chunk in client.completions.create(stream=True, **kwargs):
        for c in chunk.choices:
            ids += (c.model_extra or {}).get("token_ids", [])
    return ids


def test_greedy_ids_equal_the_reference(served):
    model, client = served
    ref = reference(model)
    assert complete(client, ref["prompt"], len(ref["greedy"])) == ref["greedy"]
    assert complete(client, ref["prompt"], len(ref["greedy"]), stream=True) == ref["greedy"]


def test_concurrent_requests_each_equal_alone(served):
    model, client = served
    ref = reference(model)
    prompts = [ref["prompt"], ref["batch"][0], ref["batch"][1], ref["prompt"][:7]]
    alone = [complete(client, p, 6) for p in prompts]
    results = [None] * len(prompts)

    def run(i):
        results[i] = complete(client, prompts[i], 6)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == alone
