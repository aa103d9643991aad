"""Decoders on tensors built by hand: YOLO v5/v8 layouts, NMS, classification top-k, BlazeFace's anchors and coder."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from edge.config import TaskConfig
from edge.errors import RunFailed
from edge.runtime.engines import TensorInfo
from edge.runtime.engines.preprocess import PreprocessSpec, plan_resize
from edge.runtime.postprocess import heads, resolved_task
from edge.runtime.postprocess.blazeface import make_anchors
from edge.runtime.postprocess.boxes import nms
from edge.runtime.postprocess.classify import Classify


def yolo_task(**kw):
    return TaskConfig(**{**dict(score_threshold=0.25, iou_threshold=0.45, max_detections=100), **kw})


def decoder(task, outputs, labels, spec=None):
    spec = spec or PreprocessSpec(640, 640)
    head = heads.choose(task, outputs, spec, labels)
    return heads.build(head, resolved_task(task, head.kind), outputs, spec, labels)


def encode(boxes_cxcywh, scores, classes, n_classes, n_candidates, layout):
    """A raw head output holding the given candidates (and zero-score filler)."""
    rows = np.zeros((n_candidates, 4 + n_classes + (1 if layout == "v5" else 0)), np.float32)
    for i, (b, s, c) in enumerate(zip(boxes_cxcywh, scores, classes)):
        rows[i, :4] = b
        if layout == "v5":
            rows[i, 4] = 1.0
            rows[i, 5 + c] = s
        else:
            rows[i, 4 + c] = s
    return rows[None] if layout == "v5" else rows.T[None]


def test_yolo_v5_and_v8_decode_to_the_same_frame_boxes():
    spec = PreprocessSpec(640, 640)
    _, _, tf = plan_resize(spec, 1280, 720)  # letterbox: scale 0.5, pad_y 140
    cands = [(320, 320, 100, 50), (322, 321, 100, 50), (100, 200, 40, 40)]
    scores, classes = [0.9, 0.8, 0.7], [2, 2, 5]
    results = {}
    for layout in ("v5", "v8"):
        raw = encode(cands, scores, classes, 80, 25200 if layout == "v5" else 8400, layout)  # v5: 3 anchors a cell
        info = TensorInfo("output0", raw.shape, np.dtype(np.float32))
        post = decoder(yolo_task(), [info], [f"c{i}" for i in range(80)], spec)
        assert post.layout == layout  # told apart by the shape and the 80 labels
        results[layout] = post({"output0": raw}, tf)
    for res in results.values():
        dets = res.detections
        assert [d.label for d in dets] == ["c2", "c5"]  # the overlapping same-class box is suppressed
        np.testing.assert_allclose(dets[0].box, [540, 310, 740, 410], atol=0.01)  # (270..370, 295..345) in input pixels
        np.testing.assert_allclose(dets[1].box, [160, 80, 240, 160], atol=0.01)  # (80..120, 180..220) in input pixels
        assert dets[0].score == np.float32(0.9)


def test_nms_keeps_overlapping_boxes_of_other_classes():
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [1, 1, 11, 11]], np.float32)
    scores = np.array([0.9, 0.8, 0.7], np.float32)
    assert nms(boxes, scores, 0.5, 10).tolist() == [0]
    assert nms(boxes, scores, 0.5, 10, classes=np.array([0, 1, 0])).tolist() == [0, 1]
    assert nms(boxes[:0], scores[:0], 0.5, 10).tolist() == []


def test_classify_top_k_with_labels_and_softmax():
    task = SimpleNamespace(top_k=2, softmax="auto")
    post = Classify(task, "logits", ["cat", "dog", "car", "cup"])
    res = post({"logits": np.array([[1.0, 3.0, -2.0, 2.0]], np.float32)}, None)
    assert [c.label for c in res.classes] == ["dog", "cup"]
    e = np.exp([1.0, 3.0, -2.0, 2.0])
    assert abs(res.classes[0].score - e[1] / e.sum()) < 1e-6


def classify(logits, top_k=5, softmax="auto", labels=("cat", "dog", "car", "cup")):
    post = Classify(SimpleNamespace(top_k=top_k, softmax=softmax), "logits", list(labels))
    return [(c.class_id, c.label, c.score) for c in post({"logits": np.array([logits], np.float32)}, None).classes]


def test_classify_reads_probabilities_as_they_are_and_logits_through_softmax():
    """auto: scores that are a distribution (none below 0, summing to 1) are the model's softmax already; others
    (here all positive, summing to 1.75) are logits. "yes" and "no" force it either way."""
    probs = [0.0, 0.75, 0.25, 0.0]
    assert classify(probs, top_k=2) == [(1, "dog", 0.75), (2, "car", 0.25)]
    assert classify(probs, top_k=2, softmax="no") == [(1, "dog", 0.75), (2, "car", 0.25)]
    e = np.exp(probs)  # softmax of the probabilities, by hand
    assert classify(probs, top_k=1, softmax="yes") == [(1, "dog", pytest.approx(e[1] / e.sum()))]
    logits = [0.25, 1.0, 0.5, 0.0]
    e = np.exp(logits)
    assert classify(logits, top_k=1) == [(1, "dog", pytest.approx(e[1] / e.sum()))]
    assert classify([1.0, 3.0, -2.0, 2.0], top_k=1, softmax="no") == [(1, "dog", 3.0)]


def test_classify_top_k_is_the_k_best_and_unlabelled_classes_are_their_ids():
    """Top 2 of five picks the two best wherever they sit; a top_k past the class count ranks them all; classes past
    the labels go by their index."""
    probs = [0.0625, 0.5, 0.0625, 0.125, 0.25]  # binary fractions: float32 holds them exactly
    assert [c for c, _, _ in classify(probs, top_k=2, labels=())] == [1, 4]
    assert classify(probs, top_k=3, labels=["a", "b", "c", "d"]) == [(1, "b", 0.5), (4, "4", 0.25), (3, "d", 0.125)]
    assert [c for c, _, _ in classify([0.2, 0.5, 0.3], top_k=9)] == [1, 2, 0]


def test_classify_refuses_nan_naming_the_output():
    with pytest.raises(RunFailed, match="output 'logits' holds 1 NaN"):
        classify([0.5, np.nan, 0.5, 0.0])


def blazeface(logits, regressors, score_threshold=0.5, size=128):
    """The BlazeFace decoder over MediaPipe's two maps (16x16 cells of 2 anchors, 8x8 of 6) with the given logits and
    regressors by anchor index; every other anchor far below any threshold."""
    spec = PreprocessSpec(size, size)
    outs = {
        "s16": np.full((1, 512, 1), -50.0, np.float32),
        "r16": np.zeros((1, 512, 16), np.float32),
        "s8": np.full((1, 384, 1), -50.0, np.float32),
        "r8": np.zeros((1, 384, 16), np.float32),
    }
    for i, v in logits.items():
        outs["s16" if i < 512 else "s8"][0, i % 512] = v
    for i, v in regressors.items():
        outs["r16" if i < 512 else "r8"][0, i % 512] = v
    infos = [TensorInfo(n, v.shape, np.dtype(np.float32)) for n, v in outs.items()]
    post = decoder(TaskConfig(type="blazeface", score_threshold=score_threshold), infos, [], spec)
    return post(outs, plan_resize(spec, size, size)[2]).detections


def test_blazeface_box_and_keypoints_by_hand():
    """Anchor 2 is cell (row 0, column 1) of the 16x16 map: centre (1.5 / 16, 0.5 / 16) of 128 = (12, 4). MediaPipe's
    regressors are in input pixels: centre offset (2, 3), width 10, height 6, then six keypoint offsets from the
    anchor centre: box (14 - 5, 7 - 3, 14 + 5, 7 + 3), first keypoint (12 + 1, 4 - 1). Score sigmoid(ln 4) = 0.8."""
    reg = np.zeros(16, np.float32)
    reg[:6] = [2, 3, 10, 6, 1, -1]
    (d,) = blazeface({2: np.log(4.0)}, {2: reg})
    assert d.box == pytest.approx([9, 4, 19, 10]) and d.score == pytest.approx(0.8) and d.label == "face"
    assert d.keypoints[0] == pytest.approx([13, 3]) and d.keypoints[1] == pytest.approx([12, 4])


def test_blazeface_reports_scores_above_the_threshold_only():
    """At 0.5: a logit of 0 scores sigmoid(0) = 0.5, not above it; -0.5 (0.38) is below, 0.5 (0.62) is above. No
    score is above a threshold of 1, not even a logit of 20 whose float32 sigmoid is 1.0; a score of 3e-7 is above a
    threshold of 0."""
    logits = {100: 0.0, 200: -0.5, 300: 0.5}
    regs = {i: np.array([0, 0, 8, 8] + [0] * 12, np.float32) for i in logits}
    assert [d.score for d in blazeface(logits, regs)] == [pytest.approx(1 / (1 + np.exp(-0.5)))]
    assert blazeface({300: 20.0}, regs, score_threshold=1.0) == []
    (d,) = blazeface({300: -15.0}, regs, score_threshold=0.0)
    assert 0 < d.score == pytest.approx(1 / (1 + np.exp(15.0)), abs=1e-7)  # float32's tanh: 3e-7 within 1e-8


def test_blazeface_refuses_nan_naming_the_output():
    with pytest.raises(RunFailed, match="output 's8' holds 1 NaN"):
        blazeface({600: np.nan}, {})


def test_blazeface_anchor_grid_matches_the_model_layout():
    a = make_anchors([[16, 2], [8, 6]])
    assert a.shape == (896, 2)
    np.testing.assert_allclose(a[0], a[1])  # two anchors per cell on the first map
    np.testing.assert_allclose(a[2], [1.5 / 16, 0.5 / 16])  # row-major: x moves first
    np.testing.assert_allclose(a[512], [0.5 / 8, 0.5 / 8])
