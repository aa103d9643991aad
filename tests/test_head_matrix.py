"""The decode matrix of the issue's target: every head x {no detections, one, many, a NaN output, a wrong type
declared}. A decode that differs from the reference and was not refused is a garbage decode; there must be none, and
no exception but edge's own one-line errors.

Each head's raw outputs are encoded here from a list of objects (centre, size, score, class); the reference decode is
that list through a plain greedy NMS written from its definition (or, for heads whose graph did NMS already, the
rows as they are), not edge's code. The class count is known (task.labels), as Ultralytics' metadata makes it for its
exports: without it some layouts cannot be told apart by shape, and auto refuses them (tests/test_heads.py).
"""

from __future__ import annotations

import math
from typing import Dict, List, Tuple

import numpy as np

from edge.config import TaskConfig
from edge.errors import ConfigError, EdgeError, RunFailed
from edge.runtime.engines import TensorInfo
from edge.runtime.engines.preprocess import PreprocessSpec, plan_resize
from edge.runtime.postprocess import heads, resolved_task

SPEC = PreprocessSpec(640, 640)
STRIDES = (8, 16, 32)
CELLS = sum((640 // s) ** 2 for s in STRIDES)
IOU, CONF = 0.7, 0.25
Obj = Tuple[float, float, float, float, float, int]  # cx, cy, w, h, score, class


def cell_of(index: int) -> Tuple[int, int, int]:
    """(x, y, stride) of candidate ``index`` in YOLOX's order: stride by stride, row-major."""
    for s in STRIDES:
        n = 640 // s
        if index < n * n:
            return index % n, index // n, s
        index -= n * n
    raise IndexError(index)


def encode(kind: str, objs: List[Obj], classes: int, rng) -> Dict[str, np.ndarray]:
    """The raw outputs of a head of ``kind`` holding ``objs`` (score 0 elsewhere)."""
    slots = rng.choice(CELLS, len(objs), replace=False) if objs else []
    if kind in ("v8", "v8t", "v5", "yolox", "seg", "pose"):
        extra = {"seg": 32, "pose": 51}.get(kind, 0)
        obj_col = 1 if kind in ("v5", "yolox") else 0
        rows = np.zeros((CELLS, 4 + obj_col + classes + extra), np.float32)
        for slot, (cx, cy, w, h, s, c) in zip(slots, objs):
            if kind == "yolox":
                x, y, st = cell_of(slot)
                rows[slot, :4] = cx / st - x, cy / st - y, math.log(w / st), math.log(h / st)
            else:
                rows[slot, :4] = cx, cy, w, h
            if obj_col:
                rows[slot, 4] = 1.0
            rows[slot, 4 + obj_col + c] = s
            if kind == "pose":
                kp = np.stack([np.linspace(cx - w / 2, cx + w / 2, 17), np.full(17, cy), np.full(17, 0.8)], axis=1)
                rows[slot, 4 + classes :] = kp.reshape(-1)
            if kind == "seg":
                rows[slot, 4 + classes :] = rng.normal(0, 1, 32)
        out = {"output0": rows[None] if kind in ("v8t", "v5", "yolox") else np.ascontiguousarray(rows.T[None])}
        if kind == "seg":
            out["output1"] = rng.normal(0, 1, (1, 32, 160, 160)).astype(np.float32)
        return out
    corners = [(cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, s, c) for cx, cy, w, h, s, c in objs]
    if kind == "deepstream":
        rows = np.zeros((1, CELLS, 6), np.float32)
        for slot, r in zip(slots, corners):
            rows[0, slot] = r
        return {"output": rows}
    kept = oracle(objs)  # heads whose graph ran NMS: what it kept, best first
    rows = np.zeros((1, 100, 6), np.float32)
    for i, r in enumerate(kept[:100]):
        rows[0, i] = r
    if kind == "end2end":
        return {"output0": rows}
    return {
        "num_dets": np.array([[min(len(kept), 100)]], np.int32),
        "det_boxes": rows[:, :, :4].copy(),
        "det_scores": rows[:, :, 4].copy(),
        "det_classes": rows[:, :, 5].astype(np.int32),
    }


def oracle(objs: List[Obj], max_det: int = 300) -> List[Tuple[float, ...]]:
    """Greedy class-wise NMS from its definition, in corners, best first; then clipped to the 640 frame."""

    def iou(a, b):
        w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
        h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
        return w * h / union if union > 0 else 0.0

    kept: List[Tuple[float, ...]] = []
    rows = [(cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, s, c) for cx, cy, w, h, s, c in objs]
    for r in sorted((r for r in rows if r[4] > CONF), key=lambda r: -r[4]):
        if all(k[5] != r[5] or iou(k, r) <= IOU for k in kept):
            kept.append(r)
    return kept[:max_det]


def clipped(rows):
    out = [(max(a, 0), max(b, 0), min(c, 640), min(d, 640), s, k) for a, b, c, d, s, k in rows]
    return [r for r in out if r[2] > r[0] and r[3] > r[1]]


KINDS = ("v8", "v8t", "v5", "yolox", "seg", "pose", "end2end", "nms_plugin", "deepstream")
TYPES = ("yolo", "yolo_seg", "yolo_pose", "yolo_end2end", "nms_plugin", "deepstream_yolo", "blazeface", "classify")
RIGHT = {"v8": "yolo", "v8t": "yolo", "v5": "yolo", "yolox": "yolo", "seg": "yolo_seg", "pose": "yolo_pose"}
RIGHT.update({"end2end": "yolo_end2end", "nms_plugin": "nms_plugin", "deepstream": "deepstream_yolo"})


def objects(case: str, rng) -> List[Obj]:
    if case == "none":
        return []
    if case == "one":
        return [(320.0, 300.0, 80.0, 120.0, 0.83, 1)]
    # many: clusters of overlapping boxes (NMS has work) plus loose ones, some below the threshold, some past the edge
    objs: List[Obj] = []
    for _ in range(12):
        cx, cy, w, h = rng.uniform(40, 600), rng.uniform(40, 600), rng.uniform(20, 160), rng.uniform(20, 160)
        for _ in range(int(rng.integers(1, 5))):
            objs.append((cx + rng.normal(0, 6), cy + rng.normal(0, 6), w * rng.uniform(0.9, 1.1), h * rng.uniform(0.9, 1.1),
                         float(np.float32(rng.uniform(0.05, 0.99))), int(rng.integers(0, 3))))  # fmt: skip
    return objs


def decode(kind: str, outputs: Dict[str, np.ndarray], declared: str, classes: int):
    labels = [f"c{i}" for i in range(classes)]
    layout = {"v8t": "v8t", "v5": "v5", "yolox": "yolox"}.get(kind, "auto") if declared == "yolo" else "auto"
    task = TaskConfig(type=declared, yolo_layout=layout, keypoints=[17, 3] if kind == "pose" else None)
    infos = [TensorInfo(n, v.shape, v.dtype) for n, v in outputs.items()]
    head = heads.choose(task, infos, SPEC, labels)
    post = heads.build(head, resolved_task(task, head.kind), infos, SPEC, labels)
    return post(outputs, plan_resize(SPEC, 640, 640)[2])


def test_no_garbage_decode_and_no_traceback_over_every_head_and_case():
    rng = np.random.default_rng(20261202)
    tally = {"decoded right": 0, "refused": 0, "garbage": 0}
    garbage = []
    for kind in KINDS:
        classes = 1 if kind == "pose" else 3
        for case in ("none", "one", "many", "nan", "wrong type"):
            objs = objects("many" if case in ("nan", "wrong type") else case, rng)
            objs = [(cx, cy, w, h, s, 0 if kind == "pose" else c) for cx, cy, w, h, s, c in objs]
            outputs = encode(kind, objs, classes, rng)
            declared = [RIGHT[kind]] if case != "wrong type" else [t for t in TYPES if t != RIGHT[kind]]
            if case == "nan":
                first = next(n for n, v in outputs.items() if v.dtype.kind == "f")
                outputs[first].reshape(-1)[7] = np.nan
            for typ in declared:
                try:
                    result = decode(kind, outputs, typ, classes)
                except (ConfigError, RunFailed):
                    tally["refused"] += 1
                    continue
                except EdgeError as exc:  # any other one-line error is a refusal too, but say which
                    tally["refused"] += 1
                    print(f"{kind} {case} {typ}: {exc}")
                    continue
                got = [(*d.box, d.score, d.class_id) for d in result.detections]
                want = clipped(oracle(objs))
                same = len(got) == len(want) and all(
                    np.allclose(g[:4], w[:4], atol=1.0) and abs(g[4] - w[4]) < 1e-3 and g[5] == w[5] for g, w in zip(got, want)
                )
                if same and case not in ("nan", "wrong type"):
                    tally["decoded right"] += 1
                else:
                    tally["garbage"] += 1
                    garbage.append((kind, case, typ, len(got), len(want)))
    print(tally)
    assert garbage == [] and tally["decoded right"] == 3 * len(KINDS)
