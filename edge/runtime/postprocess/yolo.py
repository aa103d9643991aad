"""YOLO-family heads: v5 (1, N, 5 + C) with objectness, v8 (1, 4 + C, N) without. Boxes are cx, cy, w, h in input pixels."""

from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from edge.errors import ConfigError
from edge.runtime.backends import TensorInfo
from edge.runtime.postprocess import Detection, Result
from edge.runtime.postprocess.nms import nms
from edge.runtime.preprocess import Transform


def decode(pred: np.ndarray, layout: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(boxes x1y1x2y2, best class score, class id) for every candidate of one image's raw head output."""
    if layout == "v8":
        pred = pred.T  # (4 + C, N) -> (N, 4 + C)
        cls = pred[:, 4:]
    else:
        cls = pred[:, 5:] * pred[:, 4:5]  # class confidence = objectness x class probability
    class_id = cls.argmax(axis=1)
    score = cls[np.arange(len(cls)), class_id]
    cx, cy, w, h = pred[:, 0], pred[:, 1], pred[:, 2], pred[:, 3]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    return boxes, score, class_id


def guess_layout(shape: tuple) -> str:
    """v8 exports put the (small) attribute axis first, v5 exports put the (large) candidate axis first."""
    return "v8" if shape[1] < shape[2] else "v5"


class Yolo:
    def __init__(self, task: Any, outputs: List[TensorInfo], labels: List[str]) -> None:
        head = outputs[0]
        if len(head.shape) != 3:
            raise ConfigError(
                f"task 'yolo': expected a (1, N, 5+C) or (1, 4+C, N) output, the model's first output {head.name!r} is {list(head.shape)}"
            )
        self.name = head.name
        self.layout = task.yolo_layout
        if self.layout == "auto":
            if not all(isinstance(d, int) for d in head.shape[1:]):
                raise ConfigError(f"task.yolo_layout: output {head.name!r} {list(head.shape)} is dynamic; set v5 or v8")
            self.layout = guess_layout(head.shape)
        self.task, self.labels = task, labels

    def __call__(self, out: Dict[str, np.ndarray], tf: Transform) -> Result:
        boxes, score, class_id = decode(out[self.name][0].astype(np.float32, copy=False), self.layout)
        keep = score >= self.task.score_threshold
        boxes, score, class_id = boxes[keep], score[keep], class_id[keep]
        idx = nms(boxes, score, self.task.iou_threshold, self.task.max_detections, classes=class_id)
        frame_boxes = tf.to_frame(boxes[idx])
        return Result(
            detections=[
                Detection(frame_boxes[j].tolist(), float(score[i]), int(class_id[i]), self._label(int(class_id[i])))
                for j, i in enumerate(idx)
            ]
        )

    def _label(self, i: int) -> str:
        return self.labels[i] if i < len(self.labels) else str(i)
