"""The DLA limits and the parser table held against NVIDIA's own sources, per release: the "If executing this layer
on DLA" notes of NvInfer.h (8.5.2, 8.6.1, 10.3.0) and the importers of onnx-tensorrt (8.5-GA, 8.6-GA, 10.0), read
from the project's reference copies (shared/reference beside the repository)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from edge.dla.lowering import PARSER_OPS
from edge.dla.rules import RULES, TABLES
from tests.conftest import require_or_skip

REF = Path(__file__).resolve().parents[2] / "shared" / "reference"
HEADERS = {"8.5": "8.5.2", "8.6": "8.6.1", "10.3": "10.3.0"}
PARSERS = {"8.5": "8.5-GA/builtin_op_importers.cpp", "8.6": "8.6-GA/builtin_op_importers.cpp", "10.0": "10.0/onnxOpImporters.cpp"}
ELTWISE = {"SUM": {"Add", "Sum"}, "PROD": {"Mul"}, "MAX": {"Max"}, "MIN": {"Min"}, "SUB": {"Sub"}}
ACTIVATION = {"RELU": "Relu", "SIGMOID": "Sigmoid", "TANH": "Tanh", "CLIP": "Clip"}


def header(version: str) -> str:
    path = REF / "tensorrt" / version / "NvInfer.h"
    require_or_skip(path.exists(), f"no reference header at {path} (../shared/reference beside the checkout)")
    # The doc comments as prose: '//!' prefixes gone, wrapped lines joined.
    return re.sub(r"[ \t]*\n[ \t]*//![ \t]*", " ", path.read_text(encoding="utf-8", errors="replace"))


def section(text: str, cls: str) -> str:
    """The class's declaration with the doc comment before it, up to the next class's doc comment."""
    body = re.search(rf"\nclass (TRT_DEPRECATED )?{cls} : public", text)
    start = text.rfind("\\class", 0, body.start())
    end = text.find("\\class", body.end())
    return text[start : end if end > 0 else len(text)]


def pair(text: str, what: str):
    found = re.search(what + r" must be in the range \[(\d+), ?(\d+)\]", text)
    assert found, what
    return int(found.group(1)), int(found.group(2))


@pytest.mark.parametrize("trt", sorted(HEADERS))
def test_layer_limits_match_the_header_notes(trt):
    text = header(HEADERS[trt])
    for (generation, version), lim in TABLES.items():
        if version != trt:
            continue
        conv = section(text, "IConvolutionLayer")
        assert pair(conv, "kernel size") == lim.conv_kernel
        assert pair(conv, "stride") == lim.conv_stride
        assert pair(conv, "padding") == lim.conv_pad
        assert pair(conv, "output maps") == (1, lim.max_maps)
        pool = section(text, "IPoolingLayer")
        assert pair(pool, "window size") == lim.pool_window
        assert pair(pool, "stride") == lim.pool_stride
        assert pair(pool, "padding") == lim.pool_pad
        deconv = section(text, "IDeconvolutionLayer")
        assert pair(deconv, "(?:kernel size|Kernel height and width)") == lim.deconv_range
        assert "[64, 96, 128]" in deconv and lim.deconv_wide == {64, 96, 128}
        lrn = re.search(r"only values in the set, \[([\d, ]+)\]", section(text, "ILRNLayer")).group(1)
        assert {int(v) for v in lrn.split(",")} == set(lim.lrn_windows)
        elt = re.search(r"DLA supports only ([kA-Z_, and]+)\.", section(text, "IElementWiseLayer")).group(1)
        allowed = set().union(*(ELTWISE[k] for k in re.findall(r"k([A-Z]+)", elt)))
        assert allowed == set(lim.eltwise), (generation, version)
        act = re.search(r"valid activation types are ([kA-Z_, and]+)\.", text).group(1)
        listed = {ACTIVATION[k] for k in re.findall(r"k([A-Z]+)", act)}
        assert listed <= set(lim.activations)
        assert set(lim.activations) - listed == {"LeakyRelu"} and RULES["act.leaky"].unconfirmed
        resize = section(text, "IResizeLayer")
        assert "[1, 32] for kNEAREST mode and [1, 4] for kLINEAR" in resize
        assert (lim.resize_nearest_max, lim.resize_linear_max) == (32, 4)
        softmax = section(text, "ISoftMaxLayer")
        if "On Xavier, this layer is not supported on DLA" in softmax:
            assert TABLES[("xavier", "8.5")].softmax is False
            assert "at most 8192" in softmax and "at most 1024" in softmax
            assert (lim.softmax_accurate_max, lim.softmax_max) == (8192, 1024)
        if "On Xavier, DLA supports only inclusive padding" in pool:
            assert TABLES[("xavier", "8.5")].pool_exclusive_pad is False


def test_the_10_3_header_drops_the_xavier_notes():
    """Why 10.x has no Xavier row and why SoftMax limits on 10.x rest on the 8.x notes."""
    text = header("10.3.0")
    assert "On Xavier" not in text
    assert ("xavier", "10.3") not in TABLES


@pytest.mark.parametrize("source", sorted(PARSERS))
def test_parser_table_matches_the_importers(source):
    path = REF / "onnx-tensorrt" / PARSERS[source]
    require_or_skip(path.exists(), f"no reference parser source at {path} (../shared/reference beside the checkout)")
    found = set(re.findall(r"DEFINE_BUILTIN_OP_IMPORTER\((\w+)\)", path.read_text(encoding="utf-8", errors="replace")))
    onnx_ops = {
        op for op in found if not op.startswith("TRT_") and op not in ("FallbackPluginImporter", "LocalFunctionImporter", "op")
    }
    assert onnx_ops == set(PARSER_OPS[source])


def test_instance_norm_is_a_plugin_on_8x_and_native_from_10():
    """The parser sources say so: 8.x picks the plugin unless kNATIVE_INSTANCENORM, 10.0 turns that flag on."""
    from edge.dla.lowering import lower

    for folder, trt in (("8.5-GA", "8.5"), ("8.6-GA", "8.6")):
        paths = list((REF / "onnx-tensorrt" / folder).glob("*.cpp"))
        if paths:
            assert any("InstanceNormalization_TRT" in p.read_text(encoding="utf-8", errors="replace") for p in paths)
        assert lower("InstanceNormalization", "n", trt).kind == "PLUGIN_V2"
    path = REF / "onnx-tensorrt" / "10.0" / "onnxOpImporters.cpp"
    if path.exists():
        assert "kNATIVE_INSTANCENORM is ON by default" in path.read_text(encoding="utf-8", errors="replace")
    assert lower("InstanceNormalization", "n", "10.3").kind == "NORMALIZATION"
