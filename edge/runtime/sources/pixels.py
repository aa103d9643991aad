"""Camera pixel formats and YCbCr colour on the CPU: what a frame buffer holds, and how it becomes BGR.

A frame buffer holds one of these layouts (``Frame.format``), C-contiguous:

    bgr    (H, W, 3)      what OpenCV decodes files and streams to
    bgrx   (H, W, 4)      B, G, R, unused: nvvidconv's BGRx (BGRA reads the same)
    rgba   (H, W, 4)      R, G, B, A (RGBx reads the same)
    nv12   (H * 3/2, W)   the Y plane, then U, V interleaved at half resolution: decoders, CSI pipelines
    yuyv   (H, W, 2)      Y0 U Y1 V per pixel pair: USB cameras over V4L2 (GStreamer calls it YUY2)
    uyvy   (H, W, 2)      U Y0 V Y1 per pixel pair

YCbCr frames are turned into RGB with the source's matrix (BT.601 or BT.709) and range (limited: Y 16..235,
Cb/Cr 16..240; full: 0..255), in OpenCV's arithmetic for its YUV->BGR converters: 20-bit fixed-point
coefficients, ``max(Y - 16, 0)`` for limited range, each 2x2 (NV12) or 2x1 (YUYV/UYVY) block sharing one chroma
sample. BT.601 limited range uses OpenCV's own constants, so the CPU path is ``cv2.cvtColor`` and equals it bit
for bit; the other three use the same formula with coefficients derived from the standards' Kr and Kb. The CUDA
kernel (``cuda/preprocess.cu``) runs exactly this arithmetic on the pixels it samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple

import numpy as np

from edge.errors import EdgeError

SHIFT = 20  # OpenCV's ITUR_BT_601_SHIFT


@dataclass(frozen=True)
class PixelFormat:
    name: str
    gst: str  # the GStreamer caps format name
    channels: int  # per array element row (0: NV12's 2-D plane layout)
    yuv: bool

    def shape(self, width: int, height: int) -> Tuple[int, ...]:
        """The array shape of a width x height frame."""
        if self.name == "nv12":
            return (height * 3 // 2, width)
        return (height, width, self.channels)

    def size(self, array: np.ndarray) -> Tuple[int, int]:
        """(width, height) of a frame held in ``array``, or an EdgeError when the array cannot hold this format."""
        shape = array.shape
        if self.name == "nv12":
            if array.ndim == 3 and shape[2] == 1:
                shape = shape[:2]
            ok = len(shape) == 2 and shape[0] % 3 == 0 and shape[1] % 2 == 0  # H = rows * 2/3 is then even
            w, h = (shape[1], shape[0] * 2 // 3) if ok else (0, 0)
        else:
            ok = len(shape) == 3 and shape[2] == self.channels and (not self.yuv or shape[1] % 2 == 0)
            w, h = (shape[1], shape[0]) if ok else (0, 0)
        if not ok or array.dtype != np.uint8 or w < 1 or h < 1:
            raise EdgeError(
                f"a {self.name} frame must be uint8 of shape {self.describe()}, got {array.dtype} {list(array.shape)}: "
                "set source.format to what the camera delivers"
            )
        return w, h

    def describe(self) -> str:
        if self.name == "nv12":
            return "(H*3/2, W) with even W and H"
        return f"(H, W, {self.channels})" + (" with even W" if self.yuv else "")


FORMATS: Dict[str, PixelFormat] = {
    f.name: f
    for f in (
        PixelFormat("bgr", "BGR", 3, False),
        PixelFormat("bgrx", "BGRx", 4, False),
        PixelFormat("rgba", "RGBA", 4, False),
        PixelFormat("nv12", "NV12", 0, True),
        PixelFormat("yuyv", "YUY2", 2, True),
        PixelFormat("uyvy", "UYVY", 2, True),
    )
}


def pixel_format(name: str) -> PixelFormat:
    try:
        return FORMATS[name]
    except KeyError:
        raise EdgeError(f"pixel format {name!r}: expected one of {', '.join(FORMATS)}") from None


@dataclass(frozen=True)
class Colour:
    """YCbCr -> RGB in 20-bit fixed point: R = (c_y * max(Y - y_offset, 0) + cr_r * (V - 128) + 2^19) >> 20, and
    likewise G (cb_g, cr_g) and B (cb_b), each clamped to 0..255."""

    matrix: str  # bt601 | bt709
    range: str  # limited | full
    y_offset: int
    c_y: int
    cr_r: int
    cb_g: int
    cr_g: int
    cb_b: int

    @property
    def key(self) -> str:
        return f"{self.matrix}-{self.range}"


# Kr, Kb: ITU-R BT.601-7 (section 2.5.1) and ITU-R BT.709-6 (item 3.2).
_KR_KB = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722)}
# OpenCV's YUV->BGR constants (modules/imgproc/src/color_yuv.simd.hpp, ITUR_BT_601_*): the rounded 1.164, 1.596,
# -0.391, -0.813 and 2.018 of BT.601 limited range, which cv2.cvtColor's NV12/YUYV/UYVY converters use.
_OPENCV_BT601_LIMITED = (1220542, 1673527, -409993, -852492, 2116026)


def _derived(matrix: str, full: bool) -> Tuple[int, int, int, int, int]:
    kr, kb = _KR_KB[matrix]
    kg = 1.0 - kr - kb
    y_scale = 1.0 if full else 255.0 / 219.0  # limited: 219 luma steps, 224 chroma steps (8-bit quantisation)
    c_scale = 1.0 if full else 255.0 / 224.0
    coef = (
        y_scale,
        2.0 * (1.0 - kr) * c_scale,
        -2.0 * kb * (1.0 - kb) / kg * c_scale,
        -2.0 * kr * (1.0 - kr) / kg * c_scale,
        2.0 * (1.0 - kb) * c_scale,
    )
    c_y, cr_r, cb_g, cr_g, cb_b = (int(round(c * (1 << SHIFT))) for c in coef)
    return c_y, cr_r, cb_g, cr_g, cb_b


def colour(matrix: str, range_: str) -> Colour:
    """The coefficients of one matrix and range."""
    if matrix not in _KR_KB or range_ not in ("limited", "full"):
        raise EdgeError(f"colour {matrix!r}/{range_!r}: expected bt601 or bt709, and limited or full")
    full = range_ == "full"
    c_y, cr_r, cb_g, cr_g, cb_b = _OPENCV_BT601_LIMITED if (matrix, full) == ("bt601", False) else _derived(matrix, full)
    return Colour(matrix, range_, 0 if full else 16, c_y, cr_r, cb_g, cr_g, cb_b)


BT601_LIMITED = colour("bt601", "limited")


def _opencv_code(fmt: str, col: Colour) -> int:
    """The cv2.cvtColor code that converts this frame to BGR, or -1 when OpenCV has no converter for it."""
    import cv2

    if fmt == "bgrx":
        return cv2.COLOR_BGRA2BGR
    if fmt == "rgba":
        return cv2.COLOR_RGBA2BGR
    if col == BT601_LIMITED:
        return {"nv12": cv2.COLOR_YUV2BGR_NV12, "yuyv": cv2.COLOR_YUV2BGR_YUYV, "uyvy": cv2.COLOR_YUV2BGR_UYVY}[fmt]
    return -1


def ycbcr_planes(image: np.ndarray, fmt: str) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Y, U (Cb) and V (Cr) at full resolution, each chroma sample repeated over the pixels that share it."""
    if fmt == "nv12":
        img = image.reshape(image.shape[0], image.shape[1])
        h = img.shape[0] * 2 // 3
        uv = img[h:].reshape(h // 2, -1, 2)
        up = np.repeat(np.repeat(uv, 2, axis=0), 2, axis=1)
        return img[:h], up[..., 0], up[..., 1]
    pairs = image.reshape(image.shape[0], -1, 4)  # one row of pixel pairs: 4 bytes each
    y_at, u_at, v_at = ((0, 2), 1, 3) if fmt == "yuyv" else ((1, 3), 0, 2)
    y = np.stack([pairs[..., y_at[0]], pairs[..., y_at[1]]], axis=-1).reshape(image.shape[0], -1)
    return y, np.repeat(pairs[..., u_at], 2, axis=1), np.repeat(pairs[..., v_at], 2, axis=1)


def ycbcr_to_bgr(y: np.ndarray, u: np.ndarray, v: np.ndarray, col: Colour) -> np.ndarray:
    """The fixed-point conversion itself (the kernel's arithmetic), on full-resolution planes."""
    half = 1 << (SHIFT - 1)
    # 256-entry tables per term: the sums stay exact int32, and a table lookup is cheaper than a multiply per pixel.
    levels = np.arange(256, dtype=np.int32)
    ty = np.maximum(levels - col.y_offset, 0) * col.c_y + half
    tc = levels - 128
    out = np.empty((*y.shape, 3), np.uint8)
    for channel, terms in ((2, ((v, col.cr_r),)), (1, ((u, col.cb_g), (v, col.cr_g))), (0, ((u, col.cb_b),))):
        acc = ty[y]
        for plane, c in terms:
            acc += (tc * c)[plane]
        np.clip(acc >> SHIFT, 0, 255, out=acc)
        out[..., channel] = acc
    return out


def to_bgr(image: np.ndarray, fmt: str, col: Colour = BT601_LIMITED) -> np.ndarray:
    """A frame of any supported format as uint8 BGR (H, W, 3): OpenCV's converters where OpenCV has one."""
    if fmt == "bgr":
        return image
    pixel_format(fmt).size(image)  # refuses a buffer of the wrong shape with the fix, not an OpenCV assertion
    code = _opencv_code(fmt, col)
    if code >= 0:
        import cv2

        return cv2.cvtColor(image, code)
    return ycbcr_to_bgr(*ycbcr_planes(image, fmt), col)


def from_bgr(bgr: np.ndarray, fmt: str) -> np.ndarray:
    """A BGR image (even width and height for the YCbCr formats) laid out as a camera of ``fmt`` delivers it, for
    test and benchmark frames: OpenCV's BGR->I420 (BT.601 limited range), its chroma shared as each format shares
    it (NV12: per 2x2 block; YUYV/UYVY: per pixel pair, each row pair reusing its I420 chroma row)."""
    import cv2

    if fmt == "bgr":
        return bgr
    if fmt in ("bgrx", "rgba"):
        return cv2.cvtColor(bgr, cv2.COLOR_BGR2BGRA if fmt == "bgrx" else cv2.COLOR_BGR2RGBA)
    h, w = bgr.shape[:2]
    pixel_format(fmt).size(np.empty(pixel_format(fmt).shape(w, h), np.uint8))  # even sizes, or the fix
    i420 = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420).reshape(-1)  # Y, then the U and V planes, each contiguous
    n = h * w
    y, u, v = i420[:n].reshape(h, w), i420[n : n + n // 4].reshape(h // 2, w // 2), i420[n + n // 4 :].reshape(h // 2, w // 2)
    if fmt == "nv12":
        return np.concatenate([y, np.stack([u, v], axis=-1).reshape(h // 2, w)])
    u, v = np.repeat(u, 2, axis=0), np.repeat(v, 2, axis=0)
    y0, y1 = y[:, 0::2], y[:, 1::2]
    quads = (y0, u, y1, v) if fmt == "yuyv" else (u, y0, v, y1)
    return np.ascontiguousarray(np.stack(quads, axis=-1).reshape(h, w, 2))
