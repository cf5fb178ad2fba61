"""Answers that used to be quietly wrong, each pinned (stories260K through
the paged profile): the developer role is the system prompt and an unknown
role is refused; usage counts a prompt once however many choices it has;
stream_options.include_usage false sends no usage; a stream ends with the
text the whole answer has (a held-back tail that was never a stop string);
invalid UTF-8 in a request is a 400 with a JSON body; response_format
/health shows draining;
/v1/models/{id}; CORS; vLLM's metric names with the model_name label."""
import json
import signal
import time
import urllib.request

import pytest
import requests
from openai import BadRequestError, OpenAI

from conftest import API_KEY, start_server, stop_server

STORY = "Once upon a time"
HEADERS = {"Authorization": f"Bearer {API_KEY}"}


def client(server):
    return OpenAI(base_url=server["base"] + "/v1", api_key=API_KEY)


def test_developer_role_is_the_system_prompt_and_unknown_roles_are_refused(server):
    c = client(server)
    body = {"model": "stories260K", "max_tokens": 6, "temperature": 0}
    dev = c.chat.completions.create(messages=[{"role": "developer", "content": "Be brief."}, {"role": "user", "content": STORY}], **body,
                                    extra_body={"return_token_ids": True})
    sys = c.chat.completions.create(messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": STORY}], **body,
                                    extra_body={"return_token_ids": True})
    assert dev.choices[0].model_extra["prompt_token_ids"] == sys.choices[0].model_extra["prompt_token_ids"]
    none = c.chat.completions.create(messages=[{"role": "user", "content": STORY}], **body, extra_body={"return_token_ids": True})
    assert dev.choices[0].model_extra["prompt_token_ids"] != none.choices[0].model_extra["prompt_token_ids"]  # not dropped
    with pytest.raises(BadRequestError) as e:
        c.chat.completions.create(messages=[{"role": "narrator", "content": STORY}], **body)
    assert e.value.body["param"] == "messages" and "narrator" in e.value.body["message"]


def test_usage_counts_each_prompt_once(server):
    r = client(server).completions.create(model="stories260K", prompt=STORY, max_tokens=3, n=3, temperature=0.8, seed=1)
    assert r.usage.prompt_tokens == 5 and r.usage.completion_tokens == 9 and r.usage.total_tokens == 14
    dog = client(server).completions.create(model="stories260K", prompt="The dog", max_tokens=1).usage.prompt_tokens
    r = client(server).completions.create(model="stories260K", prompt=[STORY, "The dog"], max_tokens=2, n=2, temperature=0.8, seed=1)
    assert r.usage.prompt_tokens == 5 + dog and r.usage.completion_tokens == 8


def test_a_stream_ends_with_the_whole_text(server):
    c = client(server)
    whole = c.completions.create(model="stories260K", prompt=STORY, max_tokens=12, temperature=0).choices[0].text
    # A stop string starting with the text's last character (and never
    # completing) holds that character back until the end.
    stop = whole[-1] + "\x01"
    again = c.completions.create(model="stories260K", prompt=STORY, max_tokens=12, temperature=0, stop=[stop]).choices[0].text
    streamed = "".join(ch.choices[0].text for ch in c.completions.create(model="stories260K", prompt=STORY, max_tokens=12, temperature=0,
                                                                          stop=[stop], stream=True) if ch.choices)
    assert again == whole and streamed == whole


def test_invalid_utf8_is_a_400_with_a_json_body(server):
    for raw in (b'{"prompt": "hi \xff there", "max_tokens": 2}', b'{"messages": [{"role": "user", "content": "\xc3"}]}'):
        r = requests.post(server["base"] + "/v1/completions", data=raw, headers={**HEADERS, "Content-Type": "application/json"}, timeout=30)
        assert r.status_code == 400 and "UTF-8" in r.json()["error"]["message"]


def test_models_by_id_cors_and_vllm_metrics(server):
    r = requests.get(server["base"] + "/v1/models/stories260K", headers=HEADERS, timeout=30)
    assert r.status_code == 200 and r.json()["id"] == "stories260K"
    r = requests.get(server["base"] + "/v1/models/nope", headers=HEADERS, timeout=30)
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    pre = requests.options(server["base"] + "/v1/chat/completions", timeout=30,
                           headers={"Origin": "http://example.com", "Access-Control-Request-Method": "POST",
                                    "Access-Control-Request-Headers": "authorization,content-type"})
    assert pre.status_code == 204 and pre.headers["Access-Control-Allow-Origin"] == "*"
    assert "authorization" in pre.headers["Access-Control-Allow-Headers"]
    r = requests.get(server["base"] + "/v1/models", headers={**HEADERS, "Origin": "http://example.com"}, timeout=30)
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    client(server).completions.create(model="stories260K", prompt=STORY, max_tokens=3)
    text = requests.get(server["base"] + "/metrics", timeout=30).text
    for name in ("vllm:num_requests_running{", "vllm:time_to_first_token_seconds_bucket{", "vllm:e2e_request_latency_seconds_count{",
                 "vllm:request_queue_time_seconds_sum{", "vllm:request_prefill_time_seconds_bucket{", "vllm:request_decode_time_seconds_bucket{",
                 "vllm:generation_tokens_total{", "vllm:request_success_total{"):
        assert name + 'model_name="stories260K"' in text, name


def test_health_shows_draining():
    proc, port = start_server(["--shutdown-timeout", "20"])
    base = f"http://127.0.0.1:{port}"
    c = OpenAI(base_url=base + "/v1", api_key=API_KEY)
    stream = c.completions.create(model="stories260K", prompt=STORY, max_tokens=400, temperature=0, stream=True,
                                  extra_body={"ignore_eos": True})
    next(iter(stream))
    proc.send_signal(signal.SIGTERM)
    deadline = time.time() + 10
    status = None
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(base + "/health", timeout=1) as r:
                status = r.status
        except urllib.error.HTTPError as e:
            status = e.code
            assert json.loads(e.read()) == {"status": "draining"}
            break
        time.sleep(0.05)
    assert status == 503
    for _ in stream:
        pass
    stop_server(proc)
