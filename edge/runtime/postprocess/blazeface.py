"""MediaPipe BlazeFace: SSD anchors on two feature maps, 16 regressors per anchor (box + 6 keypoints)."""

from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from edge.runtime.engines import TensorInfo
from edge.runtime.engines.preprocess import PreprocessSpec, Transform
from edge.runtime.postprocess import Result
from edge.runtime.postprocess.activations import sigmoid
from edge.runtime.postprocess.boxes import as_float, nms
from edge.runtime.postprocess.detect import detections


def make_anchors(grids: List[List[int]]) -> np.ndarray:
    """Anchor centres (N, 2) in [0, 1], row-major per feature map, ``anchors_per_cell`` repeats per cell."""
    out = []
    for cells, per_cell in grids:
        c = (np.arange(cells, dtype=np.float32) + 0.5) / cells
        xs, ys = np.meshgrid(c, c)
        grid = np.stack([xs.ravel(), ys.ravel()], axis=1)
        out.append(np.repeat(grid, per_cell, axis=0))
    return np.concatenate(out)


class BlazeFace:
    def __init__(self, task: Any, outputs: List[TensorInfo], spec: PreprocessSpec, labels: List[str]) -> None:
        self.anchors = make_anchors(task.anchor_grids)
        # Scores are (1, k, 1) and regressors (1, k, 16); each appears once per feature map, in grid order (the
        # outputs were checked against task.anchor_grids when the head was chosen).
        self.score_names = [t.name for t in outputs if t.shape[-1] == 1]
        self.box_names = [t.name for t in outputs if t.shape[-1] == 16]
        self.size = np.array([spec.width, spec.height], np.float32)
        self.task, self.labels, self.label = task, labels, labels[0]

    def __call__(self, out: Dict[str, np.ndarray], tf: Transform) -> Result:
        logits = np.concatenate([as_float(n, out[n]).reshape(-1) for n in self.score_names])
        # The scores themselves against the threshold: float32's sigmoid is 1.0 from a logit of about 17.5 and 0 from
        # about -20, so no logit threshold says "above" as the reported score does at thresholds 0 and 1.
        scores = sigmoid(logits)
        keep = np.nonzero(scores > self.task.score_threshold)[0]
        if keep.size == 0:
            return Result()
        reg = np.concatenate([as_float(n, out[n]).reshape(-1, 16) for n in self.box_names])[keep]
        scores = scores[keep]
        # Offsets are in input pixels relative to the anchor centre; sizes in input pixels.
        centre = self.anchors[keep] * self.size + reg[:, 0:2]
        half = reg[:, 2:4] / 2
        boxes = np.concatenate([centre - half, centre + half], axis=1)
        kps = self.anchors[keep, None, :] * self.size + reg[:, 4:16].reshape(-1, 6, 2)
        idx = nms(boxes, scores, self.task.iou_threshold, self.task.max_detections)
        return detections(boxes[idx], scores[idx], np.zeros(len(idx), np.int64), tf, [self.label], kps[idx])
