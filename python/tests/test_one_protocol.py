"""One client test file for both doors: `switchyard serve` and the Ray Serve
deployment answer through the same protocol code, so every request here
must get the same answer from both (ids and timestamps aside), and every
check runs against each door."""
import json
import urllib.error
import urllib.request

import pytest

pytest.importorskip("ray")
openai = pytest.importorskip("openai")

from conftest import API_KEY, has_grammar  # noqa: E402

MODEL = "stories260K"


@pytest.fixture(params=["serve", "ray"])
def door(request, direct, cluster):
    """(openai client, base URL ending in /v1) of one door."""
    client = direct if request.param == "serve" else cluster["prefix"]
    return client, str(client.base_url).rstrip("/")


def post(base: str, path: str, body, key: str = API_KEY):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    data = (body if isinstance(body, str) else json.dumps(body)).encode()
    req = urllib.request.Request(base + path, data=data, headers={**headers, "Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def merged_stream(text: str):
    """What a stream says, whatever its chunking (which follows timing):
    per choice the text, content, tool calls and logprob tokens joined, the
    finish reason; the usage; whether it ended with [DONE]."""
    choices, usage, done = {}, None, False
    for event in text.split("\n\n"):
        if not event.startswith("data: "):
            continue
        payload = event[len("data: "):]
        if payload == "[DONE]":
            done = True
            continue
        j = json.loads(payload)
        usage = j.get("usage") or usage
        for c in j.get("choices", []):
            m = choices.setdefault(c["index"], {"text": "", "content": "", "calls": {}, "tokens": [], "finish": None})
            m["text"] += c.get("text") or ""
            delta = c.get("delta") or {}
            m["content"] += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                f = m["calls"].setdefault(call["index"], {"name": "", "arguments": ""})
                f["name"] += (call.get("function") or {}).get("name") or ""
                f["arguments"] += (call.get("function") or {}).get("arguments") or ""
            lp = c.get("logprobs") or {}
            m["tokens"] += lp.get("tokens") or [x["token"] for x in lp.get("content") or []]
            m["finish"] = c.get("finish_reason") or m["finish"]
    return {"choices": choices, "usage": usage, "done": done}


def without_cache_counts(j):
    """cached_tokens depends on what the serving replica's prefix cache
    held (two Ray replicas, one serve): not part of the answer."""
    if isinstance(j, dict):
        return {k: without_cache_counts(v) for k, v in j.items() if k != "cached_tokens"}
    if isinstance(j, list):
        return [without_cache_counts(v) for v in j]
    return j


def merged_response_events(text: str):
    """A /v1/responses stream: its event types in order (deltas merged) and
    the final response."""
    kinds, final = [], None
    for event in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in event.split("\n") if ": " in line)
        if "data" not in lines:
            continue
        j = json.loads(lines["data"])
        assert j["type"] == lines.get("event"), event
        if not (kinds and kinds[-1] == j["type"] and j["type"].endswith(".delta")):
            kinds.append(j["type"])
        if j["type"] in ("response.completed", "response.incomplete"):
            final = comparable(json.dumps(j["response"]))
    return {"events": kinds, "response": final}


def comparable(text: str):
    """A response without what differs between any two answers: ids,
    timestamps, where it ran, and how a stream was cut into chunks."""
    if text.startswith("data: "):
        return merged_stream(text)
    if text.startswith("event: "):
        return merged_response_events(text)
    j = json.loads(text)
    for key in ("id", "created", "created_at", "switchyard", "system_fingerprint"):
        if isinstance(j, dict):
            j.pop(key, None)
    for item in j.get("output", []) if isinstance(j, dict) else []:  # /v1/responses
        item.pop("id", None)
        item.pop("call_id", None)
    for choice in j.get("choices", []) if isinstance(j, dict) else []:
        for call in (choice.get("message") or choice.get("delta") or {}).get("tool_calls") or []:
            call.pop("id", None)  # random per call
    return j


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}}}
WEATHER_FLAT = {"type": "function", **WEATHER["function"]}  # the Responses API's shape

# Requests whose answers are deterministic (greedy or seeded): each door
# must give the same body.
SAME = [
    ("/completions", {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "logprobs": 3}),
    ("/completions", {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 0, "echo": True, "logprobs": 1}),
    ("/completions", {"model": MODEL, "prompt": ["Lily went", "Tom saw"], "max_tokens": 8, "n": 2, "seed": 7, "temperature": 0.8}),
    ("/completions", {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0, "stop": [" the"],
                      "logit_bias": {"300": -100}}),
    ("/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "Tell me about a dog."}], "max_tokens": 24,
                           "temperature": 0, "logprobs": True, "top_logprobs": 2}),
    ("/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "A name"}], "max_tokens": 40, "temperature": 0,
                           "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {
                               "type": "object", "properties": {"name": {"type": "string", "maxLength": 8}},
                               "required": ["name"]}}}}),
    ("/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 60,
                           "temperature": 0, "tools": [WEATHER], "tool_choice": "required"}),
    ("/completions", {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 10, "temperature": 0, "stream": True,
                      "stream_options": {"include_usage": True}, "logprobs": 1}),
    ("/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "Weather in Oslo?"}], "max_tokens": 60,
                           "temperature": 0, "tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                           "stream": True}),
    ("/responses", {"model": MODEL, "instructions": "Tell a story.", "input": "Lily found a ball.", "max_output_tokens": 20,
                    "temperature": 0}),
    ("/responses", {"model": MODEL, "input": [{"role": "user", "content": "Weather in Rome?"}], "max_output_tokens": 60,
                    "temperature": 0, "tools": [WEATHER_FLAT], "tool_choice": "required", "stream": True}),
    ("/embeddings", {"model": MODEL, "input": ["Once upon a time", "Lily found a ball."], "encoding_format": "base64"}),
    ("/embeddings", {"model": MODEL, "input": [[1, 403, 407], [1, 9]]}),
]


@pytest.mark.parametrize("path,body", SAME, ids=[f"{p}#{i}" for i, (p, _) in enumerate(SAME)])
def test_both_doors_give_the_same_answer(direct, cluster, path, body):
    if ("response_format" in body or "tool_choice" in body) and not has_grammar():
        pytest.skip("structured output needs the grammar plugin (a build with xgrammar)")
    answers = {}
    for name, client in (("serve", direct), ("ray", cluster["prefix"])):
        answers[name] = post(str(client.base_url).rstrip("/"), path, body)
    assert answers["serve"][0] == 200, answers["serve"][1][:500]
    assert answers["ray"][0] == answers["serve"][0], answers["ray"][1][:500]
    assert without_cache_counts(comparable(answers["ray"][1])) == without_cache_counts(comparable(answers["serve"][1]))


# Requests each door refuses the same way: status, message, param.
REFUSED = [
    ("/completions", {"model": "gpt-4o", "prompt": "x"}, 404, "gpt-4o"),
    ("/completions", {"model": MODEL, "prompt": "x", "max_tokens": 100000}, 400, "max_tokens"),
    ("/completions", {"model": MODEL, "prompt": "x", "best_of": 3}, 400, "best_of"),
    ("/chat/completions", {"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, 400, "wizard"),
    ("/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "n": 99}, 400, "n"),
    ("/completions", "{not json", 400, "JSON"),
    ("/responses", {"model": MODEL, "input": "x", "previous_response_id": "resp_1"}, 400, "previous_response_id"),
    ("/responses", {"model": MODEL, "input": "x", "max_output_tokens": 100000}, 400, "max_output_tokens"),
    ("/embeddings", {"model": MODEL, "input": "x", "dimensions": 3}, 400, "dimensions"),
]


@pytest.mark.parametrize("path,body,status,names", REFUSED, ids=[f"{s}-{n}" for _, _, s, n in REFUSED])
def test_both_doors_refuse_the_same_way(direct, cluster, path, body, status, names):
    got = {name: post(str(c.base_url).rstrip("/"), path, body) for name, c in (("serve", direct), ("ray", cluster["prefix"]))}
    assert got["serve"][0] == status, got["serve"]
    assert names in got["serve"][1]
    assert got["ray"][0] == status and json.loads(got["ray"][1]) == json.loads(got["serve"][1]), got["ray"]


def test_the_api_key_guards_every_door(door):
    client, base = door
    assert post(base, "/completions", {"model": MODEL, "prompt": "x"}, key=None)[0] == 401
    status, text = post(base, "/completions", {"model": MODEL, "prompt": "x"}, key="wrong")
    assert status == 401 and "Incorrect API key" in text
    bad = openai.OpenAI(base_url=base, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def test_unseeded_sampling_differs_between_requests(door):
    client, _ = door
    texts = {client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=24, temperature=1.0).choices[0].text
             for _ in range(4)}
    assert len(texts) > 1, texts


def test_models_and_tokenizer_endpoints(door, direct):
    client, base = door
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")
    root = base[: -len("/v1")]
    status, text = post(root, "/tokenize", {"prompt": "Once upon a time"})
    assert status == 200
    tokens = json.loads(text)["tokens"]
    assert json.loads(post(root, "/detokenize", {"tokens": tokens})[1])["prompt"].endswith("Once upon a time")
    serve_root = str(direct.base_url).rstrip("/")[: -len("/v1")]
    assert json.loads(post(serve_root, "/tokenize", {"prompt": "Once upon a time"})[1])["tokens"] == tokens


def test_a_stream_carries_what_the_whole_answer_says(door):
    client, _ = door
    kw = dict(model=MODEL, prompt="Lily and Tom", max_tokens=20, temperature=0, logprobs=2)
    whole = client.completions.create(**kw)
    chunks = list(client.completions.create(stream=True, **kw))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    streamed = [lp for c in chunks if c.choices and c.choices[0].logprobs for lp in c.choices[0].logprobs.tokens]
    assert streamed == whole.choices[0].logprobs.tokens


def test_echo_offsets_point_into_the_echoed_text(door):
    """BOS adds nothing to the text, and the first piece's dummy-prefix
    space is not in the prompt as given: offsets count what the text has."""
    client, _ = door
    r = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=6, temperature=0, echo=True, logprobs=1)
    c = r.choices[0]
    tokens, offsets = c.logprobs.tokens, c.logprobs.text_offset
    assert c.text.startswith("Once upon a time") and offsets[:2] == [0, 0], (tokens, offsets)
    for t, at in list(zip(tokens, offsets))[2:]:
        assert c.text[at:at + len(t)] == t, (t, at, c.text)
