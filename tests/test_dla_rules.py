"""One small ONNX per DLA rule, on each side of its limit (CPU only: this checks the predictor, not TensorRT)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from edge.dla.predict import _predict, predict  # noqa: E402
from edge.dla.rules import RULES, TABLES, limits_for  # noqa: E402
from edge.errors import EdgeError  # noqa: E402
from edge.graph.model import prepare  # noqa: E402

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


def build(nodes, inputs, inits=None, opset=13, dtype=F32):
    """A model from nodes; ``inputs`` maps name -> shape, ``inits`` name -> array; 'y' is the output."""
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info(n, dtype, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in (inits or {}).items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def verdict(model, target="orin", trt="10.3", precision="fp16", node=-1):
    return predict(model, target, trt, None, precision).nodes[node]


def w(*shape):
    return np.ones(shape, np.float32)


def conv(x_shape=(1, 3, 64, 64), w_shape=(8, 3, 3, 3), **attrs):
    return build([helper.make_node("Conv", ["x", "w"], ["y"], **attrs)], {"x": list(x_shape)}, {"w": w(*w_shape)})


def deconv(w_shape=(4, 4, 2, 2), **attrs):
    return build([helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)], {"x": [1, 4, 8, 8]}, {"w": w(*w_shape)})


def pool(op="MaxPool", x_shape=(1, 4, 32, 32), **attrs):
    return build([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": list(x_shape)})


def unary(op, x_shape=(1, 4, 8, 8), opset=13, dtype=F32, **attrs):
    return build([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": list(x_shape)}, opset=opset, dtype=dtype)


def binary(op, b, x_shape=(1, 8, 4, 4), runtime_b=False, dtype=F32):
    inputs = {"x": list(x_shape), **({"b": list(b.shape)} if runtime_b else {})}
    return build([helper.make_node(op, ["x", "b"], ["y"])], inputs, None if runtime_b else {"b": b}, dtype=dtype)


def resize(scales=(1, 1, 2, 2), sizes=None, **attrs):
    inits = {"roi": np.zeros(0, np.float32), "scales": np.array(scales if sizes is None else [], np.float32)}
    names = ["x", "roi", "scales"]
    if sizes is not None:
        inits["sizes"] = np.array(sizes, np.int64)
        names.append("sizes")
    return build([helper.make_node("Resize", names, ["y"], **attrs)], {"x": [1, 4, 8, 8]}, inits)


def slice_(starts, ends, axes, steps=None, runtime_starts=False):
    inits = {"e": np.array(ends), "a": np.array(axes), **({"s": np.array(starts)} if not runtime_starts else {})}
    names = ["x", "s", "e", "a"]
    if steps is not None:
        inits["st"] = np.array(steps)
        names.append("st")
    inputs = {"x": [2, 8, 8, 8], **({"s": [len(starts)]} if runtime_starts else {})}
    model = build([helper.make_node("Slice", names, ["y"])], inputs, inits)
    if runtime_starts:
        model.graph.input[1].type.tensor_type.elem_type = TensorProto.INT64
    return model


# (case id, model factory, predict kwargs, the rule expected to send the node to GPU or None for DLA)
CASES = [
    ("conv kernel 32", lambda: conv((1, 3, 64, 64), (8, 3, 32, 32)), {}, None),
    ("conv kernel 33", lambda: conv((1, 3, 64, 64), (8, 3, 33, 33)), {}, "conv.kernel"),
    ("conv stride 8", lambda: conv(strides=[8, 8]), {}, None),
    ("conv stride 9", lambda: conv(strides=[9, 9]), {}, "conv.stride"),
    ("conv pad 31 < kernel 32", lambda: conv(w_shape=(8, 3, 32, 32), pads=[31, 31, 31, 31]), {}, None),
    ("conv pad 3 = kernel 3", lambda: conv(pads=[3, 3, 3, 3]), {}, "conv.pad"),
    ("conv dilation 32", lambda: conv((1, 3, 80, 80), dilations=[32, 32]), {}, None),
    ("conv dilation 33", lambda: conv((1, 3, 80, 80), dilations=[33, 33]), {}, "conv.dilation"),
    (
        "conv runtime weights",
        lambda: build([helper.make_node("Conv", ["x", "w"], ["y"])], {"x": [1, 3, 8, 8], "w": [8, 3, 3, 3]}),
        {},
        "conv.weights",
    ),
    ("conv 8192 maps", lambda: conv((1, 1, 2, 2), (8192, 1, 1, 1)), {}, None),
    ("conv 8193 maps", lambda: conv((1, 1, 2, 2), (8193, 1, 1, 1)), {}, "gen.dim"),
    ("deconv kernel 2 stride 2", lambda: deconv(strides=[2, 2]), {}, None),
    ("deconv kernel 1x64 (wide)", lambda: deconv((4, 4, 1, 64)), {}, None),
    ("deconv kernel 64x64", lambda: deconv((4, 4, 64, 64)), {}, "deconv.kernel"),
    ("deconv stride 33", lambda: deconv(strides=[33, 33]), {}, "deconv.stride"),
    ("deconv padding 1", lambda: deconv((4, 4, 3, 3), pads=[1, 1, 1, 1]), {}, "deconv.pad"),
    ("deconv groups 2", lambda: deconv((4, 2, 2, 2), group=2), {}, "deconv.groups"),
    ("deconv dilation 2", lambda: deconv(dilations=[2, 2]), {}, "deconv.dilation"),
    ("maxpool window 8", lambda: pool(kernel_shape=[8, 8]), {}, None),
    ("maxpool window 9", lambda: pool(kernel_shape=[9, 9]), {}, "pool.window"),
    ("maxpool stride 16", lambda: pool(kernel_shape=[2, 2], strides=[16, 16]), {}, None),
    ("maxpool stride 17", lambda: pool(kernel_shape=[2, 2], strides=[17, 17]), {}, "pool.stride"),
    ("maxpool pad 7", lambda: pool(kernel_shape=[8, 8], pads=[7, 7, 7, 7]), {}, None),
    ("maxpool pad 8", lambda: pool(kernel_shape=[8, 8], pads=[8, 8, 8, 8]), {}, "pool.pad"),
    ("lppool", lambda: pool("LpPool", kernel_shape=[2, 2]), {}, "pool.kind"),
    ("avgpool exclusive on orin", lambda: pool("AveragePool", kernel_shape=[2, 2]), {}, None),
    (
        "avgpool exclusive on xavier",
        lambda: pool("AveragePool", kernel_shape=[2, 2]),
        {"target": "xavier", "trt": "8.5"},
        "pool.exclusive",
    ),
    (
        "avgpool inclusive on xavier",
        lambda: pool("AveragePool", kernel_shape=[2, 2], count_include_pad=1),
        {"target": "xavier", "trt": "8.5"},
        None,
    ),
    ("global average pool", lambda: unary("GlobalAveragePool"), {}, "pool.global"),
    ("global max pool on 10.3", lambda: unary("GlobalMaxPool"), {}, None),
    ("global max pool on 8.5", lambda: unary("GlobalMaxPool"), {"trt": "8.5"}, "reduce.op"),
    ("reduce max over C", lambda: unary("ReduceMax", axes=[1]), {}, None),
    ("reduce max over batch", lambda: unary("ReduceMax", axes=[0]), {}, "reduce.axes"),
    ("reduce mean", lambda: unary("ReduceMean", axes=[1]), {}, "reduce.op"),
    ("relu", lambda: unary("Relu"), {}, None),
    ("leaky relu", lambda: unary("LeakyRelu"), {}, None),
    ("hard sigmoid", lambda: unary("HardSigmoid"), {}, "act.kind"),
    ("hard swish", lambda: unary("HardSwish", opset=14), {}, "act.kind"),
    ("prelu constant slope", lambda: binary("PRelu", w(1, 8, 1, 1)), {}, None),
    ("prelu runtime slope", lambda: binary("PRelu", w(1, 8, 1, 1), runtime_b=True), {}, "prelu.slope"),
    # A per-channel constant Add that no conv absorbs is a SCALE layer: on GPU in TensorRT 8.4's log (the tutorial).
    ("add per-channel", lambda: binary("Add", w(1, 8, 1, 1)), {}, "scale.standalone"),
    ("mul scalar", lambda: binary("Mul", w(1)), {}, None),
    ("mul spatial broadcast", lambda: binary("Mul", w(1, 1, 4, 4)), {}, "elt.broadcast"),
    ("div on 10.3", lambda: binary("Div", w(1)), {}, "elt.op"),
    ("div on 11.4 (fp16 model)", lambda: binary("Div", w(1).astype(np.float16), dtype=F16), {"trt": "11.4"}, None),
    ("fp32 on 11.4 (strongly typed)", lambda: unary("Relu"), {"trt": "11.4"}, "gen.typed"),
    ("abs", lambda: unary("Abs"), {}, None),
    ("exp", lambda: unary("Exp"), {}, "unary.op"),
    ("lrn window 5", lambda: unary("LRN", size=5), {}, None),
    ("lrn window 4", lambda: unary("LRN", size=4), {}, "lrn.window"),
    ("softmax on xavier", lambda: unary("Softmax", axis=1), {"target": "xavier", "trt": "8.5"}, "softmax.gen"),
    ("softmax C=8192, rest 1", lambda: unary("Softmax", (1, 8192, 1, 1), axis=1), {}, None),
    ("softmax C=1025, H=2", lambda: unary("Softmax", (1, 1025, 2, 1), axis=1), {}, "softmax.size"),
    ("softmax on batch", lambda: unary("Softmax", axis=0), {}, "softmax.axis"),
    ("softmax 2-D", lambda: unary("Softmax", (1, 4), axis=-1), {}, "gen.rank4"),
    (
        "concat channels",
        lambda: build([helper.make_node("Concat", ["x", "x"], ["y"], axis=1)], {"x": [1, 4, 8, 8]}),
        {},
        None,
    ),
    (
        "concat height",
        lambda: build([helper.make_node("Concat", ["x", "x"], ["y"], axis=2)], {"x": [1, 4, 8, 8]}),
        {},
        "concat.axis",
    ),
    (
        "concat one input",
        lambda: build([helper.make_node("Concat", ["x"], ["y"], axis=1)], {"x": [1, 4, 8, 8]}),
        {},
        "concat.inputs",
    ),
    (
        "resize nearest x2 asymmetric floor",
        lambda: resize(coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        {},
        None,
    ),
    (
        "resize nearest x32",
        lambda: resize((1, 1, 32, 32), coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        {},
        None,
    ),
    (
        "resize nearest x33",
        lambda: resize((1, 1, 33, 33), coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        {},
        "resize.range",
    ),
    ("resize nearest x1.5", lambda: resize((1, 1, 1.5, 1.5)), {}, "resize.range"),
    # NvInfer.h 10.3.0, IResizeLayer: on DLA, nearest takes half-pixel with kHALF_DOWN or kHALF_UP rounding (ONNX's
    # round_prefer_floor and round_prefer_ceil), not ceil
    ("resize nearest half_pixel round_prefer_floor", lambda: resize(nearest_mode="round_prefer_floor"), {}, None),
    ("resize nearest half_pixel round_prefer_ceil", lambda: resize(nearest_mode="round_prefer_ceil"), {}, None),
    ("resize nearest half_pixel ceil", lambda: resize(nearest_mode="ceil"), {}, "resize.mode"),
    ("resize linear x4", lambda: resize((1, 1, 4, 4), mode="linear"), {}, None),
    ("resize linear x5", lambda: resize((1, 1, 5, 5), mode="linear"), {}, "resize.range"),
    ("resize align_corners", lambda: resize(mode="linear", coordinate_transformation_mode="align_corners"), {}, "resize.mode"),
    ("resize channel scale", lambda: resize((1, 2, 2, 2)), {}, "resize.scales"),
    ("resize by sizes", lambda: resize(sizes=(1, 4, 16, 16)), {}, "resize.scales"),
    ("slice channels", lambda: slice_([0], [4], [1]), {}, None),
    ("slice batch", lambda: slice_([0], [1], [0]), {}, "slice.axis0"),
    ("slice step 2", lambda: slice_([0], [8], [1], [2]), {}, "slice.step"),
    ("slice runtime starts", lambda: slice_([0], [4], [1], runtime_starts=True), {}, "slice.const"),
    (
        "split channels",
        lambda: build([helper.make_node("Split", ["x"], ["y", "z"], axis=1)], {"x": [1, 4, 8, 8]}),
        {"node": 0},
        None,
    ),
    (
        "split batch",
        lambda: build([helper.make_node("Split", ["x"], ["y", "z"], axis=0)], {"x": [2, 4, 8, 8]}),
        {"node": 0},
        "slice.axis0",
    ),
    (
        "pad",
        lambda: build(
            [helper.make_node("Pad", ["x", "p"], ["y"])], {"x": [1, 4, 8, 8]}, {"p": np.array([0, 0, 1, 1, 0, 0, 1, 1])}
        ),
        {},
        "pad.fill",
    ),
    (
        "reshape",
        lambda: build([helper.make_node("Reshape", ["x", "s"], ["y"])], {"x": [1, 4, 8, 8]}, {"s": np.array([1, 256])}),
        {},
        "shuffle",
    ),
    ("matmul constant weights (4-D)", lambda: binary("MatMul", w(8, 16), (1, 1, 4, 8)), {}, "matmul.fc"),
    ("matmul two activations", lambda: binary("MatMul", w(1, 1, 8, 16), (1, 1, 4, 8), runtime_b=True), {}, "matmul.weights"),
    # The builder makes a fully connected layer of it: on DLA in the 8.4, 8.5.2 and 10.3 logs of the corpus.
    ("matmul 2-D", lambda: binary("MatMul", w(8, 16), (1, 8)), {}, None),
    ("matmul 2-D, 9000 input features", lambda: binary("MatMul", w(9000, 16), (1, 9000)), {}, "gen.dim"),
    (
        "gather",
        lambda: build([helper.make_node("Gather", ["x", "i"], ["y"], axis=1)], {"x": [1, 4, 8, 8]}, {"i": np.array([0, 1])}),
        {},
        "op.unsupported",
    ),
    (
        "quantize (explicit Q/DQ)",
        lambda: build([helper.make_node("QuantizeLinear", ["x", "s"], ["y"])], {"x": [1, 4, 8, 8]}, {"s": np.float32(0.1)}),
        {},
        "gen.qdq",
    ),
    ("3-D tensor", lambda: unary("Relu", (1, 4, 8)), {}, "gen.rank4"),
    ("double tensor", lambda: unary("Relu", dtype=TensorProto.DOUBLE), {}, "gen.dtype"),
    ("channels 8192", lambda: unary("Relu", (1, 8192, 1, 1)), {}, None),
    ("channels 8193", lambda: unary("Relu", (1, 8193, 1, 1)), {}, "gen.dim"),
    ("batch 4096", lambda: unary("Relu", (4096, 1, 1, 1)), {}, None),
    ("batch 4097", lambda: unary("Relu", (4097, 1, 1, 1)), {}, "gen.batch"),
]


@pytest.mark.parametrize("case, factory, kwargs, rule", CASES, ids=[c[0] for c in CASES])
def test_rule_each_side_of_its_limit(case, factory, kwargs, rule):
    v = verdict(factory(), **kwargs)
    assert v.rule == rule, f"{case}: {v.reason}"
    assert v.device == ("DLA" if rule is None else "GPU")
    if rule:
        assert v.value  # the value that broke the rule is named
        assert RULES[rule].sources or RULES[rule].evidence == "inference"


def test_comparison_needs_int8_and_a_cast():
    cmp_cast = build(
        [helper.make_node("Greater", ["x", "b"], ["c"]), helper.make_node("Cast", ["c"], ["y"], to=F16)],
        {"x": [1, 4, 8, 8]},
        {"b": w(1)},
    )
    fp16 = predict(cmp_cast, "orin", "10.3")
    assert [(n.device, n.rule) for n in fp16.nodes] == [("GPU", "cmp.int8"), ("GPU", "op.unknown")]
    int8 = predict(cmp_cast, "orin", "10.3", precision="int8")
    assert [n.device for n in int8.nodes] == ["DLA", "DLA"]


def test_int8_depthwise_conv_is_noted_as_fp16():
    model = conv((1, 8, 8, 8), (8, 1, 3, 3), group=8)
    assert not verdict(model).notes
    v = verdict(model, precision="int8")
    assert v.device == "DLA" and "conv.int8_group" in v.notes[0]


def test_unknown_shape_after_custom_op_is_a_static_shape_finding():
    model = build(
        [helper.make_node("MyOp", ["x"], ["t"], domain="custom"), helper.make_node("Relu", ["t"], ["y"])], {"x": [1, 4, 8, 8]}
    )
    model.opset_import.append(helper.make_opsetid("custom", 1))
    report = predict(model)
    assert [(n.op, n.rule) for n in report.nodes] == [("MyOp", "op.unknown"), ("Relu", "gen.static")]


def test_subgraph_weight_cap_is_checked_per_subgraph():
    graph = prepare(conv((1, 3, 8, 8), (64, 3, 3, 3)))
    small = dataclasses.replace(limits_for("orin"), max_weight_bytes=1000)
    report = _predict(graph, small, "fp16", "t")
    assert report.subgraphs[0].weight_bytes == 64 * 3 * 3 * 3 * 2
    assert any("sub.weights" in f for f in report.findings)
    # NvInferRuntime.h (10.3): the weights must total *less than* the cap, so exactly the cap is too much.
    for cap, over in ((3456, True), (3457, False)):
        report = _predict(graph, dataclasses.replace(limits_for("orin"), max_weight_bytes=cap), "fp16", "t")
        assert any("sub.weights" in f for f in report.findings) is over, cap


def test_every_rule_has_a_source_or_says_it_is_inference():
    for rule in RULES.values():
        assert rule.evidence in ("header", "docs", "log", "parser", "inference")
        assert rule.sources or rule.evidence == "inference", rule.id
        assert all(s.startswith("https://") for s in rule.sources)


def test_tables_cover_the_shipped_pairs_and_refuse_the_others():
    assert set(TABLES) == {
        ("xavier", "8.5"),
        ("orin", "8.5"),
        ("orin", "8.6"),
        ("orin", "10.3"),
        ("orin", "10.7"),
        ("orin", "11.4"),
    }
    assert limits_for("orin", "10.3.0").trt == "10.3"
    assert limits_for("xavier").trt == "8.5"
    with pytest.raises(EdgeError, match="Xavier stops at JetPack 5"):
        limits_for("xavier", "10.3")
    with pytest.raises(EdgeError, match="11.0-11.3 have no DLA"):
        limits_for("orin", "11.0")
    with pytest.raises(EdgeError, match="unknown DLA target"):
        limits_for("thor")


def test_cli_offers_every_tensorrt_with_rules_and_8_6_for_jetpack_6_0():
    from edge.dla.cli import TRT_CHOICES
    from edge.dla.rules import TRT_VERSIONS

    assert TRT_CHOICES == TRT_VERSIONS and "8.6" in TRT_CHOICES
    assert limits_for("orin", "8.6.2").jetpack == "6.0"  # JetPack 6.0 (L4T 36.2/36.3) ships TensorRT 8.6.2
    model = build([helper.make_node("Relu", ["x"], ["y"])], {"x": [1, 4, 8, 8]})
    assert predict(model, "orin", "8.6.2").trt == "8.6"


def test_a_batch_past_the_limit_is_named_by_its_batch():
    v = verdict(unary("Relu", (4097, 2, 1, 1)))
    assert (v.rule, v.value) == ("gen.batch", "batch 4097")


def test_softmax_without_an_axis_takes_the_last_one():
    # ONNX Softmax-13: axis defaults to -1, the last dimension
    assert verdict(unary("Softmax", (1, 4, 8, 8))).device == "DLA"
    v = verdict(unary("Softmax", (1, 1, 2, 2000)))  # past the 1024 of a softmax over one of several axes
    assert (v.rule, v.value) == ("softmax.size", "axis size 2000 > 1024")


@pytest.mark.parametrize("op, device, rule", [("Add", "DLA", None), ("Mul", "GPU", "gen.rank4")])
def test_only_a_constant_add_rides_in_a_fully_connected_layer(op, device, rule):
    """TensorRT adds a constant bias inside the fully connected layer; a Mul after it is a layer of its own, and on a
    2-D tensor not a DLA one."""
    model = build(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node(op, ["h", "c"], ["y"])],
        {"x": [1, 8]},
        {"w": w(8, 16), "c": w(16)},
    )
    v = verdict(model)
    assert (v.device, v.rule) == (device, rule)
    assert v.fused_into == (predict(model, "orin", "10.3", None, "fp16").nodes[0].name if op == "Add" else None)


def test_a_slice_without_axes_but_with_steps_reads_each_input_in_its_slot():
    """Slice-13's inputs: data, starts, ends, axes (optional, here left empty), steps. Steps of 1 on axis 1 are a
    DLA slice; a runtime axes input would not be."""
    inits = {"s": np.array([0, 2]), "e": np.array([2, 6]), "st": np.array([1, 1])}
    model = build([helper.make_node("Slice", ["x", "s", "e", "", "st"], ["y"])], {"x": [2, 8, 8, 8]}, inits)
    assert verdict(model).device == "DLA"  # axes default to 0, 1: the whole batch of 2, then channels 2..6


@pytest.mark.parametrize("shape, merged", [([1, 64], True), ([64, 1], False)])
def test_only_a_flatten_to_n_by_c_rides_in_the_fully_connected_layer(shape, merged):
    """[1, 64, 1, 1] -> [1, 64] is undone by the FC layer's own reshape; -> [64, 1] moves the channels into the batch."""
    model = build(
        [helper.make_node("Reshape", ["x", "s"], ["h"]), helper.make_node("MatMul", ["h", "w"], ["y"])],
        {"x": [1, 64, 1, 1]},
        {"s": np.array(shape), "w": w(shape[1], 16)},
    )
    v = verdict(model, node=0)
    assert (v.device, v.fused_into) == (("DLA", "MatMul_1") if merged else ("GPU", None))


def test_an_op_the_releases_parser_lacks_is_named_for_that_release():
    # onnx-tensorrt 8.5-GA has no Mish importer; 10.0 has one (../shared/reference/onnx-tensorrt, importer tables)
    old = verdict(unary("Mish", (1, 4, 8, 8), opset=18), trt="8.5.2")
    assert (old.device, old.rule, old.notes) == ("GPU", "parser.missing", ["TensorRT 8.5's ONNX parser has no importer for Mish"])
    assert "no importer" not in " ".join(verdict(unary("Mish", (1, 4, 8, 8), opset=18), trt="10.3").notes)


def test_instance_normalization_is_a_plugin_on_8x_and_a_layer_of_its_own_from_10():
    # onnx-tensorrt 8.5/8.6 import it as InstanceNormalization_TRT (a plugin); 10.0 natively (kNATIVE_INSTANCENORM)
    def model():
        nodes = [helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])]
        return build(nodes, {"x": [1, 4, 8, 8]}, {"s": w(4), "b": w(4)})

    assert verdict(model(), trt="8.5.2").layer == "PLUGIN_V2"
    assert verdict(model(), trt="10.3").layer != "PLUGIN_V2"
