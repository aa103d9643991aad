"""Masks in results: COCO run-length encoding as pycocotools reads it, and prototype masks sampled into the frame.

pycocotools (COCO's own reference implementation) decodes edge's encoding, so the format is checked against COCO, not
against edge's decoder; the sampled masks are checked against a plain up-sample of the logits written here (bilinear,
half-pixel centres, as ``cv2.resize`` does), then cropped to the box at full resolution.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from edge.runtime.engines.preprocess import PreprocessSpec, plan_resize
from edge.runtime.postprocess.masks import ProtoMasks, decode_rle, rle

mask_util = pytest.importorskip("pycocotools.mask", reason="pycocotools is COCO's reference for the encoding")


@settings(max_examples=80, deadline=None)
@given(arrays(bool, st.tuples(st.integers(1, 12), st.integers(1, 12))), st.integers(0, 6), st.integers(0, 6), st.data())
def test_the_encoding_is_cocos(crop, x0, y0, data):
    h, w = crop.shape
    width, height = x0 + w + data.draw(st.integers(0, 5)), y0 + h + data.draw(st.integers(0, 5))
    full = np.zeros((height, width), bool)
    full[y0 : y0 + h, x0 : x0 + w] = crop
    enc = rle(crop, x0, y0, width, height)
    assert enc["size"] == [height, width] and sum(enc["counts"]) == width * height
    coco = mask_util.frPyObjects(enc, height, width)  # uncompressed RLE in, COCO's own decoder out
    np.testing.assert_array_equal(mask_util.decode(coco).astype(bool), full)
    np.testing.assert_array_equal(decode_rle(enc), full)
    assert mask_util.area(coco) == full.sum()


def test_a_prototype_mask_is_its_upsampled_logits_inside_its_box():
    import cv2

    rng = np.random.default_rng(3)
    protos = cv2.GaussianBlur(rng.normal(0, 1, (160, 160)).astype(np.float32), (0, 0), 6)[None] * 20
    coeffs = np.ones((1, 1), np.float32)
    spec = PreprocessSpec(640, 640)
    tf = plan_resize(spec, 640, 640)[2]  # frame = input
    box = np.array([101.3, 57.8, 421.6, 390.2], np.float32)
    got = decode_rle(ProtoMasks(protos, coeffs, 640, 640).mask(0, box, tf))
    want = cv2.resize(protos[0], (640, 640), interpolation=cv2.INTER_LINEAR) > 0
    cols, rows = np.arange(640), np.arange(640)
    inside = ((rows >= box[1]) & (rows < box[3]))[:, None] & ((cols >= box[0]) & (cols < box[2]))[None, :]
    want &= inside
    assert want.sum() > 1000 and (~inside & got).sum() == 0
    iou = (got & want).sum() / (got | want).sum()
    assert iou > 0.995, iou


def test_a_box_edge_on_a_whole_pixel_keeps_its_first_row_and_column_and_not_its_last():
    """Ultralytics' crop keeps pixel j when x1 <= j < x2 (and the same for rows)."""
    protos = np.full((1, 160, 160), 5.0, np.float32)  # every logit positive: the mask is the box
    tf = plan_resize(PreprocessSpec(640, 640), 640, 640)[2]
    got = decode_rle(
        ProtoMasks(protos, np.ones((1, 1), np.float32), 640, 640).mask(0, np.array([10, 20, 30, 50], np.float32), tf)
    )
    rows, cols = np.nonzero(got)
    assert (rows.min(), rows.max(), cols.min(), cols.max()) == (20, 49, 10, 29)


@pytest.mark.parametrize("frame_wh", [(1280, 720), (720, 1280)])
def test_a_letterboxed_frame_takes_the_logits_under_its_pixel_centres(frame_wh):
    """Two prototypes at a quarter of a 640x640 input: one positive on rows 40..79 (input rows 160..320), one on
    columns 40..79, negative elsewhere; bilinear sampling crosses 0 half-way between cells, at input 160 and 320. A
    1280x720 frame letterboxes at 0.5 input pixels a frame pixel with 140 rows of padding above, so frame pixel j sits
    at input (j + 0.5) * 0.5 (+ 140 for rows): rows 40..359 and columns 320..639 are inside; a 720x1280 frame is the
    same turned (140 columns of padding)."""
    protos = np.full((2, 160, 160), -5.0, np.float32)
    protos[0, 40:80, :] = protos[1, :, 40:80] = 5.0
    w, h = frame_wh
    tf = plan_resize(PreprocessSpec(640, 640), w, h)[2]
    masks = ProtoMasks(protos, np.eye(2, dtype=np.float32), 640, 640)  # detection i: prototype i
    rows, cols = decode_rle(masks.mask(0, np.array([0, 0, w, h], np.float32), tf)), decode_rle(masks.mask(1, [0, 0, w, h], tf))
    inside_rows, inside_cols = ((40, 360), (320, 640)) if w > h else ((320, 640), (40, 360))
    assert np.flatnonzero(rows.any(axis=1)).tolist() == list(range(*inside_rows)) and rows.any(axis=0).all()
    assert np.flatnonzero(cols.any(axis=0)).tolist() == list(range(*inside_cols)) and cols.any(axis=1).all()
    assert rows.sum() == (inside_rows[1] - inside_rows[0]) * w and cols.sum() == (inside_cols[1] - inside_cols[0]) * h


def test_a_box_without_width_or_height_has_an_empty_mask():
    protos = np.full((1, 160, 160), 5.0, np.float32)
    tf = plan_resize(PreprocessSpec(640, 640), 640, 480)[2]
    masks = ProtoMasks(protos, np.ones((1, 1), np.float32), 640, 640)
    for box in ([10, 20, 10, 50], [10, 20, 30, 20]):
        assert masks.mask(0, np.array(box, np.float32), tf) == {"size": [480, 640], "counts": [640 * 480]}
