"""Q/DQ beyond the weighted layers, placed as TensorRT's Q/DQ placement recommendations say (developer guide): the
skip input of a residual Add (so the Add fuses into the convolution before it and the fused layer writes INT8), the
input of pooling, one scale across a Concat's tensors. Which branch of an Add is the convolution's follows NVIDIA
Model Optimizer's rule (``build_non_residual_input_map``: with a convolution on both branches, the longer path back
to where they split is the convolution branch). The graphs are the guide's own examples written in ONNX; the numbers
come from the ONNX definitions of QuantizeLinear and DequantizeLinear applied by hand."""

from __future__ import annotations

import numpy as np
import pytest

from edge.calib import fusions, qdq
from edge.graph.model import prepare

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

C = 4  # channels everywhere: 1x1 convolutions keep the shapes equal for every Add and Concat


def model_of(nodes, inits, outputs=("y",), x_shape=(1, C, 4, 4)):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def conv(name, x, y, w="W"):
    return helper.make_node("Conv", [x, w], [y], name=name)


def weights(seed=0, n=1):
    rng = np.random.default_rng(seed)
    return {f"W{k}" if n > 1 else "W": rng.uniform(-1, 1, (C, C, 1, 1)) for k in range(n)}


def bn(name, x, y):
    return helper.make_node("BatchNormalization", [x, "g", "b", "m", "v"], [y], name=name)


BN = {"g": np.ones(C), "b": np.zeros(C), "m": np.zeros(C), "v": np.ones(C)}


def slots(model):
    """{node name: input slots that read a DequantizeLinear output} of a Q/DQ model."""
    dq = {n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    return {
        n.name: tuple(k for k, i in enumerate(n.input) if i in dq)
        for n in model.graph.node
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear")
    }


def resnet_block():
    """The guide's skip connection: stem conv -> Relu = s; s -> conv -> BN -> Relu -> conv -> BN = f; Add(f, s)."""
    nodes = [
        conv("stem", "x", "c0", "W0"),
        helper.make_node("Relu", ["c0"], ["s"], name="stem_relu"),
        conv("conv1", "s", "c1", "W1"),
        bn("bn1", "c1", "b1"),
        helper.make_node("Relu", ["b1"], ["r1"], name="relu1"),
        conv("conv2", "r1", "c2", "W2"),
        bn("bn2", "c2", "f"),
        helper.make_node("Add", ["f", "s"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="out_relu"),
    ]
    return model_of(nodes, {**weights(1, 3), **BN})


def test_a_skip_connection_quantizes_the_identity_input_and_not_the_convolution_branch():
    graph = prepare(resnet_block())
    add = next(i for i, n in enumerate(graph.nodes) if n.name == "add")
    assert fusions.conv_source(graph, "f") == next(i for i, n in enumerate(graph.nodes) if n.name == "conv2")
    assert fusions.conv_source(graph, "s") == 0  # Relu after the stem convolution: also a convolution's output
    assert fusions.conv_source(graph, "x") is None  # the network input: no producer
    assert fusions.add_slots(graph, add) == (1,)  # "s": one node back to where the branches split; "f" is five
    amax = {"s": 2.0, "r1": 3.0, "f": 5.0, "c0": 2.5, "x": 1.0}
    q_model, quantized = qdq.build(graph.model, graph, amax)
    got = slots(q_model)
    assert got["add"] == (1,) and got["out_relu"] == ()
    assert add in quantized
    # the Add's skip input and conv1's input are the same tensor: one pair, read by both
    assert [n.input[0] for n in q_model.graph.node if n.op_type == "QuantizeLinear"].count("s") == 1


def test_the_skip_input_is_quantized_with_its_threshold_by_the_onnx_definitions():
    model = resnet_block()
    graph = prepare(model)
    q_model, _ = qdq.build(model, graph, {"x": 1.0, "s": 0.7, "r1": 3.0})
    x = np.random.default_rng(3).uniform(-1, 1, (1, C, 4, 4)).astype(np.float32)
    q = ort.InferenceSession(_with_outputs(q_model, ["f", "s", "a"]).SerializeToString(), providers=["CPUExecutionProvider"])
    f, s, a = q.run(["f", "s", "a"], {"x": x})
    scale = np.float32(0.7 / 127)
    fq_s = np.clip(np.round(s / scale), -128, 127) * scale  # QuantizeLinear then DequantizeLinear, zero point 0
    np.testing.assert_allclose(a, f + fq_s, rtol=1e-6, atol=1e-6)  # the branch f is added as it is
    assert np.abs(s - fq_s).max() > 1e-3  # the skip input really was rounded (and clipped at 0.7)


def _with_outputs(model, names):
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names)
    return out


def test_a_downsampling_block_quantizes_the_shortcut_convolution_not_the_long_branch():
    """Both branches end in a convolution (ResNet's downsampling shortcut): the one with the longer way back to the
    split is the branch TensorRT fuses the Add into; the 1x1 shortcut's output is the input that gets Q/DQ."""
    nodes = [
        helper.make_node("Relu", ["x"], ["s"], name="in_relu"),
        conv("long1", "s", "l1", "W0"),
        helper.make_node("Relu", ["l1"], ["l1r"], name="long_relu"),
        conv("long2", "l1r", "l2", "W1"),
        conv("short", "s", "sc", "W2"),
        helper.make_node("Add", ["sc", "l2"], ["y"], name="add"),
    ]
    graph = prepare(model_of(nodes, weights(2, 3)))
    add = next(i for i, n in enumerate(graph.nodes) if n.name == "add")
    assert fusions.add_slots(graph, add) == (0,)
    # swapped operands: the same branch is chosen
    nodes[-1] = helper.make_node("Add", ["l2", "sc"], ["y"], name="add")
    graph = prepare(model_of(nodes, weights(2, 3)))
    assert fusions.add_slots(graph, add) == (1,)


@pytest.mark.parametrize(
    "case, add_inputs, extra",
    [
        ("a constant operand (a bias)", ["c", "k"], []),
        ("the network input", ["c", "x"], []),
        ("no convolution on either side", ["r", "r2"], [helper.make_node("Relu", ["c"], ["r2"], name="relu2")]),
        ("both sides the same convolution", ["c", "r"], []),
        ("a convolution that is itself the split", ["c", "e"], [helper.make_node("Erf", ["c"], ["e"], name="erf")]),
        ("the same, operands swapped", ["e", "c"], [helper.make_node("Erf", ["c"], ["e"], name="erf")]),
    ],
)
def test_adds_that_are_not_skip_connections_get_no_pairs(case, add_inputs, extra):
    nodes = [
        conv("conv", "x", "c"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        *extra,
        helper.make_node("Add", add_inputs, ["y"], name="add"),
    ]
    if case == "no convolution on either side":
        nodes[1] = helper.make_node("Erf", ["c"], ["r"], name="erf1")
        nodes[2] = helper.make_node("Erf", ["c"], ["r2"], name="erf2")
    graph = prepare(model_of(nodes, {**weights(4), "k": np.full((1, C, 1, 1), 0.5)}))
    add = next(i for i, n in enumerate(graph.nodes) if n.name == "add")
    assert fusions.add_slots(graph, add) == (), case
    q_model, _ = qdq.build(graph.model, graph, {t: 1.0 for t in ("x", "c", "r", "r2", "e")})
    assert slots(q_model)["add"] == ()


def test_after_silu_the_sum_is_its_own_int8_layer_and_both_convolution_outputs_are_quantized():
    """YOLO's bottleneck with BatchNorm folded: s + SiLU(conv(s)), SiLU written as x * Sigmoid(x). TensorRT runs the
    SiLU and the sum as one pointwise kernel after the convolution (published YOLOv5 profile), so the sum does not
    fuse into the convolution: both its inputs, each a convolution's output, get Q/DQ."""
    nodes = [
        conv("stem", "x", "c0", "W0"),
        helper.make_node("Sigmoid", ["c0"], ["g0"], name="sig0"),
        helper.make_node("Mul", ["c0", "g0"], ["s"], name="silu0"),
        conv("conv1", "s", "c1", "W1"),
        helper.make_node("Sigmoid", ["c1"], ["g1"], name="sig1"),
        helper.make_node("Mul", ["g1", "c1"], ["f"], name="silu1"),
        helper.make_node("Add", ["s", "f"], ["y"], name="add"),
    ]
    graph = prepare(model_of(nodes, weights(5, 2)))
    add = next(i for i, n in enumerate(graph.nodes) if n.name == "add")
    assert fusions.conv_source(graph, "f") == 3 and fusions.conv_source(graph, "f", sum_fuses=True) is None
    assert fusions.add_slots(graph, add) == (0, 1)


def test_a_feature_pyramid_sum_quantizes_the_convolution_side_only():
    """RetinaFace's FPN: LeakyReLU(conv(x)) + Resize(coarser level). The Resize output does not come from a
    convolution's epilogue; the lateral convolution's does."""
    nodes = [
        conv("lateral", "x", "c", "W0"),
        helper.make_node("LeakyRelu", ["c"], ["l"], name="leaky", alpha=0.1),
        conv("coarse", "x", "k", "W1"),
        helper.make_node("MaxPool", ["k"], ["kp"], name="down", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Resize", ["kp", "", "scales"], ["up"], name="up", mode="nearest"),
        helper.make_node("Add", ["l", "up"], ["y"], name="add"),
    ]
    graph = prepare(model_of(nodes, {**weights(8, 2), "scales": [1, 1, 2, 2]}))
    add = next(i for i, n in enumerate(graph.nodes) if n.name == "add")
    assert fusions.add_slots(graph, add) == (0,)


def test_pooling_inputs_get_a_pair():
    nodes = [
        conv("conv", "x", "c"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["m"], name="maxpool", kernel_shape=[2, 2]),
        helper.make_node("GlobalAveragePool", ["m"], ["y"], name="gap"),
    ]
    graph = prepare(model_of(nodes, weights(6)))
    q_model, quantized = qdq.build(graph.model, graph, {"x": 1.0, "r": 2.0, "m": 2.0})
    got = slots(q_model)
    assert got["maxpool"] == (0,) and got["gap"] == (0,) and got["relu"] == ()
    assert quantized == {0, 2, 3}


def test_a_concat_shares_one_scale_across_its_tensors():
    """SPPF-like: y = conv(x); m = MaxPool(y); Concat(y, m) -> conv. y is read by the pooling and the Concat; its
    pair, the pooling's and the one before the last convolution all take the group's largest threshold."""
    nodes = [
        conv("conv0", "x", "y0", "W0"),
        helper.make_node("MaxPool", ["y0"], ["m"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["y0", "m"], ["cat"], name="cat", axis=1),
        helper.make_node("Conv", ["cat", "W1"], ["y"], name="conv1"),
    ]
    inits = {"W0": np.random.default_rng(7).uniform(-1, 1, (C, C, 1, 1)), "W1": np.ones((C, 2 * C, 1, 1))}
    graph = prepare(model_of(nodes, inits))
    plan = fusions.plan(graph)
    assert plan.groups() == {"cat": ["cat", "m", "y0"]}
    q_model, _ = qdq.build(graph.model, graph, {"x": 1.0, "y0": 2.0, "m": 1.5, "cat": 2.0 + 0.5})
    scales = {
        n.input[0]: float(numpy_helper.to_array(next(i for i in q_model.graph.initializer if i.name == n.input[1])))
        for n in q_model.graph.node
        if n.op_type == "QuantizeLinear" and not n.input[0].startswith("W")
    }
    assert scales["y0"] == pytest.approx(2.5 / 127) and scales["cat"] == pytest.approx(2.5 / 127)
    assert scales["x"] == pytest.approx(1.0 / 127)  # not a Concat's tensor: its own threshold


def test_a_constant_concatenated_keeps_out_of_the_shared_scale():
    """A Concat of an activation and a constant (a learned token, an extra channel of ones): TensorRT takes the
    constant as weights, so only the activation and the output share the scale."""
    nodes = [
        conv("conv0", "x", "y0", "W0"),
        helper.make_node("Concat", ["y0", "k"], ["cat"], name="cat", axis=1),
        helper.make_node("Conv", ["cat", "W1"], ["y"], name="conv1"),
    ]
    inits = {"W0": np.ones((C, C, 1, 1)), "k": np.ones((1, C, 4, 4)), "W1": np.ones((C, 2 * C, 1, 1))}
    plan = fusions.plan(prepare(model_of(nodes, inits)))
    assert plan.groups() == {"cat": ["cat", "y0"]}


def test_a_kept_add_or_pooling_layer_gets_no_pair():
    model = resnet_block()
    graph = prepare(model)
    add = next(i for i, n in enumerate(graph.nodes) if n.name == "add")
    q_model, quantized = qdq.build(model, graph, {"s": 1.0, "r1": 1.0, "x": 1.0}, {add})
    assert slots(q_model)["add"] == () and add not in quantized
    assert slots(q_model)["conv1"] == (0, 1)  # the tensor's pair still feeds the convolution that reads it


def test_the_alone_twin_of_an_add_reads_its_skip_input_through_qdq():
    model = resnet_block()
    graph = prepare(model)
    add = next(i for i, n in enumerate(graph.nodes) if n.name == "add")
    twins, pairs = qdq.alone_model(model, graph, {"s": 1.0, "r1": 1.0, "x": 1.0}, {add})
    assert pairs == {add: ("a", "a" + qdq.ALONE)}
    assert slots(twins)["add" + qdq.ALONE] == (1,) and slots(twins)["add"] == ()


# Where this placement and Model Optimizer's differ, with why (every other recorded node must agree).
MODELOPT_DIFFERS = {
    ("picodet-layout", "p2o.Add.132"): "both inputs are HardSwish written out (x * clip(x + 3, 0, 6) / 6) after a "
    "convolution: edge follows the activation back to each convolution and quantizes both; Model Optimizer's "
    "partitions stop at the two-input Mul and leave the sum in float",
}


# Adds of a constant whose data input Model Optimizer quantizes (edge leaves every Add of a constant in float).
CONST_ADDS_QUANTIZED_BY_MODELOPT = {"picodet-layout": 94}  # its 94 HardSwish x + 3


def _modelopt_cases():
    import json
    from pathlib import Path

    record = json.loads((Path(__file__).parent / "fixtures" / "modelopt_placement.json").read_text())
    assert record["modelopt"] == "0.47.0"
    return sorted(record["models"].items())


@pytest.mark.slow
@pytest.mark.parametrize("asset, recorded", _modelopt_cases(), ids=[a for a, _ in _modelopt_cases()])
def test_real_models_get_model_optimizers_placement_for_adds_pooling_and_concats(asset, recorded):
    """Model Optimizer 0.47's choices, recorded by scripts/modelopt_placement.py on the same files: each Add's and
    pooling node's quantized inputs, and which of a Concat's tensors share one scale."""
    import hashlib

    from edge import assets

    path = assets.resolve(asset, quiet=True)
    assert path.name == recorded["file"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == recorded["sha256"]
    graph = prepare(str(path))
    plan = fusions.plan(graph)
    agreed, differs, const_adds = 0, [], 0
    for idx, node in enumerate(graph.nodes):
        theirs = recorded["slots"].get(node.output[0]) if node.output else None
        if theirs is None or node.op_type == "Concat":
            continue
        if node.op_type == "Add" and any(n in graph.consts for n in node.input):
            # An Add of a constant (a bias, HardSwish's x + 3) is left in float here; Model Optimizer quantizes some
            # of them where the data input has a pair for another reader (picodet's HardSwish).
            assert idx not in plan.inputs
            const_adds += bool(theirs)
            continue
        ours = list(plan.inputs.get(idx, ()))
        if ours == theirs:
            agreed += 1
        elif (asset, node.name) not in MODELOPT_DIFFERS:
            differs.append((node.name, node.op_type, ours, theirs))
    assert not differs, differs
    assert const_adds == CONST_ADDS_QUANTIZED_BY_MODELOPT.get(asset, 0)
    assert agreed >= len([1 for k in MODELOPT_DIFFERS if k[0] == asset]) and agreed > 0
    for out, scales in recorded["concat_scales"].items():
        if len(scales) >= 2 and len(set(scales.values())) == 1:  # Model Optimizer shares one scale here
            assert len({plan.shared.get(t) for t in scales}) == 1, (out, scales)
            assert plan.shared.get(next(iter(scales))) is not None


def test_tensorrt_rtx_writes_the_skip_tensor_once_in_int8_with_the_skip_quantized():
    """The reason for the rule, seen in a real TensorRT compiler (TensorRT-RTX's CPU-only build, its verbose kernel
    listing): with Q/DQ only before the convolutions, the kernel after the stem writes the skip tensor twice, in INT8
    for the next convolution and in float for the Add; with the skip quantized, once in INT8."""
    pytest.importorskip("tensorrt_rtx")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import qdq_placement

    model = resnet_block()
    graph = prepare(model)
    written = {}
    for fused in (False, True):
        q_model, _ = qdq.build(model, graph, {"x": 1.0, "s": 1.0, "r1": 1.0}, fused=fused)
        kernels = qdq_placement.kernels(qdq_placement.build_log(q_model.SerializeToString()))
        assert len(kernels) == 7  # quantize x, 3 convolutions, 3 epilogues
        written[fused] = kernels[2][1]  # the stem's epilogue: ReLU, then the skip tensor s
    s_int8 = C * 4 * 4  # [1, 4, 4, 4] at one byte
    assert written[False] == {"Int8": s_int8, "Float": 4 * s_int8}
    assert written[True] == {"Int8": s_int8}


@pytest.mark.slow
def test_the_placement_benchmark_quick_run_prints_both_tables():
    import re
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("tensorrt_rtx")
    bench = Path(__file__).resolve().parents[1] / "bench" / "qdq_placement.py"
    proc = subprocess.run([sys.executable, str(bench), "--quick"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = re.findall(r"^  centerface +(weighted|fusions) +(\d+) +(\d+) +[\d.]+ +([\d.]+) +([\d.]+)x$", proc.stdout, re.M)
    assert [r[0] for r in rows] == ["weighted", "fusions"]
    assert int(rows[1][1]) == int(rows[0][1]) + 13  # CenterFace's 13 residual Adds take a pair each
    assert float(rows[1][3]) < float(rows[0][3])  # and the compiler writes fewer float bytes between kernels
    assert re.search(r"^  fusions +\d+ layers quantized  top-1 [\d.]+%$", proc.stdout, re.M)
    assert re.search(
        r"McNemar: right only with weighted \d+, only with fusions \d+, exact two-sided p = [\d.]+$", proc.stdout, re.M
    )


def test_two_convolutions_of_two_network_inputs_quantize_the_first_input():
    """No common ancestor: both branches are 0 nodes from 'where they split', so neither is longer; Model Optimizer's
    rule then takes the second input as the convolution branch and quantizes the first."""
    nodes = [conv("a", "x", "ca", "W0"), conv("b", "x2", "cb", "W1"), helper.make_node("Add", ["ca", "cb"], ["y"], name="add")]
    graph = helper.make_graph(
        nodes,
        "two",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, C, 4, 4]) for n in ("x", "x2")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in weights(9, 2).items()],
    )
    g = prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert fusions.add_slots(g, 2) == (0,)


def test_a_convolution_that_is_the_split_is_found_behind_a_stem():
    """x -> stem -> conv = c; c + Erf(c): the nearest common ancestor is conv itself (one node from each side), not
    the stem further up, so the sum is no skip connection."""
    nodes = [
        conv("stem", "x", "c0", "W0"),
        conv("conv", "c0", "c", "W1"),
        helper.make_node("Erf", ["c"], ["e"], name="erf"),
        helper.make_node("Add", ["c", "e"], ["y"], name="add"),
    ]
    g = prepare(model_of(nodes, weights(10, 2)))
    assert fusions.add_slots(g, 3) == ()


def test_operands_swapped_give_the_same_inputs_and_a_gate_stops_at_the_network_input():
    nodes = [
        conv("lateral", "x", "c", "W0"),
        helper.make_node("LeakyRelu", ["c"], ["l"], name="leaky", alpha=0.1),
        helper.make_node("Erf", ["x"], ["e"], name="erf"),
        helper.make_node("Add", ["e", "l"], ["y"], name="add"),  # the convolution's side second
        helper.make_node("Mul", ["c", "x"], ["p"], name="product"),  # a product with the network input: no gate
        helper.make_node("Add", ["p", "e"], ["y2"], name="add2"),
    ]
    g = prepare(model_of(nodes, weights(11, 1) | {"W0": weights(11, 1)["W"]}, outputs=("y", "y2")))
    assert fusions.add_slots(g, 3) == (1,)
    assert fusions.conv_source(g, "p") is None and fusions.add_slots(g, 5) == ()


def test_no_convolution_before_an_add_is_no_pair_even_where_a_weighted_layer_reads_an_input():
    nodes = [
        helper.make_node("Erf", ["x"], ["a"], name="erf_a"),
        helper.make_node("Erf", ["x"], ["b"], name="erf_b"),
        helper.make_node("Add", ["a", "b"], ["s"], name="add"),
        conv("reader", "a", "y", "W"),  # a is read by a convolution: it has a pair, but the sum is not quantized
    ]
    g = prepare(model_of(nodes, weights(12), outputs=("s", "y")))
    assert fusions.add_slots(g, 2) == ()


def test_a_sum_of_x_and_a_function_of_x_is_no_gate():
    """Only a product gates (SiLU, HardSwish): c + Sigmoid(c) after a convolution is not its epilogue."""
    nodes = [
        conv("conv", "x", "c"),
        helper.make_node("Sigmoid", ["c"], ["g"], name="sig"),
        helper.make_node("Add", ["c", "g"], ["t"], name="not_a_gate"),
    ]
    g = prepare(model_of(nodes, weights(13), outputs=("t",)))
    assert fusions.conv_source(g, "t") is None


def test_a_graph_with_no_add_pooling_or_concat_gets_an_empty_plan():
    g = prepare(model_of([conv("conv", "x", "y")], weights(14)))
    plan = fusions.plan(g)
    assert plan.inputs == {} and plan.shared == {} and plan.groups() == {}
