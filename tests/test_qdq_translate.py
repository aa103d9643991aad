"""A Q/DQ model said the implicit way (no Q/DQ, a cache, FP16 layers) for the DLA before TensorRT 11, checked against
NVIDIA's QDQ Translator: its output on two real Q/DQ models (one edge's, one NVIDIA Model Optimizer's) is committed
in tests/fixtures/qdq with how it was made; the small cases follow the rules its README and code state."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from edge.errors import EdgeError
from edge.graph.qdq_translate import has_qdq, translate

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "qdq"


def pair(tensor, scale, axis=None, zero=0):
    """QuantizeLinear -> DequantizeLinear of ``tensor``; returns (nodes, initializers, the dequantized name)."""
    scale = np.asarray(scale, np.float32)
    extra = {} if axis is None else {"axis": axis}
    inits = [
        numpy_helper.from_array(scale, f"{tensor}_s"),
        numpy_helper.from_array(np.full(scale.shape, zero, np.int8), f"{tensor}_z"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", [tensor, f"{tensor}_s", f"{tensor}_z"], [f"{tensor}_q"], f"{tensor}_Q", **extra),
        helper.make_node(
            "DequantizeLinear", [f"{tensor}_q", f"{tensor}_s", f"{tensor}_z"], [f"{tensor}_dq"], f"{tensor}_DQ", **extra
        ),
    ]
    return nodes, inits, f"{tensor}_dq"


def small(w_scale=None, zero=0):
    """x -Q/DQ-> conv(W -Q/DQ) = c -> Relu = r -> MaxPool = m; Add(c2, r) where c2 = conv2(m), r's pair feeds nothing:
    the graph exercises pass-on, the unary Conv+Add scale and the FP16 list."""
    rng = np.random.default_rng(0)
    w = rng.uniform(-1, 1, (4, 3, 1, 1)).astype(np.float32)
    w2 = rng.uniform(-1, 1, (4, 4, 1, 1)).astype(np.float32)
    nx, ix, dx = pair("x", 0.02, zero=zero)
    nw, iw, dw = pair("W", np.abs(w).reshape(4, -1).max(1) / 127 if w_scale is None else w_scale, axis=0)
    nodes = [
        *nx,
        *nw,
        helper.make_node("Conv", [dx, dw], ["c"], "conv"),
        helper.make_node("Relu", ["c"], ["r"], "relu"),
        *pair("r", 0.05)[0],
        helper.make_node("MaxPool", ["r_dq"], ["m"], "pool", kernel_shape=[1, 1]),
        helper.make_node("Conv", ["m", "W2"], ["c2"], "conv2"),
        helper.make_node("Add", ["c2", "r"], ["y"], "add"),
    ]
    inits = [*ix, *iw, *pair("r", 0.05)[1], numpy_helper.from_array(w, "W"), numpy_helper.from_array(w2, "W2")]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_pairs_go_their_scales_stay_and_the_rest_is_the_same_model():
    model = small()
    t = translate(model)
    assert has_qdq(model) and not has_qdq(t.model) and t.pairs == 3
    onnx.checker.check_model(t.model)
    assert [n.op_type for n in t.model.graph.node] == ["Conv", "Relu", "MaxPool", "Conv", "Add"]
    assert {i.name for i in t.model.graph.initializer} == {"W", "W2"}  # the scales and zero points went
    # activations keep their pair's scale; the MaxPool passes r's on to m (the translator's default pass-on ops)
    assert t.scales["x"] == pytest.approx(0.02) and t.scales["r"] == pytest.approx(0.05)
    assert t.scales["m"] == pytest.approx(0.05)
    assert t.weight_mismatches == []
    # the clean model computes the FP32 model: the same graph without the rounding
    x = np.random.default_rng(1).uniform(-1, 1, (1, 3, 4, 4)).astype(np.float32)
    got = ort.InferenceSession(t.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    c = np.einsum("oc,nchw->nohw", inits["W"][:, :, 0, 0], x)
    r = np.maximum(c, 0)
    np.testing.assert_allclose(got, np.einsum("oc,nchw->nohw", inits["W2"][:, :, 0, 0], r) + r, rtol=1e-5, atol=1e-6)
    assert not model.graph.node[0].op_type != "QuantizeLinear"  # the caller's model is left as it was


def test_a_convolution_read_only_by_an_add_gets_scale_one_else_the_add_goes_fp16():
    t = translate(small())
    # conv2's output c2 has no pair and only the Add reads it: scale 1.0 (--add_unary_ew_scales_for_dla)
    assert t.unary == ["c2"] and t.scales["c2"] == 1.0
    # conv's output c has no pair, but ReLU passes r's scale back to it (the backward pass); y has no reader
    assert t.scales["c"] == pytest.approx(0.05) and t.fp16_layers == []
    t_off = translate(small(), dla_unary_scales=False)
    assert t_off.unary == [] and "c2" not in t_off.scales and t_off.fp16_layers == ["add"]


def test_a_weight_pair_off_max_w_over_127_is_counted():
    assert translate(small(w_scale=np.full(4, 0.5))).weight_mismatches == ["W"]


def test_a_nonzero_zero_point_is_one_line():
    with pytest.raises(EdgeError, match=r"'x_Q' has a zero point other than 0; TensorRT takes symmetric INT8 only"):
        translate(small(zero=3))


def test_edges_qdq_model_translates_as_nvidias_translator_does():
    """edge's Q/DQ model of BlazeFace (every threshold 1.0): the same 136 scales and the same FP16 nodes as NVIDIA's
    translator wrote (it lists a node without a name as "", which TensorRT's parser calls node_of_<output>)."""
    from edge import assets
    from edge.calib import qdq
    from edge.calib.stats import calibration_tensors
    from edge.graph.model import prepare

    graph = prepare(str(assets.resolve("blazeface-back-256", quiet=True)))
    acts, _ = calibration_tensors(graph)
    q_model, _ = qdq.build(graph.model, graph, dict.fromkeys(acts, 1.0))
    _agrees(translate(q_model), json.loads((FIXTURES / "blazeface-back-256.edge.translator.json").read_text()))


def test_model_optimizers_qdq_model_translates_as_nvidias_translator_does():
    model = onnx.load(str(FIXTURES / "blazeface-back-256.modelopt.qdq.onnx"))
    t = translate(model)
    _agrees(t, json.loads((FIXTURES / "blazeface-back-256.modelopt.translator.json").read_text()))
    onnx.checker.check_model(t.model)


def _agrees(t, reference):
    scales = reference["int8_tensor_scales"]
    assert set(t.scales) == set(scales)
    assert all(t.scales[k] == pytest.approx(v, rel=1e-6) for k, v in scales.items())
    assert sum(1 for v in scales.values() if v == 1.0) == len(t.unary) == 31  # BlazeFace's 31 convolutions into Adds
    named = sorted(n for n in reference["fp16_nodes"] if n)
    assert sorted(n for n in t.fp16_layers if not n.startswith("node_of_")) == named
    assert len(t.fp16_layers) == len(reference["fp16_nodes"])


def test_edge_dla_predicts_a_qdq_model_as_edge_build_builds_it():
    """The DLA takes no Q/DQ before TensorRT 11: a Q/DQ model is predicted without its pairs, which places every
    node as the same model without Q/DQ in INT8 (before, every Q/DQ pair was a GPU layer)."""
    from edge import assets
    from edge.dla.predict import predict

    plain = predict(assets.resolve("blazeface-back-256", quiet=True), "orin", "10.3", precision="int8")
    qdq = predict(FIXTURES / "blazeface-back-256.modelopt.qdq.onnx", "orin", "10.3")
    from collections import Counter

    # Model Optimizer renamed the nodes that had no name: compare what each kind of node gets, and where
    assert Counter((n.op, n.device, n.rule) for n in qdq.nodes) == Counter((n.op, n.device, n.rule) for n in plain.nodes)
    assert any(n.device == "DLA" for n in qdq.nodes)  # not a comparison of two empty placements
    assert qdq.findings[0].startswith("Q/DQ model: predicted without its 138 Q/DQ pairs")
    assert qdq.findings[1:] == plain.findings


def test_edge_dla_on_a_qdq_model_it_cannot_translate_predicts_it_as_it_is_and_says_why(tmp_path, capsys):
    """edge-build refuses such a model (one line); a prediction still places its layers, Q/DQ ones on the GPU."""
    from edge import cli

    path = tmp_path / "zp.onnx"
    onnx.save(small(zero=3), str(path))
    assert cli.main(["dla", str(path), "--target", "orin"]) == 0
    out = capsys.readouterr().out
    assert "Q/DQ model not translated, its Q/DQ layers predicted as they are: Q/DQ model: 'x_Q' has a zero point" in out
    assert "QuantizeLinear" in out and "gen.qdq" in out


def _model(nodes, inits, inputs=(("x", [1, 4, 4, 4]),), outputs=("y",)):
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_edge_calibs_embedded_cache_and_fp16_list_are_used_as_they_are():
    from edge.graph.qdq_translate import FP16_KEY, SCALES_KEY, embed

    model = small()
    model.metadata_props.add(key="author", value="someone")  # other metadata stays
    embed(model, {"x": 0.5, "c": 0.25, "y": 2.0}, ["relu"])
    props = {p.key: p.value for p in model.metadata_props}
    assert json.loads(props[SCALES_KEY]) == {"c": 0.25, "x": 0.5, "y": 2.0} and json.loads(props[FP16_KEY]) == ["relu"]
    assert props["author"] == "someone"
    embed(model, {"x": 0.1}, [])  # again: replaced, not added twice
    assert [p.key for p in model.metadata_props].count(SCALES_KEY) == 1
    embed(model, {"x": 0.5, "c": 0.25, "y": 2.0}, ["relu"])
    t = translate(model)
    assert t.scales == {"x": 0.5, "c": 0.25, "y": 2.0} and t.fp16_layers == ["relu"] and t.unary == []
    assert t.source == "edge calib's cache in the model" and t.pairs == 3 and t.weight_mismatches == []
    assert t.sources == ["W", "r", "x"] == translate(small()).sources  # what the pairs quantized, either way
    assert not has_qdq(t.model) and [n.op_type for n in t.model.graph.node][0] == "Conv"
    assert translate(small()).source == "the Q/DQ pairs (NVIDIA QDQ Translator's rules)"


@pytest.mark.parametrize(
    "scales, layers, said",
    [
        ("{not json", "[]", "is not JSON"),
        ('{"x": -1}', "[]", "must map tensor names to positive scales"),
        ('{"x": true}', "[]", "must map tensor names to positive scales"),
        ('{"x": "0.5"}', "[]", "must map tensor names to positive scales"),
        ('{"x": 1e999}', "[]", "must map tensor names to positive scales"),
        ('{"x": 0}', "[]", "must map tensor names to positive scales"),
        ('[["x", 0.5]]', "[]", "must map tensor names to positive scales"),
        ('{"x": 0.5}', '"relu"', "edge.fp16_layers must be a list of layer names"),
        ('{"x": 0.5}', "[1]", "edge.fp16_layers must be a list of layer names"),
        ('{"x": 0.5}', "[nope", "is not JSON"),
    ],
)
def test_malformed_embedded_metadata_is_one_line_naming_the_key(scales, layers, said):
    from edge.graph.qdq_translate import FP16_KEY, SCALES_KEY

    model = small()
    model.metadata_props.add(key=SCALES_KEY, value=scales)
    model.metadata_props.add(key=FP16_KEY, value=layers)
    with pytest.raises(EdgeError) as err:
        translate(model)
    assert said in str(err.value) and "\n" not in str(err.value) and "edge calib --qdq" in str(err.value)


def test_without_an_fp16_entry_the_embedded_list_is_empty():
    from edge.graph.qdq_translate import SCALES_KEY

    model = small()
    model.metadata_props.add(key=SCALES_KEY, value='{"x": 0.5}')
    assert translate(model).fp16_layers == []


def test_a_lone_quantize_or_dequantize_counts_as_qdq():
    nodes, inits, _ = pair("x", 0.1)
    assert has_qdq(_model(nodes[:1], inits, outputs=("x_q",)))
    assert has_qdq(_model([helper.make_node("DequantizeLinear", ["x", "x_s"], ["y"], "dq")], inits))
    assert not has_qdq(_model([helper.make_node("Relu", ["x"], ["y"], "r")], []))
    with pytest.raises(EdgeError, match=r"DequantizeLinear 'dq' does not read a QuantizeLinear"):
        translate(_model([helper.make_node("DequantizeLinear", ["x", "x_s"], ["y"], "dq")], inits))


def test_a_weight_in_a_constant_node_is_a_weight_and_a_constant_operand_is_no_activation():
    """Paddle's exports keep weights in Constant nodes: their pairs give no cache entry, and a Constant read by an
    Add (a bias) is not a tensor left without a scale."""
    w = np.random.default_rng(2).uniform(-1, 1, (4, 4, 1, 1)).astype(np.float32)
    nx, ix, dx = pair("x", 0.02)
    nw, iw, dw = pair("W", np.abs(w).reshape(4, -1).max(1) / 127, axis=0)
    nodes = [
        helper.make_node("Constant", [], ["W"], "w_const", value=numpy_helper.from_array(w)),
        helper.make_node("Constant", [], ["b"], "b_const", value=numpy_helper.from_array(np.ones((1, 4, 1, 1), np.float32))),
        *nx,
        *nw,
        helper.make_node("Conv", [dx, dw], ["c"], "conv"),
        helper.make_node("Add", ["c", "b"], ["y"], "bias"),
    ]
    t = translate(_model(nodes, [*ix, *iw]))
    assert set(t.scales) == {"x", "c"} and "W" not in t.scales and "b" not in t.scales and t.weight_mismatches == []
    # c: a convolution read only by an Add of two inputs (a constant counts, as in the translator): scale 1.0
    assert t.unary == ["c"] and t.scales["c"] == 1.0 and t.fp16_layers == []
    assert [n.op_type for n in t.model.graph.node] == ["Constant", "Constant", "Conv", "Add"]


def test_weight_scales_are_checked_per_channel_on_the_pairs_axis_and_per_tensor():
    rng = np.random.default_rng(3)
    w = (rng.uniform(-1, 1, (2, 4, 1, 1)) * 20).astype(np.float32)  # large weights: /127 and /128 differ past 1e-3
    per_out = np.abs(w).reshape(2, -1).max(1) / 127

    def with_weight(scale, axis):
        nx, ix, dx = pair("x", 0.02)
        nw, iw, dw = pair("W", scale, axis=axis)
        nodes = [*nx, *nw, helper.make_node("Conv", [dx, dw], ["y"], "conv")]
        return _model(nodes, [*ix, *iw, numpy_helper.from_array(w, "W")])

    assert translate(with_weight(per_out, 0)).weight_mismatches == []  # two channels: still per channel
    assert translate(with_weight(np.abs(w).max() / 127, None)).weight_mismatches == []  # one scale for the tensor
    assert translate(with_weight(np.abs(w).max() / 128, None)).weight_mismatches == ["W"]
    assert translate(with_weight(per_out[::-1].copy(), 0)).weight_mismatches == ["W"]
    # without an axis attribute ONNX's default is 1: W's axis 1 has 4 entries, not the 2 scales given
    per_in = np.abs(w).transpose(1, 0, 2, 3).reshape(4, -1).max(1) / 127
    assert translate(with_weight(per_in, None)).weight_mismatches == []
    assert translate(with_weight(per_out, None)).weight_mismatches == ["W"]


def test_pairs_that_are_not_symmetric_int8_by_one_constant_scale_are_one_line():
    nx, ix, _ = pair("x", 0.02)
    relu = helper.make_node("Relu", ["x_dq"], ["y"], "relu")
    q_zp, dq_zp = _model([*nx, relu], ix), _model([*nx, relu], ix)
    q_zp.graph.initializer.append(numpy_helper.from_array(np.array(5, np.int8), "dq_z"))
    q_zp.graph.node[1].input[2] = "dq_z"  # the DequantizeLinear's own zero point
    with pytest.raises(EdgeError, match="zero point other than 0"):
        translate(q_zp)
    dq_zp.graph.node[0].input[2] = "computed"  # a zero point no constant gives
    with pytest.raises(EdgeError, match="zero point other than 0"):
        translate(dq_zp)
    other = _model([*nx, relu], ix)
    other.graph.initializer.append(numpy_helper.from_array(np.array(0.04, np.float32), "s2"))
    other.graph.node[1].input[1] = "s2"
    with pytest.raises(EdgeError, match=r"the pair 'x_Q' -> 'x_DQ' has no constant scale, or two"):
        translate(other)
    computed = _model([*nx, relu], ix)
    computed.graph.node[0].input[1] = "runtime_scale"
    with pytest.raises(EdgeError, match="has no constant scale, or two"):
        translate(computed)
    no_zp = _model([*nx, relu], ix)
    for n in no_zp.graph.node[:2]:
        del n.input[2]  # the zero point is optional: 0
    assert translate(no_zp).scales == {"x": pytest.approx(0.02), "y": pytest.approx(0.02)}  # y: ReLU passes it on


def test_an_activation_with_one_scale_per_channel_is_one_line():
    nx, ix, _ = pair("x", [0.1, 0.2, 0.3, 0.4], axis=1)
    with pytest.raises(EdgeError, match=r"activation 'x' has 4 scales; TensorRT takes one per activation tensor"):
        translate(_model([*nx, helper.make_node("Relu", ["x_dq"], ["y"], "relu")], ix))


def test_a_graph_output_written_by_a_dequantize_keeps_its_name_and_scale():
    nr, ir, _ = pair("r", 0.25)
    nodes = [helper.make_node("Relu", ["x"], ["r"], "relu"), *nr]
    t = translate(_model(nodes, ir, outputs=("r_dq",)))
    assert [tuple(n.output) for n in t.model.graph.node] == [("r_dq",)]
    assert t.scales == {"r_dq": 0.25, "x": 0.25}  # x: back through the ReLU
    x = np.random.default_rng(4).uniform(-1, 1, (1, 4, 4, 4)).astype(np.float32)
    got = ort.InferenceSession(t.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(["r_dq"], {"x": x})[0]
    np.testing.assert_array_equal(got, np.maximum(x, 0))


def test_edge_calib_checks_a_qdq_model_as_it_is_and_writes_the_translators_cache(megamind_frames, tmp_path, capsys):
    """A Model Optimizer Q/DQ model through edge calib: its own pairs are the INT8 side of the check, the model without
    them the FP32 side; nothing is calibrated, and the cache and FP16 list written are those NVIDIA's translator
    wrote for it (tests/fixtures/qdq)."""
    from edge import cli
    from edge.calib.cache import read_cache
    from edge.calib.sidecar import read_sidecar
    from tests.conftest import write_frames

    reference = json.loads((FIXTURES / "blazeface-back-256.modelopt.translator.json").read_text())
    frames = write_frames(tmp_path / "frames", megamind_frames)
    cache = tmp_path / "mo.cache"
    model = FIXTURES / "blazeface-back-256.modelopt.qdq.onnx"
    assert cli.main(["calib", str(model), "--config", "configs/demo.yaml", "--images", str(frames), "--cache", str(cache)]) == 0
    out = capsys.readouterr().out
    assert "checked as it is against the same model without its 138 Q/DQ pairs; nothing calibrated" in out
    assert "scales from the Q/DQ pairs (NVIDIA QDQ Translator's rules): 136 tensors (31 at 1.0" in out
    row = re.search(r"^  detections +\d+ +([\d.]+) +-$", out, re.M)  # the decisions INT8 keeps, measured
    assert row and float(row.group(1)) < 0.99  # Model Optimizer's INT8 adds faces on these frames
    assert "--min-agreement" not in out  # no note offering a budget the Q/DQ model's check refuses
    scales = read_cache(cache).scales
    assert set(scales) == set(reference["int8_tensor_scales"])
    assert all(scales[k] == pytest.approx(v, rel=1e-6) for k, v in reference["int8_tensor_scales"].items())
    layers = read_sidecar(cache).layers
    assert sorted(layers) == sorted(reference["fp16_nodes"])  # Model Optimizer named every node
    assert len(layers) == len(reference["fp16_nodes"])
    assert f"edge-build {model} -o blazeface-back-256.modelopt.qdq.engine" in out and "--int8" not in out


@pytest.mark.parametrize(
    "flag",
    [["--max-drop", "1", "--eval", "mnist_5k[:10]"], ["--min-agreement", "0.9"], ["--keep-fp16", "x"], ["--qdq", "o.onnx"]],
)
def test_flags_that_would_change_a_qdq_models_quantization_are_one_line(flag, tmp_path, capsys):
    from edge import cli

    model = FIXTURES / "blazeface-back-256.modelopt.qdq.onnx"
    argv = ["calib", str(model), "--config", "configs/demo.yaml", "--images", str(tmp_path), "--cache", str(tmp_path / "c.cache")]
    assert cli.main([*argv, *flag]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{flag[0]}: blazeface-back-256.modelopt.qdq.onnx already has Q/DQ pairs" in err
    assert not (tmp_path / "c.cache").exists()


def test_a_network_input_without_a_scale_sends_its_readers_to_fp16_and_a_weight_listed_as_an_input_does_not():
    """The translator lists the readers of every graph input and node output without a scale; an initializer that an
    old export also declares as a graph input is a weight, not an input."""
    nr, ir, _ = pair("r", 0.5)
    w = np.ones((4, 4, 1, 1), np.float32)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], "relu"),
        *nr,
        helper.make_node("Conv", ["r_dq", "W"], ["y"], "conv"),
    ]
    model = _model(nodes, [*ir, numpy_helper.from_array(w, "W")], inputs=(("x", [1, 4, 4, 4]), ("W", [4, 4, 1, 1])))
    t = translate(model, dla_unary_scales=False)
    # x has no pair, but ReLU passes r's scale back to it; the Conv's output y has no reader
    assert t.scales == {"r": 0.5, "x": 0.5} and t.fp16_layers == []
    nodes[0] = helper.make_node("Sigmoid", ["x"], ["r"], "sig")  # no pass-on through a sigmoid: x stays unscaled
    t = translate(_model(nodes, [*ir, numpy_helper.from_array(w, "W")], inputs=(("x", [1, 4, 4, 4]), ("W", [4, 4, 1, 1]))))
    assert t.scales == {"r": 0.5} and t.fp16_layers == ["sig"]


def test_a_hostile_node_name_in_a_qdq_model_reaches_the_terminal_escaped(tmp_path, capsys):
    """Node names come from the file: edge dla's finding and edge calib's refusal quote them, escaped."""
    from edge import cli

    model = small(zero=3)
    model.graph.node[0].name = "x_Q\x1b[31m\r\nFAKE: ok"
    path = tmp_path / "hostile.onnx"
    onnx.save(model, str(path))
    assert cli.main(["dla", str(path), "--target", "orin"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out and "\\x1b[31m" in out
    assert cli.main(["build", str(path), "-o", str(tmp_path / "h.engine"), "--dla", "0"]) == 2  # no DLA here: refused
    err = capsys.readouterr().err
    assert "\x1b" not in err and err.count("\n") == 1


def test_a_model_without_pairs_translates_to_itself_with_no_scales():
    """The empty case: nothing to remove, no scale, and every reader of an unscaled tensor listed for FP16."""
    model = _model([helper.make_node("Relu", ["x"], ["y"], "relu")], [])
    t = translate(model)
    assert (t.pairs, t.scales, t.sources, t.unary) == (0, {}, [], [])
    assert t.fp16_layers == ["relu"] and [n.name for n in t.model.graph.node] == ["relu"]
