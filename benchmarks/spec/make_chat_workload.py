#!/usr/bin/env python3
"""A natural-prompt workload for speculative decoding (a JSONL trace for
`switchyard bench/ab`): chat questions whose answers do not copy the prompt,
rendered with the model's own chat template (through the switchyard CLI),
so drafters are measured where they cannot lean on input copying.

  python3 benchmarks/spec/make_chat_workload.py --cli build/switchyard \\
      --model $(scripts/fetch-smollm2.sh) --out /tmp/chat.jsonl
  build/switchyard ab --model $(scripts/fetch-smollm2.sh) --profiles paged,lookahead \\
      --workload /tmp/chat.jsonl --max-concurrency 1
"""
import argparse
import json
import subprocess

QUESTIONS = [
    "Explain how photosynthesis works.",
    "Write a short story about a robot who learns to paint.",
    "What are the main causes of the French Revolution?",
    "Give me a recipe for a simple vegetable soup.",
    "How do vaccines train the immune system?",
    "Describe the water cycle to a ten-year-old.",
    "What should I pack for a three-day hiking trip?",
    "Compare cats and dogs as pets.",
    "Why is the sky blue?",
    "Write a polite email asking a colleague to review my report.",
    "List five tips for learning a new language.",
    "What is the difference between weather and climate?",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", required=True, help="the switchyard program")
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--output-tokens", type=int, default=128)
    a = ap.parse_args()
    with open(a.out, "w") as f:
        for q in QUESTIONS:
            out = subprocess.run([a.cli, "generate", "--model", a.model, "--chat", "--prompt", q, "--max-tokens", "1", "--json"],
                                 check=True, capture_output=True, text=True).stdout
            prompt = json.loads(out)["prompt_ids"]
            f.write(json.dumps({"arrival_s": 0.0, "prompt_ids": prompt, "output_len": a.output_tokens}) + "\n")
    print(f"wrote {a.out}: {len(QUESTIONS)} requests")


if __name__ == "__main__":
    main()
