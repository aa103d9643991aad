"""edge's DETR decoder against Ultralytics' own RT-DETR code (ultralytics 8.4.190, test-only, AGPL; see
tests/ultralytics_reference.py), run on the same arrays.

The model is Ultralytics' RT-DETR-l architecture (``rtdetr-l.yaml``) with random weights: no trained RT-DETR ships
inside a package this machine can fetch, so the outputs are a real RT-DETR's computation but not a trained one's
(scores bunch near 0.44). Two layouts are checked:

- ``rows``: the ONNX export's ``[1, 300, 6]`` (cx, cy, w, h normalised, score, class), decoded by edge and by
  ``RTDETRPredictor.postprocess``;
- ``pair``: the decoder's own boxes ``[1, 300, 4]`` and class logits ``[1, 300, C]`` before its top-k, from the torch
  model's forward pass; Ultralytics' reference is the rows that same pass makes (``RTDETRDecoder.postprocess``, a
  top-k over every (query, class) pair) through ``RTDETRPredictor.postprocess``.

Ultralytics does not clip boxes to the frame; edge does (its documented rule), so the reference rows are clipped
before the comparison. Tolerances: boxes within 1 pixel, scores within 1e-3, the same classes.
"""

from __future__ import annotations

from typing import Dict

import numpy as np
import pytest

import tests.ultralytics_reference as R
from edge.config import TaskConfig
from edge.errors import ConfigError, RunFailed
from edge.metadata import ModelMetadata, from_onnx
from edge.runtime.engines import TensorInfo
from edge.runtime.engines.preprocess import Preprocessor, PreprocessSpec, plan_resize
from edge.runtime.postprocess import heads, resolved_task
from tests.conftest import run_cli

SIZE = 320
SPEC = PreprocessSpec(SIZE, SIZE, resize="stretch")  # RTDETRPredictor.scale_fill: the frame is stretched
BOX_TOL, SCORE_TOL = 1.0, 1e-3


@pytest.fixture(scope="module")
def rtdetr(tmp_path_factory) -> dict:
    import onnx

    path = R.export_random("rtdetr-l.yaml", SIZE, dir=tmp_path_factory.mktemp("rtdetr"))
    meta = from_onnx(str(path), onnx.load(str(path), load_external_data=False))
    import onnxruntime as ort

    return {"path": path, "meta": meta, "sess": ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])}


@pytest.fixture(scope="module")
def torch_model():
    """The same architecture and seed in torch, for the raw decoder outputs."""
    torch = R._ultralytics()["torch"]
    from ultralytics import RTDETR

    torch.manual_seed(0)
    return RTDETR("rtdetr-l.yaml").model.eval()


@pytest.fixture(scope="module")
def frames() -> Dict[str, np.ndarray]:
    import cv2

    from edge import assets

    out = {n: cv2.imread(str(assets.resolve(n, quiet=True))) for n in ("messi", "notes")}
    cap = cv2.VideoCapture(str(assets.resolve("megamind", quiet=True)))
    ok, out["megamind"] = cap.read()
    cap.release()
    assert ok
    return out


def decode(outs: Dict[str, np.ndarray], labels, meta=None, frame_hw=(SIZE, SIZE), **task):
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in outs.items()]
    t = TaskConfig(**task)
    head = heads.choose(t, infos, SPEC, list(labels), meta)
    dec = heads.build(head, resolved_task(t, head.kind), infos, SPEC, list(labels))
    res = dec(outs, plan_resize(SPEC, frame_hw[1], frame_hw[0])[2])
    return head, np.array([[*d.box, d.score, d.class_id] for d in res.detections], np.float64).reshape(-1, 6)


def clipped(rows: np.ndarray, frame_hw) -> np.ndarray:
    """Reference rows as edge reports them: clipped to the frame, those left with no area dropped."""
    rows = rows.copy()
    rows[:, [0, 2]] = rows[:, [0, 2]].clip(0, frame_hw[1])
    rows[:, [1, 3]] = rows[:, [1, 3]].clip(0, frame_hw[0])
    return rows[(rows[:, 2] > rows[:, 0]) & (rows[:, 3] > rows[:, 1])]


def ordered(rows: np.ndarray) -> np.ndarray:
    return rows[np.lexsort((rows[:, 5], rows[:, 0], -rows[:, 4]))]


def assert_same(got: np.ndarray, want: np.ndarray, what: str, order: bool = True) -> None:
    if order:
        got, want = ordered(got), ordered(want)
    assert len(got) == len(want), f"{what}: edge {len(got)}, Ultralytics {len(want)}"
    if len(want):
        assert np.abs(got[:, :4] - want[:, :4]).max() <= BOX_TOL, what
        assert np.abs(got[:, 4] - want[:, 4]).max() <= SCORE_TOL, what
        assert (got[:, 5] == want[:, 5]).all(), what


def thresholds(scores: np.ndarray) -> list:
    """Ultralytics' default 0.25; one between the 5th and 6th best score (a few boxes); one above all (none)."""
    s = np.sort(scores.ravel())[::-1]
    return [0.25, float((s[4] + s[5]) / 2), float(s[0] + 0.01)]


def test_the_export_is_recognised_from_its_metadata(rtdetr):
    meta = rtdetr["meta"]
    assert meta.head == "RTDETRDecoder"
    outs = {"output0": np.zeros((1, 300, 6), np.float32)}
    head, _ = decode(outs, meta.names, meta)
    assert (head.kind, head.layout) == ("detr", "rows")
    # without the metadata the same output is an end-to-end YOLO head: auto must not guess RT-DETR
    assert decode(outs, meta.names)[0].kind == "yolo_end2end"
    assert decode(outs, meta.names, type="detr")[0].layout == "rows"


@pytest.mark.parametrize("name", ["messi", "notes", "megamind"])
def test_rows_decode_equals_ultralytics_predictor(rtdetr, frames, name):
    bgr = frames[name]
    x, _ = Preprocessor(SPEC)(bgr)
    (out,) = rtdetr["sess"].run(None, {"images": x})
    for conf in thresholds(out[0, :, 4]):
        want = clipped(R.rtdetr(out, bgr.shape[:2], conf, 300), bgr.shape[:2])
        _, got = decode({"output0": out}, rtdetr["meta"].names, rtdetr["meta"], bgr.shape[:2], score_threshold=conf)
        assert_same(got, want, f"{name} at {conf:.4f}")
    assert len(R.rtdetr(out, bgr.shape[:2], thresholds(out[0, :, 4])[1], 300)) == 5


@pytest.mark.parametrize("name", ["messi", "megamind"])
def test_pair_decode_equals_ultralytics_top_k(torch_model, frames, name):
    """Boxes and logits before the head's top-k: edge ranks every (query, class) pair as RTDETRDecoder does."""
    torch = R._ultralytics()["torch"]
    bgr = frames[name]
    x, _ = Preprocessor(SPEC)(bgr)
    with torch.no_grad():
        rows, raw = torch_model(torch.from_numpy(x))
    boxes, logits = raw[0][-1].numpy(), raw[1][-1].numpy()  # the last decoder layer: [1, 300, 4], [1, 300, C]
    outs = {"pred_boxes": boxes, "pred_logits": logits}
    rows = rows.numpy()
    for conf in thresholds(rows[0, :, 4]):
        want = clipped(R.rtdetr(rows, bgr.shape[:2], conf, 300), bgr.shape[:2])
        head, got = decode(outs, [], None, bgr.shape[:2], score_threshold=conf)
        assert (head.layout, head.classes) == ("pair", logits.shape[2])
        assert_same(got, want, f"{name} pair at {conf:.4f}")


def test_edge_run_on_the_export(rtdetr, frames, tmp_path):
    """edge-run as a user runs it, with the metadata's decoder choice: the JSONL holds what Ultralytics reports."""
    import json

    bgr = frames["messi"]
    x, _ = Preprocessor(SPEC)(bgr)
    (out,) = rtdetr["sess"].run(None, {"images": x})
    conf = thresholds(out[0, :, 4])[1]
    cfg = tmp_path / "rtdetr.yaml"
    cfg.write_text(f"model:\n  path: {rtdetr['path']}\ninput:\n  resize: stretch\nsource:\n  uri: asset://messi\n")
    res = tmp_path / "r.jsonl"
    proc = run_cli("-c", str(cfg), "--results", str(res), "--score-threshold", f"{conf:.6f}", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "decoder detr rows (80 classes)" in proc.stdout + proc.stderr
    (line,) = [json.loads(x) for x in res.read_text().splitlines()]
    got = np.array([[*d["box"], d["score"], d["class_id"]] for d in line["detections"]]).reshape(-1, 6)
    want = clipped(R.rtdetr(out, bgr.shape[:2], conf, 300), bgr.shape[:2])
    assert len(want) == 5

    def by_place(r: np.ndarray) -> np.ndarray:  # the JSONL rounds scores to 1e-4: near-equal ones may swap places
        return r[np.lexsort((r[:, 5], np.round(r[:, 1]), np.round(r[:, 0])))]

    assert_same(by_place(got), by_place(want), "edge-run", order=False)


def test_odd_detr_outputs(rtdetr):
    meta = rtdetr["meta"]
    empty = {"output0": np.zeros((1, 0, 6), np.float32)}
    assert len(decode(empty, meta.names, meta)[1]) == 0  # no queries at all: no detection, no error
    nan = {"output0": np.full((1, 300, 6), np.nan, np.float32)}
    with pytest.raises(RunFailed, match="output 'output0' holds 1800 NaN"):
        decode(nan, meta.names, meta)
    bad_class = np.zeros((1, 300, 6), np.float32)
    bad_class[0, 0] = [0.5, 0.5, 0.1, 0.1, 0.9, 2.5]
    with pytest.raises(RunFailed, match="gives class 2.5"):
        decode({"output0": bad_class}, meta.names, meta)
    with pytest.raises(ConfigError, match="more than a DETR's queries"):
        decode({"output0": np.zeros((1, 8400, 6), np.float32)}, meta.names, type="detr")
    two = {"a": np.zeros((1, 300, 4), np.float32), "b": np.zeros((1, 300, 4), np.float32)}
    with pytest.raises(ConfigError, match="cannot tell the boxes from the logits"):
        decode(two, [], type="detr")
    with pytest.raises(ConfigError, match="it would have 80 classes but task.labels / the metadata name 3"):  # noqa: RUF043
        decode({"output0": np.zeros((1, 300, 84), np.float32)}, ["a", "b", "c"], type="detr")


def test_detr_softmax_drops_the_no_object_class():
    """DETR (softmax, last logit = no object): a query whose best logit is "no object" reports its best real class
    only if that class's probability clears the threshold."""
    boxes = np.array([[[0.5, 0.5, 0.2, 0.2], [0.25, 0.25, 0.1, 0.1]]], np.float32)
    logits = np.array([[[4.0, 0.0, 0.0], [0.0, 0.0, 6.0]]], np.float32)  # query 0: class 0; query 1: no object
    head, got = decode({"pred_boxes": boxes, "pred_logits": logits}, ["cat", "dog"], type="detr", detr_scores="softmax",
                       score_threshold=0.5)  # fmt: skip
    assert head.classes == 2
    p0 = np.exp(4.0) / (np.exp(4.0) + 2)  # softmax over the three logits, by hand
    assert len(got) == 1 and got[0, 5] == 0 and got[0, 4] == pytest.approx(p0, abs=1e-5)
    assert got[0, :4].tolist() == pytest.approx([128.0, 128.0, 192.0, 192.0], abs=1e-3)  # 0.4..0.6 of 320


def test_detr_softmax_keeps_the_last_real_class():
    """The no-object column is the last one only: a query whose best class is the last real one reports it."""
    boxes = np.full((1, 1, 4), 0.5, np.float32)
    logits = np.array([[[0.0, 4.0, 0.0]]], np.float32)  # cat, dog, no object
    _, got = decode({"pred_boxes": boxes, "pred_logits": logits}, ["cat", "dog"], type="detr", detr_scores="softmax")
    assert got[:, 5].tolist() == [1] and got[0, 4] == pytest.approx(np.exp(4.0) / (np.exp(4.0) + 2), abs=1e-5)


def test_detr_boxes_then_class_scores_by_hand():
    """Older Ultralytics RT-DETR exports: [1, Q, 4 + C], each query's best class and its score."""
    rows = np.zeros((1, 3, 7), np.float32)
    rows[0, 0] = [0.5, 0.5, 0.5, 0.5, 0.1, 0.8, 0.3]  # class 1 at 0.8
    rows[0, 1] = [0.25, 0.25, 0.1, 0.1, 0.6, 0.2, 0.1]  # class 0 at 0.6
    rows[0, 2] = [0.75, 0.75, 0.1, 0.1, 0.1, 0.1, 0.2]  # nothing above 0.25
    head, got = decode({"output0": rows}, ["a", "b", "c"], type="detr")
    assert (head.layout, head.classes) == ("scores", 3)
    assert got[:, 4].tolist() == pytest.approx([0.8, 0.6]) and got[:, 5].tolist() == [1, 0]
    assert got[0, :4].tolist() == pytest.approx([80, 80, 240, 240])  # cx, cy 0.5, w, h 0.5 of 320
    assert got[1, :4].tolist() == pytest.approx([64, 64, 96, 96])


def test_metadata_head_that_is_not_a_name_is_ignored():
    from edge.metadata import read

    meta = read("m.onnx", {"names": "{0: 'a'}", "task": "detect", "head": "RTDETR Decoder; rm -rf"})
    assert isinstance(meta, ModelMetadata) and meta.head is None
    assert read("m.onnx", {"names": "{0: 'a'}", "task": "detect", "head": "RTDETRDecoder"}).head == "RTDETRDecoder"


def test_detr_pair_ranks_every_query_class_pair_by_hand():
    """RT-DETR's own post-processing (sigmoid, then a top-k over the flattened (query, class) scores): query 0 scores
    class 2 at sigmoid(ln 4) = 0.8 and class 0 at sigmoid(ln 1.5) = 0.6, query 1 class 1 at sigmoid(ln 9) = 0.9, all
    else sigmoid(-10). Boxes (cx, cy, w, h) of 320: query 0 (0.5, 0.5, 0.25, 0.25) is 120..200, query 1 (0.25, 0.25,
    0.125, 0.125) is 60..100. max_detections 2 keeps the best two pairs."""
    boxes = np.array([[[0.5, 0.5, 0.25, 0.25], [0.25, 0.25, 0.125, 0.125], [0.5, 0.5, 0.5, 0.5]]], np.float32)
    logits = np.full((1, 3, 3), -10.0, np.float32)
    logits[0, 0, [2, 0]] = [np.log(4.0), np.log(1.5)]
    logits[0, 1, 1] = np.log(9.0)
    outs = {"pred_boxes": boxes, "pred_logits": logits}
    head, got = decode(outs, ["a", "b", "c"], type="detr")
    assert (head.layout, head.classes) == ("pair", 3)
    assert got.tolist() == [
        pytest.approx([60, 60, 100, 100, 0.9, 1], abs=1e-4),
        pytest.approx([120, 120, 200, 200, 0.8, 2], abs=1e-4),
        pytest.approx([120, 120, 200, 200, 0.6, 0], abs=1e-4),
    ]
    assert decode(outs, ["a", "b", "c"], type="detr", max_detections=2)[1][:, 5].tolist() == [1, 2]
    outs["pred_boxes"] = boxes.copy()
    outs["pred_boxes"][0, 2, 1] = np.nan
    with pytest.raises(RunFailed, match="output 'pred_boxes' holds 1 NaN"):
        decode(outs, ["a", "b", "c"], type="detr")


def test_detr_rows_with_a_class_past_the_labels_are_refused():
    """Three labels name classes 0..2: a row of class 3 means the output is not read as it was written."""
    rows = np.zeros((1, 300, 6), np.float32)
    rows[0, :, :4] = 0.5
    rows[0, 0] = [0.5, 0.5, 0.1, 0.1, 0.9, 3]
    with pytest.raises(RunFailed, match=r"output 'output0' gives class 3, not a class id 0\.\.2"):
        decode({"output0": rows}, ["a", "b", "c"], type="detr")


def test_a_detr_output_that_is_not_its_boxes_or_holds_nan_is_named():
    rows = np.zeros((1, 300, 6), np.float32)
    rows[0, 0] = [120, 80, 40, 40, 0.9, 1]  # pixels, not 0..1: an end-to-end YOLO head's rows
    with pytest.raises(RunFailed, match=r"^output 'output0' gives box values from 0 to 120, not normalised"):
        decode({"output0": rows}, ["a", "b"], type="detr")
    pair = {"boxes": np.full((1, 100, 4), 0.5, np.float32), "logits": np.zeros((1, 100, 3), np.float32)}
    pair["logits"][0, 7, 1] = np.nan
    with pytest.raises(RunFailed, match=r"^output 'logits' holds 1 NaN or infinite value"):
        decode(pair, ["a", "b", "c"], type="detr")
