"""SSD heads exported without their post-processing: box encodings [1, N, 4] and class scores [1, N, 1 + C] per
anchor (the first class is background), decoded with the anchors of TensorFlow's Object Detection API.

Anchors (``ssd_anchor_generator``): feature map k of ``num_layers`` has scale s_k = min_scale + (max_scale -
min_scale) * k / (num_layers - 1) (and s_num_layers = 1); each cell has one anchor per aspect ratio a of height
s_k / sqrt(a) and width s_k * sqrt(a), plus one of scale sqrt(s_k * s_k+1) and aspect ``interpolated_scale_aspect_ratio``;
the lowest layer, with ``reduce_boxes_in_lowest_layer``, has (0.1, 1), (s_0, 2) and (s_0, 0.5) only. Centres sit at
((j + 0.5) / width, (i + 0.5) / height); anchors run layer by layer, row, column, then anchor, in normalised
[ymin, xmin, ymax, xmax], not clipped.

Box coder (FasterRcnnBoxCoder, ``scale_factors`` 10, 10, 5, 5): encodings are [ty, tx, th, tw]; centre y = ty / 10 *
anchor height + anchor centre y, height = exp(th / 5) * anchor height, and so for x and width. Scores: sigmoid
(SSDLite, TF's ``convert_scores``) or softmax (classic SSD) of the logits, the background column dropped. NMS runs
per class on the normalised boxes, as TF's ``BatchMultiClassNonMaxSuppression`` does, before clipping.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from edge.runtime.engines.preprocess import Transform
from edge.runtime.postprocess import Result
from edge.runtime.postprocess.activations import sigmoid, softmax
from edge.runtime.postprocess.boxes import as_float, pairs, suppress
from edge.runtime.postprocess.detect import detections

MAX_LOG_SIZE = 30.0  # exp() beyond float32: a huge box, not infinity


def feature_maps(width: int, height: int, layers: int, first_stride: int = 16) -> List[Tuple[int, int]]:
    """(rows, columns) of each layer of a MobileNet SSD: the first at stride 16, each next one a stride-2 SAME
    convolution of the one before (300 -> 19, 10, 5, 3, 2, 1)."""
    h, w = -(-height // first_stride), -(-width // first_stride)
    out = []
    for _ in range(layers):
        out.append((h, w))
        h, w = -(-h // 2), -(-w // 2)
    return out


def layer_specs(cfg: Any, scales: Sequence[float], k: int) -> List[Tuple[float, float]]:
    """(scale, aspect ratio) of each anchor of a cell of layer k (SsdConfig ``cfg``); ``scales`` has one per layer and
    one more."""
    if k == 0 and cfg.reduce_boxes_in_lowest_layer:
        return [(0.1, 1.0), (scales[0], 2.0), (scales[0], 0.5)]
    specs = [(scales[k], a) for a in cfg.aspect_ratios]
    if cfg.interpolated_scale_aspect_ratio > 0:
        specs.append((float(np.sqrt(scales[k] * scales[k + 1])), cfg.interpolated_scale_aspect_ratio))
    return specs


def anchor_count(cfg: Any, maps: Sequence[Tuple[int, int]]) -> int:
    """How many anchors ``ssd_anchors`` makes, counted without making them (the maps come from the config)."""
    scales = [1.0] * (len(maps) + 1)  # the count does not depend on the scales
    return sum(h * w * len(layer_specs(cfg, scales, k)) for k, (h, w) in enumerate(maps))


def ssd_anchors(cfg: Any, maps: Sequence[Tuple[int, int]], width: int, height: int) -> np.ndarray:
    """(N, 4) anchors [ymin, xmin, ymax, xmax] in [0, 1] of TF's ssd_anchor_generator for ``cfg`` (SsdConfig)."""
    n = len(maps)
    scales = [cfg.min_scale + (cfg.max_scale - cfg.min_scale) * k / max(n - 1, 1) for k in range(n)] + [1.0]
    # a non-square input keeps anchors square in pixels: TF scales the base anchor by the shorter side
    short = min(width, height)
    base_h, base_w = short / height, short / width
    out = []
    for k, (fh, fw) in enumerate(maps):
        specs = layer_specs(cfg, scales, k)
        s = np.array([x for x, _ in specs], np.float32)
        r = np.sqrt(np.array([a for _, a in specs], np.float32))
        h, w = s / r * base_h, s * r * base_w
        yc = (np.arange(fh, dtype=np.float32) + np.float32(0.5)) / np.float32(fh)
        xc = (np.arange(fw, dtype=np.float32) + np.float32(0.5)) / np.float32(fw)
        y, x, a = np.meshgrid(yc, xc, np.arange(len(specs)), indexing="ij")
        out.append(np.stack([y - h[a] / 2, x - w[a] / 2, y + h[a] / 2, x + w[a] / 2], axis=-1).reshape(-1, 4))
    return np.concatenate(out).astype(np.float32)


class Ssd:
    def __init__(self, task: Any, head: Any, labels: List[str], width: int, height: int) -> None:
        self.task, self.head, self.labels = task, head, labels
        self.cfg = task.ssd
        self.anchors = head.anchors
        self.size = np.array([width, height, width, height], np.float32)
        ah, aw = self.anchors[:, 2] - self.anchors[:, 0], self.anchors[:, 3] - self.anchors[:, 1]
        self.anchor_hw = np.stack([ah, aw], axis=1)
        self.anchor_c = np.stack([self.anchors[:, 0] + ah / 2, self.anchors[:, 1] + aw / 2], axis=1)

    def __call__(self, out: Dict[str, np.ndarray], tf: Transform) -> Result:
        names = self.head.outputs
        logits = as_float(names["scores"], out[names["scores"]]).reshape(len(self.anchors), -1)
        scores = sigmoid(logits) if self.cfg.scores == "sigmoid" else softmax(logits)
        anchor, cls, conf = pairs(scores[:, 1:], self.task.score_threshold)  # column 0 is background
        enc = as_float(names["boxes"], out[names["boxes"]]).reshape(len(self.anchors), 4)[anchor]
        fy, fx, fh, fw = self.cfg.scale_factors
        centre = self.anchor_c[anchor] + enc[:, 0:2] / np.array([fy, fx], np.float32) * self.anchor_hw[anchor]
        size = np.exp(np.minimum(enc[:, 2:4] / np.array([fh, fw], np.float32), MAX_LOG_SIZE)) * self.anchor_hw[anchor]
        yx1, yx2 = centre - size / 2, centre + size / 2
        boxes = np.stack([yx1[:, 1], yx1[:, 0], yx2[:, 1], yx2[:, 0]], axis=1)  # normalised x1, y1, x2, y2
        keep = suppress(boxes, conf, cls, self.task)
        return detections(boxes[keep] * self.size, conf[keep], cls[keep], tf, self.labels)
