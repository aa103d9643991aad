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

import hashlib
import math
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np

from edge.calib.decisions import Matched, TaskDecisions
from edge.graph.model import Graph

ANCHORS = "anchors"  # the per-anchor class decisions of a YOLO head, in a task-aware check
DETECTIONS = "detections"  # matched detections (IoU >= 0.5, same class) over those FP32 or INT8 reports
PIXELS = "pixels"  # a semantic segmenter's pixels whose reported class INT8 keeps (IoU of the two class maps)

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
    unaligned: int = 0  # batches whose INT8 output had another shape (data-dependent sizes: a graph with its own NMS)
    integer: bool = False  # class ids or counts: compared value for value, no signal to measure noise against

    @property
    def agreement(self) -> float:
        return self.agree / self.positions if self.positions else 1.0

    @property
    def sqnr_db(self) -> float:
        if self.integer or (self.unaligned and self.signal == 0.0 and self.noise == 0.0):
            return math.nan  # nothing was compared value for value, or the values are ids (1.8 % differing read inf)
        if self.noise == 0.0:
            return math.inf
        if self.signal == 0.0:
            return -math.inf
        return 10.0 * math.log10(self.signal / self.noise)

    def to_dict(self) -> Dict[str, object]:
        sqnr = None if math.isnan(self.sqnr_db) else self.sqnr_db
        out: Dict[str, object] = {"output": self.name, "positions": self.positions, "agreement": self.agreement, "sqnr_db": sqnr}
        if self.unaligned:
            out["unaligned"] = self.unaligned
        return out


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


@dataclass
class KeptRows:
    """Per image row of one output, from FP32's own values: its decisions, its summed square and its digest."""

    decisions: np.ndarray
    signal: np.ndarray
    digests: List[bytes]


def row_digest(row: np.ndarray) -> bytes:
    """A digest of one image's output as float32 bytes: equal digests mean INT8 gave FP32's values exactly."""
    return hashlib.sha256(np.ascontiguousarray(row, np.float32)).digest()  # SHA extensions: 2x blake2b here


class FidelityMeter:
    """Agreement and SQNR of each output, summed over batches of FP32 and INT8 outputs.

    With ``task`` (a detector the run config names or the outputs reveal, ``edge.calib.decisions``), agreement is of
    the decisions the detector makes: the class each anchor picks and the detections its decoder keeps; each raw
    output then has its SQNR only, since an argmax over a box regressor's axis means nothing."""

    def __init__(self, graph: Graph, outputs: Iterable[str], layout: str, task: Optional[TaskDecisions] = None) -> None:
        self.layout, self.task = layout, task
        self.thresholds = {o: (0.5 if is_probability(graph, o) else 0.0) for o in outputs}
        self.results = {o: OutputFidelity(o) for o in self.thresholds}
        self.matched = Matched()

    def decide(self, name: str, values: np.ndarray) -> np.ndarray:
        """Output ``name``'s decision at every position (none of its own when a task decides)."""
        if self.task is not None:
            return np.zeros((len(values), 0), np.int64)
        return decisions(values, class_axis(values.ndim, self.layout), self.thresholds[name])

    def update(
        self, fp32: Dict[str, np.ndarray], int8: Dict[str, np.ndarray], kept: Optional[Dict[str, KeptRows]] = None
    ) -> None:
        """``kept``: what a Reference knows of FP32's rows beyond the (rounded) values it hands over."""
        for name, r in self.results.items():
            a = np.asarray(fp32[name])
            b = np.asarray(int8[name])
            if a.shape != b.shape:  # INT8 kept another number of rows: no value pairs with a value of FP32's
                r.unaligned += 1
                continue
            if a.dtype.kind != "f":  # an integer output (class ids, counts): decisions only
                r.integer = True
                same = a == b
                r.positions += same.size
                r.agree += int(same.sum())
                continue
            rows = kept.get(name) if kept else None
            same = (self.decide(name, a) if rows is None else rows.decisions) == self.decide(name, b)
            r.positions += same.size
            r.agree += int(same.sum())
            if rows is not None:
                # FP32's own signal; no noise from a row INT8 reproduced bit for bit (an exact copy reads as exact)
                r.signal += float(rows.signal.sum())
                differ = np.array([row_digest(row) != d for row, d in zip(b, rows.digests)], bool)
                a, b = a[differ], b[differ]
            # Dot products in float32 make no float64 copies of a batch of outputs; each batch's sum is exact to far
            # finer than the 0.1 dB shown, and the batches add up in Python floats.
            flat = np.ascontiguousarray(a, np.float32).reshape(-1)
            diff = flat - np.ascontiguousarray(b, np.float32).reshape(-1)
            if rows is None:
                r.signal += float(np.dot(flat, flat))
            r.noise += float(np.dot(diff, diff))
        if self.task is not None:
            self.task.update(self.matched, fp32, int8)

    def summary(self) -> List[OutputFidelity]:
        if self.task is None:
            return list(self.results.values())
        m, out = self.matched, []
        if self.task.has_anchors:
            out.append(OutputFidelity(ANCHORS, m.anchors, m.anchors_agree, math.nan, math.nan))
        name = PIXELS if self.task.head.kind == "segment" else DETECTIONS
        out.append(OutputFidelity(name, m.either, m.kept, math.nan, math.nan))
        return out + list(self.results.values())


class Reference:
    """The FP32 outputs the statistics pass saw, kept for the check so that FP32 need not run again: every position's
    decision as FP32 made it, each image's summed square and digest, and the values (for the noise) in float16 where
    rounding them (and flushing magnitudes below 2^-14 to 0) costs under MAX_ROUNDING of their power, else as they
    came. An image INT8 reproduces bit for bit adds no noise. On a recogniser with an 18385-way output this halves
    the largest thing edge calib holds."""

    # Rounding error power / signal power allowed for float16 (-66 dB; float16 alone rounds at about -70 dB). The
    # noise measured against rounded values is off by at most the rounding error's norm: an SQNR of s dB moves by
    # at most 20 log10(1 + 10^((s - 66) / 20)) dB, 0.04 at 20 dB, 0.14 at 30, 0.4 at 40.
    MAX_ROUNDING = 2.5e-7

    def __init__(self, meter: FidelityMeter, count: int, limit_bytes: int) -> None:
        self.meter, self.count, self.limit_bytes = meter, count, limit_bytes
        self.values: Dict[str, np.ndarray] = {}
        self.decided: Dict[str, np.ndarray] = {}
        self.signal: Dict[str, np.ndarray] = {}
        self.digests: Dict[str, List[bytes]] = {}
        self.filled: Dict[str, int] = {}
        self.dropped = False  # the outputs would not fit in limit_bytes: the check runs FP32 itself
        self._scratch = np.empty(0, np.float32)

    def add(self, outputs: Dict[str, np.ndarray], images: int) -> None:
        """Keep one run's outputs (those of ``meter``; the run had ``images`` images), in image order."""
        for name in self.meter.results:
            if self.dropped:
                return
            value = outputs.get(name)
            if value is not None:
                self._add(name, value, images)

    def _drop(self) -> None:
        self.dropped = True
        for kept in (self.values, self.decided, self.signal, self.digests):
            kept.clear()

    def _add(self, name: str, value: np.ndarray, images: int) -> None:
        stored = self.values.get(name)
        if value.ndim == 0 or len(value) != images or (stored is not None and value.shape[1:] != stored.shape[1:]):
            self._drop()  # not one row per image, or a shape that changes from run to run: FP32 runs again instead
            return
        floating = value.dtype.kind == "f"
        if stored is None:
            # A task's decoder reads the kept values as FP32 gave them: rounding would move its boxes.
            dtype = np.dtype(np.float16 if floating and self.meter.task is None else value.dtype)
            if dtype.itemsize * (value.size // images) * self.count + self._bytes() > self.limit_bytes:
                self._drop()
                return
            # Allocated once: small arrays kept between the pass's large short-lived ones would pin the heap.
            stored = self.values[name] = np.empty((self.count, *value.shape[1:]), dtype)
            self.filled[name] = 0
            if floating:
                self.decided[name] = np.empty((self.count, *self.meter.decide(name, value[:1]).shape[1:]), np.int64)
                self.signal[name] = np.empty(self.count, np.float64)
                self.digests[name] = []
        start = self.filled[name]
        rows = stored[start : start + images]
        if stored.dtype == np.float16:
            with np.errstate(over="ignore", invalid="ignore"):  # what float16 cannot hold fails the check
                self._to_half(value, rows)
                fine = self._rounds_finely(value, rows)
        else:
            np.copyto(rows, value, casting="same_kind")
            fine = True
        if not fine:
            stored = self.values[name] = stored.astype(value.dtype)  # the whole output as it comes, from here on
            if self._bytes() > self.limit_bytes:
                self._drop()
                return
            stored[start : start + images] = value
        if floating:
            self.decided[name][start : start + images] = self.meter.decide(name, value)
            for k, row in enumerate(value, start):
                flat = np.ascontiguousarray(row, np.float32).reshape(-1)
                self.signal[name][k] = float(np.dot(flat, flat))
                self.digests[name].append(row_digest(row))
        self.filled[name] = start + images

    def _bytes(self) -> int:
        return sum(v.nbytes for v in self.values.values())

    def _to_half(self, value: np.ndarray, rows: np.ndarray) -> None:
        # Magnitudes below float16's smallest normal number become 0 first: converting to its subnormals took 18 ms
        # a run on a recogniser's softmax (93 % of its values), against 1 ms for the rest.
        work = self._work(value)
        np.multiply(value, np.abs(value) >= np.float32(2.0**-14), out=work, casting="same_kind")
        np.copyto(rows, work, casting="same_kind")

    def _work(self, value: np.ndarray) -> np.ndarray:
        """Scratch float32 space shaped like ``value``, reused from run to run."""
        if self._scratch.size < value.size:
            self._scratch = np.empty(value.size, np.float32)
        return self._scratch[: value.size].reshape(value.shape)

    def _rounds_finely(self, value: np.ndarray, rounded: np.ndarray) -> bool:
        """Whether float16 ``rounded`` holds ``value`` to within MAX_ROUNDING of its power (inf and NaN fail)."""
        flat = np.ascontiguousarray(value, np.float32).reshape(-1)
        error = self._work(flat)
        np.copyto(error, rounded.reshape(-1))
        np.subtract(error, flat, out=error)
        return float(np.dot(error, error)) <= self.MAX_ROUNDING * float(np.dot(flat, flat))

    def complete(self) -> bool:
        """Whether every output was kept, for the same images (a fixed-batch model leaves out a short last batch, as
        the check does)."""
        return not self.dropped and len(self.values) == len(self.meter.results) and len(set(self.filled.values())) == 1

    def batch(self, start: int, stop: int) -> Tuple[Dict[str, np.ndarray], Dict[str, KeptRows]]:
        """(values, what else is kept of FP32's floating outputs) of images ``start:stop``."""
        return (
            {n: v[start:stop] for n, v in self.values.items()},
            {
                n: KeptRows(d[start:stop], self.signal[n][start:stop], self.digests[n][start:stop])
                for n, d in self.decided.items()
            },
        )


def lowest(results: List[OutputFidelity]) -> Tuple[float, Optional[str]]:
    """The lowest agreement over the outputs, and which output has it."""
    if not results:
        return 1.0, None
    worst = min(results, key=lambda r: r.agreement)
    return worst.agreement, worst.name


def undecided(results: List[OutputFidelity]) -> Optional[str]:
    """The detector's decision measure (anchors, detections) that had nothing to compare: neither FP32 nor INT8 found
    an object on any image, so its agreement of 1.0 says nothing about INT8."""
    return next((r.name for r in results if r.name in (ANCHORS, DETECTIONS) and not r.positions), None)


def render(results: List[OutputFidelity], images: int, source: str) -> List[str]:
    width = max([len(r.name) for r in results] + [6])
    lines = [f"FP32 vs INT8 (Q/DQ in ONNX Runtime) on {images} images from {source}, no labels needed:"]
    lines.append(f"  {'output':{width}}  {'positions':>10} {'agreement':>10} {'SQNR dB':>8}")
    for r in results:
        agreement = f"{r.agreement:10.4f}" if r.positions or r.name in (ANCHORS, DETECTIONS, PIXELS) else f"{'-':>10}"
        sqnr = f"{r.sqnr_db:8.1f}" if not math.isnan(r.sqnr_db) else f"{'-':>8}"
        lines.append(f"  {r.name:{width}}  {r.positions:10d} {agreement} {sqnr}")
    unaligned = [r for r in results if r.unaligned]
    if unaligned:
        lines.append(
            f"  {', '.join(r.name for r in unaligned)}: INT8 gave another number of rows than FP32 in "
            f"{max(r.unaligned for r in unaligned)} batch(es) (sizes the graph decides, as its own NMS does); those were "
            "not compared value by value"
        )
    return lines
