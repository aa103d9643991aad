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


PAIRS = 1 << 21  # overlap tests solved at once (a few tens of MB of temporaries); more go box by box
ROUNDS = 8  # fixpoint rounds before walking the suppression edges rank by rank (dense one-class heaps chain deeply)
FEW = 24  # candidates so few that walking them box by box costs less than setting up the pairs


def nms(
    boxes: np.ndarray, scores: np.ndarray, iou_threshold: float, max_out: int, classes: Optional[np.ndarray] = None
) -> np.ndarray:
    """Indices of the kept boxes, best first. With ``classes``, boxes of different classes never suppress each other.

    Greedy NMS (keep the best box, drop those that overlap it above the threshold, repeat), computed exactly without
    a Python step per box where the pairs that can suppress each other (same class, or all for agnostic NMS) number
    at most PAIRS: see ``_by_pairs``. Beyond that it walks the boxes one by one."""
    if len(boxes) == 0:
        return np.zeros(0, np.int64)
    order = np.argsort(-scores, kind="stable")
    ranked = boxes[order].astype(np.float32, copy=False)
    groups = None if classes is None else np.asarray(classes)[order]
    kept = _by_pairs(ranked, groups, iou_threshold, max_out) if len(ranked) > FEW else None
    if kept is None:
        kept = _walk(ranked, groups, iou_threshold, max_out)
    return order[kept]


def _by_pairs(boxes: np.ndarray, groups: Optional[np.ndarray], iou_threshold: float, max_out: int) -> Optional[np.ndarray]:
    """Greedy NMS of ``boxes`` ranked best first: the ranks kept, at most ``max_out``; None when there are too many pairs.

    Every pair of one group (a class, or all boxes for agnostic NMS) that overlaps above the threshold is an edge from
    the better-ranked box to the other. Box j is kept iff no kept box has an edge to it; that defines the kept set
    uniquely (by induction on rank), so iterating keep[j] = no edge from a kept box, from "all kept", stops exactly
    there. Each round counts the edges from kept boxes into each box (one bincount); the rounds needed are the longest
    chain of suppressions, a few in practice. Only pairs whose x ranges overlap are tested: sorted by group, then
    left edge, a box's partners are the run of boxes that start before it ends (one searchsorted)."""
    n = len(boxes)
    x1, y1, x2, y2 = (np.ascontiguousarray(boxes[:, k]) for k in range(4))
    span = 2.0 * float(max(np.abs(x1).max(), np.abs(x2).max())) + 1.0
    key = x1.astype(np.float64) + (0.0 if groups is None else groups.astype(np.float64) * span)
    by_key = np.argsort(key, kind="stable")
    sorted_key = key[by_key]
    ends = np.searchsorted(sorted_key, sorted_key + (x2 - x1)[by_key].astype(np.float64), side="left")
    later = np.maximum(ends - np.arange(n) - 1, 0)  # partners after each box in that order
    total = int(later.sum())
    if total > PAIRS:
        return None
    first = np.repeat(np.arange(n), later)
    second = first + 1 + np.arange(total) - np.repeat(np.cumsum(later) - later, later)
    i, j = by_key[first], by_key[second]
    w = np.clip(np.minimum(x2[i], x2[j]) - np.maximum(x1[i], x1[j]), 0, None)
    h = np.clip(np.minimum(y2[i], y2[j]) - np.maximum(y1[i], y1[j]), 0, None)
    inter = w * h
    areas = (x2 - x1) * (y2 - y1)
    hit = inter > iou_threshold * np.maximum(areas[i] + areas[j] - inter, 1e-9)
    i, j = i[hit], j[hit]
    src, dst = np.minimum(i, j), np.maximum(i, j)  # from the better rank to the worse
    keep = np.ones(n, bool)
    for _ in range(ROUNDS):
        nxt = np.bincount(dst, weights=keep[src], minlength=n) == 0
        if np.array_equal(nxt, keep):
            return np.flatnonzero(keep)[:max_out]
        keep = nxt
    # A chain longer than the rounds: the same rule rank by rank, over the edges of the kept boxes only, in plain
    # Python lists (a numpy call per rank cost ten times more on a dense one-class heap).
    ordered = np.argsort(src, kind="stable")
    targets = dst[ordered].tolist()
    bounds = np.searchsorted(src[ordered], np.arange(n + 1)).tolist()
    dead = bytearray(n)
    out: list = []
    for j in range(n):
        if not dead[j]:
            out.append(j)
            if len(out) == max_out:
                break
            for t in targets[bounds[j] : bounds[j + 1]]:
                dead[t] = 1
    return np.asarray(out, np.int64)


def _walk(boxes: np.ndarray, groups: Optional[np.ndarray], iou_threshold: float, max_out: int) -> np.ndarray:
    """Greedy NMS box by box (ranked best first), for more pairs than ``_by_pairs`` takes at once."""
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
        stays = inter <= iou_threshold * np.maximum(areas[best] + areas[rest] - inter, 1e-9)
        if groups is not None:
            stays |= groups[rest] != groups[best]
        order = rest[stays]
    return np.asarray(keep, np.int64)


def candidates(scores: np.ndarray, threshold: float) -> np.ndarray:
    """Indices of the scores above ``threshold``, at most MAX_NMS of them, best first."""
    idx = np.flatnonzero(scores > threshold)
    if idx.size > MAX_NMS:
        idx = idx[np.argpartition(-scores[idx], MAX_NMS - 1)[:MAX_NMS]]
    return idx[np.argsort(-scores[idx], kind="stable")]


def pairs(scores: np.ndarray, threshold: float) -> tuple:
    """(rows, classes, scores) of every (candidate, class) pair of ``scores`` (N, C) above ``threshold``, at most
    MAX_NMS of the best: heads whose every class is a candidate of its own (PicoDet, SSD), NMS then per class."""
    rows, cls = np.nonzero(scores > threshold)
    conf = scores[rows, cls]
    if len(conf) > MAX_NMS:
        best = np.argpartition(-conf, MAX_NMS - 1)[:MAX_NMS]
        rows, cls, conf = rows[best], cls[best], conf[best]
    return rows, cls, conf


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
