"""One Prometheus page from the replicas' pages: each sample gains a
`replica` label, each family keeps one HELP and TYPE line."""
from __future__ import annotations

from typing import Dict, List


def _with_label(sample: str, replica: str) -> str:
    name_end = len(sample)
    for i, ch in enumerate(sample):
        if ch in "{ ":
            name_end = i
            break
    label = f'replica="{replica}"'
    if name_end < len(sample) and sample[name_end] == "{":
        rest = sample[name_end + 1:]
        return f"{sample[:name_end]}{{{label}{'' if rest.startswith('}') else ','}{rest}"
    return f"{sample[:name_end]}{{{label}}}{sample[name_end:]}"


def merge_replica_metrics(replicas: Dict[str, str], extra: Dict[str, float]) -> str:
    """replicas: replica id -> its Prometheus text. extra: counters of the
    merging process itself (name -> value)."""
    order: List[str] = []
    heads: Dict[str, List[str]] = {}
    samples: Dict[str, List[str]] = {}
    for replica, text in sorted(replicas.items()):
        family = None
        for line in text.splitlines():
            if not line.strip():
                continue
            if line.startswith("# "):
                parts = line.split(" ", 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    family = parts[2]
                    if family not in heads:
                        order.append(family)
                        heads[family] = []
                        samples[family] = []
                    if line not in heads[family]:
                        heads[family].append(line)
                continue
            if family is None:
                family = line.split("{", 1)[0].split(" ", 1)[0]
                order.append(family)
                heads[family], samples[family] = [], []
            samples[family].append(_with_label(line, replica))
    out: List[str] = []
    for family in order:
        out += heads[family] + samples[family]
    for name, value in extra.items():
        out += [f"# TYPE {name} counter", f"{name} {value}"]
    return "\n".join(out) + "\n"
