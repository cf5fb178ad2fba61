#!/usr/bin/env python3
"""Reference logits for the attention-fusion pass's approximate KV strategies,
computed with ONNX Runtime on the exported graph, independently of the
engine:

  --window W    sliding-window attention: decode the prompt one token at a
                time, keeping only the last W-1 keys/values as the past (each
                query then sees itself and the W-1 keys before it), with
                absolute position ids.
  --kv-heads T  KV heads pooled to T by averaging contiguous groups: the
                model's K and V projection weights are averaged over each
                group of heads (RoPE is the same linear map on every head,
                so averaging before it equals averaging after), every head
                of a group then carrying the group's mean.

Prints {"last_logits": [...]}.
Usage: kv_strategy_reference.py MODEL 1,2,3 (--window W | --kv-heads T)"""
import json
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

path, ids = sys.argv[1], [int(t) for t in sys.argv[2].split(",")]
mode, value = sys.argv[3], int(sys.argv[4])
model = onnx.load(path)
past_inputs = [i for i in model.graph.input if i.name.startswith("past_key_values")]
kv_heads = past_inputs[0].type.tensor_type.shape.dim[1].dim_value
head_dim = past_inputs[0].type.tensor_type.shape.dim[3].dim_value

if mode == "--kv-heads":
    group = kv_heads // value
    inits = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "MatMul" and ("/wk/" in node.name or "/wv/" in node.name):
            t = inits[node.input[1]]
            w = numpy_helper.to_array(t).copy()  # [dim, kv_heads * head_dim]
            heads = w.reshape(w.shape[0], value, group, head_dim)
            w = np.repeat(heads.mean(axis=2, keepdims=True), group, axis=2).reshape(w.shape)
            t.CopyFrom(numpy_helper.from_array(w.astype(np.float32), t.name))
    tmp = tempfile.NamedTemporaryFile(suffix=".onnx", delete=False)
    onnx.save(model, tmp.name)
    path = tmp.name

so = ort.SessionOptions()
so.log_severity_level = 3
sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
names = [i.name for i in past_inputs]
past = {n: np.zeros((1, kv_heads, 0, head_dim), dtype=np.float32) for n in names}
outputs = ["logits"] + [n.replace("past_key_values", "present") for n in names]


def run(tokens, start):
    n, p = len(tokens), next(iter(past.values())).shape[2]
    feeds = {"input_ids": np.array([tokens], dtype=np.int64), "attention_mask": np.ones((1, p + n), dtype=np.int64),
             "position_ids": np.arange(start, start + n, dtype=np.int64)[None], **past}
    return sess.run(outputs, feeds)


if mode == "--window":
    for t, tok in enumerate(ids):
        out = run([tok], t)
        for n, present in zip(names, out[1:]):
            past[n] = present[:, :, -(value - 1):, :] if value > 1 else present[:, :, :0, :]
    logits = out[0][0, -1]
else:
    logits = run(ids, 0)[0][0, -1]
print(json.dumps({"last_logits": logits.tolist()}))
