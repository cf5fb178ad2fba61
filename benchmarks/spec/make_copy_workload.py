#!/usr/bin/env python3
"""An input-copying workload for speculative decoding (a JSONL trace for
`switchyard bench/ab`): each prompt holds a story the model wrote, then the
story's opening again, so the continuation re-tells text that is already in
the prompt, as a summary or an edit reuses its document. The stories are
the model's own greedy continuations (through the switchyard CLI), so the
workload suits any model with a tokenizer the CLI reads.

  python3 benchmarks/spec/make_copy_workload.py --cli build/switchyard \
      --model ../shared/models/stories260K.onnx --out /tmp/copy.jsonl
  build/switchyard ab --manifest examples/manifests/speculative.yaml --profiles plain,lookup \
      --workload /tmp/copy.jsonl --max-concurrency 1
"""
import argparse
import json
import subprocess

OPENINGS = [
    "Once upon a time, there was a little girl named Lily.",
    "Tom had a big red ball. He liked to play with it every day.",
    "One day, a small cat found a box in the garden.",
    "Sara and Ben went to the park with their mom.",
    "There was a kind old man who lived in a small house.",
    "The sun was shining and the birds were singing.",
    "Max was a happy dog. He loved to run and jump.",
    "Amy wanted to bake a cake for her friend.",
]


def generate(cli, model, text, tokens):
    out = subprocess.run([cli, "generate", "--model", model, "--prompt", text, "--max-tokens", str(tokens), "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", required=True, help="the switchyard program")
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--story-tokens", type=int, default=160, help="length of the story in the prompt")
    ap.add_argument("--output-tokens", type=int, default=128)
    a = ap.parse_args()
    with open(a.out, "w") as f:
        for opening in OPENINGS:
            first = generate(a.cli, a.model, opening, a.story_tokens)
            opening_ids = first["prompt_ids"]
            # The story, then its opening again (without a second BOS).
            prompt = opening_ids + first["ids"] + opening_ids[1:]
            f.write(json.dumps({"arrival_s": 0.0, "prompt_ids": prompt, "output_len": a.output_tokens}) + "\n")
    print(f"wrote {a.out}: {len(OPENINGS)} requests")


if __name__ == "__main__":
    main()
