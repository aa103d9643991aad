"""Calibration checks that measure what a detector decides: the class each YOLO anchor picks, and the detections the
runtime's decoder keeps, FP32 against INT8.

The cases are built so the right answer is known by construction: INT8 that only moves box coordinates a little
keeps every decision (a per-output argmax over the anchor axis, what edge measured before, calls that disagreement);
INT8 that flips the class of one confident anchor loses exactly that detection.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edge.calib.decisions import TaskDecisions, _mask_iou, match
from edge.calib.fidelity import ANCHORS, DETECTIONS, FidelityMeter, render
from edge.config import TaskConfig
from edge.graph.model import prepare
from edge.runtime.engines import TensorInfo
from edge.runtime.engines.preprocess import PreprocessSpec
from edge.runtime.postprocess import Detection, heads, resolved_task

SPEC = PreprocessSpec(640, 640)
N = 8400


def graph_of(outputs):
    """A graph with these outputs (each an Identity of an input of its shape): the meter reads only their producers."""
    g = helper.make_graph(
        [helper.make_node("Identity", [f"in_{n}"], [n]) for n in outputs],
        "g",
        [helper.make_tensor_value_info(f"in_{n}", TensorProto.FLOAT, list(s)) for n, s in outputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in outputs.items()],
    )
    return prepare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))


def task_for(outputs, labels, **kw):
    t = TaskConfig(**kw)
    infos = [TensorInfo(n, s, np.dtype(np.float32)) for n, s in outputs.items()]
    head = heads.choose(t, infos, SPEC, labels)
    return TaskDecisions(head, heads.build(head, resolved_task(t, head.kind), infos, SPEC, labels), SPEC)


def v8_batch(images, rng, layout="v8"):
    """Images of a v8 head: a few confident anchors each, the rest background with low scores."""
    out = np.zeros((images, 4 + 3, N), np.float32)
    out[:, :4] = rng.uniform(50, 600, (images, 4, N))
    out[:, 2:4] = rng.uniform(10, 60, (images, 2, N))
    out[:, 4:] = rng.uniform(0, 0.05, (images, 3, N))
    for i in range(images):
        for a in rng.choice(N, 5, replace=False):
            out[i, 4 + rng.integers(3), a] = 0.9
    return out if layout == "v8" else np.ascontiguousarray(out.transpose(0, 2, 1))


@pytest.mark.parametrize("layout", ["v8", "v8t"])
def test_box_noise_keeps_every_decision_of_a_yolo_head_in_either_layout(layout):
    rng = np.random.default_rng(0)
    fp32 = v8_batch(4, rng, layout)
    int8 = fp32.copy()
    coords = (slice(None), slice(0, 4), slice(None)) if layout == "v8" else (slice(None), slice(None), slice(0, 4))
    int8[coords] += rng.normal(0, 0.3, int8[coords].shape).astype(np.float32)  # INT8 rounding of the regressors
    shape = {"output0": (1, *fp32.shape[1:])}
    task = task_for(shape, ["a", "b", "c"])
    meter = FidelityMeter(graph_of(shape), ["output0"], "nchw", task)
    meter.update({"output0": fp32}, {"output0": int8})
    got = {r.name: r for r in meter.summary()}
    assert got[ANCHORS].agreement == 1.0 and got[ANCHORS].positions == 4 * 5
    assert got[DETECTIONS].agreement == 1.0 and got[DETECTIONS].positions > 0
    # the raw output keeps its SQNR and no agreement of its own; the old per-output argmax saw disagreement here
    assert got["output0"].positions == 0 and 20 < got["output0"].sqnr_db < 80
    if layout == "v8":  # [1, 4+C, N]: an argmax over the last axis asks which anchor has the largest cx
        plain = FidelityMeter(graph_of(shape), ["output0"], "nchw")
        plain.update({"output0": fp32}, {"output0": int8})
        assert plain.summary()[0].agreement < 0.9


def test_a_flipped_class_at_one_confident_anchor_loses_that_detection():
    rng = np.random.default_rng(1)
    fp32 = v8_batch(1, rng)
    int8 = fp32.copy()
    anchor = int(np.flatnonzero(fp32[0, 4:].max(axis=0) > 0.5)[0])
    cls = int(fp32[0, 4:, anchor].argmax())
    int8[0, 4 + cls, anchor], int8[0, 4 + (cls + 1) % 3, anchor] = 0.01, 0.9
    shape = {"output0": (1, 7, N)}
    meter = FidelityMeter(graph_of(shape), ["output0"], "nchw", task_for(shape, ["a", "b", "c"]))
    meter.update({"output0": fp32}, {"output0": int8})
    got = {r.name: r for r in meter.summary()}
    assert (got[ANCHORS].positions, got[ANCHORS].agree) == (5, 4)
    # five detections each side (the seed keeps the boxes apart), four matched: the flipped one is a detection FP32
    # reports and INT8 does not, and one INT8 reports and FP32 does not
    assert (got[DETECTIONS].positions, got[DETECTIONS].agree) == (6, 4)


@pytest.mark.parametrize("change", ["added", "dropped"])
def test_a_detection_int8_adds_disagrees_as_much_as_one_it_drops(change):
    rng = np.random.default_rng(1)
    fp32 = v8_batch(1, rng)
    int8 = fp32.copy()
    confident = np.flatnonzero(fp32[0, 4:].max(axis=0) > 0.5)
    if change == "added":  # a sixth confident anchor, its box far from the five others
        anchor = next(a for a in range(N) if a not in confident)
        int8[0, :4, anchor] = [620, 620, 10, 10]
        int8[0, 4, anchor] = 0.9
    else:  # one of class 0, the lowest class id: an anchor that sees class 0 sees an object
        int8[0, 4:, next(a for a in confident if fp32[0, 4:, a].argmax() == 0)] = 0.01
    shape = {"output0": (1, 7, N)}
    meter = FidelityMeter(graph_of(shape), ["output0"], "nchw", task_for(shape, ["a", "b", "c"]))
    meter.update({"output0": fp32}, {"output0": int8})
    got = {r.name: r for r in meter.summary()}
    # added: 5 FP32 + 6 INT8 - 5 matched = 6 reported by either, 5 agree; dropped: 5 + 4 - 4 = 5, 4 agree; the anchors
    # count the same way (the added one and the dropped one are seen by one side only)
    want = (6, 5) if change == "added" else (5, 4)
    assert (got[DETECTIONS].positions, got[DETECTIONS].agree) == want
    assert (got[ANCHORS].positions, got[ANCHORS].agree) == want
    assert got[DETECTIONS].agreement == pytest.approx(5 / 6 if change == "added" else 4 / 5)
    meter.update({"output0": fp32}, {"output0": int8})  # a second batch adds its counts
    got = {r.name: r for r in meter.summary()}
    assert (got[DETECTIONS].positions, got[ANCHORS].agree) == (2 * want[0], 2 * want[1])
    assert (got[ANCHORS].positions, got[DETECTIONS].agree) == (2 * want[0], 2 * want[1])


def test_an_anchor_at_exactly_the_score_threshold_sees_nothing():
    """The decoder keeps scores above task.score_threshold (edge.runtime.postprocess.boxes.candidates); the anchors'
    classes follow it."""
    out = np.zeros((1, 4 + 3, N), np.float32)
    out[0, 4, 0], out[0, 5, 1], out[0, 6, 2] = 0.25, 0.2501, 0.9
    task = task_for({"output0": (1, 7, N)}, ["a", "b", "c"])
    assert task.decoder.task.score_threshold == 0.25
    assert task.anchor_classes(out)[0, :4].tolist() == [-1, 1, 2, -1]


def test_matching_is_one_to_one_same_class_and_iou_at_least_half():
    def d(box, c, s=0.9):
        return Detection(list(map(float, box)), s, c)

    fp32 = [d([0, 0, 10, 10], 0), d([0, 0, 10, 10], 1), d([100, 100, 110, 110], 0, 0.5)]
    int8 = [d([0, 0, 10, 10], 0), d([100, 105, 110, 115], 0)]  # the second: IoU 5/15 = 0.33 with FP32's third
    assert match(fp32, int8) == 1
    assert match(fp32, [d([0, 0, 10, 10], 0)] * 1 + [d([1, 0, 11, 10], 0)]) == 1  # one INT8 box per FP32 box
    assert match(fp32, [d([0, 0, 10, 10], 1), d([0, 0, 10, 10], 0)]) == 2
    assert match([], int8) == 0 and match(fp32, []) == 0


def test_detections_of_a_head_without_anchors_are_compared_through_its_decoder():
    rows = np.zeros((1, 300, 6), np.float32)
    rows[0, :3] = [[10, 10, 50, 50, 0.9, 1], [100, 100, 200, 200, 0.8, 2], [300, 300, 320, 330, 0.3, 0]]
    int8 = rows.copy()
    int8[0, 2, 4] = 0.2  # falls below the 0.25 default: one of three FP32 detections is lost
    shape = {"output0": (1, 300, 6)}
    meter = FidelityMeter(graph_of(shape), ["output0"], "nchw", task_for(shape, [f"c{i}" for i in range(3)]))
    meter.update({"output0": rows}, {"output0": int8})
    got = {r.name: r for r in meter.summary()}
    assert ANCHORS not in got
    assert (got[DETECTIONS].positions, got[DETECTIONS].agree) == (3, 2)
    # a count of detections has no SQNR: the report shows "-" there
    assert math.isnan(got[DETECTIONS].sqnr_db)


def test_a_torchvision_export_with_its_own_nms_is_one_image_of_any_number_of_rows():
    """torchvision_nms has no batch axis: its rows are one image's detections, whose number INT8 may change. The
    same three detections listed in another order all match (read row by row, as batched outputs are, A met C and
    C met A: one match of five); the raw outputs, one row short in INT8, are not compared value by value and say so."""
    boxes = np.array([[10, 10, 50, 50], [100, 100, 200, 200], [300, 300, 320, 330]], np.float32)
    fp32 = {"boxes": boxes, "scores": np.array([0.9, 0.8, 0.7], np.float32), "labels": np.array([1, 2, 3], np.int64)}
    int8 = {k: v[::-1].copy() for k, v in fp32.items()}
    shapes = {"boxes": ("n", 4), "scores": ("n",), "labels": ("n",)}
    meter = FidelityMeter(graph_of({"boxes": (3, 4), "scores": (3,), "labels": (3,)}), list(shapes), "nchw", task_for(shapes, []))
    meter.update(fp32, int8)
    meter.update(fp32, {k: v[:2] for k, v in fp32.items()})  # INT8 loses the third
    got = {r.name: r for r in meter.summary()}
    assert (got[DETECTIONS].positions, got[DETECTIONS].agree) == (6, 5)
    assert got["boxes"].unaligned == got["labels"].unaligned == 1
    assert got["labels"].positions == 3  # the first image's ids, compared in place (one of three equal: reversed)
    assert got["labels"].agree == 1
    text = "\n".join(render(list(got.values()), 2, "x"))
    assert "boxes, scores, labels: INT8 gave another number of rows than FP32 in 1 batch(es)" in text


def test_a_model_file_graph_loads_for_the_meter():
    onnx.checker.check_model(graph_of({"output0": (1, 7, N)}).model)


@pytest.mark.parametrize("kind", ["yolo_seg", "yolo_pose"])
def test_segmentation_and_pose_heads_of_yolo_compare_their_confident_anchors_too(kind):
    """A YOLO segmentation head carries 32 mask coefficients after the classes (and a prototype output), a pose head
    17 x 3 keypoint values: their anchors are compared as a detector's are, with no SQNR of their own."""
    rng = np.random.default_rng(3)
    extra = 32 if kind == "yolo_seg" else 17 * 3
    classes = 3 if kind == "yolo_seg" else 1
    fp32 = np.concatenate([v8_batch(2, rng)[:, : 4 + classes], rng.normal(0, 1, (2, extra, N)).astype(np.float32)], axis=1)
    if kind == "yolo_pose":
        fp32[:, 4] = np.where(rng.random((2, N)) < 5 / N, 0.9, 0.01)
    shape = {"output0": (1, 4 + classes + extra, N)}
    if kind == "yolo_seg":
        shape["output1"] = (1, 32, 160, 160)
    labels = ["a", "b", "c"][:classes]
    task = task_for(shape, labels, **({"type": "yolo_pose", "keypoints": [17, 3]} if kind == "yolo_pose" else {}))
    assert task.head.kind == kind
    meter = FidelityMeter(graph_of(shape), list(shape), "nchw", task)
    outputs = {"output0": fp32}
    if kind == "yolo_seg":
        outputs["output1"] = rng.normal(0, 1, (2, 32, 160, 160)).astype(np.float32)
    meter.update(outputs, {k: v.copy() for k, v in outputs.items()})
    got = {r.name: r for r in meter.summary()}
    confident = int((fp32[:, 4 : 4 + classes].max(axis=1) > 0.25).sum())
    assert got[ANCHORS].positions == confident > 0 and got[ANCHORS].agreement == 1.0
    assert math.isnan(got[ANCHORS].sqnr_db) and math.isnan(got[DETECTIONS].sqnr_db)


def test_a_semantic_segmenter_is_summed_up_in_pixels_not_detections():
    shape = {"map": (1, 3, 80, 80)}
    task = task_for(shape, ["sky", "road", "car"], type="segment")
    meter = FidelityMeter(graph_of(shape), ["map"], "nchw", task)
    fp32 = np.zeros((2, 3, 80, 80), np.float32)
    fp32[:, 1, 40:] = 1.0  # the lower half is road, the rest sky
    meter.update({"map": fp32}, {"map": fp32})
    names = [r.name for r in meter.summary()]
    assert names[0] == "pixels" and "detections" not in names, names


def test_box_iou_by_hand():
    from edge.calib.decisions import _box_iou

    a = np.array([[0, 0, 10, 10]], np.float64)
    b = np.array([[10, 0, 20, 10], [20, 20, 30, 30], [20, 0, 30, 10], [0, 20, 10, 30], [5, 0, 15, 10], [0, 0, 10, 5]], np.float64)
    # touching (no overlap); apart on both axes (two negative extents must not multiply into an overlap); apart on one
    # axis only (a negative extent must not make a negative overlap); a third; a half
    assert _box_iou(a, b).tolist() == [[0.0, 0.0, 0.0, 0.0, 50 / 150, 0.5]]
    tiny = np.array([[0, 0, 1, 0.5]], np.float64)  # area 0.5: the guard against an empty union must not dilute it
    assert _box_iou(tiny, tiny).tolist() == [[1.0]]


def test_matching_takes_iou_of_exactly_half_and_each_int8_box_once():
    def d(box, c=0, mask=None):
        return Detection(list(map(float, box)), 0.9, c, mask=mask)

    assert match([d([0, 0, 10, 10])], [d([0, 0, 10, 5])]) == 1  # IoU 50 / 100 = 0.5 exactly
    assert match([d([0, 0, 10, 10])], [d([0, 0, 10, 4.9])]) == 0
    assert match([d([0, 0, 10, 10]), d([0, 0, 10, 10])], [d([0, 0, 10, 10])]) == 1  # one INT8 box for two FP32 boxes


def test_matching_an_instance_segmenter_needs_the_masks_to_overlap_by_half():
    # masks over a 4 x 4 frame, COCO run-length counts down the columns (background first)
    left = {"size": [4, 4], "counts": [0, 8, 8]}  # columns 0-1
    left_col = {"size": [4, 4], "counts": [0, 4, 12]}  # column 0: IoU with `left` 4 / 8
    right = {"size": [4, 4], "counts": [8, 8]}  # columns 2-3: IoU with `left` 0
    none = {"size": [4, 4], "counts": [16]}

    def d(mask, c=0):
        return Detection([0.0, 0.0, 4.0, 4.0], 0.9, c, mask=mask)

    assert [_mask_iou(left, m) for m in (left, left_col, right, none)] == [1.0, 0.5, 0.0, 0.0]
    assert _mask_iou(none, none) == 1.0  # two empty masks are the same mask
    assert match([d(left)], [d(left_col)]) == 1  # the boxes are the same; the masks overlap by half
    assert match([d(left)], [d(right)]) == 0
    # an INT8 detection whose mask missed one FP32 detection is still free for the next one
    assert match([d(right), d(left)], [d(left)]) == 1
    assert match([d(none)], [d(none)]) == 1


@pytest.mark.parametrize("background", [None, 0])
def test_a_segmenters_pixels_by_hand_over_two_batches(background):
    shape = {"map": (1, 3, 4, 4)}
    task = task_for(shape, ["bg", "road", "car"], type="segment", background=background)
    meter = FidelityMeter(graph_of(shape), ["map"], "nchw", task)

    def scores(classes):
        out = np.zeros((3, 4, 4), np.float32)
        for c in range(3):
            out[c] = np.asarray(classes) == c
        return out

    a = np.zeros((4, 4), int)
    a[0] = 1  # the top row is road, the rest class 0
    b = a.copy()
    b[0, 3] = 2  # INT8: one road pixel read as a car
    b[3, 0] = 1  # and one class-0 pixel as road
    meter.update({"map": scores(a)[None]}, {"map": scores(b)[None]})
    c = np.full((4, 4), 2)  # a second batch: everything a car, both ways
    meter.update({"map": scores(c)[None]}, {"map": scores(c)[None]})
    (pixels,) = [r for r in meter.summary() if r.name == "pixels"]
    if background == 0:  # class 0 is not reported: the first image's union is the top row and the extra road pixel
        assert (pixels.positions, pixels.agree) == (5 + 16, 3 + 16)
    else:  # every class is reported: every pixel counts, and all but the two INT8 changed agree
        assert (pixels.positions, pixels.agree) == (16 + 16, 14 + 16)


def test_v5_anchors_are_objectness_times_class_score():
    """A YOLOv5 head [1, N, 5 + C]: an anchor's class score is objectness x class probability, so a confident class
    at a low objectness is no object."""
    n = 3 * (80 * 80 + 40 * 40 + 20 * 20)  # three anchors per cell of the strides 8, 16, 32 grids at 640 x 640
    rows = np.zeros((1, n, 5 + 2), np.float32)
    rows[0, :3, :4] = [[40, 40, 20, 20], [100, 40, 20, 20], [160, 40, 20, 20]]
    rows[0, 0, 4:] = [0.9, 0.9, 0.1]  # 0.81 for class 0: an object
    rows[0, 1, 4:] = [0.2, 0.1, 0.9]  # 0.18 for class 1: below the 0.25 default
    rows[0, 2, 4:] = [0.6, 0.1, 0.5]  # 0.30 for class 1
    task = task_for({"output0": (1, n, 7)}, ["a", "b"], type="yolo", yolo_layout="v5")
    picked = task.anchor_classes(rows)
    assert picked.shape == (1, n) and picked[0, :3].tolist() == [0, -1, 1] and (picked[0, 3:] == -1).all()


def test_a_one_channel_map_is_read_at_the_tasks_threshold():
    """A one-channel map (DBNet's text probability) reports a pixel above task.score_threshold; below it, nothing."""
    shape = {"map": (1, 1, 2, 4)}
    task = task_for(shape, ["text"], type="segment", score_threshold=0.3)
    meter = FidelityMeter(graph_of(shape), ["map"], "nchw", task)
    fp32 = np.array([[[[0.9, 0.9, 0.35, 0.1], [0.1, 0.1, 0.1, 0.1]]]], np.float32)
    int8 = np.array([[[[0.9, 0.25, 0.4, 0.1], [0.1, 0.1, 0.1, 0.31]]]], np.float32)
    meter.update({"map": fp32}, {"map": int8})
    (pixels,) = [r for r in meter.summary() if r.name == "pixels"]
    # text in FP32 at 3 pixels, in INT8 at 3 (one moved under 0.3, one over it): 4 either way, 2 both
    assert (pixels.positions, pixels.agree) == (4, 2)


@pytest.mark.parametrize("layout", ["v5", "v8t"])
def test_a_segmenting_heads_mask_coefficients_are_not_classes(layout):
    """YOLOv5-seg [1, N, 5 + C + 32] and a transposed v8-seg [1, N, 4 + C + 32]: the 32 mask coefficients after the
    classes can be large, and an anchor's class is read from the class columns only."""
    n = 25200 if layout == "v5" else 8400
    first = 5 if layout == "v5" else 4
    rows = np.zeros((1, n, first + 2 + 32), np.float32)
    rows[0, :2, :4] = [[40, 40, 20, 20], [100, 40, 20, 20]]
    if layout == "v5":
        rows[0, :2, 4] = 0.9  # objectness
    rows[0, 0, first : first + 3] = [0.1, 0.1, 5.0]  # low class scores, a large first coefficient
    rows[0, 1, first : first + 3] = [0.1, 0.8, 5.0]  # class 1
    shape = {"output0": (1, n, first + 2 + 32), "output1": (1, 32, 160, 160)}
    task = task_for(shape, ["a", "b"], type="yolo_seg", yolo_layout=layout)
    assert task.anchor_classes(rows)[0, :3].tolist() == [-1, 1, -1]
