"""What eval harnesses ask of a completions server, on the trained model
(SmolLM2-135M-Instruct's GGUF): echo with prompt logprobs and max_tokens 0
(loglikelihood), vLLM's /tokenize, /detokenize and /tokenizer_info (lm-eval's
remote tokenizer), logit_bias, and logprob tokens that keep their exact
bytes and count text_offset in characters. lm-eval-harness itself
(local-completions) runs a multiple-choice task from a local file against
the server; every loglikelihood it reports equals the one computed from
`switchyard logits` (the graph's last-position logits, one prefix at a
time)."""
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import requests
from openai import OpenAI

from conftest import API_KEY, start_server, stop_server, trained_model

CLI = os.environ["SWITCHYARD_CLI"]
GGUF = trained_model()
HEADERS = {"Authorization": f"Bearer {API_KEY}"}
# float32 logits through two paths (the step engine's prompt pass, the
# graph's last position): equal up to summation order.
TOLERANCE = 2e-3


@pytest.fixture(scope="module")
def server():
    proc, port = start_server(["--model", GGUF], manifest=None, profile="paged")
    base = f"http://127.0.0.1:{port}"
    client = OpenAI(base_url=base + "/v1", api_key=API_KEY)
    yield {"base": base, "client": client, "model": client.models.list().data[0].id}
    stop_server(proc)


def post(server, path, body):
    return requests.post(server["base"] + path, json=body, headers=HEADERS, timeout=120)


def tokenize(server, text):
    r = post(server, "/tokenize", {"prompt": text, "add_special_tokens": False})
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def reference_logprobs(prompts):
    """Per prompt, log_softmax(last logits)[next token] for every prefix, from
    `switchyard logits`: one process (one model load) for all of them."""
    with tempfile.TemporaryDirectory() as tmp:
        batch = Path(tmp) / "prompts.json"
        prefixes = [(ids[:i], ids[i]) for ids in prompts for i in range(1, len(ids))]
        batch.write_text(json.dumps([p for p, _ in prefixes]))
        out = subprocess.run([CLI, "logits", "--model", GGUF, "--batch", str(batch)], capture_output=True, text=True, check=True, timeout=1200)
    lines = out.stdout.splitlines()
    assert len(lines) == len(prefixes), out.stderr[-2000:]
    values = []
    for line, (_, nxt) in zip(lines, prefixes):
        logits = json.loads(line)["last_logits"]
        m = max(logits)
        z = m + math.log(sum(math.exp(x - m) for x in logits))
        values.append((logits[nxt] - z, logits[nxt] == m))
    per_prompt, at = [], 0
    for ids in prompts:
        per_prompt.append(values[at:at + len(ids) - 1])
        at += len(ids) - 1
    return per_prompt


def test_echo_with_max_tokens_0_gives_the_prompt_logprobs(server):
    ids = tokenize(server, "The capital of France is Paris.")
    r = post(server, "/v1/completions", {"model": server["model"], "prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 1, "temperature": 0})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["text"] == "The capital of France is Paris." and choice["finish_reason"] == "length"
    lp = choice["logprobs"]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None and len(lp["tokens"]) == len(ids)
    expected, = reference_logprobs([ids])
    for got, (want, greedy), top in zip(lp["token_logprobs"][1:], expected, lp["top_logprobs"][1:]):
        assert abs(got - want) < TOLERANCE
        assert (got == max(top.values())) == greedy  # the chosen token is always among the top ones
    assert r.json()["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 0, "total_tokens": len(ids),
                                 "prompt_tokens_details": {"cached_tokens": 0}}


def test_max_tokens_0_without_echo_writes_nothing(server):
    r = server["client"].completions.create(model=server["model"], prompt="Hello", max_tokens=0)
    assert r.choices[0].text == "" and r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 0


def test_echo_then_generation_and_vllm_prompt_logprobs(server):
    r = post(server, "/v1/completions", {"model": server["model"], "prompt": "Once upon a time", "max_tokens": 4, "echo": True, "logprobs": 2,
                                         "temperature": 0, "prompt_logprobs": 1})
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    plain = server["client"].completions.create(model=server["model"], prompt="Once upon a time", max_tokens=4, temperature=0)
    assert c["text"] == "Once upon a time" + plain.choices[0].text
    n_prompt = len(tokenize(server, "Once upon a time"))
    assert len(c["logprobs"]["tokens"]) == n_prompt + 4
    assert c["prompt_logprobs"][0] is None and len(c["prompt_logprobs"]) == n_prompt
    for entry, lp in zip(c["prompt_logprobs"][1:], c["logprobs"]["token_logprobs"][1:n_prompt]):
        assert any(abs(v["logprob"] - lp) < 1e-6 for v in entry.values())
    # Streamed chunks have no place for them: refused, not dropped.
    r = post(server, "/v1/completions", {"model": server["model"], "prompt": "Once", "max_tokens": 2, "stream": True, "prompt_logprobs": 1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt_logprobs"


def test_lm_eval_loglikelihood_equals_switchyard_logits(server):
    docs = [{"question": "The capital of France is", "choices": [" Paris", " Rome"], "answer": 0},
            {"question": "Two plus two equals", "choices": [" four", " seven"], "answer": 0},
            {"question": "The sky on a clear day is", "choices": [" green", " blue"], "answer": 1}]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
        (tmp / "tasks").mkdir()
        (tmp / "tasks" / "switchyard_mc.yaml").write_text(
            "task: switchyard_mc\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: " + str(tmp / "docs.jsonl") + "\n"
            "test_split: test\noutput_type: multiple_choice\ndoc_to_text: '{{question}}'\ndoc_to_choice: '{{choices}}'\n"
            "doc_to_target: '{{answer}}'\nmetric_list:\n  - metric: acc\n")
        args = (f"base_url={server['base']}/v1/completions,model={server['model']},tokenizer_backend=remote,auth_token={API_KEY},"
                "num_concurrent=1,max_retries=1,tokenized_requests=True")
        env = dict(os.environ, OPENAI_API_KEY=API_KEY, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        out = subprocess.run([sys.executable, "-m", "lm_eval", "--model", "local-completions", "--model_args", args, "--tasks", "switchyard_mc",
                              "--include_path", str(tmp / "tasks"), "--log_samples", "--output_path", str(tmp / "out")],
                             capture_output=True, text=True, timeout=1200, env=env)
        assert out.returncode == 0, out.stderr[-3000:]
        samples = [json.loads(line) for f in (tmp / "out").rglob("samples_switchyard_mc_*.jsonl") for line in f.read_text().splitlines()]
    assert len(samples) == len(docs)
    asked = []  # (context ids, context + continuation ids, lm-eval's loglikelihood, its is-greedy)
    for s in samples:
        # The (context, continuation) pairs lm-eval asked about (its target
        # delimiter included), with the answers it got.
        pairs = [s["arguments"][f"gen_args_{i}"] for i in range(len(s["arguments"]))]  # {"gen_args_0": {"arg_0": ..., "arg_1": ...}}
        for args, resp in zip(pairs, s["resps"]):
            context_text, continuation = args["arg_0"], args["arg_1"]
            loglikelihood, greedy = resp[0]  # logged as text: ["-1.25", "True"]
            context = tokenize(server, context_text)
            whole = tokenize(server, context_text + continuation)
            assert whole[:len(context)] == context
            asked.append((context, whole, float(loglikelihood), str(greedy) == "True"))
    assert len(asked) == 2 * len(docs)
    for (context, _, loglikelihood, greedy), reference in zip(asked, reference_logprobs([w for _, w, _, _ in asked])):
        expected = reference[len(context) - 1:]
        assert abs(loglikelihood - sum(v for v, _ in expected)) < TOLERANCE * len(expected)
        assert greedy == all(g for _, g in expected)


def test_tokenize_detokenize_and_tokenizer_info(server):
    r = post(server, "/tokenize", {"prompt": "Hello world", "return_token_strs": True})
    assert r.status_code == 200
    j = r.json()
    assert j["count"] == len(j["tokens"]) and j["max_model_len"] > 0 and "".join(j["token_strs"]) == "Hello world"
    assert post(server, "/detokenize", {"tokens": j["tokens"]}).json() == {"prompt": "Hello world"}
    chat = post(server, "/tokenize", {"messages": [{"role": "user", "content": "Hi"}]}).json()
    assert chat["count"] > 3
    info = requests.get(server["base"] + "/tokenizer_info", headers=HEADERS, timeout=30).json()
    assert info["eos_token"] == "<|im_end|>" and "im_start" in info["chat_template"]
    bad = post(server, "/detokenize", {"tokens": [10 ** 9]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
    assert requests.post(server["base"] + "/tokenize", json={"prompt": "x"}, timeout=30).status_code == 401


def test_logit_bias_moves_the_choice(server):
    c, model = server["client"], server["model"]
    greedy = c.completions.create(model=model, prompt="The capital of France is", max_tokens=1, temperature=0, logprobs=1)
    first = tokenize(server, greedy.choices[0].text)[0]
    banned = c.completions.create(model=model, prompt="The capital of France is", max_tokens=1, temperature=0, logit_bias={str(first): -100})
    assert banned.choices[0].text != greedy.choices[0].text
    forced = tokenize(server, " banana")[0]
    pushed = c.completions.create(model=model, prompt="The capital of France is", max_tokens=1, temperature=0, logit_bias={str(forced): 100})
    assert tokenize(server, pushed.choices[0].text)[0] == forced
    r = post(server, "/v1/completions", {"model": model, "prompt": "x", "logit_bias": {"99999999": 1}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "logit_bias"


def test_logprob_tokens_keep_their_bytes_and_offsets_count_characters(server):
    text = "Caf\u00e9 na\u00efve \U0001F600 \u65e5\u672c"
    r = post(server, "/v1/completions", {"model": server["model"], "prompt": text, "max_tokens": 0, "echo": True, "logprobs": 5})
    lp = r.json()["choices"][0]["logprobs"]
    names = lp["tokens"]
    # Parts of a character are named by their bytes, so no two top entries collide.
    assert any(t.startswith("bytes:") for t in names)
    raw = b"".join(bytes(int(h, 16) for h in t[len("bytes:"):].split("\\x")[1:]) if t.startswith("bytes:") else t.encode() for t in names)
    assert raw.decode() == text
    offsets = lp["text_offset"]
    assert offsets[0] == 0 and offsets == sorted(offsets) and offsets[-1] < len(text)
    for t, at in zip(names, offsets):
        if not t.startswith("bytes:"):
            assert text[at:at + len(t)] == t
    chat = server["client"].chat.completions.create(model=server["model"], messages=[{"role": "user", "content": "Say hi"}], max_tokens=4,
                                                    temperature=0, logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert b"".join(bytes(e.bytes) for e in content).decode(errors="replace") == chat.choices[0].message.content


def test_embeddings_put_each_text_nearest_its_paraphrase(server):
    """/v1/embeddings on the trained model (a generative model: mean of its
    tokens, normalised): retrieval works as a user would try it. Every text's
    nearest neighbour among the others is its paraphrase (seen margins: 0.07
    and more in cosine)."""
    pairs = [("The cat is sleeping on the sofa.", "A cat naps on the couch."),
             ("Interest rates rose by half a percent this quarter.", "The central bank raised borrowing costs."),
             ("What is the capital of France?", "Paris is the capital and largest city of France."),
             ("How do vaccines protect against disease?", "Vaccines train the immune system to recognise a pathogen so the body can fight it off.")]
    texts = [t for p in pairs for t in p]
    r = server["client"].embeddings.create(model=server["model"], input=texts)
    v = [d.embedding for d in r.data]
    assert len(v) == len(texts) and all(abs(sum(x * x for x in e) - 1) < 1e-4 for e in v)
    for i in range(len(texts)):
        sims = [sum(a * b for a, b in zip(v[i], v[j])) if j != i else -2 for j in range(len(texts))]
        assert sims.index(max(sims)) == i ^ 1, (texts[i], sims)
