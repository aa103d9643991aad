"""YOLO heads that need NMS, one decoder per layout of the raw head output (boxes cx, cy, w, h in input pixels):

- ``v8``: Ultralytics v8/v11 ``[1, 4 + C, N]`` (no objectness), also the detection part of -seg and -pose heads;
- ``v8t``: the same transposed, ``[1, N, 4 + C]`` (exports that add a transpose for TensorRT or DeepStream);
- ``v5``: YOLOv5/v7 ``[1, N, 5 + C]``, objectness then class probabilities (score = objectness x class);
- ``yolox``: YOLOX exported without its decoder, ``[1, N, 5 + C]`` with offsets on a grid of strides 8, 16, 32
  (x, y in cells, log w, h), objectness and class probabilities.

-seg adds mask coefficients after the class scores and a prototype output; -pose adds keypoints (x, y[, visibility])
after one class score.
"""

from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from edge.runtime.engines.preprocess import Transform
from edge.runtime.postprocess import Result
from edge.runtime.postprocess.boxes import as_float, candidates, suppress, xywh_to_xyxy
from edge.runtime.postprocess.detect import detections
from edge.runtime.postprocess.masks import ProtoMasks


def grid(width: int, height: int, strides: List[int]) -> tuple:
    """YOLOX's cell origins (N, 2) and strides (N,), row-major per stride, strides in output order."""
    cells, steps = [], []
    for s in strides:
        ys, xs = np.meshgrid(np.arange(-(-height // s)), np.arange(-(-width // s)), indexing="ij")
        cells.append(np.stack([xs.ravel(), ys.ravel()], axis=1))
        steps.append(np.full(xs.size, s))
    return np.concatenate(cells).astype(np.float32), np.concatenate(steps).astype(np.float32)


class Yolo:
    """Raw YOLO heads (the layouts above), with masks for -seg and keypoints for -pose."""

    def __init__(self, task: Any, head: Any, labels: List[str], width: int, height: int) -> None:
        self.task, self.head, self.labels = task, head, labels
        self.name, self.layout, self.classes = head.outputs["head"], head.layout, head.classes
        self.proto = head.outputs.get("protos")
        self.keypoints = head.keypoints  # (count, 2 or 3) for pose, else None
        self.size = (width, height)
        if self.layout == "yolox":
            self.cells, self.strides = grid(width, height, list(head.strides))

    def rows(self, pred: np.ndarray, idx: np.ndarray, start: int, stop: int) -> np.ndarray:
        """Attributes start:stop of candidates ``idx``, as (len(idx), stop - start)."""
        if self.layout == "v8":
            return pred[start:stop, idx].T
        return pred[idx, start:stop]

    def __call__(self, out: Dict[str, np.ndarray], tf: Transform) -> Result:
        pred = as_float(self.name, out[self.name][0])
        c, conf = self.classes, self.task.score_threshold
        if self.layout == "v8":
            scores_all = pred[4 : 4 + c].max(axis=0)
        elif self.layout == "v8t":
            scores_all = pred[:, 4 : 4 + c].max(axis=1)
        else:  # objectness first: a score is at most its objectness, so only those above the threshold are multiplied
            obj = pred[:, 4]
            scores_all = np.zeros(len(pred), np.float32)
            live = np.flatnonzero(obj > conf)
            scores_all[live] = (pred[live, 5 : 5 + c] * obj[live, None]).max(axis=1)
        idx = candidates(scores_all, conf)
        first = 5 if self.layout in ("v5", "yolox") else 4
        classes = self.rows(pred, idx, first, first + c).argmax(axis=1)
        xywh = self.rows(pred, idx, 0, 4).astype(np.float32, copy=True)
        if self.layout == "yolox":
            step = self.strides[idx, None]
            xywh[:, 0:2] = (xywh[:, 0:2] + self.cells[idx]) * step
            xywh[:, 2:4] = np.exp(np.minimum(xywh[:, 2:4], 30.0)) * step  # a huge log-size is a huge box, not inf
        boxes, scores = xywh_to_xyxy(xywh), scores_all[idx]
        keep = suppress(boxes, scores, classes, self.task)
        boxes, scores, classes, idx = boxes[keep], scores[keep], classes[keep], idx[keep]
        kps = masks = None
        if self.keypoints is not None:
            count, dims = self.keypoints
            kps = self.rows(pred, idx, first + c, first + c + count * dims).reshape(len(idx), count, dims)
        if self.proto is not None:
            coeffs = self.rows(pred, idx, first + c, first + c + self.head.mask_dims)
            masks = ProtoMasks(as_float(self.proto, out[self.proto][0]), coeffs, *self.size)
        return detections(boxes, scores, classes, tf, self.labels, kps, masks)
