"""Chat templates in C++ against Python's Jinja2 set up as transformers'
apply_chat_template sets it up (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loop controls, its tojson, raise_exception, strftime_now and
the {% generation %} block). Six templates in the styles of the model
families (ChatML with tools, Llama-3, Llama-2 [INST], Mistral with tool
calls, Gemma, Phi-3) and one that exercises the Jinja features templates
use, each on a fixed set of conversations and 1000 random ones: the prompt
text is byte-identical, and where Python raises, the engine refuses too."""
import json
import os
import random
import subprocess
import tempfile
from datetime import datetime
from pathlib import Path

import jinja2
import jinja2.ext
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

CLI = os.environ["SWITCHYARD_CLI"]
TEMPLATES = Path(__file__).parent / "templates"
NAMES = ["chatml_tools", "llama3", "llama2", "mistral_tools", "gemma", "phi3", "features"]
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


class Generation(jinja2.ext.Extension):
    """transformers' AssistantTracker without the tracking: the block renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def reference(template, request):
    """What apply_chat_template renders: special tokens, then messages, tools,
    documents, add_generation_prompt and the extra keyword arguments."""
    context = dict(SPECIAL)
    context.update(messages=request["messages"], tools=request.get("tools"), documents=request.get("documents"),
                   add_generation_prompt=request.get("add_generation_prompt", True))
    context.update(request.get("chat_template_kwargs", {}))
    try:
        return {"text": template.render(**context)}
    except Exception as e:  # noqa: BLE001 - any refusal counts; the engine must refuse too
        return {"error": f"{type(e).__name__}: {e}"}


def engine(name, requests):
    with tempfile.TemporaryDirectory() as tmp:
        batch = Path(tmp) / "batch.json"
        # Special tokens travel as keyword arguments, as transformers passes them.
        batch.write_text(json.dumps([dict(r, chat_template_kwargs={**SPECIAL, **r.get("chat_template_kwargs", {})}) for r in requests]))
        out = subprocess.run([CLI, "chat-template", "--template", str(TEMPLATES / f"{name}.jinja"), "--batch", str(batch)],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        lines = [json.loads(line) for line in out.stdout.splitlines()]
        return [{"text": r["rendered"]} if "rendered" in r else r for r in lines]


# ----------------------------------------------------------------- inputs

TEXTS = ["Hi there, how are you?", "The weather?", "Be brief.", "  padded with spaces  ", "line one\nline two\n\nline four",
         "quotes ' and \" and \\ backslash", "braces {{ not a tag }} {% nor this %}", "Über straße — naïve café",
         "東京は日本の首都です。", "emoji 😀🎉", "", "tab\there", "trailing newline\n", "e" * 40, "a, b, c, d",
         "What's 2 + 2?", "<|im_end|> in text", "ends with question?", "Thanks!", "1e-9 3.14 -42"]
ROLES = ["user", "assistant", "system", "tool"]


def random_value(rng, depth=0):
    kind = rng.randrange(9 if depth < 2 else 6)
    if kind == 0:
        return rng.randrange(-1000, 1000)
    if kind == 1:
        return rng.choice([0.5, -2.25, 1e-7, 3.0, 1e16, 123.456, 0.1])
    if kind == 2:
        return rng.choice(TEXTS)
    if kind == 3:
        return rng.choice([True, False])
    if kind == 4:
        return None
    if kind == 5:
        return rng.choice(["celsius", "Paris", "ä"])
    if kind == 6:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    return {rng.choice(["a", "unit", "z", "nested", "b_c"]): random_value(rng, depth + 1) for _ in range(rng.randrange(3))}


def random_call(rng):
    ident = "".join(rng.choice("abcdefghijk0123456789") for _ in range(rng.choice([9, 9, 9, 8])))
    args = {k: random_value(rng) for k in rng.sample(["location", "unit", "count", "options", "flag", "zeta"], rng.randrange(1, 4))}
    return {"id": ident, "type": "function", "function": {"name": rng.choice(["get_weather", "search", "add"]), "arguments": args}}


def random_tools(rng):
    tools = []
    for name in rng.sample(["get_weather", "search", "add"], rng.randrange(1, 3)):
        tools.append({"type": "function", "function": {
            "name": name, "description": rng.choice(TEXTS),
            "parameters": {"type": "object", "properties": {"location": {"type": "string", "description": "a city"},
                                                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                           "required": ["location"]}}})
    return tools


def random_request(rng):
    messages = []
    alternate = rng.random() < 0.6  # most conversations are well formed; the rest test refusals
    if rng.random() < 0.4:
        messages.append({"role": "system", "content": rng.choice(TEXTS)})
    for i in range(rng.randrange(1, 7)):
        role = ("user" if i % 2 == 0 else "assistant") if alternate else rng.choice(ROLES)
        msg = {"role": role, "content": rng.choice(TEXTS)}
        if role == "assistant" and rng.random() < 0.25:
            msg["tool_calls"] = [random_call(rng) for _ in range(rng.choice([1, 1, 2]))]
            if rng.random() < 0.5:
                msg["content"] = None if rng.random() < 0.5 else ""
        if role == "tool":
            msg["tool_call_id"] = "".join(rng.choice("abc123") for _ in range(rng.choice([9, 9, 4])))
            if rng.random() < 0.3:
                msg["content"] = {"result": random_value(rng)}
        if role == "user" and rng.random() < 0.08:
            msg["content"] = [{"type": "text", "text": rng.choice(TEXTS)}, {"type": "image"}, {"type": "text", "text": "more"}]
        messages.append(msg)
    request = {"messages": messages, "add_generation_prompt": rng.random() < 0.7}
    if rng.random() < 0.3:
        request["tools"] = random_tools(rng)
    kwargs = {}
    if rng.random() < 0.2:
        kwargs["date_string"] = "01 Jan 2025"
    if rng.random() < 0.1:
        kwargs["tools_in_user_message"] = False
    if kwargs:
        request["chat_template_kwargs"] = kwargs
    return request


FIXED = [
    {"messages": [{"role": "user", "content": "Hello"}]},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there, how are you?"},
                  {"role": "assistant", "content": "Fine!"}, {"role": "user", "content": "The weather?"}]},
    {"messages": [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "abc123def", "type": "function",
                       "function": {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius", "days": 3, "ratio": 0.5}}}]},
                  {"role": "tool", "tool_call_id": "abc123def", "content": "22 degrees"},
                  {"role": "user", "content": "Thanks!"}],
     "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                                                 "parameters": {"type": "object", "properties": {"location": {"type": "string"}}}}}]},
    {"messages": [{"role": "user", "content": "Über straße 東京 😀"}, {"role": "assistant", "content": "  spaced  "}],
     "add_generation_prompt": False},
    {"messages": []},
]


def cases(seed):
    rng = random.Random(seed)
    return FIXED + [random_request(rng) for _ in range(1000)]


@pytest.mark.parametrize("name", NAMES)
def test_template_matches_jinja2(name):
    template = environment().from_string((TEMPLATES / f"{name}.jinja").read_text())
    requests = cases(seed=NAMES.index(name) + 1)
    want = [reference(template, r) for r in requests]
    got = engine(name, requests)
    assert len(got) == len(requests)
    rendered = refused = 0
    for i, (w, g) in enumerate(zip(want, got)):
        where = f"{name} case {i}: {json.dumps(requests[i], ensure_ascii=False)[:400]}"
        if "text" in w:
            assert g == w, where + f"\nengine: {g}\njinja2: {w}"
            rendered += 1
        else:
            assert "error" in g, where + f"\njinja2 refused ({w['error']}) but the engine rendered:\n{g.get('text')}"
            if w["error"].startswith("TemplateError: "):  # the template's own raise_exception: same message
                assert w["error"][len("TemplateError: "):] in g["error"], where + f"\n{g['error']}"
            refused += 1
    print(f"{name}: {rendered} rendered identically, {refused} refused by both")
    assert rendered >= 100, f"{name}: too few conversations rendered ({rendered}) for the comparison to mean much"


def test_model_folder_template_and_special_tokens():
    """A model folder's tokenizer_config.json (a named-template list, AddedToken
    special tokens) and chat_template.jinja, which wins when both exist."""
    chatml = (TEMPLATES / "chatml_tools.jinja").read_text()
    llama2 = (TEMPLATES / "llama2.jinja").read_text()
    messages = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}, {"role": "user", "content": "Bye"}]
    env = environment()
    with tempfile.TemporaryDirectory() as tmp:
        config = {"bos_token": {"content": "<BOS>", "lstrip": False}, "eos_token": "<EOS>",
                  "chat_template": [{"name": "default", "template": llama2}, {"name": "tool_use", "template": chatml}]}
        (Path(tmp) / "tokenizer_config.json").write_text(json.dumps(config))
        (Path(tmp) / "m.json").write_text(json.dumps(messages))
        out = subprocess.run([CLI, "chat-template", "--tokenizer", tmp, "--messages", str(Path(tmp) / "m.json")], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert out.stdout == env.from_string(llama2).render(messages=messages, bos_token="<BOS>", eos_token="<EOS>", add_generation_prompt=True)
        # With tools, the tool_use variant.
        tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
        (Path(tmp) / "t.json").write_text(json.dumps({"messages": messages, "tools": tools}))
        out = subprocess.run([CLI, "chat-template", "--tokenizer", tmp, "--messages", str(Path(tmp) / "t.json")], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert out.stdout == env.from_string(chatml).render(messages=messages, tools=tools, add_generation_prompt=True)
        # chat_template.jinja wins.
        (Path(tmp) / "chat_template.jinja").write_text(chatml)
        out = subprocess.run([CLI, "chat-template", "--tokenizer", tmp, "--messages", str(Path(tmp) / "m.json"), "--no-generation-prompt"],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert out.stdout == env.from_string(chatml).render(messages=messages, add_generation_prompt=False)


@pytest.mark.parametrize("source,needle", [
    ("{% for x in %}", "expected"),
    ("{{ 'unterminated }}", "unterminated"),
    ("{% if x %}no end", "endif"),
    ("{% call foo() %}{% endcall %}", "unsupported statement"),
    ("{{ x | nosuchfilter }}", "unknown filter 'nosuchfilter'"),
    ("{{ messages.append(1) }}", "unsafe"),
    ("{% for i in range(100000000) %}{% endfor %}", "range()"),
    ("{{ " + "(" * 500 + "1" + ")" * 500 + " }}", "nested too deeply"),
    # Found by the fuzzer: integers past 64 bits are refused, never undefined behaviour.
    ("{% set x = 66666666666666666666666666 %}", "out of range"),
    ("{{ 9223372036854775807 + 1 }}", "integer overflow"),
    ("{{ 3 ** 99 }}", "integer overflow"),
])
def test_bad_templates_are_refused_with_the_line(source, needle):
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "bad.jinja").write_text("line one\n" + source)
        (Path(tmp) / "m.json").write_text(json.dumps([{"role": "user", "content": "x"}]))
        out = subprocess.run([CLI, "chat-template", "--template", str(Path(tmp) / "bad.jinja"), "--messages", str(Path(tmp) / "m.json")],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode != 0
        assert "bad.jinja:2:" in out.stderr and needle in out.stderr, out.stderr
