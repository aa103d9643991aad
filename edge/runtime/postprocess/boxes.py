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


MATRIX = 2048  # candidates per suppression matrix (16 MB of float32); more go class block by class block, or one by one


def nms(
    boxes: np.ndarray, scores: np.ndarray, iou_threshold: float, max_out: int, classes: Optional[np.ndarray] = None
) -> np.ndarray:
    """Indices of the kept boxes, best first. With ``classes``, boxes of different classes never suppress each other.

    Greedy NMS (keep the best box, drop those that overlap it above the threshold, repeat) computed exactly but
    without a Python step per box: see ``_greedy``. Blocks of whole classes of at most MATRIX candidates are solved
    one at a time; one class (or agnostic NMS) beyond that falls back to the box-by-box loop."""
    if len(boxes) == 0:
        return np.zeros(0, np.int64)
    order = np.argsort(-scores, kind="stable")
    boxes = boxes[order].astype(np.float32, copy=False)
    if classes is None:
        kept = _greedy(boxes, iou_threshold, max_out)
        return order[kept]
    cls = np.asarray(classes)[order]
    # Each class moves to its own region of the plane, far enough that no two classes overlap.
    span = float(np.abs(boxes).max()) * 2 + 1.0
    shifted = boxes + (cls.astype(np.float64) * span)[:, None].astype(np.float32)
    if len(boxes) <= MATRIX:
        return order[_greedy(shifted, iou_threshold, max_out)]
    by_class = np.argsort(cls, kind="stable")  # score order kept within each class
    bounds = np.flatnonzero(np.diff(cls[by_class])) + 1
    groups = np.split(by_class, bounds)
    kept: list = []
    block: list = []
    for g in groups + [None]:
        if g is not None and sum(len(b) for b in block) + len(g) <= MATRIX:
            block.append(g)
            continue
        if block:
            members = np.sort(np.concatenate(block))  # back in score order
            kept.append(members[_greedy(shifted[members], iou_threshold, max_out)])
        block = [g] if g is not None else []
    merged = np.sort(np.concatenate(kept)) if kept else np.zeros(0, np.int64)
    return order[merged[:max_out]]


def _greedy(boxes: np.ndarray, iou_threshold: float, max_out: int) -> np.ndarray:
    """Greedy NMS of ``boxes`` sorted best first: the positions kept, at most ``max_out``.

    With S[i, j] = (i < j and IoU(i, j) > threshold), box j is kept iff no kept box i suppresses it. That defines the
    kept set uniquely (by induction on j), so iterating keep = not (keep @ S) from "all kept" until nothing changes
    reaches it; each round is one matrix product, and the rounds needed are the longest chain of suppressions (a few).
    Past a round limit, or for more boxes than a matrix holds, the boxes are walked one by one."""
    n = len(boxes)
    if n > MATRIX:
        return _walk(boxes, iou_threshold, max_out)
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    areas = (x2 - x1) * (y2 - y1)
    w = np.clip(np.minimum(x2[:, None], x2[None, :]) - np.maximum(x1[:, None], x1[None, :]), 0, None)
    h = np.clip(np.minimum(y2[:, None], y2[None, :]) - np.maximum(y1[:, None], y1[None, :]), 0, None)
    inter = w * h
    union = np.maximum(areas[:, None] + areas[None, :] - inter, 1e-9)
    suppress = np.triu(inter > iou_threshold * union, k=1).astype(np.float32)
    keep = np.ones(n, np.float32)
    for _ in range(64):
        nxt = (keep @ suppress == 0).astype(np.float32)
        if np.array_equal(nxt, keep):
            return np.flatnonzero(keep)[:max_out]
        keep = nxt
    out: list = []  # a chain longer than the rounds: the same rule, box by box, on the matrix
    dead = np.zeros(n, bool)
    for j in range(n):
        if not dead[j]:
            out.append(j)
            if len(out) == max_out:
                break
            dead |= suppress[j] > 0
    return np.asarray(out, np.int64)


def _walk(boxes: np.ndarray, iou_threshold: float, max_out: int) -> np.ndarray:
    """Greedy NMS box by box (sorted best first), for more boxes than a suppression matrix holds."""
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    order = np.arange(len(boxes))
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
