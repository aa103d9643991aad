"""The box/NMS core every detector ends in (``edge.runtime.postprocess.boxes``), on boxes and scores built by hand.

NMS follows Ultralytics' ``non_max_suppression``: a box suppresses another of its class whose IoU with it is strictly
above the threshold. Each NMS case runs with few candidates (the box-by-box walk) and with more than ``FEW`` (the
pairwise path), so both keep what the definition keeps.
"""

from __future__ import annotations

import numpy as np
import pytest

from edge.config import TaskConfig
from edge.errors import RunFailed
from edge.runtime.postprocess import boxes as core


def apart(pair, copies):
    """``copies`` of a pair of boxes, each copy shifted 100 px right of the last so that copies never overlap."""
    shift = np.array([100.0, 0, 100.0, 0], np.float32)
    return np.array([np.asarray(b, np.float32) + k * shift for k in range(copies) for b in pair], np.float32)


@pytest.mark.parametrize("copies", [1, 30])  # 2 boxes: the walk; 60 boxes: the pairwise path
def test_an_iou_exactly_at_the_threshold_does_not_suppress(copies):
    # [0, 0, 10, 10] and [0, 0, 10, 5]: intersection 50, union 100 + 50 - 50 = 100, IoU 0.5 exactly
    b = apart([[0, 0, 10, 10], [0, 0, 10, 5]], copies)
    scores = np.tile(np.array([0.9, 0.8], np.float32), copies)
    classes = np.zeros(len(b), np.int64)
    assert sorted(core.nms(b, scores, 0.5, 300, classes).tolist()) == list(range(2 * copies))
    assert sorted(core.nms(b, scores, 0.49, 300, classes).tolist()) == list(range(0, 2 * copies, 2))


@pytest.mark.parametrize("copies", [1, 30])
def test_boxes_smaller_than_a_pixel_overlap_by_their_iou(copies):
    # normalised-size boxes [0, 0, 0.5, 0.5] and [0, 0, 0.5, 0.4]: intersection 0.2, union 0.25, IoU 0.8 > 0.5
    b = apart([[0, 0, 0.5, 0.5], [0, 0, 0.5, 0.4]], copies)
    scores = np.tile(np.array([0.9, 0.8], np.float32), copies)
    assert sorted(core.nms(b, scores, 0.5, 300).tolist()) == list(range(0, 2 * copies, 2))


@pytest.mark.parametrize("count", [10, 30])
@pytest.mark.parametrize("column", [True, False])
def test_boxes_in_a_row_or_column_never_suppress_each_other(count, column):
    # a column of 10 x 1 boxes 4 px apart (x ranges coincide, y ranges never meet), or a row of 1 x 10 boxes: IoU 0
    b = np.array([[0, 5 * k, 10, 5 * k + 1] for k in range(count)], np.float32)
    if not column:
        b = b[:, [1, 0, 3, 2]]
    scores = np.linspace(0.9, 0.5, count, dtype=np.float32)
    assert core.nms(b, scores, 0.1, 300, np.zeros(count, np.int64)).tolist() == list(range(count))


@pytest.mark.parametrize("agnostic,want", [(False, [0, 1]), (True, [0])])
def test_the_task_says_whether_classes_suppress_each_other(agnostic, want):
    b = np.array([[0, 0, 10, 10], [0, 0, 10, 10]], np.float32)  # one box twice, IoU 1
    task = TaskConfig(iou_threshold=0.5, max_detections=10, agnostic_nms=agnostic)
    scores, classes = np.array([0.9, 0.8], np.float32), np.array([0, 1])
    assert core.suppress(b, scores, classes, task).tolist() == want


@pytest.mark.parametrize("count", [20, 40])
def test_equal_scores_keep_the_order_of_the_output_rows(count):
    # disjoint boxes scored 0.5, 0.6, 0.5, 0.6, ...: best first, and among equal scores the earlier row first
    b = np.array([[20 * k, 0, 20 * k + 10, 10] for k in range(count)], np.float32)
    scores = np.array([0.5, 0.6] * (count // 2), np.float32)
    want = list(range(1, count, 2)) + list(range(0, count, 2))
    assert core.nms(b, scores, 0.5, 300).tolist() == want
    assert core.candidates(scores, 0.0).tolist() == want


def test_at_most_max_nms_class_pairs_are_kept_the_best():
    # 20000 candidates x 2 classes scored k / 40000 for k = 0 .. 39999: above 0 are k = 1 .. 39999, and the 30000
    # (MAX_NMS) best of those are k = 10000 .. 39999
    scores = (np.arange(40000, dtype=np.float64) / 40000).reshape(20000, 2)
    rows, cls, conf = core.pairs(scores, 0.0)
    assert sorted(np.rint(conf * 40000).astype(int).tolist()) == list(range(10000, 40000))
    np.testing.assert_array_equal(rows * 2 + cls, np.rint(conf * 40000))  # each pair is its row and class


@pytest.mark.parametrize("dtype", [np.int16, np.uint8, np.float16, np.float64])
def test_outputs_are_converted_to_float32_values(dtype):
    got = core.as_float("o", np.array([0, 1, 3], dtype))
    assert got.dtype == np.float32 and got.tolist() == [0.0, 1.0, 3.0]


def test_a_non_finite_output_says_what_to_do():
    with pytest.raises(RunFailed) as err:
        core.as_float("boxes", np.array([1.0, np.nan, np.inf], np.float32))
    assert str(err.value) == (
        "output 'boxes' holds 2 NaN or infinite value(s): the model or engine computes garbage (an FP16 overflow, or a "
        "broken export); check it with edge-run on the ONNX file, or rebuild without --fp16"
    )


def test_more_candidates_than_max_nms_keep_exactly_the_best_max_nms():
    """Past MAX_NMS candidates the best MAX_NMS enter NMS, best first: the same set a full sort gives (300 over, 50
    random score sets; a partition at the wrong rank drops a top candidate in a few of them)."""
    for seed in range(50):
        scores = np.random.default_rng(seed).random(core.MAX_NMS + 300).astype(np.float32)
        got = core.candidates(scores, 0.0)
        assert sorted(got.tolist()) == sorted(np.argsort(-scores, kind="stable")[: core.MAX_NMS].tolist()), seed
        assert np.all(np.diff(scores[got]) <= 0)
