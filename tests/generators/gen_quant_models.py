#!/usr/bin/env python3
"""Writes stories260K quantized by other tools, for the quantize plugin's
cross-checks against ONNX Runtime:
  OUT/stories260K.ort-int4.onnx  ONNX Runtime's own MatMulNBitsQuantizer (4-bit, groups of 32)
  OUT/stories260K.ort-int8.onnx  the same at 8 bits (asymmetric)
  OUT/stories260K.qdq-int8.onnx  weight-only QDQ: MatMul(A, DequantizeLinear(int8 W, per-column scale))
Usage: gen_quant_models.py SHARED_MODELS_DIR OUT"""
import logging
import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

logging.disable(logging.INFO)  # the quantizer logs every node

src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
model_path = os.path.join(src, "stories260K.onnx")

for bits, sym in ((4, True), (8, False)):
    q = MatMulNBitsQuantizer(onnx.load(model_path), bits=bits, block_size=32, is_symmetric=sym)
    q.process()
    onnx.save(q.model.model, os.path.join(out, f"stories260K.ort-int{bits}.onnx"))

m = onnx.load(model_path)
inits = {i.name: i for i in m.graph.initializer}
replaced = {}
new_nodes = []
for node in m.graph.node:
    if node.op_type == "MatMul" and node.input[1] in inits:
        name = node.input[1]
        if name not in replaced:
            w = numpy_helper.to_array(inits[name]).astype(np.float32)
            scale = np.maximum(np.abs(w).max(axis=0), 1e-12) / 127.0
            wq = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
            m.graph.initializer.extend([numpy_helper.from_array(wq, name + "_int8"),
                                        numpy_helper.from_array(scale.astype(np.float32), name + "_scale"),
                                        numpy_helper.from_array(np.zeros_like(scale, dtype=np.int8), name + "_zp")])
            new_nodes.append(helper.make_node("DequantizeLinear", [name + "_int8", name + "_scale", name + "_zp"],
                                              [name + "_dq"], name=name + "_DequantizeLinear", axis=1))
            replaced[name] = name + "_dq"
        node.input[1] = replaced[name]
for name in replaced:
    m.graph.initializer.remove(inits[name])
# DequantizeLinear nodes first: they read only initializers.
nodes = new_nodes + list(m.graph.node)
del m.graph.node[:]
m.graph.node.extend(nodes)
onnx.checker.check_model(m)
onnx.save(m, os.path.join(out, "stories260K.qdq-int8.onnx"))
print(f"wrote ORT int4/int8 and QDQ int8 models to {out} ({len(replaced)} QDQ weights)")
