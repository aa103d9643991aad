"""The Q/DQ model edge calib writes, run in ONNX Runtime and compared with the ONNX definition of a symmetric INT8
QuantizeLinear -> DequantizeLinear pair (y = saturate(round_half_even(x / scale)) to [-128, 127], times scale) applied
by hand to the FP32 model's input and weights: scale = amax / 127 for an activation, max|w| / 127 per output channel
for a weight (the axis the operator's definition gives its output channels), one scale for the whole weight where
there is no such axis."""

from __future__ import annotations

import numpy as np
import pytest

from edge.calib import qdq
from edge.calib.stats import TensorTap
from edge.errors import EdgeError
from edge.graph.model import prepare

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def fake_quant(x: np.ndarray, scale) -> np.ndarray:
    """QuantizeLinear then DequantizeLinear with an int8 zero point of 0 (ONNX operator definitions, opset 13)."""
    scale = np.asarray(scale, np.float32)
    return (np.clip(np.round(x / scale), -128, 127) * scale).astype(np.float32)


def one_node(op, x_shape, weight, y_shape, opset=13, **attributes):
    """x -> op(x, W) -> y, W an initializer."""
    node = helper.make_node(op, ["x", "W"], ["y"], name="layer", **attributes)
    graph = helper.make_graph(
        [node],
        "one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(weight.astype(np.float32), "W")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def with_weight(model, weight):
    """The same model with W replaced."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.initializer[0].CopyFrom(numpy_helper.from_array(weight.astype(np.float32), "W"))
    return out


def spread_weight(shape, axis, rng):
    """Random weights whose output channels along ``axis`` differ in size by 1000x: one shared scale would round the
    small channels to zero."""
    w = rng.uniform(-1, 1, shape).astype(np.float32)
    sizes = np.logspace(-3, 0, shape[axis]).astype(np.float32)
    return w * sizes.reshape([-1 if d == axis else 1 for d in range(len(shape))])


def per_channel(w, axis):
    """max|w| / 127 along every axis but ``axis``, shaped to broadcast against w."""
    others = tuple(d for d in range(w.ndim) if d != axis)
    return np.abs(w).max(axis=others, keepdims=True) / np.float32(127)


CASES = {
    # op, x shape, weight shape, y shape, attributes, the weight's output-channel axis (None: one scale)
    "Conv": ("Conv", [1, 3, 4, 4], (5, 3, 3, 3), [1, 5, 2, 2], {}, 0),
    "ConvTranspose": ("ConvTranspose", [1, 4, 3, 3], (4, 6, 2, 2), [1, 6, 4, 4], {}, 1),
    "ConvTranspose group 2": ("ConvTranspose", [1, 4, 3, 3], (4, 3, 2, 2), [1, 6, 4, 4], {"group": 2}, None),
    "Gemm": ("Gemm", [2, 6], (6, 5), [2, 5], {}, 1),
    "Gemm transB": ("Gemm", [2, 6], (5, 6), [2, 5], {"transB": 1}, 0),
    "MatMul": ("MatMul", [2, 6], (6, 5), [2, 5], {}, 1),
    "MatMul batched weight": ("MatMul", [3, 2, 6], (3, 6, 5), [3, 2, 5], {}, None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_weights_take_one_scale_per_output_channel_and_the_input_the_calibrated_one(case):
    op, x_shape, w_shape, y_shape, attributes, axis = CASES[case]
    rng = np.random.default_rng(1)
    w = spread_weight(w_shape, 0 if axis is None else axis, rng)
    model = one_node(op, x_shape, w, y_shape, **attributes)
    x = rng.uniform(-3, 3, x_shape).astype(np.float32)
    amax = 2.0  # values beyond +-2 saturate

    q_model, quantized = qdq.build(model, prepare(model), {"x": amax})
    got = run(onnx.load_from_string(qdq.serialize(q_model)), x)

    w_scale = per_channel(w, axis) if axis is not None else np.abs(w).max() / np.float32(127)
    expected = run(with_weight(model, fake_quant(w, w_scale)), fake_quant(x, np.float32(amax) / np.float32(127)))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert quantized == {0}
    # The FP32 model gives something else: the pairs are in effect.
    assert not np.allclose(run(model, x), got, rtol=1e-5, atol=1e-6)


def test_a_zero_weight_channel_and_a_zero_threshold_still_get_a_positive_scale():
    # Conv 1x1 with bias: channel 1's weights are all 0, so its output is its bias alone; x's threshold is 0, so
    # every x quantizes to (almost) 0 and channel 0 is its bias too. A zero scale would give NaN.
    w = np.array([[[[1.0]], [[-0.5]]], [[[0.0]], [[0.0]]]], np.float32)
    node = helper.make_node("Conv", ["x", "W", "B"], ["y"])
    graph = helper.make_graph(
        [node],
        "zero",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 2, 2])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array([0.25, -1.5], np.float32), "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    q_model, _ = qdq.build(model, prepare(model), {"x": 0.0})
    x = np.full((1, 2, 2, 2), 0.5, np.float32)
    got = run(q_model, x)
    # 0.5 saturates at 127 steps of 1e-8 (MIN_SCALE): 1.27e-6 * (1.0 - 0.5) + 0.25 is 0.25 to float32 precision
    np.testing.assert_allclose(got[0, 0], 0.25, atol=1e-5)
    np.testing.assert_array_equal(got[0, 1], np.float32(-1.5))
    # The bias is no Q/DQ input: TensorRT quantizes it itself.
    conv = next(n for n in q_model.graph.node if n.op_type == "Conv")
    assert conv.input[2] == "B"


def test_weight_scales_by_definition():
    w = np.array([[1.0, -2.0], [0.0, 0.0], [0.5, 0.25]], np.float32)
    np.testing.assert_allclose(qdq.weight_scales(w, 0), [2 / 127, qdq.MIN_SCALE, 0.5 / 127], rtol=1e-6)
    np.testing.assert_allclose(qdq.weight_scales(w, 1), [1 / 127, 2 / 127], rtol=1e-6)
    assert qdq.weight_scales(w, None) == pytest.approx(2 / 127)
    assert qdq.weight_scales(np.zeros(0, np.float32), None) == qdq.MIN_SCALE
    # a 1-D weight per channel: each value is its own channel
    np.testing.assert_allclose(qdq.weight_scales(np.array([-3.0, 0.0, 1.0]), 0), [3 / 127, qdq.MIN_SCALE, 1 / 127])


def two_layers(opset=13):
    """x -> Conv "first" (W1) -> a -> Relu -> r -> Conv without a name (W2) -> y; a Constant node feeds an Add."""
    rng = np.random.default_rng(2)
    nodes = [
        helper.make_node("Conv", ["x", "W1"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["r"], name="act"),
        helper.make_node("Conv", ["r", "W2"], ["c"]),
        helper.make_node(
            "Constant", [], ["k"], name="const", value=numpy_helper.from_array(np.full((1, 2, 3, 3), 0.5, np.float32))
        ),
        helper.make_node("Add", ["c", "k"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3, 3])],
        [
            numpy_helper.from_array(rng.uniform(-1, 1, (2, 2, 1, 1)).astype(np.float32), "W1"),
            numpy_helper.from_array(rng.uniform(-1, 1, (2, 2, 1, 1)).astype(np.float32), "W2"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_layer_names_are_tensorrts_node_name_or_node_of_the_first_output():
    # onnx-tensorrt's ModelImporter names a layer after its node, or "node_of_" + its first output without a name
    model = two_layers()
    assert [qdq.layer_name(n) for n in model.graph.node] == ["first", "act", "node_of_c", "const", "add"]


def test_keep_fp16_takes_a_node_name_a_layer_name_or_an_output_and_refuses_the_rest():
    graph = prepare(two_layers())
    assert qdq.match_nodes(graph, ["first"]) == ({0}, ["first"])
    assert qdq.match_nodes(graph, ["node_of_c", "r"]) == ({1, 2}, ["act", "node_of_c"])
    assert qdq.match_nodes(graph, []) == (set(), [])
    with pytest.raises(EdgeError) as err:
        qdq.match_nodes(graph, ["second"])
    # the examples are the layers that take Q/DQ
    assert str(err.value) == (
        "--keep-fp16 second: no node has this name, layer name or output tensor (names look like: first, node_of_c); "
        "the accuracy report lists the layers by these names"
    )
    with pytest.raises(EdgeError) as err:
        qdq.match_nodes(graph, ["k"])
    assert str(err.value) == "--keep-fp16 k: is a Constant node (weights), not a layer; name a layer such as first, node_of_c"


def test_without_a_quantizable_layer_the_examples_are_the_other_layers():
    model = two_layers()
    for node in model.graph.node:
        if node.op_type == "Conv":
            node.op_type = "Mul"  # two inputs, as a Conv here has
    with pytest.raises(EdgeError, match=r"names look like: first, act, node_of_c\)"):
        qdq.match_nodes(prepare(model), ["nothing"])
    const = next(n for n in model.graph.node if n.op_type == "Constant")
    model.graph.node.remove(const)
    model.graph.node.insert(0, const)  # first in the file: still weights, not a layer to name
    with pytest.raises(EdgeError, match=r"names look like: first, act, node_of_c\)"):
        qdq.match_nodes(prepare(model), ["nothing"])


def test_a_kept_layer_gets_no_pairs_and_an_activation_without_a_threshold_none():
    model = two_layers()
    graph = prepare(model)
    x = np.random.default_rng(3).uniform(-1, 1, (1, 2, 3, 3)).astype(np.float32)
    q_model, quantized = qdq.build(model, graph, {"x": 1.0, "r": 1.0}, keep_fp16={0})
    assert quantized == {2}
    ops = [n.op_type for n in q_model.graph.node]
    assert ops.count("QuantizeLinear") == 2  # r and W2: nothing in front of the kept "first"
    first = next(n for n in q_model.graph.node if n.name == "first")
    assert list(first.input) == ["x", "W1"]
    # "r" has no threshold: its Conv's weight alone is quantized, and it still counts as quantized
    q_model, quantized = qdq.build(model, graph, {"x": 1.0})
    assert quantized == {0, 2}
    second = next(n for n in q_model.graph.node if n.output[0] == "c")
    assert second.input[0] == "r" and second.input[1] != "W2"
    np.testing.assert_allclose(run(q_model, x), run(model, x), atol=0.05)  # an INT8 copy, not another model


def test_one_pair_per_tensor_however_many_layers_read_it():
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["a"]), helper.make_node("MatMul", ["x", "W"], ["b"])]
    nodes.append(helper.make_node("Add", ["a", "b"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "shared",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(rng.uniform(-1, 1, (3, 3)).astype(np.float32), "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    q_model, quantized = qdq.build(model, prepare(model), {"x": 1.0})
    assert quantized == {0, 1}
    assert [n.op_type for n in q_model.graph.node].count("QuantizeLinear") == 2  # x and W, once each
    qdq.serialize(q_model)  # names are unique: the checker passes


def test_an_old_opset_is_lifted_to_13_and_one_that_cannot_be_is_one_line():
    model = two_layers(opset=11)
    q_model, _ = qdq.build(model, prepare(model), {"x": 1.0, "r": 1.0})
    assert [o.version for o in q_model.opset_import if o.domain in ("", "ai.onnx")] == [13]
    assert [o.version for o in model.opset_import] == [11]  # the caller's model is left as it was
    spelled = two_layers(opset=11)
    spelled.opset_import[0].domain = "ai.onnx"  # ONNX: the default domain's other name
    q_model, _ = qdq.build(spelled, prepare(spelled), {"x": 1.0, "r": 1.0})
    assert [(o.domain, o.version) for o in q_model.opset_import] == [("ai.onnx", 13)]
    newer = two_layers(opset=17)
    q_model, _ = qdq.build(newer, prepare(newer), {"x": 1.0})
    assert [o.version for o in q_model.opset_import] == [17]
    # an op the converter has no schema for: it gives up
    graph = helper.make_graph(
        [helper.make_node("NoSuchOp", ["x"], ["y"])],
        "old",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    old = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    with pytest.raises(EdgeError, match=r"^--qdq: the model is opset 11 and cannot be converted to 13 \([^\n]*NoSuchOp"):
        qdq.build(old, prepare(old), {})


def test_each_alone_quantized_twin_reads_the_fp32_inputs():
    model = two_layers()
    graph = prepare(model)
    amax = {"x": 1.0, "r": 1.0}
    twins, pairs = qdq.alone_model(model, graph, amax, {0, 1, 2})
    # the Relu takes no Q/DQ, so it has no twin
    assert pairs == {0: ("a", "a__int8_alone"), 2: ("c", "c__int8_alone")}
    assert [n.name for n in twins.graph.node if n.name.endswith(qdq.ALONE)] == ["first__int8_alone", "c__int8_alone"]
    x = np.random.default_rng(5).uniform(-2, 2, (1, 2, 3, 3)).astype(np.float32)
    tap = TensorTap(twins, [["a", "a__int8_alone", "r", "c", "c__int8_alone", "y"]])
    out = next(tap.run(x))
    w1, w2 = (numpy_helper.to_array(i) for i in model.graph.initializer)
    s = np.float32(1.0) / np.float32(127)
    # the FP32 path is untouched
    np.testing.assert_array_equal(out["y"], run(model, x))
    np.testing.assert_allclose(out["a"], np.einsum("oc,nchw->nohw", w1[:, :, 0, 0], x), rtol=1e-5, atol=1e-6)
    # each twin: its own inputs through Q/DQ, from the FP32 tensors before it
    for got, inp, w in ((out["a__int8_alone"], x, w1), (out["c__int8_alone"], out["r"], w2)):
        wq = fake_quant(w, per_channel(w, 0))[:, :, 0, 0]
        np.testing.assert_allclose(got, np.einsum("oc,nchw->nohw", wq, fake_quant(inp, s)), rtol=1e-5, atol=1e-6)


def test_a_model_the_checker_refuses_is_one_line():
    model = two_layers()
    model.graph.node[1].input[0] = "nowhere"
    with pytest.raises(EdgeError, match=r"^--qdq: the Q/DQ model does not pass the ONNX checker \(.*nowhere"):
        qdq.serialize(model)


def test_a_missing_onnx_names_the_q_dq_model(monkeypatch):
    import sys

    from edge.lazy import MissingDependency

    model = two_layers()
    graph = prepare(model)
    monkeypatch.setitem(sys.modules, "onnx", None)
    for write in (lambda: qdq.build(model, graph, {}), lambda: qdq.serialize(model)):
        with pytest.raises(MissingDependency, match="'onnx' is needed for writing a Q/DQ model but"):
            write()


def test_pairs_are_named_after_their_tensor_and_axis_so_one_weight_can_have_two():
    """TensorRT names its layers after the ONNX nodes, so these names are what its build log shows; one weight read by
    a ConvTranspose per output channel and by a grouped one per tensor gets two pairs that must not collide."""
    w = np.random.default_rng(5).uniform(-1, 1, (4, 3, 2, 2)).astype(np.float32)
    nodes = [
        helper.make_node("ConvTranspose", ["x", "W"], ["y1"], name="up1"),
        helper.make_node("ConvTranspose", ["x", "W"], ["y2"], name="up2", group=2),
    ]
    graph = helper.make_graph(
        nodes,
        "shared",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 3])],
        [
            helper.make_tensor_value_info("y1", TensorProto.FLOAT, [1, 3, 4, 4]),
            helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 6, 4, 4]),
        ],
        [numpy_helper.from_array(w, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    q_model, quantized = qdq.build(model, prepare(model), {"x": 1.0})
    qdq.serialize(q_model)  # passes the checker: no name twice
    names = [(n.op_type, n.name, n.output[0]) for n in q_model.graph.node if n.op_type.endswith("Linear")]
    assert names == [
        ("QuantizeLinear", "x_QuantizeLinear", "x_quantized"),
        ("DequantizeLinear", "x_DequantizeLinear", "x_dequantized"),
        ("QuantizeLinear", "W_axis1_QuantizeLinear", "W_axis1_quantized"),
        ("DequantizeLinear", "W_axis1_DequantizeLinear", "W_axis1_dequantized"),
        ("QuantizeLinear", "W_QuantizeLinear", "W_quantized"),
        ("DequantizeLinear", "W_DequantizeLinear", "W_dequantized"),
    ]
    assert {i.name for i in q_model.graph.initializer} >= {"W_axis1_scale", "W_scale", "x_scale", "x_zero_point"}
    assert quantized == {0, 1}
