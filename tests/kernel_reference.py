"""``edge/runtime/engines/cuda/preprocess.cu`` re-done in numpy, operation for operation, from the same ``kernel_params``
the launch gets: the tap tables, the per-format byte addressing, the fixed-point YCbCr conversion of each tap,
OpenCV's integer resize, padding, swap, the two float32 roundings of the normalisation, the store.

It lets the CPU machine check the kernel's arithmetic against OpenCV (tests/test_frame_formats.py); on the GPU
machine the kernel must equal it bit for bit (tests/test_gpu_frames.py), which ties the two together.
"""

from __future__ import annotations

import numpy as np

from edge.runtime.engines.cuda.preprocess import kernel_params
from edge.runtime.engines.preprocess import PreprocessSpec
from edge.runtime.sources.frames import Frame


def _ycbcr(Y, U, V, p):  # noqa: N803 - the kernel's names
    y = np.maximum(Y - int(p["y_offset"]), 0) * int(p["c_y"]) + (1 << 19)
    u, v = U - 128, V - 128
    b = (y + int(p["cb_b"]) * u) >> 20
    g = (y + int(p["cb_g"]) * u + int(p["cr_g"]) * v) >> 20
    r = (y + int(p["cr_r"]) * v) >> 20
    return [np.clip(c, 0, 255) for c in (b, g, r)]


def _fetch(raw: np.ndarray, fmt: str, x: np.ndarray, y: np.ndarray, p) -> list:
    pitch = int(p["pitch"])
    row = y * pitch
    if fmt in ("bgr", "bgrx", "rgba"):
        q = row + x * (3 if fmt == "bgr" else 4)
        bgr = [raw[q], raw[q + 1], raw[q + 2]]
        return bgr[::-1] if fmt == "rgba" else bgr
    if fmt == "nv12":
        uv = (int(p["src_h"]) + (y >> 1)) * pitch + (x & ~1)
        return _ycbcr(raw[row + x], raw[uv], raw[uv + 1], p)
    q = row + (x & ~1) * 2
    if fmt == "yuyv":
        return _ycbcr(raw[q + (x & 1) * 2], raw[q + 1], raw[q + 3], p)
    return _ycbcr(raw[q + 1 + (x & 1) * 2], raw[q], raw[q + 2], p)


def emulate(spec: PreprocessSpec, frame: Frame) -> np.ndarray:
    """The kernel's output tensor (with the batch axis) for ``frame``."""
    w, h = frame.size
    p, xtab, ytab = kernel_params(spec, w, h, frame.format, frame.colour)
    return emulate_launch(p, xtab, ytab, frame.image, frame.format, spec.dtype)[None]


def emulate_launch(p, xtab: np.ndarray, ytab: np.ndarray, image: np.ndarray, fmt: str, dtype: str) -> np.ndarray:
    """One launch of ``preprocess_{dtype}_{fmt}`` with these arguments: the output tensor without batch axis."""
    raw = image.reshape(-1).astype(np.int64)
    ys, xs = np.mgrid[0 : int(p["dst_h"]), 0 : int(p["dst_w"])]
    rx, ry = xs - int(p["roi_x"]), ys - int(p["roi_y"])
    inside = (rx >= 0) & (ry >= 0) & (rx < int(p["roi_w"])) & (ry < int(p["roi_h"]))
    tx = xtab[np.clip(rx, 0, len(xtab) - 1)].astype(np.int64)
    ty = ytab[np.clip(ry, 0, len(ytab) - 1)].astype(np.int64)
    taps = {(i, j): _fetch(raw, fmt, tx[..., i], ty[..., j], p) for i in (0, 1) for j in (0, 1)}  # (x, y tap) -> b, g, r
    bgr = []
    for c in range(3):
        s0 = taps[(0, 0)][c] * tx[..., 2] + taps[(1, 0)][c] * tx[..., 3]
        s1 = taps[(0, 1)][c] * tx[..., 2] + taps[(1, 1)][c] * tx[..., 3]
        t = (((s0 >> 4) * ty[..., 2]) >> 16) + (((s1 >> 4) * ty[..., 3]) >> 16)
        value = np.clip((t + 2) >> 2, 0, 255).astype(np.float32)
        bgr.append(np.where(inside, value, np.float32(p["pad"])))
    chans = [bgr[2 - c] if int(p["swap_rb"]) else bgr[c] for c in range(3)]
    if dtype != "uint8":
        a, b = p["a"].astype(np.float32), p["b"].astype(np.float32)
        chans = [(chans[c] * a[c]).astype(np.float32) + b[c] for c in range(3)]
    out = np.stack(chans, axis=0 if int(p["nchw"]) else -1)
    return out.astype({"float32": np.float32, "float16": np.float16, "uint8": np.uint8}[dtype])
