"""edge's YOLO decoders, letterbox, frame mapping and engine-header reader against Ultralytics' OWN code, run on the
same arrays (``tests/ultralytics_reference.py``: ultralytics 8.4.190 and torch, test-only, AGPL; edge never imports
them). Skips, naming the reason, where torch or ultralytics is missing (CI with EDGE_REQUIRE_SERVERS=1 fails instead).

Raw heads come from ``head()``: boxes clustered by ``synthetic_raw`` (so NMS has overlaps to resolve) and every
anchor's best class score distinct from every other anchor's and exactly representable in FP16 (no ties, whose order
neither side defines; the FP16 copies hold the same scores).

Known differences are written down here rather than hidden:

* Ultralytics' class-wise NMS moves each class to ``class * 7680`` in float32, so at high class ids box corners lose
  precision (1/16 px at class 79) and a box whose IoU with a better box of its class is just above the threshold can
  survive (``test_ultralytics_float32_class_offset_keeps_a_box_above_the_iou_threshold``). Class-wise comparisons
  therefore check edge against Ultralytics' NMS run class by class (no offset) in full, and against its class-wise
  call up to the first such borderline decision.
* A -seg detection whose mask is empty is dropped by both (Ultralytics' predictor, and edge since this test showed
  the difference).
* End-to-end rows: Ultralytics takes the first max_det rows above conf in the graph's order, edge the best max_det
  (the same for real one-to-one heads, which write rows best first).
* Masks: edge crops to the box after sampling, at full resolution, as Ultralytics 8.4 does (it cropped whole
  prototype cells first, which this file caught: IoU down to 0.69 on small masks).
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import pytest

import tests.ultralytics_reference as R
from edge.config import TaskConfig
from edge.metadata import ModelMetadata
from edge.runtime.engines import TensorInfo
from edge.runtime.engines.preprocess import PreprocessSpec, plan_resize
from edge.runtime.postprocess import heads, resolved_task
from edge.runtime.postprocess.masks import decode_rle
from tests.conftest import require_or_skip, run_cli

SPEC = PreprocessSpec(640, 640)
CELLS = 8400  # 80x80 + 40x40 + 20x20 anchors at 640
NAMES = [f"class{i}" for i in range(80)]
IOU = 0.7
MAX_DET = 300


@pytest.fixture(scope="module")
def ultra():
    """Ultralytics' modules (torch, nms, ops, ...), or a skip (a failure under EDGE_REQUIRE_SERVERS=1) naming why."""
    missing = [m for m in ("torch", "ultralytics") if importlib.util.find_spec(m) is None]
    require_or_skip(
        not missing,
        f"{' and '.join(missing)} not installed: the Ultralytics reference tests need "
        "'pip install torch==2.13.0' and 'pip install --no-deps ultralytics==8.4.190' (test-only)",
    )
    try:
        return R._ultralytics()
    except pytest.skip.Exception as exc:
        require_or_skip(False, str(exc))


# -- helpers ---------------------------------------------------------------------------------------------------------


def head(seed: int, nc: int = 80, n: int = CELLS, extra: int = 0, imgsz: int = 640) -> np.ndarray:
    """A ``[1, 4+nc+extra, n]`` float32 raw head: synthetic_raw's clustered boxes and extra channels, then class scores
    rebuilt so each anchor's best score is distinct among anchors and an exact FP16 value, the rest of its row below
    it (a unique arg-max)."""
    raw = R.synthetic_raw(nc, n, imgsz, extra=extra, seed=seed)
    rng = np.random.default_rng(seed + 1000)
    grid = np.arange(np.float16(0.0005).view(np.uint16), np.float16(0.9995).view(np.uint16) + 1, dtype=np.uint16)
    best = rng.choice(grid, n, replace=False).view(np.float16).astype(np.float32)
    others = (best[None, :] * rng.uniform(0, 0.95, (nc, n))).astype(np.float16).astype(np.float32)
    others = np.minimum(others, np.nextafter(best.astype(np.float16), np.float16(0)).astype(np.float32)[None, :])
    cls = rng.integers(0, nc, n)
    others[cls, np.arange(n)] = best
    raw[0, 4 : 4 + nc] = others
    return raw


def smooth_protos(seed: int, nm: int = 32, h: int = 160, w: int = 160) -> np.ndarray:
    """Prototype masks ``[1, nm, h, w]`` that vary smoothly (as trained ones do): coarse noise, cubic-upsampled."""
    import cv2

    coarse = np.random.default_rng(seed).normal(0, 1, (nm, h // 8, w // 8)).astype(np.float32)
    return np.stack([cv2.resize(p, (w, h), interpolation=cv2.INTER_CUBIC) for p in coarse])[None]


def pose_head(seed: int, n: int = CELLS) -> np.ndarray:
    """A ``[1, 4+1+51, n]`` pose head: one class, 17 keypoints (x, y, visibility) scattered around each box centre."""
    raw = head(seed, nc=1, n=n, extra=51)
    rng = np.random.default_rng(seed + 2000)
    kp = np.empty((17, 3, n), np.float32)
    kp[:, 0] = raw[0, 0] + rng.normal(0, 60, (17, n))
    kp[:, 1] = raw[0, 1] + rng.normal(0, 60, (17, n))
    kp[:, 2] = rng.uniform(0, 1, (17, n))
    raw[0, 5:] = kp.reshape(51, n)
    return raw


def infos(outputs: Dict[str, np.ndarray]) -> List[TensorInfo]:
    return [TensorInfo(k, v.shape, v.dtype) for k, v in outputs.items()]


def decoder(outputs, labels=NAMES, meta: Optional[ModelMetadata] = None, spec=SPEC, **task):
    t = TaskConfig(**task)
    h = heads.choose(t, infos(outputs), spec, list(labels), meta)
    return heads.build(h, resolved_task(t, h.kind), infos(outputs), spec, list(labels))


def identity(spec=SPEC):
    return plan_resize(spec, spec.width, spec.height)[2]


def as_rows(result) -> np.ndarray:
    return np.array([[*d.box, d.score, d.class_id] for d in result.detections], np.float64).reshape(-1, 6)


def clipped(ref: np.ndarray, width: int = 640, height: int = 640) -> tuple:
    """Ultralytics' rows with boxes clipped to the frame, as edge reports them, and which rows keep an area (edge
    drops a box with none); returns (rows, kept index)."""
    out = np.array(ref[:, :6], np.float64)
    out[:, [0, 2]] = out[:, [0, 2]].clip(0, width)
    out[:, [1, 3]] = out[:, [1, 3]].clip(0, height)
    keep = np.flatnonzero((out[:, 2] > out[:, 0]) & (out[:, 3] > out[:, 1]))
    return out[keep], keep


def assert_rows(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Same count, then row by row (both best first, scores distinct): boxes within 1 px, same class, score 1e-3."""
    assert len(got) == len(want), f"{what}: edge kept {len(got)}, Ultralytics {len(want)}"
    if not len(got):
        return
    box = np.abs(got[:, :4] - want[:, :4]).max()
    assert box <= 1.0, f"{what}: boxes differ by up to {box:.3f} px"
    assert np.array_equal(got[:, 5], want[:, 5]), f"{what}: classes differ at {np.flatnonzero(got[:, 5] != want[:, 5])[:5]}"
    score = np.abs(got[:, 4] - want[:, 4]).max()
    assert score <= 1e-3, f"{what}: scores differ by up to {score:.2e}"


def iou64(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    b, bs = np.asarray(box, np.float64), np.asarray(boxes, np.float64).reshape(-1, 4)
    w = (np.minimum(b[2], bs[:, 2]) - np.maximum(b[0], bs[:, 0])).clip(0)
    h = (np.minimum(b[3], bs[:, 3]) - np.maximum(b[1], bs[:, 1])).clip(0)
    inter = w * h
    union = (b[2] - b[0]) * (b[3] - b[1]) + (bs[:, 2] - bs[:, 0]) * (bs[:, 3] - bs[:, 1]) - inter
    return inter / np.maximum(union, 1e-12)


def assert_rows_up_to_borderline(got: np.ndarray, want: np.ndarray, raw_want: np.ndarray, what: str) -> int:
    """Class-wise results against Ultralytics' class-wise call: equal up to the first row where they part, and that
    row must be a borderline NMS decision (exact IoU with a better box of its class within 2e-3 of the threshold),
    which Ultralytics' float32 class offsets can flip; after it, the cascade is not compared. ``raw_want``: the
    unclipped Ultralytics rows. Returns how many rows matched."""
    n = min(len(got), len(want))
    differs = np.flatnonzero(
        (np.abs(got[:n, :4] - want[:n, :4]).max(1) > 1.0)
        | (got[:n, 5] != want[:n, 5])
        | (np.abs(got[:n, 4] - want[:n, 4]) > 1e-3)
    )
    if not len(differs):
        assert len(got) == len(want) or n == MAX_DET, f"{what}: edge kept {len(got)}, Ultralytics {len(want)}"
        return n
    i = int(differs[0])
    # The row kept by one side only is the better-scored of the two at i.
    lone = raw_want[i] if want[i, 4] > got[i, 4] else None
    if lone is None:  # edge kept a box Ultralytics suppressed: measure against Ultralytics' better rows of its class
        g = got[i]
        better = raw_want[:i][raw_want[:i, 5] == g[5]]
        overlap = iou64(g[:4], better[:, :4]).max(initial=0.0)
    else:
        better = raw_want[:i][raw_want[:i, 5] == lone[5]]
        overlap = iou64(lone[:4], better[:, :4]).max(initial=0.0)
    assert abs(overlap - IOU) < 2e-3, (
        f"{what}: edge and Ultralytics part at row {i} (of {len(want)}), and not on a borderline IoU ({overlap:.6f} vs {IOU})"
    )
    return i


def per_class_reference(raw: np.ndarray, conf: float, nc: int) -> np.ndarray:
    """Ultralytics' NMS run class by class (agnostic within one class, so no class offset and no precision loss),
    merged best first and capped: what class-wise NMS means, computed by Ultralytics' own code."""
    best = raw[0, 4 : 4 + nc].argmax(0)
    parts = []
    for c in np.unique(best):
        sub = np.ascontiguousarray(raw[:, :, best == c])
        if sub.shape[-1] == 6:  # six anchors would be read as end2end rows (see the reference's docstring)
            sub = np.concatenate([sub, np.zeros((1, sub.shape[1], 1), sub.dtype)], 2)
        parts.append(R.detect(sub, conf, IOU, MAX_DET, agnostic=True))
    rows = np.concatenate(parts) if parts else np.zeros((0, 6), np.float32)
    return rows[np.argsort(-rows[:, 4], kind="stable")][:MAX_DET]


# -- a. detection: v8 / v8t / FP16 ----------------------------------------------------------------------------------


@pytest.mark.parametrize("conf", [0.25, 0.001])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_detect_v8_agnostic_matches_ultralytics(ultra, seed, conf):
    raw = head(seed)
    want, _ = clipped(R.detect(raw, conf, IOU, MAX_DET, agnostic=True))
    post = decoder({"output0": raw}, score_threshold=conf, agnostic_nms=True)
    assert post.head_info == "yolo v8 (80 classes)"
    assert_rows(as_rows(post({"output0": raw}, identity())), want, f"seed {seed} conf {conf} agnostic")


# Ultralytics' class-wise call at conf 0.001 takes 15-30 s here: without torchvision its pure-torch NMS visits every
# one of the ~8400 candidates (no max_det stop), and classes do not suppress each other. One seed, marked slow.
CLASSWISE = [(s, 0.25, True) for s in (0, 1, 2)] + [(s, 0.001, False) for s in (0, 1, 2)]
CLASSWISE.append(pytest.param(1, 0.001, True, marks=pytest.mark.slow))


@pytest.mark.parametrize("seed, conf, direct_call", CLASSWISE)
def test_detect_v8_classwise_matches_ultralytics(ultra, seed, conf, direct_call):
    raw = head(seed)
    post = decoder({"output0": raw}, score_threshold=conf)
    got = as_rows(post({"output0": raw}, identity()))
    exact, _ = clipped(per_class_reference(raw, conf, 80))
    assert_rows(got, exact, f"seed {seed} conf {conf} class by class")
    if not direct_call:
        return
    direct = R.detect(raw, conf, IOU, MAX_DET)
    want, keep = clipped(direct)
    assert_rows_up_to_borderline(got, want, direct[keep], f"seed {seed} conf {conf} class-wise")


@pytest.mark.parametrize("agnostic", [False, True])
def test_detect_transposed_v8t_and_fp16_outputs_match_ultralytics(ultra, agnostic):
    raw = head(7)
    want, _ = clipped(per_class_reference(raw, 0.25, 80) if not agnostic else R.detect(raw, 0.25, IOU, MAX_DET, agnostic=True))
    t = np.ascontiguousarray(raw[0].T[None])
    post = decoder({"output0": t}, agnostic_nms=agnostic)
    assert post.head_info == "yolo v8t (80 classes)"
    assert_rows(as_rows(post({"output0": t}, identity())), want, "v8t")

    half = raw.astype(np.float16)  # an FP16 engine's output: both sides read the same half values
    want16, _ = clipped(
        per_class_reference(half, 0.25, 80) if not agnostic else R.detect(half, 0.25, IOU, MAX_DET, agnostic=True)
    )
    for name, out in (("v8 fp16", half), ("v8t fp16", np.ascontiguousarray(half[0].T[None]))):
        post = decoder({"output0": out}, agnostic_nms=agnostic)
        assert_rows(as_rows(post({"output0": out}, identity())), want16, name)


@pytest.mark.parametrize("seed", [3, 4])
def test_a_single_class_detector_matches_ultralytics_in_both_layouts(ultra, seed):
    """One class (a person or a face detector): Ultralytics' NMS on [1, 5, N]; edge reads the same head as v8 and,
    transposed, as v8t."""
    raw = head(seed, nc=1)
    want, _ = clipped(R.detect(raw, 0.25, IOU, MAX_DET))
    for name, out in (("v8", raw), ("v8t", np.ascontiguousarray(raw[0].T[None]))):
        post = decoder({"output0": out}, ["person"])
        assert post.head_info == f"yolo {name} (1 classes)"
        assert_rows(as_rows(post({"output0": out}, identity())), want, f"one class {name} seed {seed}")


def test_ultralytics_float32_class_offset_keeps_a_box_above_the_iou_threshold(ultra):
    """Two class-79 boxes with exact IoU 0.70004 (> 0.7): the second must go. Ultralytics' NMS offsets class 79 by
    79 * 7680 = 606720 in float32 (1/16 px steps), rounds the IoU down to 0.7 and keeps both; edge (offsets scaled to
    the boxes) suppresses it, as does Ultralytics for class 0 or agnostic."""
    boxes = np.array([[10, 10, 110, 110], [10, 10, 110, 80.004]], np.float32)
    assert iou64(boxes[0], boxes[1:])[0] > IOU
    raw = np.zeros((1, 84, 100), np.float32)  # more anchors than attributes: the v8 layout
    for i, (x1, y1, x2, y2) in enumerate(boxes):
        raw[0, :4, i] = (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1
    for cls, ultralytics_keeps in ((0, 1), (79, 2)):
        raw[0, 4:] = 0
        raw[0, 4 + cls, :2] = 0.9, 0.8
        assert len(R.detect(raw, 0.25, IOU, MAX_DET)) == ultralytics_keeps
        assert len(R.detect(raw, 0.25, IOU, MAX_DET, agnostic=True)) == 1
        post = decoder({"output0": raw}, type="yolo", yolo_layout="v8")
        assert len(post({"output0": raw}, identity()).detections) == 1


# -- b. -seg ---------------------------------------------------------------------------------------------------------


def mask_ious(result, ref_rows: np.ndarray, ref_masks: np.ndarray) -> np.ndarray:
    """IoU of edge's decoded RLE mask with Ultralytics' mask, for each Ultralytics detection edge also has (matched
    by score and class, both distinct)."""
    by_key = {(round(d.score, 5), d.class_id): d for d in result.detections}
    out = []
    for row, m in zip(ref_rows, ref_masks):
        d = by_key.get((round(float(row[4]), 5), int(row[5])))
        if d is None:
            continue
        e, u = decode_rle(d.mask), m > 0
        union = (e | u).sum()
        out.append((e & u).sum() / union if union else 1.0)
    return np.array(out)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_seg_boxes_match_ultralytics(ultra, seed):
    """The boxes of a -seg head: Ultralytics' SegmentationPredictor's (its NMS with nc = number of names, then
    detections whose mask is empty dropped)."""
    raw, protos = head(seed, extra=32), smooth_protos(seed)
    outs = {"output0": raw, "output1": protos}
    for agnostic in (True, False):
        post = decoder(outs, agnostic_nms=agnostic)
        assert post.head_info == "yolo_seg v8 (80 classes, 32 mask coefficients)"
        got = as_rows(post(outs, identity()))
        ref = np.asarray(R.segment(raw, protos, 0.25, IOU, MAX_DET, agnostic=agnostic)[0])[:, :6]
        want, keep = clipped(ref)
        if agnostic:
            assert_rows(got, want, f"seg seed {seed} agnostic")
        else:
            assert_rows_up_to_borderline(got, want, ref[keep], f"seg seed {seed} class-wise")


def test_seg_masks_match_ultralytics(ultra):
    """Every mask Ultralytics keeps against edge's (input size = frame, identity mapping): IoU >= 0.9 each."""
    ious = []
    for seed in (0, 1, 2):
        raw, protos = head(seed, extra=32), smooth_protos(seed)
        outs = {"output0": raw, "output1": protos}
        result = decoder(outs, agnostic_nms=True)(outs, identity())
        ref, masks = R.segment(raw, protos, 0.25, IOU, MAX_DET, agnostic=True)
        found = mask_ious(result, ref, masks)
        assert len(found) == len(ref) > 0
        ious.extend(found)
    ious = np.array(ious)
    assert ious.min() >= 0.9, f"mask IoU min {ious.min():.3f}, mean {ious.mean():.4f} over {len(ious)} detections"


def test_a_seg_detection_with_an_empty_mask_is_dropped_by_both(ultra):
    """Ultralytics' SegmentationPredictor drops a detection whose mask is empty (segment/predict.py:107-110); so does
    edge: a segment of no pixel is no detection."""
    raw, protos = head(3, extra=32), smooth_protos(3)
    outs = {"output0": raw, "output1": protos}
    best = int(np.argmax(raw[0, 4:84].max(0)))
    raw[0, 84:, best] = 0.0  # coefficients 0: logits 0 everywhere, "> 0" nowhere
    ref, _ = R.segment(raw, protos, 0.25, IOU, MAX_DET, agnostic=True)
    result = decoder(outs, agnostic_nms=True)(outs, identity())
    top = float(raw[0, 4:84, best].max())
    assert not np.isclose(ref[:, 4], top).any()  # Ultralytics: gone
    assert not any(abs(d.score - top) < 1e-6 for d in result.detections)  # edge: gone
    assert len(result.detections) == len(clipped(ref)[0])


# -- c. -pose --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_pose_matches_ultralytics(ultra, seed):
    raw = pose_head(seed)
    meta = ModelMetadata("ultralytics", ("person",), (640, 640), 32, "pose", (17, 3), False)
    post = decoder({"output0": raw}, ["person"], meta)
    assert post.head_info == "yolo_pose v8 (1 classes, 17 keypoints)"
    result = post({"output0": raw}, identity())
    boxes, kpts = R.pose(raw, 0.25, IOU, MAX_DET)
    want, keep = clipped(boxes)
    assert_rows(as_rows(result), want, f"pose seed {seed}")
    frame_kpts = R.scale_coords(kpts, (640, 640), (640, 640))[keep]  # Ultralytics' own mapping (clips to the frame)
    got_xy = np.array([d.keypoints for d in result.detections])
    got_vis = np.array([d.keypoint_scores for d in result.detections])
    assert np.abs(got_xy - frame_kpts[..., :2]).max() <= 1.0
    assert np.abs(got_vis - frame_kpts[..., 2]).max() <= 1e-3


# -- d. end2end (YOLOv10 / YOLO26 one-to-one heads) ----------------------------------------------------------------


def e2e_rows(seed: int, k: int = 300, extra: int = 0, sort: bool = True) -> np.ndarray:
    """``[1, k, 6 + extra]`` rows as a one-to-one head writes them: x1 y1 x2 y2, distinct scores best first, class."""
    rng = np.random.default_rng(seed)
    xy = rng.uniform(-40, 640, (k, 2))
    wh = rng.uniform(2, 300, (k, 2))
    scores = rng.choice(np.arange(1, 100_000), k, replace=False) / 100_000.0
    if sort:
        scores = np.sort(scores)[::-1]
    rows = np.concatenate([xy, xy + wh, scores[:, None], rng.integers(0, 80, (k, 1)), rng.normal(0, 1, (k, extra))], 1)
    return rows[None].astype(np.float32)


def e2e_meta(task: str, names=NAMES, kpt=None) -> ModelMetadata:
    return ModelMetadata("ultralytics", tuple(names), (640, 640), 32, task, kpt, True)


@pytest.mark.parametrize("conf", [0.25, 0.001])
def test_end2end_detect_matches_ultralytics(ultra, conf):
    rows = e2e_rows(0)
    post = decoder({"output0": rows}, meta=e2e_meta("detect"), score_threshold=conf)
    assert post.head_info == "yolo_end2end (80 classes)"
    want, _ = clipped(R.end2end(rows, conf, MAX_DET))
    assert_rows(as_rows(post({"output0": rows}, identity())), want, f"end2end conf {conf}")
    # max_det below the survivors: both keep the best (the head writes rows best first)
    want, _ = clipped(R.end2end(rows, conf, 50))
    post = decoder({"output0": rows}, meta=e2e_meta("detect"), score_threshold=conf, max_detections=50)
    assert_rows(as_rows(post({"output0": rows}, identity())), want, "end2end max_det 50")


def test_end2end_rows_out_of_order_edge_sorts_ultralytics_takes_model_order(ultra):
    """Ultralytics takes the first max_det rows above conf in the order the graph wrote them; edge sorts by score
    first. Same result for real one-to-one heads (they emit rows best first); differs for a graph that does not."""
    rows = e2e_rows(1, sort=False)
    post = decoder({"output0": rows}, meta=e2e_meta("detect"), max_detections=20)
    got = as_rows(post({"output0": rows}, identity()))
    ref = R.end2end(rows, 0.25, 20)
    assert np.all(np.diff(got[:, 4]) < 0) and not np.all(np.diff(ref[:, 4]) < 0)
    everything, _ = clipped(R.end2end(rows, 0.25, 300))
    best20 = everything[np.argsort(-everything[:, 4])][:20]
    assert_rows(got, best20, "edge keeps the 20 best")


def test_end2end_seg_yolo26_boxes_and_masks(ultra):
    u = ultra
    rows, protos = e2e_rows(2, extra=32), smooth_protos(2)
    outs = {"output0": rows, "output1": protos}
    post = decoder(outs, meta=e2e_meta("segment"))
    assert post.head_info == "yolo_end2end (80 classes, 32 mask coefficients)"
    result = post(outs, identity())
    # What SegmentationPredictor does with end2end rows: non_max_suppression(end2end=True), process_mask, drop empty.
    pred = u["torch"].from_numpy(R.end2end(rows, 0.25, MAX_DET))
    masks = u["ops"].process_mask(u["torch"].from_numpy(protos[0]), pred[:, 6:], pred[:, :4], (640, 640), upsample=True)
    nonempty = (masks.amax((-2, -1)) > 0).numpy()
    ref, ref_masks = pred[:, :6].numpy()[nonempty], masks.numpy()[nonempty]
    got = as_rows(result)
    want, keep = clipped(ref)
    assert len(got) >= len(want)  # edge also keeps empty-mask rows (see the -seg test above)
    by_score = {round(r[4], 5) for r in want}
    assert_rows(np.array([r for r in got if round(r[4], 5) in by_score]), want, "end2end seg boxes")
    ious = mask_ious(result, ref[keep], ref_masks[keep])
    assert len(ious) == len(want) and ious.mean() >= 0.9, f"mask IoU min {ious.min():.3f} mean {ious.mean():.4f}"


def test_end2end_pose_yolo26_keypoints(ultra):
    rows = e2e_rows(3, extra=51)
    rng = np.random.default_rng(3)
    centre = (rows[0, :, 0:2] + rows[0, :, 2:4]) / 2
    kp = np.empty((300, 17, 3), np.float32)
    kp[..., 0] = centre[:, None, 0] + rng.normal(0, 50, (300, 17))
    kp[..., 1] = centre[:, None, 1] + rng.normal(0, 50, (300, 17))
    kp[..., 2] = rng.uniform(0, 1, (300, 17))
    rows[0, :, 6:] = kp.reshape(300, 51)
    post = decoder({"output0": rows}, meta=e2e_meta("pose", kpt=(17, 3)))
    assert post.head_info == "yolo_end2end (80 classes, 17 keypoints)"
    result = post({"output0": rows}, identity())
    ref = R.end2end(rows, 0.25, MAX_DET)
    want, keep = clipped(ref)
    assert_rows(as_rows(result), want, "end2end pose")
    kpts = R.scale_coords(ref[:, 6:].reshape(-1, 17, 3), (640, 640), (640, 640))[keep]
    assert np.abs(np.array([d.keypoints for d in result.detections]) - kpts[..., :2]).max() <= 1.0
    assert np.abs(np.array([d.keypoint_scores for d in result.detections]) - kpts[..., 2]).max() <= 1e-3


# -- e. letterbox and the frame mapping ------------------------------------------------------------------------------

ODD_SIZES = [(1, 1), (3, 1000), (1000, 3), (479, 641), (480, 640), (720, 1280), (1080, 1920), (333, 777), (2, 2000)]


def check_letterbox(frame: np.ndarray) -> float:
    from edge.runtime.engines.preprocess import Preprocessor

    x, tf = Preprocessor(PreprocessSpec(640, 640, pad_value=114))(frame)
    ref = R.preprocess(frame, 640)
    assert x.shape == ref.shape == (1, 3, 640, 640)
    h, w = frame.shape[:2]
    # the same pad geometry: where Ultralytics' letterboxed image is padding (114 outside the resized area)
    lb = R.letterbox(frame, 640)
    nh, nw = max(round(h * min(640 / h, 640 / w)), 1), max(round(w * min(640 / h, 640 / w)), 1)
    top, left = round((640 - nh) / 2 - 0.1), round((640 - nw) / 2 - 0.1)
    assert (tf.pad_x, tf.pad_y) == (left, top) and (round(tf.scale_x * w), round(tf.scale_y * h)) == (nw, nh)
    assert (
        (lb[:top] == 114).all()
        and (lb[top + nh :] == 114).all()
        and (lb[:, :left] == 114).all()
        and (lb[:, left + nw :] == 114).all()
    )
    diff = float(np.abs(x - ref).max())
    assert diff <= 1e-6, f"{w}x{h}: input tensors differ by {diff}"
    # frame mapping: corners of the input, the padding, and boxes inside
    rng = np.random.default_rng(h * 7919 + w)
    boxes = np.concatenate(
        [
            [[0, 0, 640, 640], [left, top, left + nw, top + nh]],
            np.sort(rng.uniform(-20, 660, (50, 2, 2)), 1).reshape(50, 4)[:, [0, 2, 1, 3]],
        ]
    ).astype(np.float32)
    mapped = tf.to_frame(boxes)
    want = R.scale_boxes(boxes, (640, 640), (h, w))
    assert np.abs(mapped - want).max() <= 1.0, f"{w}x{h}: mapping differs by {np.abs(mapped - want).max()}"
    return diff


def test_letterbox_and_mapping_match_ultralytics_on_real_frames(ultra, megamind_frames):
    for frame in megamind_frames.values():
        check_letterbox(frame)


@pytest.mark.parametrize("hw", ODD_SIZES, ids=[f"{w}x{h}" for h, w in ODD_SIZES])
def test_letterbox_and_mapping_match_ultralytics_on_odd_sizes(ultra, hw):
    frame = np.random.default_rng(hw[0] * 31 + hw[1]).integers(0, 256, (*hw, 3), dtype=np.uint8)
    check_letterbox(frame)


def test_letterboxed_seg_boxes_map_like_ultralytics_retina_masks(ultra):
    """A 1280x720 frame: boxes through edge's mapping vs Ultralytics' retina_masks=True path (scale_boxes then
    process_mask_native). Boxes within 1 px; masks compared by IoU (reported in the message on failure)."""
    raw, protos = head(4, extra=32), smooth_protos(4)
    outs = {"output0": raw, "output1": protos}
    tf = plan_resize(SPEC, 1280, 720)[2]
    result = decoder(outs, agnostic_nms=True)(outs, tf)
    ref, ref_masks = R.segment_native(raw, protos, 0.25, IOU, MAX_DET, (720, 1280), agnostic=True)
    keep = np.flatnonzero((ref[:, 2] > ref[:, 0]) & (ref[:, 3] > ref[:, 1]))
    by_key = {(round(float(r[4]), 5), int(r[5])) for r in ref}
    got = np.array([r for r in as_rows(result) if (round(r[4], 5), int(r[5])) in by_key])
    assert_rows(got, ref[keep].astype(np.float64), "letterboxed seg boxes")
    ious = mask_ious(result, ref[keep], ref_masks[keep])
    assert ious.mean() >= 0.9, f"mask IoU min {ious.min():.3f} mean {ious.mean():.4f}"


# -- f. engine header ----------------------------------------------------------------------------------------------


def export_metadata(task: str = "detect", names=("person", "bicycle", "car")) -> dict:
    """The dict Ultralytics' exporter writes in front of an engine (engine/exporter.py), before json.dumps."""
    meta = {
        "description": "Ultralytics YOLOv8n model trained on coco.yaml",
        "author": "Ultralytics",
        "date": "2026-01-01T00:00:00.000000",
        "version": "8.4.190",
        "license": "AGPL-3.0 License (https://ultralytics.com/license)",
        "docs": "https://docs.ultralytics.com",
        "stride": 32,
        "task": task,
        "head": "Pose" if task == "pose" else "Detect",
        "batch": 1,
        "imgsz": [640, 640],
        "names": dict(enumerate(names)),
        "args": {"batch": 1, "dynamic": False, "half": True, "int8": False, "nms": False},
        "channels": 3,
        "end2end": False,
        "dla": None,
    }
    if task == "pose":
        meta["kpt_shape"] = [17, 3]
    return meta


@pytest.mark.parametrize("task", ["detect", "pose"])
def test_engine_header_offset_matches_ultralytics_reader(ultra, tmp_path, task):
    from edge.runtime.engines import engine_file

    meta = export_metadata(task)
    plan = bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8))
    path = R.write_engine_with_header(tmp_path / "m.engine", meta, plan)
    offset, header = engine_file.split(path)
    u_offset, u_header = R.engine_header(path)
    assert offset == u_offset == path.stat().st_size - len(plan)
    assert header == u_header
    assert engine_file.read_plan(path, offset) == plan


def test_engine_header_metadata_reads_like_ultralytics(ultra, tmp_path):
    from edge import metadata
    from edge.runtime.engines import engine_file

    meta = export_metadata("pose")
    path = R.write_engine_with_header(tmp_path / "m.engine", meta, b"\x00" * 64)
    _, header = engine_file.split(path)
    read = metadata.read(str(path), header)
    _, u_header = R.engine_header(path)
    assert list(read.names) == [u_header["names"][str(i)] for i in range(len(u_header["names"]))]
    assert read.imgsz == tuple(u_header["imgsz"]) and read.task == u_header["task"] and read.kpt_shape == (17, 3)


@pytest.mark.parametrize("start", [b"", b"\x10\x00\x00\x00", b"\x02\x00\x00\x00{}", b"\xff\xff\xff\x7f"])
def test_a_plain_plan_has_no_header_for_either_reader(ultra, tmp_path, start):
    from edge.runtime.engines import engine_file

    path = tmp_path / "plain.engine"
    path.write_bytes(start + bytes(np.random.default_rng(len(start)).integers(0, 256, 2048, dtype=np.uint8)))
    if start == b"\x02\x00\x00\x00{}":  # a JSON header of two bytes ({}): Ultralytics takes it, and so does edge
        assert engine_file.split(path) == (6, {}) and R.engine_header(path) == (6, {})
        return
    assert engine_file.split(path) == (0, None)
    assert R.engine_header(path) == (0, {})


# -- g. real Ultralytics exports (random weights) through edge-run ----------------------------------------------------

EXPORTS = {
    "yolov8n": (None, "yolo v8 (80 classes)"),
    "yolov8n-seg": (None, "yolo_seg v8 (80 classes, 32 mask coefficients)"),
    "yolov8n-pose": (None, "yolo_pose v8 (1 classes, 17 keypoints)"),
    "yolo11n": (None, "yolo v8 (80 classes)"),
    "yolov10n": (False, "yolo_end2end (80 classes)"),
    "yolo26n": (False, "yolo_end2end (80 classes)"),
    "yolo26n-seg": (False, "yolo_end2end (80 classes, 32 mask coefficients)"),
    "yolo26n-pose": (False, "yolo_end2end (80 classes, 17 keypoints)"),
}


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    """name -> ONNX exported by Ultralytics at imgsz 160 with random weights (made once per session, on demand)."""
    root, made = tmp_path_factory.mktemp("ultralytics-exports"), {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = R.export_random(f"{name}.yaml", 160, dir=root / name, nms=EXPORTS[name][0])
        return made[name]

    return get


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    import cv2

    path = tmp_path_factory.mktemp("frame") / "frame.png"
    cv2.imwrite(str(path), np.random.default_rng(0).integers(0, 256, (240, 320, 3), dtype=np.uint8))
    return path


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_edge_run_check_picks_the_decoder_from_the_metadata(ultra, exported, name):
    model = exported(name)
    r = run_cli("--model", str(model), "--check")
    assert r.returncode == 0, r.stderr
    assert f"decoder {EXPORTS[name][1]}" in r.stdout, r.stdout


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_edge_run_results_carry_the_metadata_labels(ultra, exported, image, tmp_path, name):
    model = exported(name)
    names = R.onnx_metadata(model)["names"]
    import ast

    labels = ast.literal_eval(names)
    # Random weights score every class about 1.6e-4: a threshold below that makes detections to label.
    for threshold in ("0.25", "0.00001"):
        out = tmp_path / f"r{threshold}.jsonl"
        r = run_cli("--model", str(model), "--source", str(image), "--results", str(out), "-q", "--score-threshold", threshold)
        assert r.returncode == 0, r.stderr
        (line,) = out.read_text().splitlines()
        dets = json.loads(line)["detections"]
        assert all(d["label"] == labels[d["class_id"]] for d in dets)
        if threshold == "0.25":
            assert dets == [] or all(d["score"] > 0.25 for d in dets)
        elif "end2end" not in EXPORTS[name][1]:
            assert dets, "a threshold below every score leaves detections"


def test_edge_dla_edge_build_and_an_ultralytics_style_engine(ultra, exported, tmp_path):
    """edge dla and edge-build (TensorRT-RTX, CPU only) take a real Ultralytics export; the plan edge-build wrote,
    wrapped in the header ``yolo export format=engine`` writes (the export's own metadata), passes edge-run --check
    as an Ultralytics engine, with the plan offset Ultralytics' reader gives."""
    import ast
    import subprocess
    import sys

    model = exported("yolov8n")
    r = subprocess.run(
        [sys.executable, "-m", "edge", "dla", str(model), "--target", "orin"], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    assert "nodes on DLA" in r.stdout
    require_or_skip(
        importlib.util.find_spec("tensorrt_rtx") is not None or importlib.util.find_spec("tensorrt") is not None,
        "TensorRT(-RTX) is not installed: edge-build not tried (pip install tensorrt-rtx-cu13==1.7.1.116)",
    )
    engine = tmp_path / "yolov8n.engine"
    r = subprocess.run(
        [sys.executable, "-c", "import sys; from edge.cli import build_main; sys.exit(build_main())", str(model), "-o", str(engine), "--target-cc", "8.6"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    manifest = json.loads(Path(f"{engine}.json").read_text())
    assert manifest["model_metadata"] == R.onnx_metadata(model) and manifest["model_metadata"]["task"] == "detect"

    meta = R.onnx_metadata(model)
    header = {k: ast.literal_eval(v) if k in ("imgsz", "names", "args", "end2end") else v for k, v in meta.items()}
    header.update({k: int(meta[k]) for k in ("stride", "batch", "channels")})
    wrapped = R.write_engine_with_header(tmp_path / "ultralytics.engine", header, engine.read_bytes())
    offset, _ = R.engine_header(wrapped)
    r = run_cli("--engine", str(wrapped), "--check")
    assert r.returncode == 0, r.stderr
    assert f"Ultralytics export (80 class names, task detect, imgsz 160x160; the plan starts at byte {offset})" in r.stdout


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_every_ultralytics_head_goes_through_edge_dla_calib_and_build(ultra, exported, tmp_path, name, megamind_frames):
    """Structure, not numbers (random weights): edge dla predicts a placement, edge calib recognises the head from the
    metadata alone and measures its decisions, edge-build (TensorRT-RTX, CPU) writes an engine whose manifest carries
    the metadata. edge-run's part is the two tests above."""
    import subprocess
    import sys

    import cv2

    model = exported(name)
    kind = EXPORTS[name][1].split(" (")[0]
    edge = [sys.executable, "-m", "edge"]
    r = subprocess.run([*edge, "dla", str(model), "--target", "orin"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "nodes on DLA" in r.stdout, r.stderr
    images = tmp_path / "images"
    images.mkdir()
    for i, frame in list(megamind_frames.items())[:2]:
        cv2.imwrite(str(images / f"{i}.png"), frame)
    r = subprocess.run(
        [*edge, "calib", str(model), "--images", str(images), "--cache", str(tmp_path / "m.cache"), "--layer-images", "1"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-1500:]
    assert f"decisions of {kind}" in r.stdout and re.search(r"^\s+detections\s+\d+", r.stdout, re.M), r.stdout
    require_or_skip(importlib.util.find_spec("tensorrt_rtx") is not None, "TensorRT-RTX is not installed: edge-build not tried")
    engine = tmp_path / "m.engine"
    r = subprocess.run(
        [sys.executable, "-c", "import sys; from edge.cli import build_main; sys.exit(build_main())", str(model), "-o", str(engine), "--target-cc", "8.6"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-1500:]
    assert json.loads(Path(f"{engine}.json").read_text())["model_metadata"]["task"] == R.onnx_metadata(model)["task"]
