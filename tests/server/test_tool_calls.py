"""Tool calls through the official openai client, on the trained model
(SmolLM2-135M-Instruct's GGUF) with its own template and with the real
templates of each tool-calling family (scripts/fetch-chat-templates.sh).

An agent loop per case: tools offered, a call comes back parsed into
tool_calls (arguments valid against the tool's schema), the result is fed
back as a tool message, and the model answers. With tool_choice
"required" or a named function the grammar makes the model call; with
"auto" the model's own text is read by the family's parser, and the test
makes the model write that family's syntax with a regex constraint (a
135M model does not know seven conventions), so the server's reading of
each family is what is checked, streamed and not."""
import json
import re
import subprocess
from pathlib import Path

import jsonschema
import pytest
from openai import BadRequestError, OpenAI

from conftest import API_KEY, start_server, stop_server, trained_model

ROOT = Path(__file__).resolve().parents[2]
GGUF = trained_model(needs_grammar=True)  # tool_choice and the family checks need the grammar

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "Get the local time in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


def escape(text):
    return "".join("\\" + c if c in "\\^$.|?*+()[]{}/" else c for c in text)


# family -> (real template, what a model of that family writes to call get_weather(city="Paris"))
FAMILIES = {
    "hermes": ("Qwen-Qwen2.5-7B-Instruct", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
    "hermes3": ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
    "llama3_json": ("meta-llama-Llama-3.1-8B-Instruct", '{"name": "get_weather", "parameters": {"city": "Paris"}}'),
    "mistral": ("mistralai-Mistral-Nemo-Instruct-2407", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]'),
    "deepseek_v3": ("deepseek-ai-DeepSeek-V3.1",
                    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    "granite": ("ibm-granite-granite-3.3-2B-Instruct", '<tool_call>[{"name": "get_weather", "arguments": {"city": "Paris"}}]'),
    "command_r": ("CohereForAI-c4ai-command-r7b-12-2024-tool_use",
                  '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}]<|END_ACTION|>'),
    "gpt_oss": ("openai-gpt-oss-120b", "<|channel|>analysis<|message|>The user asks for the weather.<|end|><|start|>assistant"
                "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>"),
    "qwen3_thinking": ("Qwen-Qwen3-0.6B", "<think>\nI should look it up.\n</think>\n\n"
                       '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
}
REASONING = {"gpt_oss": "The user asks for the weather.", "qwen3_thinking": "\nI should look it up.\n"}


def templates():
    out = subprocess.run([str(ROOT / "scripts/fetch-chat-templates.sh")], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def serve(extra):
    # The prefix cache: each case asks the same long prompt twice (whole, streamed).
    proc, port = start_server(["--model", GGUF, *extra], manifest=None, profile="prefix")
    return proc, OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY)


def check_calls(calls, names=("get_weather",)):
    assert calls, "no tool_calls"
    for c in calls:
        assert c.type == "function" and (c.id.startswith("call_") or re.fullmatch("[A-Za-z0-9]{9}", c.id))  # Mistral: nine
        assert c.function.name in names
        jsonschema.validate(json.loads(c.function.arguments), SCHEMAS[c.function.name])


def streamed(client, **kw):
    """The streamed answer put together as the openai client's users do."""
    content, reasoning, calls, finish = "", "", {}, None
    streamed.argument_pieces = 0
    for chunk in client.chat.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            d = ch.delta
            content += d.content or ""
            reasoning += getattr(d, "reasoning_content", None) or ""
            for tc in d.tool_calls or []:
                c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                c["id"] = tc.id or c["id"]
                c["name"] += (tc.function.name or "") if tc.function else ""
                c["arguments"] += (tc.function.arguments or "") if tc.function else ""
                streamed.argument_pieces += bool(tc.function and tc.function.arguments)
            finish = ch.finish_reason or finish
    return content, reasoning, [calls[k] for k in sorted(calls)], finish


def result_messages(message, content='{"temperature": 21, "unit": "celsius"}'):
    """The assistant's calls and a result for each, as an agent sends them back."""
    out = [{"role": "assistant", "content": message.content,
            "tool_calls": [{"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
                           for c in message.tool_calls]}]
    out += [{"role": "tool", "tool_call_id": c.id, "content": content} for c in message.tool_calls]
    return out


@pytest.fixture(scope="module")
def smollm2(smollm2_prefix):
    return smollm2_prefix


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_agent_loop_with_forced_calls(smollm2, choice):
    kw = dict(model=smollm2.models.list().data[0].id, messages=QUESTION, tools=TOOLS, tool_choice=choice, temperature=0, max_tokens=64)
    r = smollm2.chat.completions.create(**kw)
    m = r.choices[0].message
    check_calls(m.tool_calls, names=[t["function"]["name"] for t in TOOLS])
    assert r.choices[0].finish_reason == ("tool_calls" if choice == "required" else "stop")
    # Streamed: the same calls, built from deltas.
    content, _, calls, finish = streamed(smollm2, **kw)
    assert [(c["name"], c["arguments"]) for c in calls] == [(c.function.name, c.function.arguments) for c in m.tool_calls]
    assert all(c["id"] for c in calls) and finish == r.choices[0].finish_reason
    # The result goes back; with tool_choice auto the model answers in text.
    follow = smollm2.chat.completions.create(model=kw["model"], messages=QUESTION + result_messages(m), tools=TOOLS, tool_choice="auto",
                                             temperature=0, max_tokens=24)
    assert follow.choices[0].message.content and follow.choices[0].finish_reason in ("stop", "length")


def test_parallel_tool_calls_false_allows_one_call(smollm2):
    r = smollm2.chat.completions.create(model=smollm2.models.list().data[0].id, messages=QUESTION, tools=TOOLS, tool_choice="required",
                                        parallel_tool_calls=False, temperature=0, max_tokens=64)
    assert len(r.choices[0].message.tool_calls) == 1


def test_tool_choice_none_and_no_tools_leave_the_text_alone(smollm2):
    model = smollm2.models.list().data[0].id
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    for kw in ({"tools": TOOLS, "tool_choice": "none"}, {}):
        r = smollm2.chat.completions.create(model=model, messages=QUESTION, temperature=0, max_tokens=64,
                                            extra_body={"structured_outputs": {"regex": escape(text)}}, **kw)
        assert r.choices[0].message.content == text and not r.choices[0].message.tool_calls


def test_unknown_tool_choice_names_are_refused(smollm2):
    import openai
    with pytest.raises(openai.BadRequestError) as e:
        smollm2.chat.completions.create(model=smollm2.models.list().data[0].id, messages=QUESTION, tools=TOOLS,
                                        tool_choice={"type": "function", "function": {"name": "nope"}})
    assert e.value.body["param"] == "tool_choice"


def family_loop(client, family, template=None):
    """The agent loop in one family's syntax; template: sent with each
    request (vLLM's chat_template field) rather than the server's own."""
    _, written = FAMILIES[family]
    model = client.models.list().data[0].id
    own = {"chat_template": template} if template else {}
    kw = dict(model=model, messages=QUESTION, tools=TOOLS, temperature=0, max_tokens=160,
              extra_body={"structured_outputs": {"regex": escape(written)}, **own})
    r = client.chat.completions.create(**kw)
    m = r.choices[0].message
    check_calls(m.tool_calls)
    assert json.loads(m.tool_calls[0].function.arguments) == {"city": "Paris"}
    assert r.choices[0].finish_reason == "tool_calls"
    assert not (m.content or "").strip(), m.content
    assert getattr(m, "reasoning_content", None) == REASONING.get(family)
    content, reasoning, calls, finish = streamed(client, **kw)
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert calls[0]["arguments"] == m.tool_calls[0].function.arguments  # the pieces add up to the whole answer's
    assert streamed.argument_pieces > 1  # the arguments stream as they are written
    assert finish == "tool_calls" and not content.strip() and reasoning == (REASONING.get(family) or "")
    # The template renders the call and its result in the next turn.
    follow = client.chat.completions.create(model=model, messages=QUESTION + result_messages(m), tools=TOOLS, temperature=0, max_tokens=2,
                                            extra_body=own)
    assert follow.choices[0].finish_reason in ("stop", "length")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_template_agent_loop(smollm2, family):
    """One server, each family's real template sent with the requests."""
    family_loop(smollm2, family, (templates() / f"{FAMILIES[family][0]}.jinja").read_text())


def test_family_template_as_the_servers_own():
    """--chat-template: the template file with the model's special tokens,
    its family chosen at start (Mistral's also wants nine-letter call ids)."""
    proc, client = serve(["--chat-template", str(templates() / f"{FAMILIES['mistral'][0]}.jinja")])
    try:
        family_loop(client, "mistral")
    finally:
        stop_server(proc)


def test_responses_api_agent_loop(smollm2):
    """/v1/responses through the openai client: a forced function call as a
    function_call item, its output sent back as a function_call_output
    item, then a text answer; streamed, the typed events build the same
    call and end in response.completed."""
    client = smollm2
    model = client.models.list().data[0].id
    tools = [{"type": "function", "name": t["function"]["name"], "description": t["function"]["description"],
              "parameters": t["function"]["parameters"]} for t in TOOLS]
    first = client.responses.create(model=model, input="What is the weather in Paris?", tools=tools, tool_choice="required",
                                    max_output_tokens=80, temperature=0)
    calls = [o for o in first.output if o.type == "function_call"]
    assert first.status == "completed" and calls, first.output
    for c in calls:
        assert c.call_id.startswith("call_") and c.name in SCHEMAS
        jsonschema.validate(json.loads(c.arguments), SCHEMAS[c.name])
    items = [{"role": "user", "content": "What is the weather in Paris?"}]
    items += [{"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments} for c in calls]
    items += [{"type": "function_call_output", "call_id": c.call_id, "output": '{"temperature": 21}'} for c in calls]
    answer = client.responses.create(model=model, instructions="Answer in one sentence.", input=items, tools=tools, max_output_tokens=40,
                                     temperature=0)
    assert answer.output_text and answer.usage.input_tokens > first.usage.input_tokens
    assert answer.usage.total_tokens == answer.usage.input_tokens + answer.usage.output_tokens
    events, args = [], ""
    for ev in client.responses.create(model=model, input="What is the weather in Paris?", tools=tools, tool_choice="required",
                                      max_output_tokens=80, temperature=0, stream=True):
        events.append(ev.type)
        if ev.type == "response.function_call_arguments.delta":
            args += ev.delta
        if ev.type == "response.completed":
            final = ev.response
    assert events[:2] == ["response.created", "response.in_progress"] and events[-1] == "response.completed"
    assert [o.arguments for o in final.output if o.type == "function_call"] == [c.arguments for c in calls]
    assert args == "".join(c.arguments for c in calls)
    # A bounded answer is "incomplete", as OpenAI says it.
    short = client.responses.create(model=model, input="Tell me a long story.", max_output_tokens=5, temperature=0)
    assert short.status == "incomplete" and short.incomplete_details.reason == "max_output_tokens"


def test_strict_functions_keep_auto_mode_calls_valid(smollm2):
    """tool_choice auto with "strict": true: the text stays free, and once the
    model writes the family's call marker the grammar holds the call to one
    of the tools and its arguments to that tool's schema (a
    "triggered_tags" constraint). A few-shot conversation gets SmolLM2 to
    call at temperature 1; without strict, some of those calls were seen to
    break the schema ("unit": "metric_c")."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
              "required": ["city", "unit"], "additionalProperties": False}
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather", "parameters": schema, "strict": True}}]
    shots = []
    for city in ("London", "Rome", "Oslo"):
        call = {"id": "c" + city, "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": city, "unit": "celsius"})}}
        shots += [{"role": "user", "content": f"What is the weather in {city}?"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                  {"role": "tool", "tool_call_id": "c" + city, "content": '{"temperature": 20}'},
                  {"role": "assistant", "content": f"It is 20 degrees in {city}."}]
    model = smollm2.models.list().data[0].id
    calls = 0
    for seed in range(16):
        r = smollm2.chat.completions.create(model=model, messages=shots + [{"role": "user", "content": "What is the weather in Paris?"}],
                                            tools=tools, temperature=1.0, seed=seed, max_tokens=60)
        m = r.choices[0].message
        for c in m.tool_calls or []:
            assert c.function.name == "get_weather"
            jsonschema.validate(json.loads(c.function.arguments), schema)
            calls += 1
        assert "<tool_call>" not in (m.content or ""), m.content  # every call that started was completed and read
    assert calls >= 1
    with pytest.raises(BadRequestError) as e:
        smollm2.chat.completions.create(model=model, messages=QUESTION, tools=tools, response_format={"type": "json_object"})
    assert e.value.body["param"] == "tools"
