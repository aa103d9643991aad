"""Decoders on tensors built by hand: YOLO v5/v8 layouts, NMS, classification top-k."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from edge.config import TaskConfig
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


def test_blazeface_anchor_grid_matches_the_model_layout():
    a = make_anchors([[16, 2], [8, 6]])
    assert a.shape == (896, 2)
    np.testing.assert_allclose(a[0], a[1])  # two anchors per cell on the first map
    np.testing.assert_allclose(a[2], [1.5 / 16, 0.5 / 16])  # row-major: x moves first
    np.testing.assert_allclose(a[512], [0.5 / 8, 0.5 / 8])
