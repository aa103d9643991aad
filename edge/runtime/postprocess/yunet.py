"""YuNet (the OpenCV Zoo's face detector, 2023mar and later): per stride 8, 16 and 32, one candidate per grid cell
with a class score ``cls_S`` [1, N, 1], an objectness ``obj_S`` [1, N, 1], a box ``bbox_S`` [1, N, 4] and five
landmarks ``kps_S`` [1, N, 10], N the cells of that stride, row-major. OpenCV's ``FaceDetectorYN`` asks for the
outputs by these names, so every YuNet export keeps them.

At cell (row r, column c) of stride s, as ``FaceDetectorYN`` decodes it: score = sqrt(cls * obj), each clamped to
[0, 1]; centre ((c + bbox[0]) * s, (r + bbox[1]) * s), width exp(bbox[2]) * s, height exp(bbox[3]) * s; landmark j
at ((c + kps[2j]) * s, (r + kps[2j + 1]) * s), in the order right eye, left eye, nose tip, right and left mouth
corners. Then class-agnostic NMS (one class).
"""

from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from edge.runtime.engines.preprocess import Transform
from edge.runtime.postprocess import Result
from edge.runtime.postprocess.boxes import as_float, candidates, suppress
from edge.runtime.postprocess.detect import detections
from edge.runtime.postprocess.yolo import grid

MAX_LOG_SIZE = 30.0  # exp() of more is infinity in float32: a huge box, not a crash
ROLES = ("cls", "obj", "bbox", "kps")


class YuNet:
    def __init__(self, task: Any, head: Any, labels: List[str], width: int, height: int) -> None:
        self.task, self.labels = task, labels or ["face"]
        self.names = head.outputs  # "cls8", "obj8", "bbox8", "kps8", ... -> output name
        self.strides = list(head.strides)
        self.cells, self.step = grid(width, height, self.strides)  # (column, row) of every cell, strides in order

    def _all(self, out: Dict[str, np.ndarray], role: str, width: int) -> np.ndarray:
        parts = [as_float(self.names[f"{role}{s}"], out[self.names[f"{role}{s}"]]) for s in self.strides]
        return np.concatenate([p.reshape(-1, width) for p in parts])

    def __call__(self, out: Dict[str, np.ndarray], tf: Transform) -> Result:
        cls = np.clip(self._all(out, "cls", 1)[:, 0], 0, 1)
        obj = np.clip(self._all(out, "obj", 1)[:, 0], 0, 1)
        scores = np.sqrt(cls * obj)
        idx = candidates(scores, self.task.score_threshold)
        box = self._all(out, "bbox", 4)[idx]
        cell, step = self.cells[idx], self.step[idx, None]
        centre = (cell + box[:, 0:2]) * step
        half = np.exp(np.minimum(box[:, 2:4], MAX_LOG_SIZE)) * step / 2
        boxes = np.concatenate([centre - half, centre + half], axis=1).astype(np.float32)
        classes = np.zeros(len(idx), np.int64)
        keep = suppress(boxes, scores[idx], classes, self.task)
        kps = self._all(out, "kps", 10)[idx[keep]].reshape(len(keep), 5, 2)  # explicit: K may be 0
        kps = (kps + cell[keep, None, :]) * step[keep, None]
        return detections(boxes[keep], scores[idx][keep], classes[keep], tf, self.labels, kps)
