"""edge's semantic-segmentation decoder: on a real model against its own package's post-processing, and on small
maps whose every pixel is worked out by hand.

The real model is the pinned PP-OCRv4 text detector (DBNet, one channel of text probability at the input's size)
with RapidOCR's own ``DetPreProcess`` and ``DBPostProcess`` (tests/references.py): the bitmap RapidOCR binarises
(``pred > thresh``) is what edge reports as the text mask, mapped to the frame as OpenCV's nearest-neighbour resize
(``INTER_NEAREST_EXACT``, pixel centres) maps it. A real three-class model, RapidAI's table lines, is checked
against its own package in tests/test_table_lines.py; other multi-class maps here are made by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edge.config import TaskConfig
from edge.errors import ConfigError, RunFailed
from edge.runtime.engines import TensorInfo
from edge.runtime.engines.preprocess import Preprocessor, PreprocessSpec, plan_resize
from edge.runtime.postprocess import heads, resolved_task
from edge.runtime.postprocess.masks import decode_rle
from tests import references
from tests.conftest import run_cli

cv2 = pytest.importorskip("cv2")
ort = pytest.importorskip("onnxruntime")


def decoder(outs, spec, labels, **task):
    """edge-run's decoder for these outputs; task.type segment unless told otherwise (auto never guesses it)."""
    infos = [TensorInfo(n, v.shape, np.dtype(v.dtype)) for n, v in outs.items()]
    t = TaskConfig(**{"type": "segment", **task})
    head = heads.choose(t, infos, spec, list(labels))
    return heads.build(head, resolved_task(t, head.kind), infos, spec, list(labels))


def frame_classes(result, shape) -> np.ndarray:
    """The per-pixel class of a Result's segments (-1 where none), from their run-length masks."""
    out = np.full(shape, -1)
    for s in result.segments:
        m = decode_rle(s.mask)
        assert not (out[m] >= 0).any(), "two segments claim one pixel"
        out[m] = s.class_id
        rows, cols = np.flatnonzero(m.any(axis=1)), np.flatnonzero(m.any(axis=0))
        assert s.box == [cols[0], rows[0], cols[-1] + 1, rows[-1] + 1] and s.pixels == int(m.sum())
    return out


# -- PP-OCRv4 text detection against RapidOCR ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def dbnet() -> dict:
    pytest.importorskip("pyclipper")
    pytest.importorskip("shapely")
    from edge import assets
    from edge.assets import ensure
    from edge.runtime.sources import read_image

    pages = {n: read_image(assets.resolve(n, quiet=True)) for n in ("notes", "messi")}
    pages.update({n: read_image(ensure(a, quiet=True)) for n, a in references.IMAGES.items()})
    sess = ort.InferenceSession(str(assets.resolve("ppocrv4-det", quiet=True)), providers=["CPUExecutionProvider"])
    return {"ref": references.module("ref-rapidocr-det"), "sess": sess, "pages": pages}


def test_text_masks_are_rapidocr_bitmaps_on_real_pages(dbnet):
    ref = dbnet["ref"]

    class Bitmap(ref.DBPostProcess):
        """RapidOCR's own post-processing, keeping the bitmap it finds its boxes in."""

        def boxes_from_bitmap(self, pred, bitmap, dest_width, dest_height):
            self.bitmap = bitmap
            return super().boxes_from_bitmap(pred, bitmap, dest_width, dest_height)

    found = {}
    for name, bgr in dbnet["pages"].items():
        blob = ref.DetPreProcess(736, "min", [0.5] * 3, [0.5] * 3)(bgr)  # RapidOCR's defaults (config.yaml)
        h_in, w_in = blob.shape[2:]
        spec = PreprocessSpec(w_in, h_in, color="bgr", resize="stretch", mean=(0.5,) * 3, std=(0.5,) * 3)
        tensor, tf = Preprocessor(spec)(bgr)
        assert np.abs(tensor - blob).max() < 1e-5  # the example config's preprocessing is RapidOCR's
        (pred,) = dbnet["sess"].run(None, {"x": blob})
        post = Bitmap(thresh=0.3, use_dilation=False)
        boxes, _ = post(pred, bgr.shape[:2])
        result = decoder({"map": pred}, spec, ["text"], score_threshold=0.3)({"map": pred}, tf)
        got = frame_classes(result, bgr.shape[:2]) == 0
        want = cv2.resize(post.bitmap.astype(np.uint8), bgr.shape[1::-1], interpolation=cv2.INTER_NEAREST_EXACT) > 0
        differ = int((got != want).sum())
        # pixel centres on a cell border round either way between OpenCV's fixed point and edge's float64
        assert differ <= max(2, got.size // 10000), f"{name}: {differ} of {got.size} pixels differ"
        found[name] = (len(boxes), int(want.sum()))
    assert found["img-text"][0] >= 5  # a paragraph: one box a line
    assert all(px > 0 for _, px in found.values())


def test_edge_run_writes_the_text_mask(dbnet, tmp_path):
    cfg = Path(__file__).parent.parent / "configs" / "segment.example.yaml"
    out = tmp_path / "t.jsonl"
    proc = run_cli("-c", str(cfg), "--results", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "decoder segment (1 classes)" in proc.stdout + proc.stderr
    (line,) = [json.loads(x) for x in out.read_text().splitlines()]
    (seg,) = line["segments"]
    assert seg["label"] == "text" and seg["mask"]["size"] == [342, 548]
    # the same frame through RapidOCR's bitmap at the config's 1184x736, mapped to the frame
    bgr = dbnet["pages"]["messi"]
    blob = dbnet["ref"].DetPreProcess(736, "min", [0.5] * 3, [0.5] * 3)(bgr)
    assert blob.shape[2:] == (736, 1184)
    (pred,) = dbnet["sess"].run(None, {"x": blob})
    want = cv2.resize((pred[0, 0] > 0.3).astype(np.uint8), (548, 342), interpolation=cv2.INTER_NEAREST_EXACT) > 0
    got = decode_rle(seg["mask"])
    # edge-run's ONNX Runtime session threads its sums differently: a few probabilities near 0.3 fall either way
    assert seg["pixels"] == int(got.sum()) and int((got != want).sum()) <= 0.05 * want.sum()


# -- hand-made maps -------------------------------------------------------------------------------------------------


def test_multiclass_logits_stretched_to_the_frame():
    """A 2x4 map of three classes, stretched over an 8x4 frame: each map cell covers 2x2 frame pixels."""
    classes = np.array([[0, 1, 1, 2], [2, 2, 0, 1]])
    logits = np.where(np.arange(3)[:, None, None] == classes[None], 5.0, -1.0)[None].astype(np.float32)  # [1, 3, 2, 4]
    spec = PreprocessSpec(8, 4, resize="stretch")
    dec = decoder({"m": logits}, spec, ["bg", "road", "car"])
    assert dec.head.describe() == "segment (3 classes)"
    res = dec({"m": logits}, plan_resize(spec, 8, 4)[2])
    want = np.repeat(np.repeat(classes, 2, axis=0), 2, axis=1)
    assert (frame_classes(res, (4, 8)) == want).all()
    assert [(s.label, s.pixels) for s in res.segments] == [("road", 12), ("car", 12), ("bg", 8)]  # largest first
    assert json.loads(json.dumps(res.to_dict()))["segments"][0]["box"] == [2.0, 0.0, 8.0, 4.0]
    with_bg = decoder({"m": logits}, spec, ["bg", "road", "car"], background=0)({"m": logits}, plan_resize(spec, 8, 4)[2])
    assert [s.label for s in with_bg.segments] == ["road", "car"]


def test_letterboxed_frame_takes_the_cells_under_its_pixels():
    """A 4x4 map over a 4x4 input that letterboxes a 4x2 frame into rows 1..2: frame row r is input row r + 1."""
    ids = np.arange(16, dtype=np.int64).reshape(1, 4, 4) % 3
    spec = PreprocessSpec(4, 4)
    tf = plan_resize(spec, 4, 2)[2]
    assert (tf.pad_y, tf.scale_y) == (1.0, 1.0)
    res = decoder({"ids": ids}, spec, ["a", "b", "c"])({"ids": ids}, tf)
    assert (frame_classes(res, (2, 4)) == ids[0, 1:3]).all()


def test_a_portrait_frame_letterboxed_sideways():
    """A 2x4 (w x h) frame letterboxed into a 4x4 input sits in columns 1..2: frame column c is input column c + 1."""
    ids = np.arange(16, dtype=np.int64).reshape(1, 4, 4) % 5
    spec = PreprocessSpec(4, 4)
    tf = plan_resize(spec, 2, 4)[2]
    assert (tf.pad_x, tf.scale_x) == (1.0, 1.0)
    res = decoder({"ids": ids}, spec, list("abcde"))({"ids": ids}, tf)
    assert (frame_classes(res, (4, 2)) == ids[0, :, 1:3]).all()


def test_class_ids_in_one_channel_of_rank_four():
    """An ArgMax export that keeps the channel axis ([1, 1, h, w] of int64) reads like [1, h, w]."""
    ids = np.array([[[[0, 1], [1, 1]]]], np.int64)
    spec = PreprocessSpec(2, 2)
    res = decoder({"ids": ids}, spec, ["sky", "sea"])({"ids": ids}, plan_resize(spec, 2, 2)[2])
    assert [(s.label, s.pixels) for s in res.segments] == [("sea", 3), ("sky", 1)]


def test_one_channel_threshold_and_quarter_resolution_map():
    prob = np.zeros((1, 1, 2, 2), np.float32)
    prob[0, 0, 1, 0] = 0.9
    prob[0, 0, 0, 1] = 0.5  # not above 0.5: background
    spec = PreprocessSpec(8, 8, resize="stretch")
    res = decoder({"p": prob}, spec, [])({"p": prob}, plan_resize(spec, 16, 16)[2])
    (seg,) = res.segments
    assert (seg.label, seg.box, seg.pixels) == ("0", [0.0, 8.0, 8.0, 16.0], 64)  # the lower-left quarter


def test_odd_segmentation_outputs():
    spec = PreprocessSpec(8, 8)
    tf = plan_resize(spec, 8, 8)[2]
    empty = np.zeros((1, 1, 4, 4), np.float32)
    assert decoder({"p": empty}, spec, [])({"p": empty}, tf).to_dict() == {"segments": []}
    nan = np.zeros((1, 3, 4, 4), np.float32)
    nan[0, 1, 2, 2] = np.nan
    with pytest.raises(RunFailed, match="output 'p' holds 1 NaN"):
        decoder({"p": nan}, spec, [])({"p": nan}, tf)
    ids = np.full((1, 4, 4), 7, np.int64)
    with pytest.raises(RunFailed, match="output 'ids' holds class 7, more than the 3 labels name"):
        decoder({"ids": ids}, spec, ["a", "b", "c"])({"ids": ids}, tf)
    ids[0, 0, 0] = 2  # the last of three labels: fine
    ids[0, 1:] = 0
    ids[0, 0, 1:] = 1
    assert [s.label for s in decoder({"ids": ids}, spec, ["a", "b", "c"])({"ids": ids}, tf).segments] == ["a", "b", "c"]
    ids[0, 3, 3] = -1
    with pytest.raises(RunFailed, match="output 'ids' holds class -1: class ids start at 0"):
        decoder({"ids": ids}, spec, ["a", "b", "c"])({"ids": ids}, tf)
    with pytest.raises(ConfigError, match="is no map"):
        decoder({"p": np.zeros((1, 5, 1, 1), np.float32)}, spec, [], type="segment")
    with pytest.raises(ConfigError, match="segment does not fit"):
        decoder({"y": np.zeros((1, 84, 8400), np.float32)}, spec, [], type="segment")
    with pytest.raises(ConfigError, match="yolo does not fit"):
        decoder({"p": np.zeros((1, 19, 64, 64), np.float32)}, PreprocessSpec(512, 512), [], type="yolo")
    with pytest.raises(ConfigError, match="fit none of edge's decoders"):  # auto: a dense map is not guessed
        decoder({"p": np.zeros((1, 19, 64, 64), np.float32)}, PreprocessSpec(512, 512), [], type="auto")


def test_class_ids_one_past_the_labels_are_refused():
    """Three labels name classes 0, 1 and 2: an id of 3 is one no label names."""
    spec = PreprocessSpec(4, 4)
    ids = np.zeros((1, 4, 4), np.int64)
    ids[0, 2, 2] = 3
    with pytest.raises(RunFailed, match="output 'ids' holds class 3, more than the 3 labels name"):
        decoder({"ids": ids}, spec, ["a", "b", "c"])({"ids": ids}, plan_resize(spec, 4, 4)[2])


def test_calibration_measures_pixels_the_two_maps_share():
    """FP32 sees class 1 on 6 cells, INT8 on 4 of them and class 2 on 1 more: the union of reported pixels is 7,
    the agreeing ones 4."""
    from edge.calib.decisions import Matched, TaskDecisions

    spec = PreprocessSpec(4, 4)
    a = np.zeros((1, 4, 4), np.int64)
    a[0, :3, :2] = 1
    b = np.zeros((1, 4, 4), np.int64)
    b[0, :2, :2] = 1
    b[0, 3, 3] = 2
    dec = decoder({"ids": a}, spec, ["bg", "x", "y"], background=0)
    total = Matched()
    TaskDecisions(dec.head, dec, spec).update(total, {"ids": a}, {"ids": b})
    assert (total.either, total.kept) == (7, 4)
