"""The CUDA preprocessing kernel (``preprocess.cu``) behind the same ``PreprocessSpec`` as the CPU ``Preprocessor``.

The frame is copied once into page-locked memory, uploaded on the caller's stream, and one kernel writes the
network input straight into the destination device buffer (TensorRT's input binding in a run). The geometry comes
from ``plan_resize``, so boxes map back to the frame exactly as on the CPU path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import numpy as np

from edge.runtime.cuda.memory import CudaContext, HostDeviceBuffer, driver
from edge.runtime.preprocess import PreprocessSpec, Transform, plan_resize

KERNEL_SOURCE = Path(__file__).with_name("preprocess.cu")
_BLOCK = (32, 8, 1)
_COEF_SCALE = 2048  # OpenCV's INTER_RESIZE_COEF_SCALE: 11-bit fixed-point weights for uint8 images

# The kernel's ``Params`` struct, field for field (all 4-byte members, so the C layout has no padding).
PARAMS_DTYPE = np.dtype(
    [
        ("src_w", "<i4"),
        ("dst_w", "<i4"),
        ("dst_h", "<i4"),
        ("roi_x", "<i4"),
        ("roi_y", "<i4"),
        ("roi_w", "<i4"),
        ("roi_h", "<i4"),
        ("pad", "<f4"),
        ("swap_rb", "<i4"),
        ("nchw", "<i4"),
        ("a", "<f4", (3,)),
        ("b", "<f4", (3,)),
    ]
)


def linear_taps(n_out: int, n_in: int) -> np.ndarray:
    """cv2.resize(INTER_LINEAR)'s taps along one axis: (n_out, 4) int32 rows of (i0, i1, w0, w1).

    Half-pixel centres, clamped at the edges, weights rounded to 11 bits, each step in float32 as OpenCV does it.
    """
    f = ((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5).astype(np.float32)
    i = np.floor(f)
    w = (f - i).astype(np.float32)
    i = i.astype(np.int64)
    outside = (i < 0) | (i >= n_in - 1)
    w[outside] = 0.0
    i = np.clip(i, 0, n_in - 1)
    w0 = np.rint((np.float32(1.0) - w) * np.float32(_COEF_SCALE))
    w1 = np.rint(w * np.float32(_COEF_SCALE))
    return np.stack([i, np.minimum(i + 1, n_in - 1), w0, w1], axis=1).astype(np.int32)


def kernel_params(spec: PreprocessSpec, frame_w: int, frame_h: int) -> Tuple[np.void, np.ndarray, np.ndarray]:
    """The kernel's arguments for one frame size: the Params struct and the column and row tap tables."""
    new_w, new_h, tf = plan_resize(spec, frame_w, frame_h)
    a, b = spec.channel_affine()
    p = np.zeros((), PARAMS_DTYPE)
    p["src_w"], p["dst_w"], p["dst_h"] = frame_w, spec.width, spec.height
    p["roi_x"], p["roi_y"], p["roi_w"], p["roi_h"] = int(tf.pad_x), int(tf.pad_y), new_w, new_h
    p["pad"] = spec.pad_value
    p["swap_rb"] = int(spec.color == "rgb")
    p["nchw"] = int(spec.layout == "nchw")
    p["a"], p["b"] = a, b
    xtab = linear_taps(new_w, frame_w)
    xtab[:, :2] *= 3  # byte offsets of the pixel in a BGR row
    return p[()], xtab, linear_taps(new_h, frame_h)


def _kernel_module(ctx: CudaContext) -> Any:
    """preprocess.cu, loaded once per context; nvcc runs once per machine (pycuda caches the binary on disk)."""
    if "preprocess" not in ctx.cache:
        from pycuda.compiler import SourceModule

        ctx.cache["preprocess"] = SourceModule(KERNEL_SOURCE.read_text(), no_extern_c=True)
    return ctx.cache["preprocess"]


class _Tables:
    """A frame size's kernel arguments on the GPU, and the event that says their upload is done."""

    def __init__(self, params: np.void, xtab: HostDeviceBuffer, ytab: HostDeviceBuffer, ready: Any, stream: Any) -> None:
        self.params, self.xtab, self.ytab, self.ready = params, xtab, ytab, ready
        self.streams = {stream.handle}  # streams already ordered after the upload


class GpuPreprocessor:
    """Frame -> network input on the GPU; ``enqueue`` needs the context current (``CudaContext.active()``)."""

    def __init__(self, spec: PreprocessSpec, ctx: CudaContext) -> None:
        self.spec = spec
        with ctx.active():
            self._kernel = _kernel_module(ctx).get_function(f"preprocess_{spec.dtype}")
        # per frame size; a camera has one size, so this is filled once
        self._sizes: Dict[Tuple[int, int], _Tables] = {}
        self._grid = ((spec.width + _BLOCK[0] - 1) // _BLOCK[0], (spec.height + _BLOCK[1] - 1) // _BLOCK[1], 1)

    def transform(self, frame: np.ndarray) -> Transform:
        """The frame's geometry alone: all the CPU has to do for a frame on the GPU path (no CUDA call)."""
        return plan_resize(self.spec, frame.shape[1], frame.shape[0])[2]

    def _tables(self, w: int, h: int, stream: Any) -> _Tables:
        """The tables of a frame size, uploaded on the first stream that needs them. Another stream waits for that
        upload (an event) before its first launch: work on different streams is unordered otherwise."""
        tables = self._sizes.get((w, h))
        if tables is None:
            params, xtab, ytab = kernel_params(self.spec, w, h)
            bufs = []
            for table in (xtab, ytab):
                buf = HostDeviceBuffer(table.shape, np.int32)
                buf.host[:] = table
                buf.upload(stream)
                bufs.append(buf)
            cuda = driver()
            ready = cuda.Event(cuda.event_flags.DISABLE_TIMING)
            ready.record(stream)
            tables = self._sizes[(w, h)] = _Tables(params, bufs[0], bufs[1], ready, stream)
        elif stream.handle not in tables.streams:
            stream.wait_for_event(tables.ready)
            tables.streams.add(stream.handle)
        return tables

    def stage(self, frame: np.ndarray, staging: Optional[HostDeviceBuffer]) -> HostDeviceBuffer:
        """Copy the frame into page-locked memory (the one CPU copy of the GPU path).

        ``staging`` is the frame buffer from the previous call, reused while the frame size stays the same; the one
        used is returned. The caller must not pass a buffer whose previous upload is still pending.
        """
        if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
            raise ValueError(f"GPU preprocessing takes uint8 BGR frames (H, W, 3), got {frame.dtype} {frame.shape}")
        if staging is None or staging.host.shape != frame.shape:
            if staging is not None:
                staging.free()
            staging = HostDeviceBuffer(frame.shape, np.uint8)
        np.copyto(staging.host, frame)
        return staging

    def enqueue(self, frame: np.ndarray, staging: Optional[HostDeviceBuffer], dst_ptr: int, stream: Any) -> HostDeviceBuffer:
        """``stage``, then upload and launch the kernel into ``dst_ptr`` on ``stream``; returns the staging buffer."""
        staging = self.stage(frame, staging)
        staging.upload(stream)
        self.launch(staging, dst_ptr, stream)
        return staging

    def launch(self, staging: HostDeviceBuffer, dst_ptr: int, stream: Any) -> None:
        """The kernel alone, on a frame already uploaded into ``staging``."""
        h, w = staging.host.shape[:2]
        t = self._tables(w, h, stream)
        args = (np.uintp(staging.ptr), np.uintp(t.xtab.ptr), np.uintp(t.ytab.ptr), np.uintp(dst_ptr), t.params)
        self._kernel(*args, block=_BLOCK, grid=self._grid, stream=stream)

    def free(self) -> None:
        """Release the tap tables (call with the context current)."""
        for t in self._sizes.values():
            t.xtab.free()
            t.ytab.free()
        self._sizes.clear()
