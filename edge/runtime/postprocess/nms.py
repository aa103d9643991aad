"""Greedy non-maximum suppression, vectorised over the remaining boxes."""

from __future__ import annotations

import numpy as np


def iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one box (4,) against many (N, 4), corners x1 y1 x2 y2."""
    x1 = np.maximum(box[0], boxes[:, 0])
    y1 = np.maximum(box[1], boxes[:, 1])
    x2 = np.minimum(box[2], boxes[:, 2])
    y2 = np.minimum(box[3], boxes[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / np.maximum(area + areas - inter, 1e-9)


def nms(
    boxes: np.ndarray, scores: np.ndarray, iou_threshold: float, max_out: int, classes: np.ndarray | None = None
) -> np.ndarray:
    """Indices of the kept boxes, best first. With ``classes``, boxes of different classes never suppress each other."""
    if len(boxes) == 0:
        return np.zeros(0, np.int64)
    if classes is not None:
        # Shift each class to its own region of the plane: one pass then handles all classes.
        offset = (boxes.max() + 1.0) * classes.astype(boxes.dtype)
        boxes = boxes + offset[:, None]
    order = np.argsort(-scores, kind="stable")
    keep = []
    while order.size and len(keep) < max_out:
        best = order[0]
        keep.append(best)
        if order.size == 1:
            break
        rest = order[1:]
        order = rest[iou(boxes[best], boxes[rest]) <= iou_threshold]
    return np.asarray(keep, np.int64)
