"""CenterFace: a face is a peak of a heatmap at a quarter of the input size, with its size and five landmarks read
at that cell (four rank-4 outputs: heatmap [1, 1, h, w], scale [1, 2, h, w], offset [1, 2, h, w], landmarks
[1, 10, h, w]).

At a cell (row r, column c) whose heatmap value is above the threshold, with stride s (input / heatmap size):
height = exp(scale[0]) * s, width = exp(scale[1]) * s, centre = ((c + offset[1] + 0.5) * s, (r + offset[0] + 0.5) *
s), and landmark j = (x1 + landmarks[2j + 1] * width, y1 + landmarks[2j] * height) from the box's top-left corner:
channel pairs are (y, x), as in CenterFace's own decode. Then class-agnostic NMS.
"""

from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from edge.runtime.engines.preprocess import Transform
from edge.runtime.postprocess import Result
from edge.runtime.postprocess.boxes import as_float, candidates, suppress
from edge.runtime.postprocess.detect import detections

MAX_LOG_SIZE = 30.0  # exp() of more is infinity in float32: a huge box, not a crash


class CenterFace:
    def __init__(self, task: Any, head: Any, labels: List[str], width: int, height: int) -> None:
        self.task, self.labels = task, labels or ["face"]
        self.names = head.outputs  # heatmap, scale, offset, landmarks
        self.size = (width, height)

    def __call__(self, out: Dict[str, np.ndarray], tf: Transform) -> Result:
        heat = as_float(self.names["heatmap"], out[self.names["heatmap"]][0, 0])
        rows, cols = heat.shape
        flat = heat.ravel()
        idx = candidates(flat, self.task.score_threshold)
        r, c = np.divmod(idx, cols)
        sy, sx = self.size[1] / rows, self.size[0] / cols  # the stride: 4 for CenterFace's heads
        scale = as_float(self.names["scale"], out[self.names["scale"]][0])[:, r, c]
        offset = as_float(self.names["offset"], out[self.names["offset"]][0])[:, r, c]
        h = np.exp(np.minimum(scale[0], MAX_LOG_SIZE)) * sy
        w = np.exp(np.minimum(scale[1], MAX_LOG_SIZE)) * sx
        x1 = (c + offset[1] + 0.5) * sx - w / 2
        y1 = (r + offset[0] + 0.5) * sy - h / 2
        boxes = np.stack([x1, y1, x1 + w, y1 + h], axis=1).astype(np.float32)
        scores = flat[idx]
        classes = np.zeros(len(idx), np.int64)
        keep = suppress(boxes, scores, classes, self.task)
        kps = None
        if "landmarks" in self.names:
            lm = as_float(self.names["landmarks"], out[self.names["landmarks"]][0])[:, r[keep], c[keep]]
            lm = lm.T.reshape(len(keep), lm.shape[0] // 2, 2)  # (K, 5, [dy, dx]); explicit: K may be 0
            kps = np.empty_like(lm)
            kps[:, :, 0] = x1[keep, None] + lm[:, :, 1] * w[keep, None]
            kps[:, :, 1] = y1[keep, None] + lm[:, :, 0] * h[keep, None]
        return detections(boxes[keep], scores[keep], classes[keep], tf, self.labels, kps)
