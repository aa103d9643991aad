"""Fidelity without labels: how often INT8 makes the same decision as FP32, and how loud its error is, per output.

Agreement is the share of positions where the argmax over the output's class axis is the same in FP32 and INT8: top-1
for a classifier [N, C], per step for a sequence recogniser [N, T, V], per anchor for a detector's scores
[N, anchors, C], per pixel for a segmenter's map. The class axis is the last one, except for the 4-D outputs of a
channels-first model ([N, C, H, W] maps), where it is C. A class axis of one value is a yes/no score: the decision
is score > 0.5 when the output comes out of a Sigmoid or Softmax (through reshapes), else score > 0 (a logit).

SQNR is 10 log10(sum a^2 / sum (a - b)^2) over all of the output's values, a FP32 and b INT8: 20 dB means the error
carries a hundredth of the signal's power, and every 6 dB more is another bit of precision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np

from edge.graph.model import Graph

# Ops that move values without changing them: a score's meaning passes through them.
_SHAPE_OPS = frozenset({"Reshape", "Transpose", "Concat", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Slice", "Gather"})
_PROBABILITY_OPS = frozenset({"Sigmoid", "Softmax", "LogSoftmax"})


@dataclass
class OutputFidelity:
    name: str
    positions: int = 0  # decisions compared
    agree: int = 0
    signal: float = 0.0  # sum of FP32^2
    noise: float = 0.0  # sum of (FP32 - INT8)^2

    @property
    def agreement(self) -> float:
        return self.agree / self.positions if self.positions else 1.0

    @property
    def sqnr_db(self) -> float:
        if self.noise == 0.0:
            return math.inf
        if self.signal == 0.0:
            return -math.inf
        return 10.0 * math.log10(self.signal / self.noise)

    def to_dict(self) -> Dict[str, object]:
        return {"output": self.name, "positions": self.positions, "agreement": self.agreement, "sqnr_db": self.sqnr_db}


def class_axis(rank: int, layout: str) -> int:
    return 1 if rank == 4 and layout == "nchw" else rank - 1


def is_probability(graph: Graph, tensor: str) -> bool:
    """Whether ``tensor`` comes out of a Sigmoid/Softmax, looking back through ops that only move values."""
    seen, todo = set(), [tensor]
    found = False
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        idx = graph.producer.get(name)
        if idx is None:
            return False
        node = graph.model.graph.node[idx]
        if node.op_type in _PROBABILITY_OPS:
            found = True
        elif node.op_type in _SHAPE_OPS:
            data = node.input if node.op_type == "Concat" else node.input[:1]  # the values, not shapes or indices
            todo.extend(i for i in data if i)
        else:
            return False
    return found


def decisions(values: np.ndarray, axis: int, threshold: float) -> np.ndarray:
    """The decision at every position: argmax over ``axis``, or score > ``threshold`` when that axis has one value."""
    if values.ndim == 0:
        return (values > threshold).reshape(1)
    if values.shape[axis] == 1:
        return np.squeeze(values > threshold, axis=axis)
    return values.argmax(axis=axis)


class FidelityMeter:
    """Agreement and SQNR of each output, summed over batches of FP32 and INT8 outputs."""

    def __init__(self, graph: Graph, outputs: Iterable[str], layout: str) -> None:
        self.layout = layout
        self.thresholds = {o: (0.5 if is_probability(graph, o) else 0.0) for o in outputs}
        self.results = {o: OutputFidelity(o) for o in self.thresholds}

    def update(self, fp32: Dict[str, np.ndarray], int8: Dict[str, np.ndarray]) -> None:
        for name, r in self.results.items():
            a = np.asarray(fp32[name])
            b = np.asarray(int8[name])
            if a.dtype.kind != "f":  # an integer output (class ids, counts): decisions only
                same = a == b
                r.positions += same.size
                r.agree += int(same.sum())
                continue
            axis = class_axis(a.ndim, self.layout)
            same = decisions(a, axis, self.thresholds[name]) == decisions(b, axis, self.thresholds[name])
            r.positions += same.size
            r.agree += int(same.sum())
            # Dot products in float32 make no float64 copies of a batch of outputs; each batch's sum is exact to far
            # finer than the 0.1 dB shown, and the batches add up in Python floats.
            flat = np.ascontiguousarray(a, np.float32).reshape(-1)
            diff = flat - np.ascontiguousarray(b, np.float32).reshape(-1)
            r.signal += float(np.dot(flat, flat))
            r.noise += float(np.dot(diff, diff))

    def summary(self) -> List[OutputFidelity]:
        return list(self.results.values())


def lowest(results: List[OutputFidelity]) -> Tuple[float, Optional[str]]:
    """The lowest agreement over the outputs, and which output has it."""
    if not results:
        return 1.0, None
    worst = min(results, key=lambda r: r.agreement)
    return worst.agreement, worst.name


def render(results: List[OutputFidelity], images: int, source: str) -> List[str]:
    width = max([len(r.name) for r in results] + [6])
    lines = [f"FP32 vs INT8 (Q/DQ in ONNX Runtime) on {images} images from {source}, no labels needed:"]
    lines.append(f"  {'output':{width}}  {'positions':>10} {'agreement':>10} {'SQNR dB':>8}")
    for r in results:
        lines.append(f"  {r.name:{width}}  {r.positions:10d} {r.agreement:10.4f} {r.sqnr_db:8.1f}")
    return lines
