"""Camera pixel formats and YCbCr colour: the CPU converters against OpenCV and FFmpeg, the kernel's arithmetic
(tests/kernel_reference.py, a numpy copy of preprocess.cu) against OpenCV cvtColor + the CPU preprocessing on
real frames, and the camera pipelines that hand those formats over.

Expected values come from outside: OpenCV's own cvtColor (NV12/YUYV/UYVY are BT.601 limited range there, BGRA and
RGBA), OpenCV's YCrCb2BGR (BT.601 full range, JPEG's), and FFmpeg's swscale for BT.709 and full range.
"""

from __future__ import annotations

import shutil
import subprocess
import threading

import cv2
import numpy as np
import pytest

from edge.config import SourceConfig
from edge.errors import EdgeError
from edge.runtime.engines.cuda.preprocess import kernel_params
from edge.runtime.engines.preprocess import Preprocessor, PreprocessSpec
from edge.runtime.sources import V4L2_FOURCC, camera_format, csi_pipeline, open_source
from edge.runtime.sources.frames import Frame
from edge.runtime.sources.pixels import BT601_LIMITED, FORMATS, colour, from_bgr, pixel_format, to_bgr, ycbcr_planes, ycbcr_to_bgr
from tests.conftest import require_or_skip
from tests.kernel_reference import emulate

COLOURS = [colour(m, r) for m in ("bt601", "bt709") for r in ("limited", "full")]
SPECS = {
    "demo nhwc [-1,1] fp32 letterbox": PreprocessSpec(256, 256, layout="nhwc", scale=1 / 127.5, offset=-1.0),
    "nchw [0,1] fp32 stretch": PreprocessSpec(640, 384, resize="stretch"),
    "nchw imagenet fp16 letterbox": PreprocessSpec(
        224, 224, dtype="float16", mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)
    ),
    "nhwc uint8 bgr pad 114": PreprocessSpec(320, 320, layout="nhwc", dtype="uint8", color="bgr", pad_value=114),
}


def real(megamind_frames, index: int, w: int, h: int) -> np.ndarray:
    frame = megamind_frames[index]
    return frame if (w, h) == frame.shape[1::-1] else cv2.resize(frame, (w, h), interpolation=cv2.INTER_AREA)


# -- the converters against OpenCV and FFmpeg -------------------------------------------------------------------


@pytest.mark.parametrize(
    "fmt, code", [("nv12", "COLOR_YUV2BGR_NV12"), ("yuyv", "COLOR_YUV2BGR_YUYV"), ("uyvy", "COLOR_YUV2BGR_UYVY")]
)
def test_fixed_point_conversion_equals_opencv_cvtcolor_bit_for_bit(megamind_frames, fmt, code):
    """The kernel's arithmetic (numpy) for BT.601 limited range is OpenCV's, on real frames and on random bytes."""
    rng = np.random.default_rng(7)
    images = [from_bgr(real(megamind_frames, i, 1280, 720), fmt) for i in (0, 125)]
    images.append(rng.integers(0, 256, images[0].shape, dtype=np.uint8))  # every Y, U, V combination, clamping too
    for image in images:
        want = cv2.cvtColor(image, getattr(cv2, code))
        got = ycbcr_to_bgr(*ycbcr_planes(image, fmt), BT601_LIMITED)
        np.testing.assert_array_equal(got, want)


def test_bt601_full_range_is_jpegs_ycrcb_within_one_level():
    """OpenCV's YCrCb2BGR is BT.601 full range (JPEG) in 14-bit fixed point; ours is 20-bit: one level at most."""
    ycc = np.random.default_rng(3).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    want = cv2.cvtColor(ycc, cv2.COLOR_YCrCb2BGR).astype(int)
    got = ycbcr_to_bgr(ycc[..., 0], ycc[..., 2], ycc[..., 1], colour("bt601", "full"))
    assert np.abs(got - want).max() <= 1


def _flat_blocks(seed: int, block: int = 16, n: int = 12):
    """NV12 made of flat colour blocks in the legal range (Y 16..235, C 16..240), and a mask of block interiors:
    chroma upsampling filters then agree, and only the matrix and range are compared."""
    rng = np.random.default_rng(seed)
    yv, uv, vv = rng.integers(16, 236, (n, n)), rng.integers(16, 241, (n, n)), rng.integers(16, 241, (n, n))
    h = w = block * n
    y = np.kron(yv, np.ones((block, block), int)).astype(np.uint8)
    u = np.kron(uv, np.ones((block // 2, block // 2), int)).astype(np.uint8)
    v = np.kron(vv, np.ones((block // 2, block // 2), int)).astype(np.uint8)
    nv12 = np.concatenate([y, np.stack([u, v], axis=-1).reshape(h // 2, w)])
    mask = np.zeros((h, w), bool)
    for by in range(n):
        for bx in range(n):
            mask[by * block + 3 : (by + 1) * block - 3, bx * block + 3 : (bx + 1) * block - 3] = True
    return nv12, mask


@pytest.mark.parametrize("col", COLOURS, ids=lambda c: c.key)
def test_each_matrix_and_range_matches_ffmpeg_swscale(col):
    """FFmpeg (swscale, accurate rounding, full chroma interpolation) decodes the same NV12 with the same
    colorimetry: within one level, while the other matrix is tens of levels away (the test tells them apart)."""
    require_or_skip(shutil.which("ffmpeg") is not None, "ffmpeg is not installed (Debian: apt-get install ffmpeg)")
    nv12, mask = _flat_blocks(11)
    h, w = nv12.shape[0] * 2 // 3, nv12.shape[1]
    rng = "tv" if col.range == "limited" else "pc"
    cmd = ["ffmpeg", "-v", "error", "-f", "rawvideo", "-pix_fmt", "nv12", "-s", f"{w}x{h}", "-i", "-"]
    cmd += ["-vf", f"scale=in_color_matrix={col.matrix}:in_range={rng}:out_range=pc:flags=accurate_rnd+full_chroma_int+bitexact"]
    cmd += ["-pix_fmt", "bgr24", "-f", "rawvideo", "-"]
    out = subprocess.run(cmd, input=nv12.tobytes(), capture_output=True, timeout=60, check=True)
    ffmpeg = np.frombuffer(out.stdout, np.uint8).reshape(h, w, 3).astype(int)
    ours = to_bgr(nv12, "nv12", col)
    other = to_bgr(nv12, "nv12", colour("bt709" if col.matrix == "bt601" else "bt601", col.range))
    assert np.abs(ours - ffmpeg)[mask].max() <= 1
    assert np.abs(other - ffmpeg)[mask].max() >= 20


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_cpu_path_turns_every_camera_format_back_into_the_frame(megamind_frames, fmt):
    bgr = real(megamind_frames, 125, 1280, 720)
    back = to_bgr(from_bgr(bgr, fmt), fmt).astype(int)
    diff = np.abs(back - bgr)
    if fmt in ("bgr", "bgrx", "rgba"):
        assert diff.max() == 0
    else:  # 4:2:0 / 4:2:2 chroma and 8-bit YCbCr: a few levels on average on a real frame, never a wrong matrix
        assert diff.mean() < 3.0


def test_wrong_buffer_shapes_are_refused_with_the_fix():
    for fmt, bad in (
        ("nv12", np.zeros((100, 64), np.uint8)),
        ("yuyv", np.zeros((4, 5, 2), np.uint8)),
        ("bgrx", np.zeros((4, 4, 3), np.uint8)),
    ):
        with pytest.raises(EdgeError, match=rf"a {fmt} frame must be uint8 of shape .*source.format"):
            to_bgr(bad, fmt)
    assert pixel_format("nv12").size(np.zeros((1620, 1920), np.uint8)) == (1920, 1080)
    assert pixel_format("uyvy").size(np.zeros((1080, 1920, 2), np.uint8)) == (1920, 1080)


# -- the kernel's arithmetic against OpenCV cvtColor + the CPU preprocessing --------------------------------------


def test_kernel_params_address_each_format():
    spec = SPECS["nchw [0,1] fp32 stretch"]
    for fmt, row_bytes in (("bgr", 3), ("bgrx", 4), ("rgba", 4), ("nv12", 1), ("yuyv", 2), ("uyvy", 2)):
        p, xtab, ytab = kernel_params(spec, 1920, 1080, fmt, colour("bt709", "full"))
        assert (int(p["src_w"]), int(p["src_h"]), int(p["pitch"])) == (1920, 1080, 1920 * row_bytes)
        assert xtab[:, :2].max() == 1919 and ytab[:, :2].max() == 1079  # pixel indices, whatever the format
        assert (int(p["y_offset"]), int(p["c_y"])) == (0, 1 << 20)


CASES = [(fmt, col) for fmt in FORMATS for col in (COLOURS if FORMATS[fmt].yuv else [BT601_LIMITED])]


@pytest.mark.parametrize("fmt, col", CASES, ids=[f"{f}-{c.key}" if FORMATS[f].yuv else f for f, c in CASES])
def test_kernel_arithmetic_matches_cvtcolor_and_the_cpu_preprocessing(megamind_frames, fmt, col):
    """Every format and colorimetry, real frames at camera sizes, the four specs: the kernel's output (numpy copy)
    equals cvtColor + Preprocessor within one intensity level (1/255 of the pixel range), exactly on downscales."""
    sizes = [(720, 528), (1920, 1080), (300, 200)]
    for spec_name, spec in SPECS.items():
        cpu = Preprocessor(spec)
        level = float(np.abs(spec.channel_affine()[0]).max()) if spec.dtype != "uint8" else 1.0
        for w, h in sizes:
            frame = Frame(0, 0.0, from_bgr(real(megamind_frames, 125, w, h), fmt), format=fmt, colour=col)
            want = cpu(frame.bgr())[0].astype(np.float64)
            got = emulate(spec, frame).astype(np.float64)
            assert got.shape == want.shape
            diff = np.abs(got - want)
            tol = level * (1.0 + 1e-3) + (2e-3 if spec.dtype == "float16" else 1e-6)
            assert diff.max() <= tol, (spec_name, w, h, diff.max() / level)
            if (w, h) != (300, 200) and spec_name != "nchw [0,1] fp32 stretch":
                assert diff.max() <= (2e-3 if spec.dtype == "float16" else 1e-6), (spec_name, w, h)  # downscaling: exact


# -- camera pipelines ------------------------------------------------------------------------------------------


def test_csi_pipeline_for_the_gpu_has_no_videoconvert_and_the_cpu_one_has():
    cpu = csi_pipeline(0, 1920, 1080, 30, 0, "bgr")
    assert "videoconvert ! video/x-raw, format=BGR ! appsink" in cpu
    for fmt, caps in (("nv12", "NV12"), ("bgrx", "BGRx"), ("rgba", "RGBA"), ("yuyv", "YUY2"), ("uyvy", "UYVY")):
        gpu = csi_pipeline(0, 1920, 1080, 30, 2, fmt)
        assert "videoconvert" not in gpu
        assert f"nvvidconv flip-method=2 ! video/x-raw, format={caps} ! appsink drop=true max-buffers=1" in gpu


def test_camera_format_auto_is_the_cameras_own_with_gpu_preprocessing():
    auto = SourceConfig(uri="csi://0")
    assert camera_format(auto, "csi", gpu=True) == "nv12" and camera_format(auto, "csi", gpu=False) == "bgr"
    assert camera_format(auto, "v4l2", gpu=True) == "yuyv" and camera_format(auto, "v4l2", gpu=False) == "bgr"
    assert camera_format(SourceConfig(uri="csi://0", format="bgrx"), "csi", gpu=False) == "bgrx"
    with pytest.raises(EdgeError, match="a V4L2 camera delivers bgr, yuyv, uyvy, nv12"):
        camera_format(SourceConfig(uri="/dev/video0", format="rgba"), "v4l2", gpu=True)
    assert set(V4L2_FOURCC) == {"yuyv", "uyvy", "nv12"}


def test_v4l2_camera_for_the_gpu_asks_for_raw_yuyv(monkeypatch, tmp_path):
    """A V4L2 camera goes through OpenCV's V4L2 backend; for the GPU it is asked for YUYV with OpenCV's own
    conversion off, so the camera's bytes reach the kernel. (No camera here: the capture is recorded.)"""
    from edge.runtime import sources

    opened = {}

    def fake_init(self, target, description, live, loop=False, api=None, props=None):
        opened.update(target=target, api=api, props=props)
        sources.Source.__init__(self)
        self.description, self.live = description, live

    monkeypatch.setattr(sources.CaptureSource, "__init__", fake_init)
    device = tmp_path / "video0"
    device.touch()
    src = open_source(SourceConfig(uri=f"v4l2://{device}", width=1280, height=720), threading.Event(), gpu=True)
    assert src.format == "yuyv" and opened["api"] == cv2.CAP_V4L2
    assert opened["props"][cv2.CAP_PROP_FOURCC] == cv2.VideoWriter_fourcc(*"YUYV")
    assert opened["props"][cv2.CAP_PROP_CONVERT_RGB] == 0 and opened["props"][cv2.CAP_PROP_FRAME_WIDTH] == 1280
    src = open_source(SourceConfig(uri=f"v4l2://{device}", color_matrix="bt709"), threading.Event(), gpu=False)
    assert src.format == "bgr" and cv2.CAP_PROP_CONVERT_RGB not in opened["props"]
    assert src.info()["format"] == "bgr" and "colour" not in src.info()


def test_files_refuse_a_camera_format(megamind):
    with pytest.raises(EdgeError, match="source.format'?: nv12 is what a camera delivers"):
        open_source(SourceConfig(uri=str(megamind), format="nv12"), threading.Event())
