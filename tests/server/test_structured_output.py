"""Structured output through the real server and the official openai client:
every completion under a JSON schema validates against it (Python's
jsonschema), sampled at temperature 1 with many seeds; regex and grammar
extension fields; refused schemas are 400s naming the field. Runs when the
build has the xgrammar plugin (the default manifest then loads it)."""
import concurrent.futures
import json
import os
import re

import jsonschema
import openai
import pytest

from conftest import API_KEY, start_server, stop_server

pytestmark = pytest.mark.skipif(os.environ.get("SWITCHYARD_HAS_GRAMMAR") != "1",
                                reason="built without xgrammar (scripts/install-xgrammar.sh)")

MODEL = os.path.join(os.path.dirname(os.environ["SWITCHYARD_STORIES_MANIFEST"]), "../../../shared/models/stories260K.onnx")

NAME = {"type": "string", "pattern": "^[A-Z][a-z]{1,7}$"}
SCHEMAS = {
    "flat": {"type": "object", "properties": {"name": NAME, "age": {"type": "integer", "minimum": 1, "maximum": 120}},
             "required": ["name", "age"]},
    "enum": {"type": "object", "properties": {"mood": {"enum": ["happy", "sad", "sleepy"]},
                                              "pet": {"type": "string", "enum": ["cat", "dog"]}},
             "required": ["mood", "pet"]},
    "optional": {"type": "object", "properties": {"name": NAME, "nickname": NAME, "friend": NAME,
                                                  "age": {"type": "integer", "minimum": 0, "maximum": 9}},
                 "required": ["name"]},
    "nested": {"type": "object", "properties": {
        "hero": {"type": "object", "properties": {"name": NAME, "brave": {"type": "boolean"}}, "required": ["name", "brave"]},
        "place": {"type": "object", "properties": {"kind": {"enum": ["park", "forest", "house"]}}, "required": ["kind"]}},
        "required": ["hero", "place"]},
    "array": {"type": "object", "properties": {"toys": {"type": "array", "items": {"enum": ["ball", "doll", "car"]},
                                                        "minItems": 1, "maxItems": 3}},
              "required": ["toys"]},
    "numbers": {"type": "object", "properties": {"score": {"type": "number", "minimum": 0, "maximum": 10},
                                                 "count": {"type": "integer", "minimum": -5, "maximum": 5}},
                "required": ["score", "count"]},
    "pattern": {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
                                                 "date": {"type": "string", "pattern": "^20[0-9]{2}-[01][0-9]-[0-3][0-9]$"}},
                "required": ["code", "date"]},
    "array_of_objects": {"type": "object", "properties": {"kids": {"type": "array", "maxItems": 2, "items": {
        "type": "object", "properties": {"name": NAME, "age": {"type": "integer", "minimum": 1, "maximum": 12}},
        "required": ["name", "age"]}}}, "required": ["kids"]},
    "top_level_array": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "minItems": 1, "maxItems": 4},
}


@pytest.fixture(scope="module")
def server():
    proc, port = start_server(["--model", MODEL], manifest=None, profile="paged")
    yield {"proc": proc, "port": port, "base": f"http://127.0.0.1:{port}"}
    stop_server(proc)


def client(server):
    return openai.OpenAI(base_url=server["base"] + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def complete(server, seed, **kw):
    r = client(server).completions.create(model="stories260K", prompt="Once upon a time", max_tokens=400, temperature=1.0,
                                          seed=seed, **kw)
    return r.choices[0]


def test_every_output_validates_against_its_schema(server):
    jobs = [(name, seed) for name in SCHEMAS for seed in range(1, 7)]

    def run(job):
        name, seed = job
        rf = {"type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name]}}
        return name, complete(server, seed, extra_body={"response_format": rf})

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, jobs))
    texts = {}
    for name, choice in results:
        assert choice.finish_reason == "stop", (name, choice.text)
        jsonschema.validate(json.loads(choice.text), SCHEMAS[name])
        texts.setdefault(name, set()).add(choice.text)
    assert sum(len(v) for v in texts.values()) > len(SCHEMAS) * 2, "sampling should vary the outputs"


def test_chat_json_object_and_schema(server):
    c = client(server)
    r = c.chat.completions.create(model="stories260K", messages=[{"role": "user", "content": "Tell me about Lily"}],
                                  max_tokens=300, temperature=1.0, seed=7,
                                  response_format={"type": "json_schema",
                                                   "json_schema": {"name": "nested", "schema": SCHEMAS["nested"]}})
    jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMAS["nested"])
    r = c.chat.completions.create(model="stories260K", messages=[{"role": "user", "content": "Hi"}], max_tokens=40,
                                  temperature=0, response_format={"type": "json_object"})
    text = r.choices[0].message.content
    assert text.startswith("{"), text
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)


def test_json_object_with_a_schema_follows_the_schema(server):
    """llama.cpp's spelling: response_format json_object with "schema"."""
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    for seed in range(1, 4):
        c = complete(server, seed, extra_body={"response_format": {"type": "json_object", "schema": schema}})
        assert c.finish_reason == "stop", (c.finish_reason, c.text[:300])
        jsonschema.validate(json.loads(c.text), schema)


def test_strings_with_max_length_are_valid_json(server):
    """Bounded strings hold no raw control characters (strict JSON)."""
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 8}, "b": {"type": "string", "minLength": 2, "maxLength": 5}},
              "required": ["a", "b"]}
    for seed in range(1, 13):
        c = complete(server, seed, extra_body={"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}})
        jsonschema.validate(json.loads(c.text, strict=True), schema)


def test_streaming_output_validates(server):
    stream = client(server).completions.create(
        model="stories260K", prompt="Once upon a time", max_tokens=300, temperature=1.0, seed=11, stream=True,
        extra_body={"response_format": {"type": "json_schema", "json_schema": {"name": "flat", "schema": SCHEMAS["flat"]}}})
    text = "".join(chunk.choices[0].text for chunk in stream if chunk.choices)
    jsonschema.validate(json.loads(text), SCHEMAS["flat"])


def test_regex_grammar_and_vllm_spellings(server):
    r = complete(server, 5, extra_body={"regex": "(yes|no), [a-z]{2,8}\\."})
    assert re.fullmatch(r"(yes|no), [a-z]{2,8}\.", r.text), r.text
    g = 'root ::= "The " animal " is " color "."\nanimal ::= "cat" | "dog"\ncolor ::= [a-z]+'
    r = complete(server, 6, extra_body={"grammar": g})
    assert re.fullmatch(r"The (cat|dog) is [a-z]+\.", r.text), r.text
    r = complete(server, 7, extra_body={"guided_choice": ["red (dark)", "blue?"]})
    assert r.text in ("red (dark)", "blue?"), r.text


def test_refused_constraints_are_400s_naming_the_field(server):
    c = client(server)
    cases = [
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": 3}}}},
         "response_format"),
        ({"regex": "(unclosed"}, "regex"),
        ({"grammar": "root ::= nowhere"}, "grammar"),
        ({"response_format": {"type": "yaml"}}, "response_format"),
        ({"regex": "a+", "grammar": 'root ::= "a"'}, "grammar"),
    ]
    for body, param in cases:
        with pytest.raises(openai.BadRequestError) as e:
            c.completions.create(model="stories260K", prompt="Once", max_tokens=5, extra_body=body)
        assert e.value.status_code == 400
        assert e.value.body["param"] == param, (body, e.value.body)
    # The server serves on.
    r = complete(server, 1, extra_body={"response_format": {"type": "json_schema", "json_schema": {"name": "enum", "schema": SCHEMAS["enum"]}}})
    jsonschema.validate(json.loads(r.text), SCHEMAS["enum"])


def test_metrics_count_constrained_requests(server):
    import urllib.request
    with urllib.request.urlopen(server["base"] + "/metrics") as r:
        text = r.read().decode()
    m = re.search(r"switchyard:structured_output_requests_total (\d+)", text)
    assert m and int(m.group(1)) > 0, text
    assert "switchyard:structured_output_mask_seconds_total" in text
