"""The one place for boxes: raw outputs made float32 and checked, corner conversion, score filtering, NMS, and the
mapping of kept boxes to frame pixels. Every detector's decoder ends here, so thresholds, NMS and clipping mean the
same thing for every head.

The rules follow Ultralytics' ``non_max_suppression`` so that numbers compare with published ones: a candidate
survives when its score is above the threshold (strictly), at most ``MAX_NMS`` of the best go into NMS, NMS is per
class unless told otherwise (a box suppresses another of its class whose IoU with it is above the IoU threshold),
and at most ``max_det`` boxes are kept, best first.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from edge.errors import RunFailed

MAX_NMS = 30000  # candidates that enter NMS, best first (Ultralytics' max_nms)


def as_float(name: str, value: np.ndarray) -> np.ndarray:
    """An output as float32 values: FP16 and integer outputs are converted (never reinterpreted); NaN or infinity is
    refused naming the output, since any box or score built from it would be garbage."""
    arr = np.asarray(value)
    if arr.dtype != np.float32:
        if arr.dtype.kind not in "fiub":
            raise RunFailed(f"output '{name}' has dtype {arr.dtype}; edge decodes numeric outputs only")
        arr = arr.astype(np.float32)
    if not np.isfinite(arr).all():
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise RunFailed(
            f"output '{name}' holds {bad} NaN or infinite value(s): the model or engine computes garbage "
            "(an FP16 overflow, or a broken export); check it with edge-run on the ONNX file, or rebuild without --fp16"
        )
    return arr


def xywh_to_xyxy(xywh: np.ndarray) -> np.ndarray:
    """Centre, width, height (N, 4) to corners x1, y1, x2, y2."""
    out = np.empty_like(xywh)
    half = xywh[:, 2:4] / 2
    out[:, 0:2] = xywh[:, 0:2] - half
    out[:, 2:4] = xywh[:, 0:2] + half
    return out


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
    boxes: np.ndarray, scores: np.ndarray, iou_threshold: float, max_out: int, classes: Optional[np.ndarray] = None
) -> np.ndarray:
    """Indices of the kept boxes, best first. With ``classes``, boxes of different classes never suppress each other."""
    if len(boxes) == 0:
        return np.zeros(0, np.int64)
    if classes is not None:
        # Each class moves to its own region of the plane, far enough that no two classes overlap: one pass then
        # handles all classes.
        span = float(np.abs(boxes).max()) * 2 + 1.0
        boxes = boxes + (classes.astype(np.float64) * span)[:, None].astype(boxes.dtype)
    order = np.argsort(-scores, kind="stable")
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    keep = []
    while order.size and len(keep) < max_out:
        best = order[0]
        keep.append(best)
        rest = order[1:]
        if not rest.size:
            break
        b = boxes[best]
        w = np.clip(np.minimum(b[2], boxes[rest, 2]) - np.maximum(b[0], boxes[rest, 0]), 0, None)
        h = np.clip(np.minimum(b[3], boxes[rest, 3]) - np.maximum(b[1], boxes[rest, 1]), 0, None)
        inter = w * h
        order = rest[inter <= iou_threshold * np.maximum(areas[best] + areas[rest] - inter, 1e-9)]
    return np.asarray(keep, np.int64)


def candidates(scores: np.ndarray, threshold: float) -> np.ndarray:
    """Indices of the scores above ``threshold``, at most MAX_NMS of them, best first."""
    idx = np.flatnonzero(scores > threshold)
    if idx.size > MAX_NMS:
        idx = idx[np.argpartition(-scores[idx], MAX_NMS - 1)[:MAX_NMS]]
    return idx[np.argsort(-scores[idx], kind="stable")]


def suppress(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, task: Any) -> np.ndarray:
    """NMS with the task's IoU threshold, cap and class rule (``task.agnostic_nms``)."""
    per_class = None if getattr(task, "agnostic_nms", False) else classes
    return nms(boxes, scores, task.iou_threshold, task.max_detections, classes=per_class)


def visible(frame_boxes: np.ndarray) -> np.ndarray:
    """Which boxes (already clipped to the frame) still have an area: a box wholly outside the frame, or of zero width
    or height, is not a detection."""
    if len(frame_boxes) == 0:
        return np.zeros(0, bool)
    return (frame_boxes[:, 2] > frame_boxes[:, 0]) & (frame_boxes[:, 3] > frame_boxes[:, 1])
