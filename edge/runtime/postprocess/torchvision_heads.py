"""torchvision's one-stage detectors exported without their post-processing: box regression [1, N, 4] and class
logits [1, N, C] per anchor (FCOS adds its centre-ness [1, N, 1]), decoded as the torchvision builder named in
``task.torchvision.model`` decodes them.

Anchors, in input pixels (x1, y1, x2, y2), in the order the heads emit them (level, row, column, anchor):

- SSD and SSDlite (``DefaultBoxGenerator``): level k has scale s_k (given, or min_ratio + (max_ratio - min_ratio) *
  k / (L - 1), with s_L = 1); a cell has the boxes (s_k, s_k), (s', s') with s' = sqrt(s_k * s_k+1), then for each
  aspect ratio a (s_k * sqrt(a), s_k / sqrt(a)) and the same turned; widths and heights clipped to [0, 1]; centres at
  (j + 0.5) / f_x with f_x = W / step (or the map's width without steps); scaled by the input's width and height.
- RetinaNet and FCOS (``AnchorGenerator``): per level, one anchor per (aspect ratio, size): width size / sqrt(r),
  height size * sqrt(r), halved and rounded to whole pixels around the cell's corner (j * stride, i * stride), the
  stride being input size // map size in whole pixels. FCOS has one square anchor a cell, as large as the stride.

Box coders: ``BoxCoder`` (weights 10, 10, 5, 5 for SSD and 1 each for RetinaNet): encodings are [dx, dy, dw, dh];
centre x = dx / wx * anchor width + anchor centre x, width = exp(min(dw / ww, ln(1000 / 16))) * anchor width.
``BoxLinearCoder`` (FCOS): distances [l, t, r, b] from the anchor's centre in anchor sizes. Boxes are clipped to
the input before NMS, as torchvision does.

Candidates: SSD takes softmax scores, drops the background (label 0) and keeps per class the best
``topk_candidates`` above the threshold; RetinaNet takes sigmoid scores and keeps per level the best
``topk_candidates`` (anchor, class) pairs above it; FCOS the same with sqrt(sigmoid(logit) * sigmoid(centre-ness)). NMS per class, then the best ``max_detections``. Class ids are
torchvision's labels (its COCO list starts with ``__background__``), so ``task.labels`` takes the 91 names of the
weights' ``meta["categories"]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from edge.runtime.engines.preprocess import Transform
from edge.runtime.postprocess import Result
from edge.runtime.postprocess.activations import sigmoid, softmax
from edge.runtime.postprocess.boxes import as_float, suppress
from edge.runtime.postprocess.detect import detections
from edge.runtime.postprocess.ssd import feature_maps as strided_maps

BBOX_XFORM_CLIP = math.log(1000.0 / 16)  # torchvision's BoxCoder: exp() of at most this


@dataclass(frozen=True)
class Preset:
    """What a torchvision builder fixes: its anchor generator, box coder, score function and post-processing
    values (``score``, ``iou``, ``detections``, ``topk``: torchvision's defaults for COCO evaluation)."""

    family: str  # "ssd" (DefaultBoxGenerator, softmax), "retinanet" (AnchorGenerator, sigmoid) or "fcos"
    weights: Tuple[float, float, float, float]
    iou: float
    detections: int
    topk: int
    aspect_ratios: Tuple[Tuple[float, ...], ...]
    min_ratio: float = 0.15
    max_ratio: float = 0.9
    scales: Optional[Tuple[float, ...]] = None
    steps: Optional[Tuple[int, ...]] = None
    sizes: Tuple[Tuple[int, ...], ...] = ()

    def per_cell(self, level: int) -> int:
        if self.family == "ssd":
            return 2 + 2 * len(self.aspect_ratios[level])
        return len(self.sizes[level]) * len(self.aspect_ratios[level])

    @property
    def levels(self) -> int:
        return len(self.aspect_ratios)


_RETINA_SIZES = tuple((x, int(x * 2 ** (1.0 / 3)), int(x * 2 ** (2.0 / 3))) for x in (32, 64, 128, 256, 512))
PRESETS: Dict[str, Preset] = {
    "ssdlite320_mobilenet_v3_large": Preset(
        "ssd", (10.0, 10.0, 5.0, 5.0), 0.55, 300, 300, ((2.0, 3.0),) * 6, min_ratio=0.2, max_ratio=0.95
    ),
    "ssd300_vgg16": Preset(
        "ssd",
        (10.0, 10.0, 5.0, 5.0),
        0.45,
        200,
        400,
        ((2.0,), (2.0, 3.0), (2.0, 3.0), (2.0, 3.0), (2.0,), (2.0,)),
        scales=(0.07, 0.15, 0.33, 0.51, 0.69, 0.87, 1.05),
        steps=(8, 16, 32, 64, 100, 300),
    ),
    "retinanet_resnet50_fpn": Preset(
        "retinanet", (1.0, 1.0, 1.0, 1.0), 0.5, 300, 1000, ((0.5, 1.0, 2.0),) * 5, sizes=_RETINA_SIZES
    ),
    "fcos_resnet50_fpn": Preset(
        "fcos", (1.0, 1.0, 1.0, 1.0), 0.6, 100, 1000, ((1.0,),) * 5, sizes=((8,), (16,), (32,), (64,), (128,))
    ),
}


def _halve(n: int) -> int:
    return -(-n // 2)  # a 3x3 stride-2 convolution padded by 1


def feature_maps(model: str, width: int, height: int) -> List[Tuple[int, int]]:
    """(rows, columns) of each level of the builder's backbone at this input size."""
    if model == "ssd300_vgg16":
        # VGG16 to conv4_3: three 2x2 poolings, the third in ceil mode; fc7 after a fourth; two stride-2 extras, then
        # two unpadded 3x3 convolutions
        def vgg(n: int) -> List[int]:
            c4 = -(-(n // 2 // 2) // 2)
            fc7 = c4 // 2
            c8 = _halve(fc7)
            c9 = _halve(c8)
            return [c4, fc7, c8, c9, c9 - 2, c9 - 4]

        return list(zip(vgg(height), vgg(width)))
    if model == "ssdlite320_mobilenet_v3_large":
        return strided_maps(width, height, 6, first_stride=16)  # C4 at stride 16, then five stride-2 levels
    return strided_maps(width, height, 5, first_stride=8)  # RetinaNet's and FCOS's FPN P3..P7


def anchor_count(preset: Preset, maps: Sequence[Tuple[int, int]]) -> int:
    return sum(h * w * preset.per_cell(k) for k, (h, w) in enumerate(maps))


def default_boxes(preset: Preset, maps: Sequence[Tuple[int, int]], width: int, height: int) -> np.ndarray:
    """SSD's default boxes (N, 4) in input pixels (x1, y1, x2, y2)."""
    n = len(maps)
    if preset.scales is not None:
        scales = list(preset.scales)
    elif n > 1:
        scales = [preset.min_ratio + (preset.max_ratio - preset.min_ratio) * k / (n - 1.0) for k in range(n)] + [1.0]
    else:
        scales = [preset.min_ratio, preset.max_ratio]
    out = []
    for k, (fh, fw) in enumerate(maps):
        pairs = [[scales[k], scales[k]], [math.sqrt(scales[k] * scales[k + 1])] * 2]
        for ar in preset.aspect_ratios[k]:
            w, h = scales[k] * math.sqrt(ar), scales[k] / math.sqrt(ar)
            pairs += [[w, h], [h, w]]
        wh = np.clip(np.asarray(pairs, np.float32), 0, 1)
        fx, fy = (width / preset.steps[k], height / preset.steps[k]) if preset.steps else (fw, fh)
        xs = ((np.arange(fw) + 0.5) / fx).astype(np.float32)
        ys = ((np.arange(fh) + 0.5) / fy).astype(np.float32)
        cy, cx = np.meshgrid(ys, xs, indexing="ij")
        centres = np.repeat(np.stack([cx.ravel(), cy.ravel()], axis=1), len(wh), axis=0)
        sizes = np.tile(wh, (fh * fw, 1))
        out.append(np.concatenate([centres - 0.5 * sizes, centres + 0.5 * sizes], axis=1))
    return (np.concatenate(out) * np.array([width, height, width, height], np.float32)).astype(np.float32)


def retinanet_anchors(preset: Preset, maps: Sequence[Tuple[int, int]], width: int, height: int) -> np.ndarray:
    """RetinaNet's anchors (N, 4) in input pixels (x1, y1, x2, y2)."""
    out = []
    for k, (fh, fw) in enumerate(maps):
        ratios = np.asarray(preset.aspect_ratios[k], np.float32)
        sizes = np.asarray(preset.sizes[k], np.float32)
        h_ratio = np.sqrt(ratios)
        ws = ((1 / h_ratio)[:, None] * sizes[None, :]).ravel()
        hs = (h_ratio[:, None] * sizes[None, :]).ravel()
        base = np.round(np.stack([-ws, -hs, ws, hs], axis=1) / 2)
        sy, sx = height // fh, width // fw
        y, x = np.meshgrid(np.arange(fh) * sy, np.arange(fw) * sx, indexing="ij")
        shifts = np.stack([x.ravel(), y.ravel(), x.ravel(), y.ravel()], axis=1).astype(np.float32)
        out.append((shifts[:, None, :] + base[None, :, :]).reshape(-1, 4))
    return np.concatenate(out).astype(np.float32)


def anchors_for(preset: Preset, maps: Sequence[Tuple[int, int]], width: int, height: int) -> np.ndarray:
    make = default_boxes if preset.family == "ssd" else retinanet_anchors
    return make(preset, maps, width, height)


def decode(codes: np.ndarray, anchors: np.ndarray, weights: Sequence[float]) -> np.ndarray:
    """torchvision's BoxCoder.decode_single: [dx, dy, dw, dh] against anchors (x1, y1, x2, y2)."""
    wx, wy, ww, wh = weights
    widths, heights = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
    cx, cy = anchors[:, 0] + 0.5 * widths, anchors[:, 1] + 0.5 * heights
    px = codes[:, 0] / wx * widths + cx
    py = codes[:, 1] / wy * heights + cy
    pw = np.exp(np.minimum(codes[:, 2] / ww, BBOX_XFORM_CLIP)) * widths
    ph = np.exp(np.minimum(codes[:, 3] / wh, BBOX_XFORM_CLIP)) * heights
    return np.stack([px - 0.5 * pw, py - 0.5 * ph, px + 0.5 * pw, py + 0.5 * ph], axis=1)


def decode_linear(codes: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """torchvision's BoxLinearCoder(normalize_by_size=True).decode: [l, t, r, b] in anchor sizes from its centre."""
    size = np.stack([anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]] * 2, axis=1)
    centre = np.stack([anchors[:, 0] + anchors[:, 2], anchors[:, 1] + anchors[:, 3]] * 2, axis=1) * 0.5
    return centre + codes * size * np.array([-1, -1, 1, 1], np.float32)


def _best(scores: np.ndarray, threshold: float, k: int) -> np.ndarray:
    """Indices of the at most ``k`` best scores above ``threshold``, best first (torch.topk's order)."""
    idx = np.flatnonzero(scores > threshold)
    if idx.size > k:
        idx = idx[np.argpartition(-scores[idx], k - 1)[:k]]
    return idx[np.argsort(-scores[idx], kind="stable")]


class TorchvisionHead:
    def __init__(self, task: Any, head: Any, labels: List[str], width: int, height: int) -> None:
        self.task, self.head, self.labels = task, head, labels
        self.preset = PRESETS[task.torchvision.model]
        self.topk = task.torchvision.topk_candidates or self.preset.topk
        self.anchors = head.anchors
        self.bounds = np.array([width, height, width, height], np.float32)
        sizes = [h * w * self.preset.per_cell(k) for k, (h, w) in enumerate(head.maps)]
        self.level_ends = np.cumsum(sizes).tolist()

    def __call__(self, out: Dict[str, np.ndarray], tf: Transform) -> Result:
        names, n = self.head.outputs, len(self.anchors)
        logits = as_float(names["scores"], out[names["scores"]]).reshape(n, -1)
        codes = as_float(names["boxes"], out[names["boxes"]]).reshape(n, 4)
        if self.preset.family == "ssd":
            anchor, cls, conf = self._ssd(softmax(logits))
        elif self.preset.family == "retinanet":
            anchor, cls, conf = self._per_level(sigmoid(logits))
        else:
            ctr = as_float(names["centerness"], out[names["centerness"]]).reshape(n, 1)
            anchor, cls, conf = self._per_level(np.sqrt(sigmoid(logits) * sigmoid(ctr)))
        if self.preset.family == "fcos":
            boxes = decode_linear(codes[anchor], self.anchors[anchor])
        else:
            boxes = decode(codes[anchor], self.anchors[anchor], self.preset.weights)
        boxes = np.clip(boxes, 0, self.bounds)  # torchvision clips before NMS
        keep = suppress(boxes, conf, cls, self.task)
        return detections(boxes[keep], conf[keep], cls[keep], tf, self.labels)

    def _ssd(self, scores: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        anchors, classes = [], []
        for label in range(1, scores.shape[1]):  # 0 is the background
            idx = _best(scores[:, label], self.task.score_threshold, self.topk)
            anchors.append(idx)
            classes.append(np.full(len(idx), label, np.int64))
        anchor, cls = np.concatenate(anchors), np.concatenate(classes)
        return anchor, cls, scores[anchor, cls]

    def _per_level(self, scores: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        c = scores.shape[1]
        found, start = [], 0
        for end in self.level_ends:
            flat = scores[start:end].ravel()
            found.append(_best(flat, self.task.score_threshold, self.topk) + start * c)
            start = end
        pairs = np.concatenate(found)
        anchor, cls = pairs // c, pairs % c
        return anchor, cls, scores[anchor, cls]
