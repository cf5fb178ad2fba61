"""A Hugging Face model folder end to end: a tiny Qwen2 export with its
tokenizer.json and a tokenizer_config.json carrying a chat template
(Llama-2 [INST] style, tests/text/chat/templates/llama2.jinja). `generate --chat`
and the server's /v1/chat/completions tokenize exactly what Python's jinja2
and the tokenizers library make of the conversation; the official openai
client gets logprobs equal to a log-softmax of `switchyard logits`; the
penalties change the choice the way OpenAI (presence, frequency) and
Hugging Face (repetition) define them, checked by replaying the formulas on
`switchyard logits`; unsupported fields are refused by name."""
import json
import math
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import jinja2
import jinja2.ext
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment
from openai import BadRequestError, OpenAI
from tokenizers import Tokenizer

from conftest import API_KEY, start_server, stop_server

CLI = os.environ["SWITCHYARD_CLI"]
ROOT = Path(__file__).resolve().parents[1]
EXPORT = ROOT / "models" / "real" / "qwen2-torchscript"
TEMPLATE = (ROOT / "text" / "chat" / "templates" / "llama2.jinja").read_text()
MESSAGES = [{"role": "system", "content": "You are a storyteller."}, {"role": "user", "content": "Tell me about a cat."}]


@pytest.fixture(scope="module")
def folder():
    with tempfile.TemporaryDirectory() as tmp:
        for f in EXPORT.iterdir():
            if f.name not in ("tokenizer_config.json", "ref.json"):
                os.symlink(f, Path(tmp) / f.name)
        config = json.loads((EXPORT / "tokenizer_config.json").read_text())
        config["chat_template"] = TEMPLATE
        (Path(tmp) / "tokenizer_config.json").write_text(json.dumps(config))
        yield Path(tmp)


def expected_prompt_ids(messages):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.globals["raise_exception"] = lambda m: (_ for _ in ()).throw(jinja2.exceptions.TemplateError(m))
    text = env.from_string(TEMPLATE).render(messages=messages, bos_token="<s>", eos_token="</s>", add_generation_prompt=True)
    return Tokenizer.from_file(str(EXPORT / "tokenizer.json")).encode(text, add_special_tokens=False).ids


def last_logits(folder, ids):
    out = subprocess.run([CLI, "logits", "--model", str(folder), "--prompt-ids", ",".join(map(str, ids)), "--json"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["last_logits"]


def byte_level_alphabet():
    """GPT-2's byte-level alphabet: the printable character standing for each byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def token_bytes(tok, token_id):
    """The raw bytes a byte-level BPE token stands for."""
    alphabet = byte_level_alphabet()
    return bytes(alphabet[c] for c in tok.id_to_token(token_id))


def log_softmax(logits):
    m = max(logits)
    z = m + math.log(sum(math.exp(x - m) for x in logits))
    return [x - z for x in logits]


def test_generate_chat_renders_and_tokenizes_like_transformers(folder):
    out = subprocess.run([CLI, "generate", "--model", str(folder), "--chat", "--system", MESSAGES[0]["content"], "--prompt",
                          MESSAGES[1]["content"], "--max-tokens", "6", "--json"], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    assert result["prompt_ids"] == expected_prompt_ids(MESSAGES)
    assert len(result["ids"]) >= 1


def test_chat_template_command_prints_rendered_and_ids(folder):
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(MESSAGES, f)
        f.flush()
        out = subprocess.run([CLI, "chat-template", "--tokenizer", str(folder), "--messages", f.name, "--json"],
                             capture_output=True, text=True, check=True)
    j = json.loads(out.stdout)
    assert j["rendered"].startswith("<s>[INST] <<SYS>>\nYou are a storyteller.\n<</SYS>>\n\nTell me about a cat. [/INST]")
    assert j["ids"] == expected_prompt_ids(MESSAGES)


@pytest.fixture(scope="module")
def client(folder):
    proc, port = start_server(["--model", str(folder)], manifest=None, profile="paged")
    yield OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY)
    stop_server(proc)


def model_id(client):
    return client.models.list().data[0].id


def test_chat_logprobs_are_the_log_softmax_of_the_logits(folder, client):
    r = client.chat.completions.create(model=model_id(client), messages=MESSAGES, max_tokens=6, temperature=0, logprobs=True,
                                       top_logprobs=5, extra_body={"ignore_eos": True, "return_token_ids": True})
    choice = r.choices[0]
    prompt = choice.model_extra["prompt_token_ids"]
    assert prompt == expected_prompt_ids(MESSAGES)  # roles honoured, through the template
    ids = choice.model_extra["token_ids"]
    content = choice.logprobs.content
    assert len(content) == len(ids) == 6
    tok = Tokenizer.from_file(str(EXPORT / "tokenizer.json"))
    worst = 0.0
    for k, entry in enumerate(content):
        ref = log_softmax(last_logits(folder, prompt + ids[:k]))
        worst = max(worst, abs(entry.logprob - ref[ids[k]]))
        raw = token_bytes(tok, ids[k])
        assert bytes(entry.bytes) == raw
        try:
            assert entry.token == raw.decode()
        except UnicodeDecodeError:  # part of a character: named by its bytes, as OpenAI does
            assert entry.token == "bytes:" + "".join(f"\\x{b:02x}" for b in raw)
        best = sorted(range(len(ref)), key=lambda i: (-ref[i], i))[:5]
        assert [t.logprob for t in entry.top_logprobs] == pytest.approx([ref[i] for i in best], abs=1e-4)
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob, abs=1e-4)  # greedy: the top token
    print(f"max |logprob - log_softmax(switchyard logits)| over 6 tokens: {worst:.2e}")
    assert worst < 1e-4, worst
    assert r.usage.prompt_tokens_details.cached_tokens >= 0


def test_completion_logprobs_streamed(folder, client):
    prompt = expected_prompt_ids(MESSAGES)
    stream = client.completions.create(model=model_id(client), prompt=prompt, max_tokens=5, temperature=0, logprobs=3, stream=True,
                                       extra_body={"ignore_eos": True, "return_token_ids": True})
    ids, lps = [], []
    for chunk in stream:
        for c in chunk.choices:
            if c.logprobs and c.logprobs.token_logprobs:
                lps += c.logprobs.token_logprobs
                ids += c.model_extra.get("token_ids") or []
    assert len(ids) == len(lps) == 5
    for k in range(5):
        assert lps[k] == pytest.approx(log_softmax(last_logits(folder, prompt + ids[:k]))[ids[k]], abs=1e-4)


def test_chat_logprobs_streamed_equal_the_non_streamed(client):
    kwargs = dict(model=model_id(client), messages=MESSAGES, max_tokens=5, temperature=0, logprobs=True, top_logprobs=2,
                  extra_body={"ignore_eos": True})
    whole = client.chat.completions.create(**kwargs).choices[0].logprobs.content
    streamed = []
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        for c in chunk.choices:
            if c.logprobs and c.logprobs.content:
                streamed += c.logprobs.content
    assert [(e.token, e.logprob, [t.logprob for t in e.top_logprobs]) for e in streamed] == \
        [(e.token, e.logprob, [t.logprob for t in e.top_logprobs]) for e in whole]


def replay_greedy(folder, prompt, steps, presence=0.0, frequency=0.0, repetition=1.0):
    """The penalised greedy choice recomputed from raw logits: OpenAI's
    logit - frequency * count - presence * (count > 0) over generated tokens,
    then Hugging Face's repetition penalty over prompt and generated."""
    out = []
    for _ in range(steps):
        logits = last_logits(folder, prompt + out)
        seen = set(prompt) | set(out)
        for t in seen:
            if repetition != 1.0:
                logits[t] = logits[t] / repetition if logits[t] > 0 else logits[t] * repetition
        for t in set(out):
            logits[t] -= frequency * out.count(t) + presence
        out.append(max(range(len(logits)), key=lambda i: (logits[i], -i)))
    return out


@pytest.mark.parametrize("penalties", [{"presence_penalty": 1.5}, {"frequency_penalty": 2.0}, {"repetition_penalty": 1.8},
                                       {"presence_penalty": 0.5, "frequency_penalty": 0.7}])
def test_penalties_change_the_choice_as_documented(folder, client, penalties):
    prompt = expected_prompt_ids(MESSAGES)
    steps = 8
    plain = client.completions.create(model=model_id(client), prompt=prompt, max_tokens=steps, temperature=0,
                                      extra_body={"ignore_eos": True, "return_token_ids": True})
    body = {"ignore_eos": True, "return_token_ids": True}
    body.update({k: v for k, v in penalties.items() if k == "repetition_penalty"})
    r = client.completions.create(model=model_id(client), prompt=prompt, max_tokens=steps, temperature=0,
                                  presence_penalty=penalties.get("presence_penalty", 0), frequency_penalty=penalties.get("frequency_penalty", 0),
                                  extra_body=body)
    got = r.choices[0].model_extra["token_ids"]
    want = replay_greedy(folder, prompt, steps, penalties.get("presence_penalty", 0.0), penalties.get("frequency_penalty", 0.0),
                         penalties.get("repetition_penalty", 1.0))
    assert got == want
    assert got != plain.choices[0].model_extra["token_ids"], "the penalty should change this greedy continuation"


def test_chat_without_max_tokens_runs_until_the_context_or_the_limit(client):
    """OpenAI's defaults: a chat completion without max_tokens runs until the
    model stops or the context is full (vLLM: max_model_len - prompt), within
    the server's --max-tokens-limit (512 here); it used to stop after 16
    tokens. A plain completion keeps OpenAI's 16."""
    model = client.models.list().data[0]
    r = client.chat.completions.create(model=model.id, messages=MESSAGES, temperature=0, extra_body={"ignore_eos": True})
    expected = min(512, model.model_extra["max_model_len"] - r.usage.prompt_tokens)
    assert expected > 16
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == expected
    c = client.completions.create(model=model.id, prompt="Once upon a time", temperature=0, extra_body={"ignore_eos": True})
    assert c.usage.completion_tokens == 16
    explicit = client.chat.completions.create(model=model.id, messages=MESSAGES, temperature=0, max_tokens=5,
                                              extra_body={"ignore_eos": True})
    assert explicit.usage.completion_tokens == 5


def test_unsupported_fields_are_refused_by_name(client):
    with pytest.raises(BadRequestError) as e:
        client.chat.completions.create(model=model_id(client), messages=MESSAGES, max_tokens=4,
                                       extra_body={"guided_decoding_backend": "outlines"})
    assert e.value.body["param"] == "guided_decoding_backend"
    with pytest.raises(BadRequestError) as e:
        client.completions.create(model=model_id(client), prompt="x", max_tokens=4, suffix="y")
    assert e.value.body["param"] == "suffix"
    with pytest.raises(BadRequestError) as e:  # the template reads no reasoning_effort
        client.chat.completions.create(model=model_id(client), messages=MESSAGES, max_tokens=4, reasoning_effort="low")
    assert e.value.body["param"] == "reasoning_effort"
    # A conversation the template refuses (roles must alternate) is a 400 with its message.
    with pytest.raises(BadRequestError) as e:
        client.chat.completions.create(model=model_id(client), messages=[{"role": "assistant", "content": "hi"}], max_tokens=4)
    assert "alternate" in e.value.body["message"]


def test_generation_config_supplies_default_sampling(folder):
    """generation_config.json's repetition_penalty applies to requests that
    do not set one (vLLM's behaviour); a request's own value wins."""
    with tempfile.TemporaryDirectory() as tmp:
        for f in folder.iterdir():
            if f.name != "generation_config.json":
                os.symlink(os.path.realpath(f), Path(tmp) / f.name)
        config = json.loads((EXPORT / "generation_config.json").read_text())
        config.update({"do_sample": False, "repetition_penalty": 1.8})
        (Path(tmp) / "generation_config.json").write_text(json.dumps(config))
        proc, port = start_server(["--model", tmp], manifest=None, profile="paged")
        try:
            c = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY)
            prompt = expected_prompt_ids(MESSAGES)
            got = c.completions.create(model=model_id(c), prompt=prompt, max_tokens=8, temperature=0,
                                       extra_body={"ignore_eos": True, "return_token_ids": True}).choices[0].model_extra["token_ids"]
            assert got == replay_greedy(Path(tmp), prompt, 8, repetition=1.8)
            plain = c.completions.create(model=model_id(c), prompt=prompt, max_tokens=8, temperature=0,
                                         extra_body={"ignore_eos": True, "return_token_ids": True, "repetition_penalty": 1.0})
            assert plain.choices[0].model_extra["token_ids"] == replay_greedy(Path(tmp), prompt, 8)
        finally:
            stop_server(proc)
