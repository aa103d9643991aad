"""The DLA limits and the parser table held against NVIDIA's own sources, per release: the "If executing this layer
on DLA" notes of NvInfer.h (8.5.2, 8.6.1, 10.3.0) and the importers of onnx-tensorrt (8.5-GA, 8.6-GA, 10.0).

Their facts are committed in tests/fixtures/nvidia_dla_facts.json with each source file's sha256
(tests/nvidia_facts.py), so these checks run without the reference copies; where the copies are (CI has
../shared/reference beside the checkout, and must), the extraction is re-run and must equal the committed facts."""

from __future__ import annotations

import pytest

from edge.dla.lowering import PARSER_OPS
from edge.dla.rules import RULES, TABLES
from tests.conftest import require_or_skip
from tests.nvidia_facts import FIXTURE, REF, committed, extract

ELTWISE = {"SUM": {"Add", "Sum"}, "PROD": {"Mul"}, "MAX": {"Max"}, "MIN": {"Min"}, "SUB": {"Sub"}}
ACTIVATION = {"RELU": "Relu", "SIGMOID": "Sigmoid", "TANH": "Tanh", "CLIP": "Clip"}
FACTS = committed()


def test_the_committed_facts_are_what_nvidias_sources_say():
    require_or_skip(REF.is_dir(), f"no reference copies at {REF} (../shared/reference beside the checkout)")
    assert extract() == FACTS, (
        f"the sources changed or the extraction did: rerun python -m tests.nvidia_facts and review {FIXTURE.name}"
    )


@pytest.mark.parametrize("trt", sorted(FACTS["headers"]))
def test_layer_limits_match_the_header_notes(trt):
    f = FACTS["headers"][trt]
    rows = [(generation, lim) for (generation, version), lim in TABLES.items() if version == trt]
    assert rows, trt
    for generation, lim in rows:
        assert tuple(f["conv_kernel"]) == lim.conv_kernel and tuple(f["conv_stride"]) == lim.conv_stride
        assert tuple(f["conv_pad"]) == lim.conv_pad and tuple(f["conv_output_maps"]) == (1, lim.max_maps)
        assert tuple(f["pool_window"]) == lim.pool_window and tuple(f["pool_stride"]) == lim.pool_stride
        assert tuple(f["pool_pad"]) == lim.pool_pad
        assert tuple(f["deconv_kernel"]) == lim.deconv_range and set(f["deconv_wide_kernels"]) == lim.deconv_wide
        assert set(f["lrn_windows"]) == set(lim.lrn_windows)
        assert set().union(*(ELTWISE[k] for k in f["eltwise"])) == set(lim.eltwise), (generation, trt)
        listed = {ACTIVATION[k] for k in f["activations"]}
        assert set(lim.activations) - listed == {"LeakyRelu"} and RULES["act.leaky"].unconfirmed
        assert (lim.resize_nearest_max, lim.resize_linear_max) == (f["resize_nearest_max"], f["resize_linear_max"])
        if f["softmax_not_on_xavier"]:
            assert TABLES[("xavier", "8.5")].softmax is False
            assert f["softmax_at_most"] == [1024, 8192] and (lim.softmax_accurate_max, lim.softmax_max) == (8192, 1024)
        if f["pool_inclusive_pad_only_on_xavier"]:
            assert TABLES[("xavier", "8.5")].pool_exclusive_pad is False


def test_the_10_3_header_drops_the_xavier_notes():
    """Why 10.x has no Xavier row and why SoftMax limits on 10.x rest on the 8.x notes."""
    assert FACTS["headers"]["10.3"]["mentions_xavier"] is False and FACTS["headers"]["8.5"]["mentions_xavier"] is True
    assert ("xavier", "10.3") not in TABLES


@pytest.mark.parametrize("source", sorted(FACTS["parsers"]))
def test_parser_table_matches_the_importers(source):
    assert FACTS["parsers"][source]["onnx_ops"] == sorted(PARSER_OPS[source])


def test_instance_norm_is_a_plugin_on_8x_and_native_from_10():
    """The parser sources say so: 8.x picks the plugin unless kNATIVE_INSTANCENORM, 10.0 turns that flag on."""
    from edge.dla.lowering import lower

    for trt in ("8.5", "8.6"):
        parser = FACTS["parsers"][trt]
        assert parser["instance_norm_plugin"] and not parser["native_instance_norm_on_by_default"]
        assert lower("InstanceNormalization", "n", trt).kind == "PLUGIN_V2"
    assert FACTS["parsers"]["10.0"]["native_instance_norm_on_by_default"]
    assert lower("InstanceNormalization", "n", "10.3").kind == "NORMALIZATION"
