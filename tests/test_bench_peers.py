"""The peer benchmark's per-image judgement of a detector and its views of a face frame, by hand-built cases."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from peers import SameDecisions, face_views  # noqa: E402

from edge.runtime.postprocess import Detection  # noqa: E402


def d(box, c=0):
    return Detection([float(v) for v in box], 0.9, c)


def test_an_image_is_right_only_when_int8_reports_exactly_fp32s_detections():
    fp32 = [[d([0, 0, 10, 10])], [d([0, 0, 10, 10])], [d([0, 0, 10, 10])], [d([0, 0, 10, 10])], [], []]
    int8 = [
        [d([1, 0, 11, 10])],  # the same face, moved by a pixel (IoU 0.82)
        [d([0, 0, 10, 10]), d([50, 50, 60, 60])],  # the same face and one FP32 does not report
        [],  # dropped
        [d([0, 0, 10, 10], c=1)],  # another class
        [],  # nothing either side
        [d([5, 5, 9, 9])],  # one INT8 invents
    ]
    assert SameDecisions.same(fp32, int8).tolist() == [True, False, False, False, True, False]


def test_a_frame_gives_24_views_mirrored_cropped_and_exposed():
    frame = np.zeros((100, 200, 3), np.uint8)
    frame[:, :100] = 100  # left half grey, right half black
    views = face_views(frame)
    assert len(views) == 24
    assert [v.shape for v in views[:12:4]] == [(100, 200, 3), (80, 160, 3), (70, 140, 3)]
    assert views[0][0, 0, 0] == 100 and views[12][0, 0, 0] == 0  # the mirrored half starts black
    assert [int(v[0, 0, 0]) for v in views[:4]] == [100, 60, 110, 110]  # x1, x0.6, x1.3 - 20, x0.7 + 40
