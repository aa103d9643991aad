"""Semantic segmentation: a class for every pixel, reported per class as one mask over the frame.

Outputs, one of:
- ``[1, C, h, w]`` scores with C > 1: a pixel's class is its best channel (logits or probabilities alike);
- ``[1, 1, h, w]`` one foreground probability (DBNet's text map, a person mask): foreground above ``score_threshold``;
- ``[1, h, w]`` or ``[1, 1, h, w]`` of integer type: class ids computed in the graph (an ArgMax export).

The map may be smaller than the input (FCN heads at 1/8 or 1/32): each frame pixel takes the class of the map cell
under its centre (nearest neighbour, as ``cv2.INTER_NEAREST_EXACT`` resizes), through the letterbox or stretch the
frame went through. ``task.background`` names a class that is not reported (0 for VOC-style models).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np

from edge.errors import RunFailed
from edge.runtime.engines.preprocess import Transform
from edge.runtime.postprocess import Result, Segment
from edge.runtime.postprocess.boxes import as_float
from edge.runtime.postprocess.detect import label_of
from edge.runtime.postprocess.masks import rle


def class_map(value: np.ndarray, name: str, threshold: float, classes: int) -> np.ndarray:
    """(h, w) class ids of one image's output (no batch axis): -1 where a one-channel map is below the threshold."""
    if value.dtype.kind in "iu":
        if value.ndim == 3 and value.shape[0] != 1:
            raise RunFailed(f"output '{name}' holds {value.shape[0]} maps of class ids {list(value.shape)}; edge runs one image")
        ids = value.reshape(value.shape[-2:]).astype(np.int64)
        if ids.size and ids.min() < 0:
            raise RunFailed(f"output '{name}' holds class {int(ids.min())}: class ids start at 0; check task.type")
        if ids.size and classes and ids.max() >= classes:
            raise RunFailed(f"output '{name}' holds class {int(ids.max())}, more than the {classes} labels name")
        return ids
    scores = as_float(name, value)
    if scores.shape[0] == 1:
        return np.where(scores[0] > threshold, 0, -1)
    return scores.argmax(axis=0)


def sample(ids: np.ndarray, tf: Transform, in_w: int, in_h: int) -> np.ndarray:
    """The class map at frame resolution: each frame pixel's centre mapped to the input, then to the map's cell."""
    h, w = ids.shape
    xs = (np.arange(tf.frame_width) + 0.5) * tf.scale_x + tf.pad_x
    ys = (np.arange(tf.frame_height) + 0.5) * tf.scale_y + tf.pad_y
    cols = np.clip(np.floor(xs * w / in_w), 0, w - 1).astype(np.intp)
    rows = np.clip(np.floor(ys * h / in_h), 0, h - 1).astype(np.intp)
    return ids[rows[:, None], cols[None, :]]


class Segmenter:
    def __init__(self, task: Any, head: Any, labels: List[str], width: int, height: int) -> None:
        self.task, self.labels, self.name = task, labels, head.outputs["map"]
        self.classes = head.classes
        self.size = (width, height)
        self.background: Optional[int] = getattr(task, "background", None)

    def __call__(self, out: Dict[str, np.ndarray], tf: Transform) -> Result:
        value = np.asarray(out[self.name])[0]
        ids = sample(class_map(value, self.name, self.task.score_threshold, self.classes), tf, *self.size)
        segments = []
        for c in np.unique(ids).tolist():
            if c < 0 or c == self.background:
                continue
            mask = ids == c
            rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
            y0, y1, x0, x1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
            crop = mask[y0:y1, x0:x1]
            encoded = rle(crop, int(x0), int(y0), tf.frame_width, tf.frame_height)
            box = [float(x0), float(y0), float(x1), float(y1)]
            segments.append(Segment(int(c), label_of(self.labels, int(c)), int(crop.sum()), box, encoded))
        segments.sort(key=lambda s: -s.pixels)
        return Result(segments=segments[: self.task.max_detections])
