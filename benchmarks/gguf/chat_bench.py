#!/usr/bin/env python3
"""A trained instruct model through `switchyard serve` and the official
openai client: chat answers, and structured output's schema-valid rate
(response_format json_schema, each answer checked with jsonschema) against
the same requests without the constraint. Prints a table, writes JSON.

  benchmarks/gguf/chat_bench.py --cli build/switchyard --model $(scripts/fetch-smollm2.sh) --out chat.json
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time

import jsonschema
from openai import OpenAI

QUESTIONS = ["What is the capital of France?", "Name three primary colors.", "How many legs does a spider have?",
             "What is 12 times 12?", "Who wrote Romeo and Juliet?"]
SCHEMAS = [
    ("a city and its country", {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
                                "required": ["city", "country"], "additionalProperties": False}),
    ("a person with a name and an age", {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                                         "required": ["name", "age"], "additionalProperties": False}),
    ("three colors", {"type": "object", "properties": {"colors": {"type": "array", "items": {"type": "string"}, "minItems": 3,
                                                                  "maxItems": 3}}, "required": ["colors"], "additionalProperties": False}),
    ("a book with a title, an author and a year", {"type": "object", "properties": {
        "title": {"type": "string"}, "author": {"type": "string"}, "year": {"type": "integer"}},
        "required": ["title", "author", "year"], "additionalProperties": False}),
    ("the weather: a temperature and whether it rains", {"type": "object", "properties": {
        "temperature_c": {"type": "number"}, "raining": {"type": "boolean"}}, "required": ["temperature_c", "raining"],
        "additionalProperties": False}),
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default="build/switchyard")
    ap.add_argument("--model", required=True)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--out", default="chat.json")
    a = ap.parse_args()
    port = free_port()
    server = subprocess.Popen([a.cli, "serve", "--model", a.model, "--port", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=600)
        for _ in range(240):
            try:
                model = client.models.list().data[0].id
                break
            except Exception:  # noqa: BLE001 - not up yet
                if server.poll() is not None:
                    sys.exit(f"chat_bench: the server exited:\n{server.stderr.read()[-2000:]}")
                time.sleep(0.5)
        else:
            sys.exit("chat_bench: the server did not come up")
        answers = []
        for q in QUESTIONS:
            r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": q}], temperature=0,
                                               max_tokens=a.max_tokens)
            answers.append({"question": q, "answer": r.choices[0].message.content, "finish_reason": r.choices[0].finish_reason})
            print(f"Q: {q}\nA: {r.choices[0].message.content}\n", flush=True)
        rows = []
        for what, schema in SCHEMAS:
            messages = [{"role": "user", "content": f"Give me {what} as JSON."}]
            row = {"request": what}
            for mode in ("constrained", "free"):
                kw = {"response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}} if mode == "constrained" else {}
                t0 = time.time()
                r = client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=a.max_tokens, **kw)
                text = r.choices[0].message.content
                try:
                    jsonschema.validate(json.loads(text), schema)
                    valid = True
                except Exception:  # noqa: BLE001 - not JSON, or not the schema
                    valid = False
                row[mode] = {"text": text, "valid": valid, "seconds": time.time() - t0}
            rows.append(row)
            print(f"{what}: constrained {row['constrained']['valid']} {row['constrained']['text']!r}; free {row['free']['valid']}", flush=True)
        valid_c = sum(r["constrained"]["valid"] for r in rows)
        valid_f = sum(r["free"]["valid"] for r in rows)
        print(f"\n{'mode':<12} {'schema-valid':>13}")
        print(f"{'constrained':<12} {valid_c:>6} of {len(rows)}")
        print(f"{'free':<12} {valid_f:>6} of {len(rows)}")
        json.dump({"model": model, "answers": answers, "structured": rows, "schema_valid_constrained": valid_c,
                   "schema_valid_free": valid_f, "requests": len(rows)}, open(a.out, "w"), indent=2)
        print(f"wrote {a.out}")
    finally:
        server.terminate()
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
