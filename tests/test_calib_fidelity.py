"""The label-free check's report: SQNR and agreement by their definitions, which outputs are probabilities (read from
real ONNX graphs), how integer outputs are compared, and the table edge calib prints."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge.calib.fidelity import (
    ANCHORS,
    DETECTIONS,
    FidelityMeter,
    OutputFidelity,
    decisions,
    is_probability,
    lowest,
    render,
    undecided,
)
from edge.graph.model import prepare

NO_GRAPH = SimpleNamespace(producer={}, model=SimpleNamespace(graph=SimpleNamespace(node=[])))


def test_sqnr_of_a_silent_output_with_noise_is_minus_infinity():
    assert OutputFidelity("y", 4, 4, 0.0, 2.0).sqnr_db == -math.inf
    # 10 log10(100 / 1)
    assert OutputFidelity("y", 4, 3, 100.0, 1.0).to_dict() == {
        "output": "y",
        "positions": 4,
        "agreement": 0.75,
        "sqnr_db": pytest.approx(20.0),
    }


def test_the_lowest_agreement_and_its_output():
    assert lowest([]) == (1.0, None)
    results = [OutputFidelity("a", 4, 3), OutputFidelity("b", 4, 1), OutputFidelity("c", 4, 1)]
    assert lowest(results) == (0.25, "b")  # the first of a tie


def test_an_output_never_aligned_has_no_sqnr_and_says_why():
    """Every batch of another shape in INT8 (a graph's own NMS kept other rows): nothing compared value by value."""
    r = OutputFidelity("boxes", unaligned=4)
    assert math.isnan(r.sqnr_db) and r.to_dict() == {
        "output": "boxes",
        "positions": 0,
        "agreement": 1.0,
        "sqnr_db": None,  # JSON has no NaN
        "unaligned": 4,
    }
    assert OutputFidelity("boxes", 2, 2, 4.0, 0.0, unaligned=1).sqnr_db == math.inf  # the aligned batches still count
    lines = render([OutputFidelity("boxes", unaligned=4), OutputFidelity("scores")], 4, "frames")
    assert lines[-1] == (
        "  boxes: INT8 gave another number of rows than FP32 in 4 batch(es) (sizes the graph decides, as its own NMS "
        "does); those were not compared value by value"
    )
    assert "another number" not in "\n".join(render([OutputFidelity("scores", 1, 1)], 1, "x"))


def test_a_decision_measure_with_nothing_compared_is_named():
    """No object found either way: the detections' agreement reads 1.0 over nothing, which the report says."""
    assert undecided([OutputFidelity("boxes", 0), OutputFidelity(DETECTIONS, 0)]) == DETECTIONS
    assert undecided([OutputFidelity(ANCHORS, 0), OutputFidelity(DETECTIONS, 3, 3)]) == ANCHORS
    assert undecided([OutputFidelity(DETECTIONS, 1, 0), OutputFidelity("scores", 0)]) is None  # a raw output is not one
    assert undecided([]) is None


def test_a_scalar_output_is_one_yes_no_decision():
    assert decisions(np.float32(0.7), 0, 0.5).tolist() == [True]
    assert decisions(np.float32(0.3), 0, 0.5).tolist() == [False]
    assert decisions(np.float32(0.5), 0, 0.5).tolist() == [False]  # at the threshold: not above it


def test_a_score_at_the_threshold_is_a_no():
    # "yes" is score > 0.5 after a Sigmoid (0.5 is a logit of 0) and logit > 0
    assert decisions(np.array([[0.5], [0.51]]), 1, 0.5).tolist() == [False, True]
    assert decisions(np.array([[0.0], [0.01]]), 1, 0.0).tolist() == [False, True]


def graph(nodes, outputs, inputs=("x",), initializers=()):
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(i, TensorProto.FLOAT, [2, 3]) for i in inputs],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        list(initializers),
    )
    return prepare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))


def test_probabilities_are_found_through_ops_that_only_move_values():
    shape = numpy_helper.from_array(np.array([3, 2], np.int64), "shape")
    g = graph(
        [
            helper.make_node("Sigmoid", ["x"], ["s"]),
            helper.make_node("Softmax", ["x"], ["p"]),
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Reshape", ["s", "shape"], ["s_reshaped"]),
            helper.make_node("Concat", ["s", "p", "s"], ["both"], axis=1),
            helper.make_node("Concat", ["s", "r"], ["mixed"], axis=1),
            helper.make_node("Concat", ["r", "s", "s"], ["mixed_late"], axis=1),
            helper.make_node("Transpose", ["both"], ["both_t"]),
            helper.make_node("Gather", ["s", "idx"], ["picked"], axis=1),
            helper.make_node("Gather", ["r", "idx"], ["picked_r"], axis=1),
        ],
        ["s_reshaped", "both_t", "mixed", "mixed_late", "picked", "picked_r", "x", "r"],
        initializers=[shape, numpy_helper.from_array(np.array([0], np.int64), "idx")],
    )
    # Reshape's shape and Gather's indices are not values: only their first input counts
    assert is_probability(g, "s_reshaped") and is_probability(g, "picked")
    assert is_probability(g, "both_t")  # every input of the Concat is a probability
    assert not is_probability(g, "mixed")  # one is not
    assert not is_probability(g, "mixed_late")  # nor here, after a probability met twice
    assert not is_probability(g, "picked_r")
    assert not is_probability(g, "x") and not is_probability(g, "r")


def test_a_probability_score_decides_at_one_half_and_a_logit_at_zero():
    g = graph(
        [helper.make_node("Sigmoid", ["x"], ["p"]), helper.make_node("Neg", ["x"], ["logit"])],
        ["p", "logit"],
    )
    meter = FidelityMeter(g, ["p", "logit"], "nhwc")
    # [N=2, 1]: yes/no per image. FP32 0.6 and 0.4 against INT8 0.45 and 0.3: the first flips at 0.5, not at 0.
    fp32 = {"p": np.array([[0.6], [0.4]], np.float32), "logit": np.array([[0.6], [0.4]], np.float32)}
    int8 = {"p": np.array([[0.45], [0.3]], np.float32), "logit": np.array([[0.45], [-0.1]], np.float32)}
    meter.update(fp32, int8)
    p, logit = meter.summary()
    assert (p.positions, p.agreement) == (2, 0.5)
    assert (logit.positions, logit.agreement) == (2, 0.5)  # the second logit flips at 0
    # the same values as the probability's, as logits: 0.6 -> 0.45 crosses 0.5 but not 0, so they agree
    meter = FidelityMeter(g, ["logit"], "nhwc")
    meter.update({"logit": fp32["p"]}, {"logit": int8["p"]})
    assert meter.summary()[0].agreement == 1.0


def test_integer_outputs_are_compared_value_for_value_without_sqnr():
    meter = FidelityMeter(NO_GRAPH, ["ids", "y"], "nhwc")
    ids = np.array([[3, 1, 4], [1, 5, 9]], np.int64)
    changed = ids.copy()
    changed[1, 2] = 2
    y = np.array([[1.0, 2.0]], np.float32)
    meter.update({"ids": ids, "y": y}, {"ids": changed, "y": y + np.float32(0.5)})
    meter.update({"ids": ids, "y": y}, {"ids": ids, "y": y})
    ids_r, y_r = meter.summary()
    assert (ids_r.positions, ids_r.agree, ids_r.signal, ids_r.noise) == (12, 11, 0.0, 0.0)
    # no signal to measure noise against: no SQNR (it read inf, "exact", with a class id changed; seen on RapidAI's
    # table lines, 1.8 % of the pixels another class)
    assert math.isnan(ids_r.sqnr_db) and ids_r.to_dict()["sqnr_db"] is None
    # y: 2 runs of 1 decision; signal 2 x (1 + 4), noise 0.25 + 0.25 from the first run
    assert (y_r.positions, y_r.agree, y_r.signal, y_r.noise) == (2, 2, 10.0, 0.5)


def test_the_report_table():
    results = [
        OutputFidelity("y", 200, 150, 100.0, 1.0),
        OutputFidelity("unused", 0, 0, 0.0, 0.0),
        OutputFidelity(DETECTIONS, 0, 0, math.nan, math.nan),
        OutputFidelity(ANCHORS, 10, 9, math.nan, math.nan),
    ]
    assert render(results, 8, "calib/") == [
        "FP32 vs INT8 (Q/DQ in ONNX Runtime) on 8 images from calib/, no labels needed:",
        # columns: the widest name (10), positions 10, agreement 10, SQNR 8
        "  output       positions  agreement  SQNR dB",
        "  y                  200     0.7500     20.0",
        "  unused               0          -      inf",
        "  detections           0     1.0000        -",
        "  anchors             10     0.9000        -",
    ]
    # a short name still gets a column as wide as "output"
    assert render([OutputFidelity("p", 1, 1, 1.0, 0.0)], 1, "x")[1:] == [
        "  output   positions  agreement  SQNR dB",
        "  p                1     1.0000      inf",
    ]


def test_a_four_dimensional_map_decides_along_the_layouts_channel_axis():
    """A [1, 3, 1, 2] class map: NCHW decides per pixel over the 3 channels (2 positions); read as NHWC it would be
    per (channel, row) over the 2 columns (3 positions). INT8 flips the second pixel's class from 2 to 0."""
    fp32 = {"m": np.array([[[[0.1, 0.0]], [[0.2, 0.1]], [[0.0, 0.9]]]], np.float32)}
    int8 = {"m": np.array([[[[0.1, 0.8]], [[0.2, 0.1]], [[0.0, 0.7]]]], np.float32)}
    nchw = FidelityMeter(NO_GRAPH, ["m"], "nchw")
    nchw.update(fp32, int8)
    assert (nchw.summary()[0].positions, nchw.summary()[0].agree) == (2, 1)
    nhwc = FidelityMeter(NO_GRAPH, ["m"], "nhwc")
    nhwc.update(fp32, int8)
    assert (nhwc.summary()[0].positions, nhwc.summary()[0].agree) == (3, 2)  # channel 0's argmax moves to column 1
