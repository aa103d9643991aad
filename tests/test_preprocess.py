"""Preprocessing: the letterbox geometry, its inverse, normalisation, layouts and dtypes."""

from __future__ import annotations

import numpy as np
import pytest

from edge.errors import ConfigError
from edge.runtime.engines.preprocess import Preprocessor, PreprocessSpec, plan_resize


def test_letterbox_centres_the_frame_and_pads_the_short_side():
    spec = PreprocessSpec(256, 256)
    new_w, new_h, tf = plan_resize(spec, 720, 528)
    assert (new_w, new_h) == (256, 188)  # 528 * 256 / 720 = 187.7
    assert (tf.pad_x, tf.pad_y) == (0.0, 34.0)


def test_letterbox_box_mapping_round_trips():
    spec = PreprocessSpec(320, 320)
    _, _, tf = plan_resize(spec, 1280, 720)
    boxes = np.array([[10.0, 20.0, 640.0, 700.0], [0.0, 0.0, 1280.0, 720.0]], np.float32)
    np.testing.assert_allclose(tf.to_frame(tf.to_input(boxes)), boxes, atol=1e-3)
    # The frame's corners land on the edges of the image area inside the padding.
    np.testing.assert_allclose(tf.to_input(boxes[1:]), [[0.0, 70.0, 320.0, 250.0]], atol=0.01)


def test_letterbox_pixels_land_where_the_transform_says():
    """A white square in the frame appears in the network input at the transformed position."""
    frame = np.zeros((400, 800, 3), np.uint8)
    frame[100:200, 300:400] = 255
    spec = PreprocessSpec(200, 200, color="bgr", layout="nhwc", scale=1.0, offset=0.0)
    x, tf = Preprocessor(spec)(frame)
    x1, y1, x2, y2 = tf.to_input(np.array([[300.0, 100.0, 400.0, 200.0]]))[0]
    ys, xs = np.nonzero(x[0, :, :, 0] > 127)
    assert abs(xs.min() - x1) <= 1 and abs(xs.max() + 1 - x2) <= 1
    assert abs(ys.min() - y1) <= 1 and abs(ys.max() + 1 - y2) <= 1
    assert x[0, 0, 0, 0] == 0 and x[0, 10, 100, 0] == 0  # padding rows are pad_value


def test_stretch_has_no_padding_and_independent_scales():
    _, _, tf = plan_resize(PreprocessSpec(256, 128, resize="stretch"), 512, 512)
    assert (tf.scale_x, tf.scale_y, tf.pad_x, tf.pad_y) == (0.5, 0.25, 0.0, 0.0)


def test_normalisation_colour_order_and_layout():
    frame = np.zeros((4, 4, 3), np.uint8)
    frame[..., 0], frame[..., 1], frame[..., 2] = 10, 20, 30  # B, G, R
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    spec = PreprocessSpec(4, 4, color="rgb", layout="nchw", mean=mean, std=std)
    x, _ = Preprocessor(spec)(frame)
    assert x.shape == (1, 3, 4, 4) and x.dtype == np.float32
    for c, raw in enumerate((30, 20, 10)):  # RGB order after the swap
        np.testing.assert_allclose(x[0, c], (raw / 255 - mean[c]) / std[c], rtol=1e-5)


def test_blazeface_range_and_fp16_and_uint8():
    frame = np.zeros((2, 2, 3), np.uint8)
    frame[0, 0] = 255
    x, _ = Preprocessor(PreprocessSpec(2, 2, layout="nhwc", scale=1 / 127.5, offset=-1.0))(frame)
    assert x[0, 0, 0].tolist() == pytest.approx([1.0, 1.0, 1.0]) and x[0, 1, 1].tolist() == pytest.approx([-1.0, -1.0, -1.0])
    x16, _ = Preprocessor(PreprocessSpec(2, 2, dtype="float16"))(frame)
    assert x16.dtype == np.float16
    x8, _ = Preprocessor(PreprocessSpec(2, 2, dtype="uint8", layout="nhwc", color="bgr"))(frame)
    assert x8.dtype == np.uint8 and x8[0, 0, 0].tolist() == [255, 255, 255]


def test_bad_spec_values_are_rejected():
    with pytest.raises(ConfigError, match="layout"):
        PreprocessSpec(2, 2, layout="hwc")
