"""The TensorRT layers each ONNX node becomes, per release, held against onnx-tensorrt's importers (8.5-GA and 8.6-GA
``builtin_op_importers.cpp``, 10.0 ``onnxOpImporters.cpp``; the op lists via tests/fixtures/nvidia_dla_facts.json)
and the builder's fully connected conversion as docs/edge-dla.md states it."""

from __future__ import annotations

import numpy as np
import pytest

from edge.dla.lowering import lower, parser_ops
from tests.nvidia_facts import committed

PARSERS = committed()["parsers"]
V8, V10 = ("8.5", "8.6"), ("10.3", "10.7", "11.4")


@pytest.mark.parametrize(
    ("trt", "source"), [("8.5", "8.5"), ("8.6", "8.6"), ("10.3", "10.0"), ("10.7", "10.0"), ("11.4", "10.0")]
)
def test_each_release_is_read_against_its_parser_source(trt, source):
    """docs/edge-dla.md: 8.5-GA and 8.6-GA, and 10.0, which 10.3/10.7/11.4 are read against."""
    assert parser_ops(trt) == set(PARSERS[source]["onnx_ops"])


@pytest.mark.parametrize("domain", ["com.acme", "trt.plugins"])
def test_a_custom_domain_node_is_a_plugin_layer_named_after_the_node(domain):
    # Ops the parser has no importer for go to FallbackPluginImporter: addPluginV2 under the node's name.
    low = lower("Relu", "custom", "10.3", domain=domain)
    assert (low.kind, low.layers, low.importer) == ("PLUGIN_V2", [("PLUGIN_V2", "custom")], True)
    assert domain in low.note and "plugin" in low.note


@pytest.mark.parametrize("domain", ["", "ai.onnx"])
def test_the_default_domain_by_either_name_is_the_builtin_importer(domain):
    low = lower("Relu", "r", "10.3", domain=domain)
    assert (low.kind, low.layers, low.note) == ("ACTIVATION(RELU)", [("ACTIVATION", "r")], "")


def test_an_op_a_release_has_no_importer_for_is_unsupported_with_no_layers():
    # Gelu's importer first appears in 10.0 (DEFINE_BUILTIN_OP_IMPORTER(Gelu) is not in 8.5-GA or 8.6-GA)
    assert "Gelu" not in PARSERS["8.5"]["onnx_ops"] and "Gelu" in PARSERS["10.0"]["onnx_ops"]
    low = lower("Gelu", "g", "8.5")
    assert (low.kind, low.layers, low.importer) == ("UNSUPPORTED", [], False)
    assert "8.5" in low.note and "Gelu" in low.note
    # 10.0: activationHelper(..., ActivationType::kGELU_ERF) for the default approximate="none"
    assert lower("Gelu", "g", "10.3").layers == [("ACTIVATION", "g")]
    assert lower("Gelu", "g", "10.3").kind == "ACTIVATION(GELU_ERF)"


# The operation each importer passes to its helper (activationHelper, elementwiseHelper, unaryHelper,
# reduceTensor) or to network()->add*, identical in 8.5-GA and 10.0; the layer is registered under the node's name.
KINDS = [
    ("Relu", "ACTIVATION(RELU)"),
    ("Clip", "ACTIVATION(CLIP)"),
    ("Add", "ELEMENTWISE(SUM)"),
    ("Sub", "ELEMENTWISE(SUB)"),
    ("Abs", "UNARY(ABS)"),
    ("Sin", "UNARY(SIN)"),
    ("ReduceMean", "REDUCE(AVG)"),
    ("ReduceMax", "REDUCE(MAX)"),
    ("MaxPool", "POOLING(MAX)"),  # addPoolingNd(..., PoolingType::kMAX, ...)
    ("Conv", "CONVOLUTION"),  # addConvolutionNd
]


@pytest.mark.parametrize("trt", ["8.5", "10.3"])
@pytest.mark.parametrize(("op", "kind"), KINDS)
def test_a_node_is_one_layer_of_its_kind_named_after_it(op, kind, trt):
    low = lower(op, "node7", trt)
    # the build log prints the layer type without the operation: ACTIVATION, POOLING
    assert (low.kind, low.layers, low.importer) == (kind, [(kind.split("(")[0], "node7")], True)


@pytest.mark.parametrize("op", ["Identity", "Dropout"])
def test_identity_and_dropout_are_identity_layers(op):
    # Identity: addIdentity; Dropout in inference mode: RETURN_IDENTITY (8.5-GA and 10.0)
    assert lower(op, "i", "8.5").kind == lower(op, "i", "10.3").kind == "IDENTITY"


@pytest.mark.parametrize("trt", V8 + V10)
def test_cast_is_an_identity_layer_on_8x_and_a_cast_layer_from_10(trt):
    # 8.5-GA/8.6-GA Cast: addIdentity(tensor) with setOutputType; 10.0 Cast and CastLike: addCast
    kind = "IDENTITY" if trt in V8 else "CAST"
    assert (lower("Cast", "c", trt).kind, lower("Cast", "c", trt).layers) == (kind, [(kind, "c")])
    if trt in V10:
        assert lower("CastLike", "c", trt).layers == [("CAST", "c")]


@pytest.mark.parametrize("trt", V8 + V10)
def test_instance_normalization_is_the_plugin_on_8x_and_native_from_10(trt):
    """8.x: addPluginV2 of InstanceNormalization_TRT under the node's name, with the unsqueeze/squeeze shuffles
    around it only when nbDims == 3 (needToExpandDims; a DLA input is 4-D); 10.0: the native normalization layer."""
    kind = "PLUGIN_V2" if trt in V8 else "NORMALIZATION"
    low = lower("InstanceNormalization", "in", trt)
    assert (low.kind, low.layers) == (kind, [(kind, "in")])


@pytest.mark.parametrize("trt", ["8.5", "11.4"])
def test_hard_swish_is_a_hard_sigmoid_activation_then_a_product(trt):
    # activationHelper(kHARD_SIGMOID, alpha 1/6, beta 1/2), then elementwiseHelper({x, hardSigmoid}, kPROD)
    low = lower("HardSwish", "hs", trt)
    assert low.kind == "ACTIVATION(HARD_SIGMOID)+ELEMENTWISE(PROD)"
    assert [t for t, _ in low.layers] == ["ACTIVATION", "ELEMENTWISE"]


@pytest.mark.parametrize("trt", ["8.5", "10.3"])
def test_gemm_is_a_matrix_multiply_then_an_unnamed_bias_sum(trt):
    # addMatrixMultiply registered under the node's name; the bias addElementWise(kSUM) is never registered, so the
    # build log shows TensorRT's default name "(Unnamed Layer* N) [ElementWise]"
    (mm, bias) = lower("Gemm", "fc", trt).layers
    assert mm == ("MATRIX_MULTIPLY", "fc") and bias[0] == "ELEMENTWISE"
    assert bias[1].startswith("(Unnamed Layer*") and "[ElementWise]" in bias[1]
    # MatMul has no bias input: addMatrixMultiply only
    assert lower("MatMul", "mm", trt).layers == [("MATRIX_MULTIPLY", "mm")]
    # Gemm without C (optional since opset 11): onnxOpImporters.cpp adds the bias sum only "if (inputs.size() > 2)"
    assert lower("Gemm", "fc", trt, bias=False).layers == [("MATRIX_MULTIPLY", "fc")]


@pytest.mark.parametrize("op", ["Gemm", "MatMul"])
def test_the_builder_makes_a_fully_connected_layer_between_its_two_reshapes(op):
    """docs/edge-dla.md: a fully connected layer between reshape_before_<node> and reshape_after_<node>."""
    low = lower(op, "fc1", "8.5", fully_connected=True)
    assert low.kind == "FULLY_CONNECTED"
    assert low.layers == [("SHUFFLE", "reshape_before_fc1"), ("FULLY_CONNECTED", "fc1"), ("SHUFFLE", "reshape_after_fc1")]


def test_only_a_matrix_product_becomes_fully_connected():
    assert lower("Conv", "c", "10.3", fully_connected=True).layers == [("CONVOLUTION", "c")]


@pytest.mark.parametrize("with_c", [False, True])
def test_gemm_bias_layer_follows_the_real_parser(with_c):
    """TensorRT-RTX's ONNX parser (the one that runs here) adds the bias ELEMENTWISE layer only for a Gemm with C."""
    trt = pytest.importorskip("tensorrt_rtx")
    onnx = pytest.importorskip("onnx")
    h, nh = onnx.helper, onnx.numpy_helper
    inits = [nh.from_array(np.ones((4, 3), np.float32), "B")] + ([nh.from_array(np.ones(3, np.float32), "C")] if with_c else [])
    graph = h.make_graph(
        [h.make_node("Gemm", ["A", "B"] + (["C"] if with_c else []), ["Y"], "fc")],
        "g",
        [h.make_tensor_value_info("A", onnx.TensorProto.FLOAT, [2, 4])],
        [h.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [2, 3])],
        inits,
    )
    logger = trt.Logger(trt.Logger.ERROR)
    network = trt.Builder(logger).create_network(0)
    assert trt.OnnxParser(network, logger).parse(h.make_model(graph, opset_imports=[h.make_opsetid("", 13)]).SerializeToString())
    real = [network.get_layer(i).type.name for i in range(network.num_layers)]
    ours = [kind for kind, _ in lower("Gemm", "fc", "10.3", bias=with_c).layers]
    assert [t for t in real if t not in ("CONSTANT", "SHUFFLE")] == ours  # constants and broadcasts are not layers we list
