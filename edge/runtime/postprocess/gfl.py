"""PP-PicoDet and other GFL heads exported the same way: per feature level, class scores [1, N, C] (already sigmoid) and box
distributions [1, N, 4 * (R + 1)] exported without their post-processing.

Each level has one anchor point per cell of a grid of stride s, at ((column + 0.5) * s, (row + 0.5) * s). Each side's
distance (left, top, right, bottom) is the expectation of a softmax over R + 1 bins (0..R), times s (generalised
focal loss's distribution regression). Every class whose score is above the threshold makes a candidate, so an anchor
can be a candidate of several classes, as PaddleDetection's PicoDet post-processing does; NMS is then per class.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np

from edge.runtime.engines.preprocess import Transform
from edge.runtime.postprocess import Result
from edge.runtime.postprocess.activations import softmax
from edge.runtime.postprocess.boxes import as_float, pairs, suppress
from edge.runtime.postprocess.detect import detections
from edge.runtime.postprocess.yolo import grid


def distances(raw: np.ndarray, bins: int) -> np.ndarray:
    """(K, 4 * bins) logits to (K, 4) expected distances in bins."""
    return (softmax(raw.reshape(len(raw), 4, bins)) * np.arange(bins, dtype=np.float32)).sum(axis=2)


class Gfl:
    def __init__(self, task: Any, head: Any, labels: List[str], width: int, height: int) -> None:
        self.task, self.labels = task, labels
        self.levels: List[Tuple[str, str]] = head.levels  # (scores, boxes) output names per level, stride order
        cells, self.step = grid(width, height, list(head.strides))  # YOLOX's grid: the same cells, row-major
        self.centres = (cells + 0.5) * self.step[:, None]

    def __call__(self, out: Dict[str, np.ndarray], tf: Transform) -> Result:
        scores = np.concatenate([as_float(s, out[s][0]) for s, _ in self.levels])  # (N, C)
        anchor, cls, conf = pairs(scores, self.task.score_threshold)  # one candidate per (anchor, class) above it
        raw = np.concatenate([as_float(b, out[b][0]) for _, b in self.levels])
        bins = raw.shape[1] // 4
        dist = distances(raw[anchor], bins) * self.step[anchor, None]
        c = self.centres[anchor]
        boxes = np.concatenate([c - dist[:, 0:2], c + dist[:, 2:4]], axis=1)
        keep = suppress(boxes, conf, cls, self.task)
        return detections(boxes[keep], conf[keep], cls[keep], tf, self.labels)
