"""The INT8 side of edge calib's checks is a Q/DQ model in ONNX Runtime with its optimisations on but its Q/DQ
transformers off. Here a Q/DQ graph whose arithmetic is exact in float32 (small integers, power-of-two scales, so no
summation order can change a result) must give bit for bit what ONNX Runtime gives with every optimisation disabled,
the literal ONNX semantics: an optimisation that dropped, moved or merged a Q/DQ pair, or ran an integer kernel with
another rounding, would show. ONNX Runtime is real here; nothing is faked."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge.calib.check import session
from edge.calib.stats import session_options

ort = pytest.importorskip("onnxruntime")


def _qdq(name: str, scale: float, nodes: list, inits: list) -> str:
    inits += [
        numpy_helper.from_array(np.array(scale, np.float32), f"{name}.s"),
        numpy_helper.from_array(np.array(0, np.int8), f"{name}.z"),
    ]
    nodes += [
        helper.make_node("QuantizeLinear", [name, f"{name}.s", f"{name}.z"], [f"{name}.q"]),
        helper.make_node("DequantizeLinear", [f"{name}.q", f"{name}.s", f"{name}.z"], [f"{name}.dq"]),
    ]
    return f"{name}.dq"


def _weight(name: str, q: np.ndarray, scales: np.ndarray, nodes: list, inits: list, axis: int = 0) -> str:
    inits += [
        numpy_helper.from_array(q.astype(np.int8), f"{name}.q"),
        numpy_helper.from_array(scales.astype(np.float32), f"{name}.s"),
        numpy_helper.from_array(np.zeros(len(scales), np.int8), f"{name}.z"),
    ]
    nodes.append(helper.make_node("DequantizeLinear", [f"{name}.q", f"{name}.s", f"{name}.z"], [name], axis=axis))
    return name


def _exact_qdq_model():
    """x -> Q/DQ -> Conv (INT8 weights) -> BatchNorm (epsilon 0) -> Relu -> Q/DQ -> depthwise Conv -> Q/DQ -> Add
    (residual) -> Q/DQ -> Flatten -> Q/DQ -> MatMul (INT8 weights): the patterns ONNX Runtime fuses, every value a
    multiple of a power of two."""
    rng = np.random.default_rng(5)
    nodes: list = []
    inits: list = []
    x = _qdq("x", 0.5, nodes, inits)
    w1 = _weight("w1", rng.integers(-3, 4, (4, 2, 3, 3)), np.array([0.25, 0.5, 0.25, 0.125]), nodes, inits)
    w2 = _weight("w2", rng.integers(-3, 4, (4, 1, 3, 3)), np.array([0.5, 0.25, 0.5, 0.25]), nodes, inits)
    w3 = _weight("w3", rng.integers(-3, 4, (4 * 6 * 6, 5)), np.full(5, 0.125), nodes, inits, axis=1)
    inits += [
        numpy_helper.from_array(np.array([0.25, -0.5, 0.0, 1.0], np.float32), "b1"),
        numpy_helper.from_array(np.array([1.0, 0.5, 2.0, 1.0], np.float32), "bn.g"),
        numpy_helper.from_array(np.array([0.5, 0.0, -0.25, 1.0], np.float32), "bn.b"),
        numpy_helper.from_array(np.array([0.5, 1.0, 0.0, -2.0], np.float32), "bn.m"),
        numpy_helper.from_array(np.array([4.0, 1.0, 16.0, 0.25], np.float32), "bn.v"),
    ]
    nodes += [
        helper.make_node("Conv", [x, w1, "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn.g", "bn.b", "bn.m", "bn.v"], ["bn"], epsilon=0.0),
        helper.make_node("Relu", ["bn"], ["r1"]),
    ]
    r1 = _qdq("r1", 1.0, nodes, inits)  # scale 1: values above 127 saturate
    nodes.append(helper.make_node("Conv", [r1, w2], ["c2"], pads=[1, 1, 1, 1], group=4))
    c2 = _qdq("c2", 1.0, nodes, inits)
    nodes.append(helper.make_node("Add", [c2, r1], ["sum"]))
    nodes.append(helper.make_node("Flatten", [_qdq("sum", 2.0, nodes, inits)], ["flat"]))
    nodes.append(helper.make_node("MatMul", [_qdq("flat", 2.0, nodes, inits), w3], ["y"]))
    graph = helper.make_graph(
        nodes,
        "exact",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_the_check_session_keeps_every_q_dq_pair_of_an_exact_graph_bit_for_bit():
    model = _exact_qdq_model()
    rng = np.random.default_rng(6)
    x = rng.integers(-40, 41, (2, 2, 6, 6)).astype(np.float32) * 0.5
    x[0, 0, 0, :2] = (300.0, -300.0)  # saturates at +-127 steps of 0.5
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    literal = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    expected = literal.run(None, {"x": x})[0]
    simulated = session(model, threads=1, int8=True)
    got = simulated.run(None, {"x": x})[0]
    assert np.array_equal(got, expected)
    # The input's Q/DQ is in effect: a nudge inside half a step, or past the INT8 range, changes nothing.
    nudged = x + 0.2
    nudged[0, 0, 0, :2] = (1e4, -1e4)
    assert np.array_equal(simulated.run(None, {"x": nudged})[0], expected)
    # while a whole step does (the graph is not blind to its input)
    assert not np.array_equal(simulated.run(None, {"x": x + 0.5})[0], expected)


def test_the_check_session_runs_no_integer_kernel_and_keeps_the_activation_q_dq(tmp_path):
    """What ONNX Runtime made of the graph, read from the optimised model it writes: its integer kernels (another
    rounding, and 16-bit saturation on CPUs without VNNI) must not appear, the float ops and the activations' Q/DQ
    must. The same options with the Q/DQ passes left on do fuse, so the check can tell them apart."""
    import onnx

    model = _exact_qdq_model()
    made = {}
    for simulated in (True, False):
        opts, disabled = session_options(1, simulated_int8=simulated)
        opts.optimized_model_filepath = str(tmp_path / f"{simulated}.onnx")
        ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"], disabled_optimizers=disabled)
        made[simulated] = [n.op_type for n in onnx.load(opts.optimized_model_filepath).graph.node]
    integer = {"QLinearConv", "ConvInteger", "MatMulInteger", "MatMulIntegerToFloat", "QLinearMatMul", "QLinearAdd"}
    assert not integer & set(made[True])
    assert made[True].count("QuantizeLinear") == 5 and made[True].count("DequantizeLinear") >= 5
    assert {"Conv", "MatMul"} <= set(made[True]) or {"FusedConv", "MatMul"} <= set(made[True])
    assert integer & set(made[False])  # ONNX Runtime's default would have run integer kernels
