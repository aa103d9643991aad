"""A Q/DQ model said the implicit way (no Q/DQ, a cache, FP16 layers) for the DLA before TensorRT 11, checked against
NVIDIA's QDQ Translator: its output on two real Q/DQ models (one edge's, one NVIDIA Model Optimizer's) is committed
in tests/fixtures/qdq with how it was made; the small cases follow the rules its README and code state."""

from __future__ import annotations

import json
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
