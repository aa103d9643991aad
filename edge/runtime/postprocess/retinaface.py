"""RetinaFace heads exported without their post-processing (Pytorch_Retinaface and the ONNX files made from it, TF
ports): per prior box, four box offsets, two scores (background, face) and five landmarks, either over every level at
once (boxes [1, N, 4], scores [1, N, 2], landmarks [1, N, 10]) or as each level's own maps (4A, 2A and 10A channels
for A priors a cell, NHWC or NCHW).

Priors (Pytorch_Retinaface's ``PriorBox``): the feature map of stride s has ceil(H / s) rows and ceil(W / s)
columns; each cell has one square prior per size m in ``min_sizes`` (input pixels), centred on ((column + 0.5) * s,
(row + 0.5) * s); priors run level by level, then row, column and size.

Box coder, with variances (v0, v1): centre = prior centre + offset[0:2] * v0 * prior size, size = prior size *
exp(offset[2:4] * v1); landmark j = prior centre + landmarks[2j:2j + 2] * v0 * prior size. The score is the face
column of a softmax over the two, which most exports already apply in the graph: rows that are probabilities (in 0..1,
summing to 1) are read as they are. NMS over the one class.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np

from edge.errors import RunFailed
from edge.runtime.engines.preprocess import Transform
from edge.runtime.postprocess import Result
from edge.runtime.postprocess.activations import softmax
from edge.runtime.postprocess.boxes import as_float, candidates, suppress
from edge.runtime.postprocess.detect import detections

MAX_LOG_SIZE = 30.0  # exp() of more is infinity in float32: a huge box, not a crash
WIDTHS = {"boxes": 4, "scores": 2, "landmarks": 10}  # values per prior
SUM_SLACK = 1e-2  # an FP16 engine's softmax rows sum to 1 within a few 1e-4


def level_grids(cfg: Any, width: int, height: int) -> List[Tuple[int, int, int]]:
    """(stride, rows, columns) of each level of ``cfg`` (PriorsConfig) at the input size."""
    return [(s, -(-height // s), -(-width // s)) for s in cfg.steps]


def prior_boxes(cfg: Any, width: int, height: int) -> np.ndarray:
    """(N, 4) priors: centre x, centre y, width, height in input pixels, in the order the heads list them."""
    out = []
    for (step, rows, cols), sizes in zip(level_grids(cfg, width, height), cfg.min_sizes):
        y, x, a = np.meshgrid(np.arange(rows), np.arange(cols), np.arange(len(sizes)), indexing="ij")
        side = np.asarray(sizes, np.float64)[a]
        out.append(np.stack([(x + 0.5) * step, (y + 0.5) * step, side, side], axis=-1).reshape(-1, 4))
    return np.concatenate(out).astype(np.float32)


def probabilities(scores: np.ndarray) -> bool:
    """Whether (N, 2) scores are softmax outputs already: no value below 0, every row summing to 1 (so none above)."""
    return bool(len(scores) and scores.min() >= 0.0 and np.abs(scores.sum(axis=1) - 1.0).max() <= SUM_SLACK)


class RetinaFace:
    def __init__(self, task: Any, head: Any, labels: List[str]) -> None:
        self.task, self.labels = task, labels or ["face"]
        self.names: Dict[str, str] = head.outputs
        self.layout = head.layout  # rows, nhwc or nchw
        self.priors = head.anchors
        self.strides = head.strides
        self.variances = np.asarray(task.priors.variances, np.float32)

    def _values(self, out: Dict[str, np.ndarray], role: str) -> np.ndarray:
        """(N, width) of one role, from the one output or from each level's map in stride order."""
        width = WIDTHS[role]
        if self.layout == "rows":
            parts = [(self.names[role], out[self.names[role]])]
        else:
            parts = [(self.names[f"{role}{s}"], out[self.names[f"{role}{s}"]]) for s in self.strides]
        arrays = []
        for name, value in parts:
            arr = as_float(name, value)
            if self.layout != "rows":
                if arr.ndim != 4:
                    raise RunFailed(f"output '{name}' has shape {list(arr.shape)}; retinaface reads rank-4 maps here")
                arr = arr[0].transpose(1, 2, 0) if self.layout == "nchw" else arr[0]
            arrays.append(arr.reshape(-1))
        flat = np.concatenate(arrays)
        if flat.size != len(self.priors) * width:
            shapes = ", ".join(f"'{n}' {list(np.shape(v))}" for n, v in parts)
            raise RunFailed(
                f"output {shapes} holds {flat.size} values; retinaface expects {width} for each of the {len(self.priors)} "
                "priors of task.priors at this input size"
            )
        return flat.reshape(len(self.priors), width)

    def __call__(self, out: Dict[str, np.ndarray], tf: Transform) -> Result:
        scores = self._values(out, "scores")
        face = (scores if probabilities(scores) else softmax(scores))[:, 1]
        idx = candidates(face, self.task.score_threshold)
        prior = self.priors[idx]
        loc = self._values(out, "boxes")[idx]
        v_centre, v_size = self.variances
        centre = prior[:, :2] + loc[:, :2] * v_centre * prior[:, 2:]
        size = prior[:, 2:] * np.exp(np.minimum(loc[:, 2:] * v_size, MAX_LOG_SIZE))
        boxes = np.concatenate([centre - size / 2, centre + size / 2], axis=1)
        conf = face[idx]
        classes = np.zeros(len(idx), np.int64)
        keep = suppress(boxes, conf, classes, self.task)
        kps = None
        if "landmarks" in self.names or f"landmarks{self.strides[0]}" in self.names:
            lm = self._values(out, "landmarks")[idx[keep]].reshape(len(keep), 5, 2)
            kps = prior[keep, None, :2] + lm * v_centre * prior[keep, None, 2:]
        return detections(boxes[keep], conf[keep], classes[keep], tf, self.labels, kps)
