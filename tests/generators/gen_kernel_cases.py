#!/usr/bin/env python3
"""Writes one single-op ONNX model per kernel test case, with inputs and the
outputs ONNX Runtime computes for them, for tests/kernels/test_kernels.cpp.

The expected values come from ONNX Runtime (an independent implementation),
never from this engine. Usage: gen_kernel_cases.py OUT_DIR
"""
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

rng = np.random.default_rng(1234)
NP2ONNX = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64, np.int32: TensorProto.INT32,
           np.bool_: TensorProto.BOOL, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16,
           np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}
NAMES = {np.float32: "float32", np.int64: "int64", np.int32: "int32", np.bool_: "bool", np.float64: "float64",
         np.float16: "float16", np.uint8: "uint8", np.int8: "int8"}

cases = []


def f32(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def i64(*vals):
    return np.array(vals, dtype=np.int64)


def case(name, op, inputs, attrs=None, n_out=1, opset=17, tol=1e-5, domain="", plugin=None, outputs_checked=None):
    """inputs: list of (name, array) or None for an omitted optional input.
    plugin: the plugin whose kernels the case needs (contrib ops).
    outputs_checked: indices of the outputs to compare (default all)."""
    in_names = [n if a is not None else "" for n, a in inputs]
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, in_names, outs, domain=domain, **(attrs or {}))
    graph_inputs = [helper.make_tensor_value_info(n, NP2ONNX[a.dtype.type], list(a.shape))
                    for n, a in inputs if a is not None]
    # Output types come from ONNX shape inference over the one-node graph.
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    if domain:
        # Contrib ops have no ONNX schema: declare float32 outputs of unknown
        # shape, fixed below from ONNX Runtime's results.
        graph_outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs]
    else:
        probe = helper.make_model(helper.make_graph([node], name, graph_inputs, []), opset_imports=opsets)
        inferred = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(probe).graph.value_info}
        # Ops ONNX has no schema for (ONNX Runtime's default-domain extras) infer nothing.
        graph_outputs = [inferred[o] if o in inferred else helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                         for o in outs]
    g = helper.make_graph([node], name, graph_inputs, graph_outputs)
    m = helper.make_model(g, opset_imports=opsets, producer_name="gen_kernel_cases")
    m.ir_version = 8
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {n: a for n, a in inputs if a is not None}
    results = sess.run(None, feeds)
    # Declare the outputs' full shapes (data-dependent ones included) so the
    # saved model passes the ONNX checker.
    for vi, r in zip(m.graph.output, results):
        vi.type.tensor_type.ClearField("shape")
        vi.type.tensor_type.shape.SetInParent()
        for d in r.shape:
            vi.type.tensor_type.shape.dim.add().dim_value = d
    checked = outputs_checked if outputs_checked is not None else range(len(outs))
    cases.append((name, m, feeds, {outs[i]: results[i] for i in checked}, tol, plugin))


def dump(arr):
    arr = np.asarray(arr)
    name = arr.dtype.name
    if name == "float16":
        data = arr.astype(np.float32).ravel().tolist()
    elif name == "bool":
        data = arr.astype(np.int64).ravel().tolist()
    else:
        data = arr.ravel().tolist()
    # JSON has no NaN or infinity: those travel as strings.
    data = [v if not isinstance(v, float) or np.isfinite(v) else str(v) for v in data]
    return {"dtype": name, "shape": list(arr.shape), "data": data}


# --- elementwise, with broadcasting -------------------------------------------------
for op in ["Add", "Sub", "Mul", "Div"]:
    case(f"{op}_same", op, [("a", f32(2, 3, 4)), ("b", f32(2, 3, 4, lo=0.5))])
    case(f"{op}_bcast_row", op, [("a", f32(2, 3, 4)), ("b", f32(4, lo=0.5))])
    case(f"{op}_bcast_mid", op, [("a", f32(2, 1, 4)), ("b", f32(3, 1, lo=0.5))])
    case(f"{op}_scalar", op, [("a", np.array(1.5, dtype=np.float32)), ("b", f32(5, lo=0.5))])
    case(f"{op}_int64", op, [("a", i64(7, -7, 9, 100)), ("b", i64(2, 2, -4, 3))])
case("Add_empty", "Add", [("a", f32(0, 3)), ("b", f32(1, 3))])
case("Add_int32", "Add", [("a", np.array([1, 2, 3], dtype=np.int32)), ("b", np.array([4], dtype=np.int32))])
case("Max_bcast", "Max", [("a", f32(3, 4)), ("b", f32(4))])
case("Min_bcast", "Min", [("a", f32(3, 1)), ("b", f32(1, 5))])
case("Mod_int", "Mod", [("a", i64(7, -7, 7, -7)), ("b", i64(3, 3, -3, -3))])
case("Mod_fmod", "Mod", [("a", f32(6, lo=-5, hi=5)), ("b", f32(6, lo=1, hi=2))], {"fmod": 1})
case("Pow_square", "Pow", [("a", f32(2, 5)), ("b", np.array(2.0, dtype=np.float32))])
case("Pow_general", "Pow", [("a", f32(2, 5, lo=0.1, hi=3)), ("b", f32(5, lo=-1, hi=2))], tol=1e-4)
case("Pow_int_exponent", "Pow", [("a", f32(4, lo=0.1, hi=3)), ("b", i64(3))], tol=1e-4)
for op in ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]:
    a = rng.integers(0, 3, size=(3, 4)).astype(np.int64)
    case(f"{op}_int", op, [("a", a), ("b", rng.integers(0, 3, size=(4,)).astype(np.int64))])
    case(f"{op}_float", op, [("a", np.round(f32(2, 3))), ("b", np.round(f32(2, 1)))], opset=17)
case("Equal_bool", "Equal", [("a", np.array([True, False, True])), ("b", np.array([True, True, False]))], opset=19)
for op in ["And", "Or", "Xor"]:
    case(f"{op}_bcast", op, [("a", rng.random((2, 3)) > 0.5), ("b", rng.random((3,)) > 0.5)])
case("Not", "Not", [("x", rng.random((2, 3)) > 0.5)])
for op, lo, hi in [("Sqrt", 0.01, 4), ("Reciprocal", 0.5, 3), ("Exp", -3, 3), ("Log", 0.1, 5), ("Cos", -7, 7),
                   ("Sin", -7, 7), ("Tanh", -4, 4), ("Erf", -3, 3), ("Sigmoid", -8, 8), ("Relu", -2, 2),
                   ("Floor", -3, 3), ("Ceil", -3, 3), ("Neg", -3, 3), ("Abs", -3, 3), ("Softplus", -4, 4),
                   ("Sign", -3, 3), ("Round", -3, 3)]:
    case(op, op, [("x", f32(3, 7, lo=lo, hi=hi))], tol=1e-5)
case("Round_halves", "Round", [("x", np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5], dtype=np.float32))])
case("Neg_int64", "Neg", [("x", i64(1, -5, 0))])
case("Abs_int64", "Abs", [("x", i64(1, -5, 0))])
case("Where_bcast", "Where", [("c", rng.random((2, 1, 4)) > 0.5), ("x", f32(3, 4)), ("y", np.array(-1.0, dtype=np.float32))])
case("Where_int64", "Where", [("c", np.array([True, False, True])), ("x", i64(1, 2, 3)), ("y", i64(-1, -2, -3))])

# --- matmul -----------------------------------------------------------------------------
case("MatMul_2d", "MatMul", [("a", f32(5, 7)), ("b", f32(7, 3))], tol=1e-5)
case("MatMul_weight", "MatMul", [("a", f32(2, 3, 7)), ("b", f32(7, 9))], tol=1e-5)
case("MatMul_batch_bcast", "MatMul", [("a", f32(2, 1, 3, 4)), ("b", f32(1, 5, 4, 6))], tol=1e-5)
case("MatMul_vec_left", "MatMul", [("a", f32(4)), ("b", f32(2, 4, 3))], tol=1e-5)
case("MatMul_vec_right", "MatMul", [("a", f32(2, 3, 4)), ("b", f32(4))], tol=1e-5)
case("MatMul_gemv", "MatMul", [("a", f32(1, 1, 64)), ("b", f32(64, 130))], tol=1e-4)
case("MatMul_large", "MatMul", [("a", f32(33, 256)), ("b", f32(256, 300))], tol=1e-4)
case("MatMul_emptyK", "MatMul", [("a", f32(3, 0)), ("b", f32(0, 4))])
case("Gemm_plain", "Gemm", [("a", f32(3, 5)), ("b", f32(5, 4)), ("c", f32(4))], tol=1e-5)
case("Gemm_trans_alpha_beta", "Gemm", [("a", f32(5, 3)), ("b", f32(4, 5)), ("c", f32(3, 1))],
     {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}, tol=1e-5)
case("Gemm_no_c", "Gemm", [("a", f32(2, 3)), ("b", f32(3, 2))], tol=1e-5, opset=13)

# --- shapes ----------------------------------------------------------------------------
case("Shape", "Shape", [("x", f32(2, 3, 4))])
case("Shape_slice", "Shape", [("x", f32(2, 3, 4))], {"start": 1, "end": -1}, opset=15)
case("Size", "Size", [("x", f32(2, 3, 4))])
case("Reshape_infer", "Reshape", [("x", f32(2, 3, 4)), ("s", i64(0, -1))])
case("Reshape_zero_dim", "Reshape", [("x", f32(2, 0, 4)), ("s", i64(2, 0, 4))], {"allowzero": 1}, opset=14)
case("Squeeze_axes_input", "Squeeze", [("x", f32(1, 3, 1, 2)), ("a", i64(-2))], opset=13)
case("Squeeze_all", "Squeeze", [("x", f32(1, 3, 1, 2))], opset=13)
case("Squeeze_attr_opset11", "Squeeze", [("x", f32(1, 3, 1, 2))], {"axes": [0]}, opset=11)
case("Unsqueeze_neg", "Unsqueeze", [("x", f32(3, 2)), ("a", i64(-1, 0))], opset=13)
case("Unsqueeze_attr_opset11", "Unsqueeze", [("x", f32(3, 2))], {"axes": [1]}, opset=11)
case("Flatten", "Flatten", [("x", f32(2, 3, 4))], {"axis": 2})
case("Identity", "Identity", [("x", f32(2, 2))])
case("Expand", "Expand", [("x", f32(3, 1)), ("s", i64(2, 1, 4))])
case("Expand_int", "Expand", [("x", i64(1, 2)), ("s", i64(3, 1))])
case("ConstantOfShape", "ConstantOfShape", [("s", i64(2, 3))],
     {"value": helper.make_tensor("v", TensorProto.INT64, [1], [7])})
case("ConstantOfShape_default", "ConstantOfShape", [("s", i64(3))])
case("Range_int", "Range", [("a", np.array(2, dtype=np.int64)), ("b", np.array(11, dtype=np.int64)), ("d", np.array(3, dtype=np.int64))])
case("Range_float_neg", "Range", [("a", np.array(1.0, dtype=np.float32)), ("b", np.array(-1.0, dtype=np.float32)),
                                  ("d", np.array(-0.5, dtype=np.float32))])
case("Range_empty", "Range", [("a", np.array(5, dtype=np.int64)), ("b", np.array(1, dtype=np.int64)), ("d", np.array(1, dtype=np.int64))])

# --- data movement -----------------------------------------------------------------------
case("Concat_axis1", "Concat", [("a", f32(2, 1, 3)), ("b", f32(2, 4, 3))], {"axis": 1})
case("Concat_neg_axis_empty", "Concat", [("a", f32(2, 3, 0)), ("b", f32(2, 3, 2))], {"axis": -1})
case("Concat_int64", "Concat", [("a", i64(1, 2)), ("b", i64(3)), ("c", i64(4, 5))], {"axis": 0})
case("Slice_basic", "Slice", [("x", f32(4, 6)), ("s", i64(1, 2)), ("e", i64(3, 100))])
case("Slice_axes_steps", "Slice", [("x", f32(3, 8)), ("s", i64(1)), ("e", i64(8)), ("a", i64(-1)), ("t", i64(2))])
case("Slice_negative_step", "Slice", [("x", f32(3, 8)), ("s", i64(-1)), ("e", i64(-100)), ("a", i64(1)), ("t", i64(-3))])
case("Slice_empty", "Slice", [("x", f32(3, 4)), ("s", i64(2)), ("e", i64(1)), ("a", i64(0))])
case("Split_equal", "Split", [("x", f32(6, 2))], {"axis": 0}, n_out=3, opset=13)
case("Split_sizes_input", "Split", [("x", f32(2, 7)), ("s", i64(2, 5))], {"axis": -1}, n_out=2, opset=13)
case("Split_num_outputs_uneven", "Split", [("x", f32(7, 2))], {"axis": 0, "num_outputs": 3}, n_out=3, opset=18)
case("Split_attr_opset11", "Split", [("x", f32(5, 2))], {"axis": 0, "split": [1, 4]}, n_out=2, opset=11)
case("Transpose_perm", "Transpose", [("x", f32(2, 3, 4, 5))], {"perm": [0, 2, 1, 3]})
case("Transpose_default", "Transpose", [("x", f32(2, 3, 4))])
case("Transpose_int64", "Transpose", [("x", rng.integers(0, 9, size=(3, 2)).astype(np.int64))])
case("Gather_axis0", "Gather", [("x", f32(5, 3)), ("i", np.array([[0, 4], [-1, 2]], dtype=np.int64))])
case("Gather_axis1_scalar", "Gather", [("x", f32(2, 5, 3)), ("i", np.array(-2, dtype=np.int64))], {"axis": 1})
case("Gather_empty_indices", "Gather", [("x", f32(2, 5, 3)), ("i", np.zeros((0,), dtype=np.int64))], {"axis": 1})
case("Gather_int32_idx", "Gather", [("x", i64(10, 20, 30)), ("i", np.array([2, 0], dtype=np.int32))])
case("Tile", "Tile", [("x", f32(2, 3)), ("r", i64(2, 3))])
case("Tile_5d", "Tile", [("x", f32(1, 2, 1, 3, 2)), ("r", i64(1, 1, 2, 1, 1))])
for src, dst in [(np.float32, np.int64), (np.int64, np.float32), (np.float32, np.bool_), (np.bool_, np.float32),
                 (np.int64, np.int32), (np.float32, np.float16), (np.float16, np.float32), (np.float32, np.float64)]:
    if src == np.bool_:
        x = rng.random((2, 3)) > 0.5
    elif src == np.float16:
        x = f32(2, 3, lo=-100, hi=100).astype(np.float16)
    elif src == np.int64:
        x = rng.integers(-5, 5, size=(2, 3)).astype(np.int64)
    else:
        x = f32(2, 3, lo=-5, hi=5)
    case(f"Cast_{NAMES[src]}_to_{NAMES[dst]}", "Cast", [("x", x)], {"to": NP2ONNX[dst]})
case("Trilu_upper_k1", "Trilu", [("x", f32(2, 4, 5)), ("k", i64(1))])
case("Trilu_lower", "Trilu", [("x", f32(4, 4))], {"upper": 0})
case("CumSum", "CumSum", [("x", f32(3, 4)), ("a", np.array(1, dtype=np.int64))], tol=1e-5)
case("CumSum_excl_rev_int", "CumSum", [("x", i64(1, 2, 3, 4)), ("a", np.array(0, dtype=np.int64))],
     {"exclusive": 1, "reverse": 1})

# --- reductions, softmax, normalisation ----------------------------------------------------
case("ReduceMean_last", "ReduceMean", [("x", f32(2, 3, 4))], {"axes": [-1]})
case("ReduceMean_no_keep", "ReduceMean", [("x", f32(2, 3, 4))], {"axes": [0, 2], "keepdims": 0})
case("ReduceMean_all", "ReduceMean", [("x", f32(2, 3, 4))])
case("ReduceMean_opset18_input", "ReduceMean", [("x", f32(2, 3, 4)), ("a", i64(1))], opset=18)
case("ReduceSum_opset13_input", "ReduceSum", [("x", f32(2, 3, 4)), ("a", i64(-1, 0))], opset=13)
case("ReduceSum_noop", "ReduceSum", [("x", f32(2, 3))], {"noop_with_empty_axes": 1}, opset=13)
case("ReduceMax", "ReduceMax", [("x", f32(3, 5))], {"axes": [1]})
case("ReduceMin_int", "ReduceMin", [("x", rng.integers(-9, 9, size=(3, 4)).astype(np.int64))], {"axes": [0], "keepdims": 0})
case("ReduceProd", "ReduceProd", [("x", f32(2, 3, lo=0.5, hi=1.5))], {"axes": [1]}, tol=1e-5)
case("ReduceSumSquare", "ReduceSumSquare", [("x", f32(2, 3))], {"axes": [1]}, tol=1e-5)
case("ArgMax", "ArgMax", [("x", f32(3, 5))], {"axis": 1, "keepdims": 0})
case("Softmax_last", "Softmax", [("x", f32(2, 3, 7, lo=-10, hi=10))])
# TopK: a MoE router's (the k best experts per token, sorted), the smallest,
# another axis, ties (the lower index first) and k = the whole axis.
case("TopK_router", "TopK", [("x", f32(5, 8)), ("k", i64(2))], n_out=2)
case("TopK_smallest_axis0", "TopK", [("x", f32(6, 3)), ("k", i64(3))], {"axis": 0, "largest": 0}, n_out=2)
case("TopK_ties", "TopK", [("x", np.array([[1, 3, 3, 0, 3, 1]], dtype=np.float32)), ("k", i64(4))], n_out=2)
case("TopK_all_int64", "TopK", [("x", np.array([[5, -2, 9, 9, 0]], dtype=np.int64)), ("k", i64(5))], n_out=2)
case("TopK_opset1_attr", "TopK", [("x", f32(2, 7))], {"k": 3}, n_out=2, opset=9)
# OneHot: the expert mask of a traced MoE block (int64 ids, int64 values),
# another axis, negative and out-of-range indices, float values.
case("OneHot_experts", "OneHot", [("i", np.array([[0, 3], [2, 1], [3, 0]], dtype=np.int64)), ("d", i64(5)),
                                  ("v", np.array([0, 1], dtype=np.int64))])
case("OneHot_axis0_negative", "OneHot", [("i", np.array([-1, 2, 7, 0], dtype=np.int64)), ("d", i64(4)),
                                         ("v", np.array([-0.5, 2.0], dtype=np.float32))], {"axis": 0})
# Clip: gpt-oss's clamped SwiGLU (both bounds), one bound, no bound, the
# attributes of opset 6, integers.
case("Clip_both", "Clip", [("x", f32(3, 5, lo=-9, hi=9)), ("lo", np.array(-7.0, dtype=np.float32)),
                           ("hi", np.array(7.0, dtype=np.float32))])
case("Clip_max_only", "Clip", [("x", f32(3, 5, lo=-9, hi=9)), ("lo", None), ("hi", np.array(1.5, dtype=np.float32))])
case("Clip_none", "Clip", [("x", f32(4))])
case("Clip_opset6_attrs", "Clip", [("x", f32(3, 5, lo=-9, hi=9))], {"min": -1.0, "max": 2.0}, opset=6)
case("Clip_int64", "Clip", [("x", np.array([-5, 0, 3, 12], dtype=np.int64)), ("lo", np.array(-1, dtype=np.int64)),
                            ("hi", np.array(4, dtype=np.int64))])
case("Softmax_axis1", "Softmax", [("x", f32(2, 3, 4))], {"axis": 1})
case("Softmax_opset11_flatten", "Softmax", [("x", f32(2, 3, 4))], {"axis": 1}, opset=11)
case("Softmax_masked", "Softmax", [("x", np.array([[0.0, -3.4028234663852886e38, 1.0]], dtype=np.float32))])
case("LogSoftmax", "LogSoftmax", [("x", f32(3, 6))], tol=1e-5)
case("LayerNorm", "LayerNormalization", [("x", f32(2, 3, 8)), ("g", f32(8)), ("b", f32(8))], {"epsilon": 1e-5}, tol=1e-5)
case("LayerNorm_axis1_no_bias", "LayerNormalization", [("x", f32(2, 3, 4)), ("g", f32(3, 4))],
     {"axis": 1}, tol=1e-5)

# --- ops today's exporters emit around masks, caches and norms --------------------------
case("IsNaN", "IsNaN", [("x", np.array([1.0, np.nan, -np.inf, 0.0], dtype=np.float32))], opset=20)
case("IsInf", "IsInf", [("x", np.array([1.0, np.nan, -np.inf, np.inf], dtype=np.float32))], opset=20)
case("IsInf_neg_only", "IsInf", [("x", np.array([np.inf, -np.inf, 3.0], dtype=np.float32))],
     {"detect_positive": 0}, opset=20)
case("Max_variadic", "Max", [("a", f32(3, 4)), ("b", f32(4)), ("c", f32(3, 1))])
case("Min_variadic_int", "Min", [("a", i64(5, -2, 7)), ("b", i64(1)), ("c", i64(9, -9, 0))])
case("Max_single", "Max", [("a", f32(2, 3))])
case("Sum_variadic", "Sum", [("a", f32(2, 3)), ("b", f32(3)), ("c", f32(2, 1))])
case("GatherND", "GatherND", [("x", f32(3, 4, 5)), ("i", np.array([[0, 1], [2, 3]], dtype=np.int64))])
case("GatherND_batch_dims", "GatherND", [("x", f32(2, 3, 4)), ("i", np.array([[[1], [0]], [[2], [2]]], dtype=np.int64))],
     {"batch_dims": 1})
case("GatherND_full_index", "GatherND", [("x", f32(3, 4)), ("i", np.array([[2, -1], [0, 0], [1, 2]], dtype=np.int64))])
case("ScatterND", "ScatterND", [("x", f32(4, 3)), ("i", np.array([[1], [3]], dtype=np.int64)), ("u", f32(2, 3))])
case("ScatterND_add", "ScatterND", [("x", f32(4, 3)), ("i", np.array([[1, 2], [1, 2]], dtype=np.int64)), ("u", f32(2))],
     {"reduction": "add"}, opset=18)
case("GatherElements", "GatherElements", [("x", f32(3, 4)), ("i", np.array([[0, 2], [1, 0], [3, 3]], dtype=np.int64))],
     {"axis": 1})
case("GatherElements_axis0_neg", "GatherElements", [("x", f32(3, 2)), ("i", np.array([[-1, 0]], dtype=np.int64))])
case("ScatterElements", "ScatterElements", [("x", f32(3, 3)), ("i", np.array([[1, 0, 2]], dtype=np.int64)), ("u", f32(1, 3))])
case("ScatterElements_max", "ScatterElements", [("x", f32(2, 4)), ("i", np.array([[1, 1], [0, 3]], dtype=np.int64)),
                                                ("u", f32(2, 2))], {"axis": 1, "reduction": "max"}, opset=18)
case("Gelu", "Gelu", [("x", f32(3, 7, lo=-4, hi=4))], opset=20, tol=1e-5)
case("Gelu_tanh", "Gelu", [("x", f32(3, 7, lo=-4, hi=4))], {"approximate": "tanh"}, opset=20, tol=1e-5)
case("RMSNormalization", "RMSNormalization", [("x", f32(2, 3, 8)), ("g", f32(8))], {"epsilon": 1e-5}, opset=23, tol=1e-5)
case("RMSNormalization_axis1", "RMSNormalization", [("x", f32(2, 3, 4)), ("g", f32(3, 4))], {"axis": 1}, opset=23, tol=1e-5)

# --- ONNX Runtime contrib ops (plugins/contrib), as onnxruntime-genai models use them -----
MS = "com.microsoft"
case("SimplifiedLayerNormalization", "SimplifiedLayerNormalization", [("x", f32(2, 3, 8)), ("g", f32(8))],
     {"epsilon": 1e-6, "axis": -1}, tol=1e-5, outputs_checked=[0])
case("SkipSimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization",
     [("x", f32(2, 3, 8)), ("s", f32(2, 3, 8)), ("g", f32(8))], {"epsilon": 1e-6}, n_out=4, domain=MS,
     plugin="contrib", outputs_checked=[0, 3], tol=1e-5)
case("SkipLayerNormalization", "SkipLayerNormalization",
     [("x", f32(2, 3, 8)), ("s", f32(2, 3, 8)), ("g", f32(8)), ("b", f32(8)), ("bias", f32(8))], {"epsilon": 1e-5},
     n_out=4, domain=MS, plugin="contrib", outputs_checked=[0, 3], tol=1e-5)


def rotary_caches(max_pos, rotary_dim, theta=10000.0):
    inv = 1.0 / theta ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    ang = np.outer(np.arange(max_pos), inv)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


cos16, sin16 = rotary_caches(32, 16)
for inter in (0, 1):
    case(f"RotaryEmbedding_ms_interleaved{inter}", "RotaryEmbedding",
         [("x", f32(2, 3, 32)), ("p", np.array([[0, 1, 2], [5, 6, 7]], dtype=np.int64)), ("c", cos16), ("s", sin16)],
         {"interleaved": inter, "num_heads": 2}, domain=MS, plugin="contrib", tol=1e-5)


def gqa_case(name, B, S, P, H, KVH, D, seqlens, packed=False, rotary=False, window=-1, softcap=0.0, scale=0.0):
    ins = [("q", f32(B, S, (H + 2 * KVH) * D if packed else H * D))]
    ins += [("k", None), ("v", None)] if packed else [("k", f32(B, S, KVH * D)), ("v", f32(B, S, KVH * D))]
    ins += [("pk", f32(B, KVH, P, D)), ("pv", f32(B, KVH, P, D)),
            ("sl", np.array(seqlens, dtype=np.int32)), ("tl", np.array(P + S, dtype=np.int32))]
    if rotary:
        c, s_ = rotary_caches(64, D)
        ins += [("c", c), ("s", s_)]
    attrs = {"num_heads": H, "kv_num_heads": KVH, "local_window_size": window, "do_rotary": int(rotary)}
    if softcap:
        attrs["softcap"] = softcap
    if scale:
        attrs["scale"] = scale
    # Right-padded rows: only their valid positions are compared (ONNX
    # Runtime leaves padded query rows unspecified), so such cases check the
    # present outputs and the rows of full length.
    case(name, "GroupQueryAttention", ins, attrs, n_out=3, domain=MS, plugin="contrib", tol=1e-4)


case("MultiHeadAttention_causal_past", "MultiHeadAttention",
     [("q", f32(1, 2, 2 * 8)), ("k", f32(1, 2, 2 * 8)), ("v", f32(1, 2, 2 * 8)), ("b", None), ("m", None), ("ab", None),
      ("pk", f32(1, 2, 3, 8)), ("pv", f32(1, 2, 3, 8))],
     {"num_heads": 2, "unidirectional": 1}, n_out=3, domain=MS, plugin="contrib", tol=1e-4)
case("MultiHeadAttention_bias_padding", "MultiHeadAttention",
     [("q", f32(2, 3, 2 * 8)), ("k", f32(2, 3, 2 * 8)), ("v", f32(2, 3, 2 * 8)), ("b", f32(3 * 2 * 8)),
      ("m", np.array([[1, 1, 1], [0, 1, 1]], dtype=np.int32))],
     {"num_heads": 2}, domain=MS, plugin="contrib", tol=1e-4)

gqa_case("GQA_prompt", 1, 5, 0, 4, 2, 16, [4])
gqa_case("GQA_prompt_rotary_window", 1, 7, 0, 4, 2, 16, [6], rotary=True, window=2)
gqa_case("GQA_decode_past", 2, 1, 6, 4, 1, 16, [6, 6], rotary=True)
gqa_case("GQA_decode_softcap_scale", 1, 1, 5, 2, 2, 16, [5], softcap=1.5, scale=0.3)
gqa_case("GQA_packed_rotary", 1, 4, 0, 4, 2, 16, [3], packed=True, rotary=True)
gqa_case("GQA_decode_window", 1, 1, 9, 2, 1, 16, [9], window=3, rotary=True)


# --- opset 23 attention and rotary embedding (dynamo exports at opset 23) -------------------
case("Attention23_gqa_causal", "Attention", [("q", f32(1, 4, 5, 16)), ("k", f32(1, 2, 5, 16)), ("v", f32(1, 2, 5, 16))],
     {"is_causal": 1}, opset=23, tol=1e-4)
case("Attention23_bool_mask_softcap", "Attention",
     [("q", f32(2, 2, 3, 8)), ("k", f32(2, 2, 6, 8)), ("v", f32(2, 2, 6, 8)),
      ("m", np.tril(np.ones((3, 6), dtype=bool), k=3))], {"softcap": 2.0, "scale": 0.4}, opset=23, tol=1e-4)
case("Attention23_float_mask_3d_past", "Attention",
     [("q", f32(1, 2, 4 * 8)), ("k", f32(1, 2, 2 * 8)), ("v", f32(1, 2, 2 * 8)), ("m", f32(1, 1, 2, 5, lo=-3, hi=0)),
      ("pk", f32(1, 2, 3, 8)), ("pv", f32(1, 2, 3, 8))], {"q_num_heads": 4, "kv_num_heads": 2}, n_out=3, opset=23, tol=1e-4)
cos8, sin8 = rotary_caches(16, 8)
case("RotaryEmbedding23_positions", "RotaryEmbedding",
     [("x", f32(1, 2, 3, 8)), ("c", cos8), ("s", sin8), ("p", np.array([[4, 5, 6]], dtype=np.int64))], opset=23, tol=1e-5)
case("RotaryEmbedding23_3d_interleaved_partial", "RotaryEmbedding",
     [("x", f32(2, 3, 2 * 8)), ("c", f32(2, 3, 2)), ("s", f32(2, 3, 2))],
     {"interleaved": 1, "num_heads": 2, "rotary_embedding_dim": 4}, opset=23, tol=1e-5)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    index = []
    for name, model, feeds, outs, tol, plugin in cases:
        onnx.save(model, os.path.join(out_dir, name + ".onnx"))
        index.append({"name": name, "model": name + ".onnx", "tolerance": tol, "plugin": plugin,
                      "inputs": [dict(name=k, **dump(v)) for k, v in feeds.items()],
                      "outputs": [dict(name=k, **dump(v)) for k, v in outs.items()]})
    with open(os.path.join(out_dir, "cases.json"), "w") as f:
        json.dump({"generator": "onnxruntime " + ort.__version__, "cases": index}, f)
    print(f"wrote {len(index)} kernel cases to {out_dir}")


main()
