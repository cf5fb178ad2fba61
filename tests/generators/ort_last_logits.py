#!/usr/bin/env python3
"""Prints {"last_logits": [...]} from ONNX Runtime for a decoder-with-past
model and a prompt (empty past), after onnx.checker's full check.
Usage: ort_last_logits.py MODEL 1,2,3 [--no-optimizations]
--no-optimizations runs the graph as written: ORT otherwise fuses weight-only
DequantizeLinear -> MatMul into kernels that also quantize the activations."""
import json
import sys

import numpy as np
import onnx
import onnxruntime as ort

path, ids = sys.argv[1], [int(t) for t in sys.argv[2].split(",")]
onnx.checker.check_model(path, full_check=True)
so = ort.SessionOptions()
so.log_severity_level = 3
if "--no-optimizations" in sys.argv[3:]:
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
n = len(ids)
feeds = {"input_ids": np.array([ids], dtype=np.int64), "attention_mask": np.ones((1, n), dtype=np.int64),
         "position_ids": np.arange(n, dtype=np.int64)[None]}
for i in sess.get_inputs():
    if i.name.startswith("past_key_values"):
        feeds[i.name] = np.zeros((1, i.shape[1], 0, i.shape[3]), dtype=np.float32)
print(json.dumps({"last_logits": sess.run(["logits"], feeds)[0][0, -1].tolist()}))
