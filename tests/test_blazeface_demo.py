"""The demo model (real BlazeFace, ONNX Runtime on the CPU) on real frames of the demo clip.

Expected faces were picked by looking at the frames: frame 1 shows a woman in front (face about x 200-338,
y 180-320) and a man behind her (x 422-493, y 203-273); frame 125 shows one man (x 408-577, y 181-349).
"""

from __future__ import annotations

import numpy as np
import pytest

from edge.config import load_config
from edge.runtime.engines import create_backend
from edge.runtime.engines.model import pick_input, preprocess_spec
from edge.runtime.engines.preprocess import Preprocessor
from edge.runtime.postprocess import create_postprocessor

from .conftest import DEMO_CONFIG, blank


@pytest.fixture(scope="module")
def detect(demo_model):
    cfg = load_config(DEMO_CONFIG)
    backend = create_backend(cfg)
    tensor = pick_input(cfg, backend.inputs)
    spec = preprocess_spec(cfg, tensor)
    pre, post = Preprocessor(spec), create_postprocessor(cfg, backend.outputs, spec)

    def run(image):
        x, tf = pre(image)
        return post(backend.infer({tensor.name: x}), tf).detections

    return run


def iou(a, b):
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    return w * h / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h)


def best_iou(dets, box):
    return max((iou(box, d.box) for d in dets), default=0.0)


def test_finds_both_faces_in_frame_1(detect, megamind_frames):
    dets = detect(megamind_frames[1])
    assert len(dets) == 2
    assert best_iou(dets, [200, 180, 338, 320]) > 0.7
    assert best_iou(dets, [422, 203, 493, 273]) > 0.6
    assert all(d.label == "face" and d.score >= 0.6 for d in dets)


def test_finds_the_face_in_frame_125_with_keypoints_inside(detect, megamind_frames):
    dets = detect(megamind_frames[125])
    assert len(dets) == 1
    d = dets[0]
    assert best_iou(dets, [408, 181, 577, 349]) > 0.7
    x1, y1, x2, y2 = d.box
    assert len(d.keypoints) == 6 and sum(x1 <= x <= x2 and y1 <= y <= y2 for x, y in d.keypoints) >= 4


@pytest.mark.parametrize("value", [0, 128, 255])
def test_no_faces_in_blank_frames(detect, value):
    assert detect(blank(528, 720, value)) == []


def test_boxes_follow_the_face_when_the_frame_is_padded(detect, megamind_frames):
    """Letterboxing a different geometry (frame placed in a taller canvas) still maps boxes onto the face."""
    frame = megamind_frames[125]
    canvas = np.zeros((frame.shape[0] + 300, frame.shape[1], 3), np.uint8)
    canvas[200 : 200 + frame.shape[0]] = frame
    dets = detect(canvas)
    assert best_iou(dets, [408, 181 + 200, 577, 349 + 200]) > 0.7
