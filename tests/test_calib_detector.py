"""edge calib on a real detector (the MIT-licensed YOLOX of ``yolox-ddddocr``): the check measures its decisions and,
with labels, its mAP.

The labels are the reference's own answer: ddddocr's YOLOX decode (tests/test_yolox_real.py) of the FP32 model on
each image, written as YOLO txt. FP32 through edge's decoder must then score mAP@0.5 = 1 against them, which holds
only if edge's pre-processing, decode, frame mapping and the label reader agree with the reference; INT8 scores what
it scores, and its detection agreement must be the share of FP32 detections it keeps.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("ddddocr.core.detection_engine", reason="the YOLOX reference is ddddocr's code: pip install ddddocr==1.6.1")

from tests.test_yolox_real import LABELS, SPEC, frames, reference, to_frame, yolox_model  # noqa: E402, F401

CONFIG = """\
model:
  path: {model}
input:
  color: bgr
  scale: 1.0
  pad_value: 114
task:
  type: yolo
  yolo_layout: yolox
  labels: [target]
  score_threshold: 0.1
  iou_threshold: 0.45
  agnostic_nms: true
"""


@pytest.mark.slow
def test_calib_on_a_real_detector_reports_decisions_and_map_against_the_reference(tmp_path, yolox_model, frames):  # noqa: F811
    import cv2
    import onnxruntime as ort

    from edge.runtime.engines.preprocess import Preprocessor

    images, labelled = tmp_path / "calib", tmp_path / "eval"
    (labelled / "images").mkdir(parents=True)
    (labelled / "labels").mkdir()
    images.mkdir()
    session = ort.InferenceSession(str(yolox_model), providers=["CPUExecutionProvider"])
    pre = Preprocessor(SPEC)
    boxes_total = 0
    for name in ("notes", "messi", "megamind-84"):
        frame = frames[name]
        cv2.imwrite(str(images / f"{name}.png"), frame)
        cv2.imwrite(str(labelled / "images" / f"{name}.png"), frame)
        tensor, tf = pre(frame)
        rows = to_frame(reference(session.run(None, {"images": tensor})[0]), tf)
        h, w = frame.shape[:2]
        lines = [
            f"{int(c)} {(x1 + x2) / 2 / w:.6f} {(y1 + y2) / 2 / h:.6f} {(x2 - x1) / w:.6f} {(y2 - y1) / h:.6f}"
            for x1, y1, x2, y2, _, c in rows
        ]
        (labelled / "labels" / f"{name}.txt").write_text("\n".join(lines) + "\n")
        boxes_total += len(rows)
    shutil.copy(images / "notes.png", images / "notes2.png")
    config = tmp_path / "yolox.yaml"
    config.write_text(CONFIG.format(model=yolox_model))
    r = subprocess.run(
        [sys.executable, "-m", "edge", "calib", "--config", str(config), "--images", str(images), "--eval", str(labelled),
         "--cache", str(tmp_path / "y.cache"), "--layer-images", "2"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    assert "decisions of yolo yolox (1 classes): the class each anchor picks and the detections both report" in out
    row = re.search(r"^\s+detections\s+(\d+)\s+([\d.]+)\s+-", out, re.M)
    assert row is not None, out
    # FP32's detections on the four check images: the labelled three's, and notes once more in notes2.png
    assert int(row.group(1)) >= boxes_total and 0.0 < float(row.group(2)) <= 1.0
    assert re.search(r"^\s+anchors\s+\d+\s+[\d.]+\s+-", out, re.M)
    m = re.search(
        r"mAP@0\.5:0\.95 on 3 labelled images .*: FP32 ([\d.]+), INT8 ([\d.]+) .*mAP@0\.5 FP32 ([\d.]+), INT8 ([\d.]+)", out
    )
    assert m is not None, out
    fp32_map, int8_map, fp32_map50, int8_map50 = map(float, m.groups())
    assert fp32_map50 == pytest.approx(1.0, abs=1e-6) and fp32_map > 0.99  # the labels are FP32's answer
    assert 0.0 <= int8_map50 <= 1.0 and np.isfinite(int8_map)


KINDS = {
    "v5": ("yolo", "yolo_layout: v5"),
    "v8": ("auto", ""),
    "v8t": ("auto", ""),
    "deepstream": ("deepstream_yolo", ""),
    "end2end": ("auto", ""),
    "efficientnms": ("auto", ""),
}
WANT = {
    "v5": "yolo v5",
    "v8": "yolo v8",
    "v8t": "yolo v8t",
    "deepstream": "deepstream_yolo",
    "end2end": "yolo_end2end",
    "efficientnms": "nms_plugin",
}


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(KINDS))
def test_every_head_layout_of_the_real_weights_goes_through_a_task_aware_calibration(tmp_path, yolox_model, frames, variant):  # noqa: F811
    """The same real weights as each layout (tests/yolox_models.py): edge calib recognises the head (or takes the named
    type), measures its detections, and writes a cache; an engine's worth of INT8 decisions on two real frames."""
    import cv2

    from tests.yolox_models import build_all

    (tmp_path / "variants").mkdir()
    model = build_all(yolox_model, tmp_path / "variants", kinds=[variant])[variant]
    (tmp_path / "images").mkdir()
    for name in ("notes", "messi"):
        cv2.imwrite(str(tmp_path / "images" / f"{name}.png"), frames[name])
    kind, extra = KINDS[variant]
    config = tmp_path / "run.yaml"
    config.write_text(
        CONFIG.format(model=model).replace("type: yolo\n  yolo_layout: yolox\n", f"type: {kind}\n  {extra}\n".replace("  \n", ""))
    )
    r = subprocess.run(
        [sys.executable, "-m", "edge", "calib", "--config", str(config), "--images", str(tmp_path / "images"),
         "--cache", str(tmp_path / "v.cache"), "--layer-images", "1"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"decisions of {WANT[variant]}" in r.stdout
    row = re.search(r"^\s+detections\s+(\d+)\s+([\d.]+)\s+-", r.stdout, re.M)
    assert row is not None and int(row.group(1)) >= 21, r.stdout  # notes (20) and messi (1) at the reference's 0.1
