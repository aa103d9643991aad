"""The decisions a detector makes, for calibration checks that measure them: which class each anchor of a YOLO head
picks (or none), and which detections come out of the runtime's own decoder, FP32 against INT8.

- **anchors** (raw YOLO heads, either layout): at each anchor, the class whose score is above the task's score
  threshold, or background. Agreement counts only anchors where FP32 or INT8 sees an object (background everywhere
  else would make any model agree); an anchor agrees when both pick the same class.
- **detections** (every detector): FP32's detections matched one to one, best first, with INT8's of the same class at
  IoU >= 0.5; agreement is the matched pairs over the detections either reports (a detection INT8 drops and one it
  adds both disagree: a camera reports both). For an instance segmenter a match also needs mask IoU >= 0.5.
- **pixels** (semantic segmenters): each pixel's class on the model's map; agreement is the pixels where both give
  the same reported class over those where either reports one (background and below-threshold pixels aside).

The decoder is the one edge-run uses (``edge.runtime.postprocess``), so the check sees what the camera would report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import numpy as np

MATCH_IOU = 0.5
ANCHOR_KINDS = ("yolo", "yolo_seg", "yolo_pose")  # raw YOLO heads: the anchors' classes are decisions too


@dataclass
class Matched:
    either: int = 0  # detections FP32 or INT8 reports, a matched pair once (pixels either reports a class at)
    kept: int = 0  # matched pairs (pixels of the same class)
    anchors: int = 0  # anchors where FP32 or INT8 sees an object
    anchors_agree: int = 0


def _box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of ``a`` (N, 4) with every box of ``b`` (M, 4)."""
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return inter / np.maximum(area_a[:, None] + area_b[None, :] - inter, 1e-9)


def _mask_iou(a: Dict[str, Any], b: Dict[str, Any]) -> float:
    from edge.runtime.postprocess.masks import decode_rle

    ma, mb = decode_rle(a), decode_rle(b)
    union = np.logical_or(ma, mb).sum()
    return float(np.logical_and(ma, mb).sum() / union) if union else 1.0


def match(fp32: List[Any], int8: List[Any]) -> int:
    """How many of FP32's detections INT8 keeps (detections best first)."""
    if not fp32 or not int8:
        return 0
    ious = _box_iou(np.array([d.box for d in fp32], np.float64), np.array([d.box for d in int8], np.float64))
    same = np.array([d.class_id for d in fp32])[:, None] == np.array([d.class_id for d in int8])[None, :]
    ious = np.where(same, ious, 0.0)
    taken = np.zeros(len(int8), bool)
    kept = 0
    for i, det in enumerate(fp32):
        cand = np.where(taken, -1.0, ious[i])
        j = int(cand.argmax())
        if cand[j] < MATCH_IOU:
            continue
        if det.mask is not None and int8[j].mask is not None and _mask_iou(det.mask, int8[j].mask) < MATCH_IOU:
            continue
        taken[j] = True
        kept += 1
    return kept


class TaskDecisions:
    """A run config's detector, applied to batches of raw outputs in the input's own pixels (no frame to map to)."""

    def __init__(self, head: Any, decoder: Any, spec: Any) -> None:
        from edge.runtime.engines.preprocess import plan_resize

        self.head, self.decoder, self.spec = head, decoder, spec
        self.transform = plan_resize(spec, spec.width, spec.height)[2]
        self.name = head.describe()

    @property
    def has_anchors(self) -> bool:
        return self.head.kind in ANCHOR_KINDS

    @property
    def outputs(self) -> List[str]:
        return list(self.head.outputs.values())

    def anchor_classes(self, value: np.ndarray) -> Optional[np.ndarray]:
        """(images, anchors): the class each anchor picks above the score threshold, or -1; None for heads that are not
        raw YOLO heads."""
        if not self.has_anchors:
            return None
        c, layout = self.head.classes, self.head.layout
        v = np.asarray(value, np.float32)
        if layout == "v8":
            scores = v[:, 4 : 4 + c, :].transpose(0, 2, 1)
        elif layout == "v8t":
            scores = v[:, :, 4 : 4 + c]
        else:
            scores = v[:, :, 5 : 5 + c] * v[:, :, 4:5]
        best = scores.argmax(axis=2)
        top = np.take_along_axis(scores, best[..., None], axis=2)[..., 0]
        return np.where(top > self.decoder.task.score_threshold, best, -1)

    @property
    def batched(self) -> bool:
        """Whether the outputs have a batch axis: a torchvision model exported whole has none (one image a run)."""
        return self.head.kind != "torchvision_nms"

    def detections(self, outputs: Dict[str, np.ndarray], i: int) -> List[Any]:
        if not self.batched:
            return self.decoder(outputs, self.transform).detections
        return self.decoder({n: v[i : i + 1] for n, v in outputs.items()}, self.transform).detections

    def update(self, total: Matched, fp32: Dict[str, np.ndarray], int8: Dict[str, np.ndarray]) -> None:
        if self.head.kind == "segment":
            self._pixels(total, fp32, int8)
            return
        head = self.head.outputs.get("head")
        if head is not None:
            a, b = self.anchor_classes(fp32[head]), self.anchor_classes(int8[head])
            if a is not None and b is not None:
                seen = (a >= 0) | (b >= 0)
                total.anchors += int(seen.sum())
                total.anchors_agree += int((seen & (a == b)).sum())
        images = len(next(iter(fp32.values()))) if self.batched else 1
        for i in range(images):
            ref, got = self.detections(fp32, i), self.detections(int8, i)
            kept = match(ref, got)
            total.either += len(ref) + len(got) - kept
            total.kept += kept

    def _pixels(self, total: Matched, fp32: Dict[str, np.ndarray], int8: Dict[str, np.ndarray]) -> None:
        """A segmenter's decisions are its pixels' classes, on the model's own map: counted where FP32 or INT8 sees
        a reported class (the intersection over union of the two class maps, every class at once)."""
        from edge.runtime.postprocess.segment import class_map

        name, task = self.head.outputs["map"], self.decoder.task
        for a_img, b_img in zip(fp32[name], int8[name]):
            a = class_map(a_img, name, task.score_threshold, self.head.classes)
            b = class_map(b_img, name, task.score_threshold, self.head.classes)
            seen_a = (a >= 0) & (a != self.decoder.background)
            seen_b = (b >= 0) & (b != self.decoder.background)
            total.either += int((seen_a | seen_b).sum())
            total.kept += int((seen_a & (a == b)).sum())
