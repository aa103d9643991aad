"""The CUDA preprocessing kernel (``preprocess.cu``) behind the same ``PreprocessSpec`` as the CPU ``Preprocessor``.

One kernel per source format reads the frame where it lies and writes the network input straight into the
destination device buffer (TensorRT's input binding in a run). Where the frame lies depends on its memory:

- a mapped ring buffer (Jetson): the kernel reads it in place through its device pointer, nothing is copied;
- a page-locked ring buffer: it is uploaded as it is, on the caller's stream;
- any other array: it is first copied into a page-locked staging buffer, then uploaded.

The geometry comes from ``plan_resize``, so boxes map back to the frame exactly as on the CPU path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

import numpy as np

from edge.runtime.engines.cuda.memory import CudaContext, HostDeviceBuffer, driver
from edge.runtime.engines.preprocess import PreprocessSpec, Transform, plan_resize
from edge.runtime.sources.frames import Frame
from edge.runtime.sources.pixels import BT601_LIMITED, FORMATS, Colour

KERNEL_SOURCE = Path(__file__).with_name("preprocess.cu")
_BLOCK = (32, 8, 1)
_COEF_SCALE = 2048  # OpenCV's INTER_RESIZE_COEF_SCALE: 11-bit fixed-point weights for uint8 images
_ROW_BYTES = {"bgr": 3, "bgrx": 4, "rgba": 4, "nv12": 1, "yuyv": 2, "uyvy": 2}  # per pixel (NV12: the luma plane)

# The kernel's ``Params`` struct, field for field (all 4-byte members, so the C layout has no padding).
PARAMS_DTYPE = np.dtype(
    [
        ("src_w", "<i4"),
        ("src_h", "<i4"),
        ("pitch", "<i4"),
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
        ("y_offset", "<i4"),
        ("c_y", "<i4"),
        ("cr_r", "<i4"),
        ("cb_g", "<i4"),
        ("cr_g", "<i4"),
        ("cb_b", "<i4"),
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


def kernel_params(
    spec: PreprocessSpec, frame_w: int, frame_h: int, fmt: str = "bgr", colour: Colour = BT601_LIMITED
) -> Tuple[np.void, np.ndarray, np.ndarray]:
    """The kernel's arguments for one frame size and format: the Params struct and the column and row tap tables
    (source pixel indices; the kernel finds the bytes from the format)."""
    new_w, new_h, tf = plan_resize(spec, frame_w, frame_h)
    a, b = spec.channel_affine()
    p = np.zeros((), PARAMS_DTYPE)
    p["src_w"], p["src_h"], p["pitch"] = frame_w, frame_h, frame_w * _ROW_BYTES[fmt]
    p["dst_w"], p["dst_h"] = spec.width, spec.height
    p["roi_x"], p["roi_y"], p["roi_w"], p["roi_h"] = int(tf.pad_x), int(tf.pad_y), new_w, new_h
    p["pad"] = spec.pad_value
    p["swap_rb"] = int(spec.color == "rgb")
    p["nchw"] = int(spec.layout == "nchw")
    p["a"], p["b"] = a, b
    for key in ("y_offset", "c_y", "cr_r", "cb_g", "cr_g", "cb_b"):
        p[key] = getattr(colour, key)
    return p[()], linear_taps(new_w, frame_w), linear_taps(new_h, frame_h)


def as_frame(frame: Union[Frame, np.ndarray]) -> Frame:
    """A plain array is a BGR frame without a ring buffer (staged through page-locked memory)."""
    return frame if isinstance(frame, Frame) else Frame(0, 0.0, frame)


def _kernel_module(ctx: CudaContext) -> Any:
    """preprocess.cu, loaded once per context; nvcc runs once per machine (pycuda caches the binary on disk)."""
    if "preprocess" not in ctx.cache:
        from pycuda.compiler import SourceModule

        ctx.cache["preprocess"] = SourceModule(KERNEL_SOURCE.read_text(), no_extern_c=True)
    return ctx.cache["preprocess"]


class _Tables:
    """A frame size's tap tables on the GPU, and the event that says their upload is done."""

    def __init__(self, xtab: HostDeviceBuffer, ytab: HostDeviceBuffer, ready: Any, stream: Any) -> None:
        self.xtab, self.ytab, self.ready = xtab, ytab, ready
        self.streams = {stream.handle}  # streams already ordered after the upload


class FrameInput:
    """Where one buffer set's frame goes on its way to the kernel: ``prepare`` decides, on the CPU, and ``enqueue``
    uploads (unless mapped). Owned by a buffer set, so one frame's upload never races another's."""

    def __init__(self) -> None:
        self.staging: Optional[HostDeviceBuffer] = None  # a pageable frame's page-locked copy and its device twin
        self.device: Any = None  # device memory a page-locked ring buffer is uploaded into
        self.device_bytes = 0
        self.upload: Optional[np.ndarray] = None  # the host array to upload for this frame; None when mapped
        self.src_ptr = 0  # the device address the kernel reads the frame from
        self.size = (0, 0)  # the frame's width and height
        self.path = ""  # mapped | pinned | staged: how the last frame travelled

    def free(self) -> None:
        if self.staging is not None:
            self.staging.free()
        if self.device is not None:
            self.device.free()
        self.staging = self.device = self.upload = None


class GpuPreprocessor:
    """Frame -> network input on the GPU; ``prepare``/``enqueue`` need the context current (``CudaContext.active()``)."""

    def __init__(self, spec: PreprocessSpec, ctx: CudaContext) -> None:
        self.spec = spec
        with ctx.active():
            module = _kernel_module(ctx)
            self._kernels = {fmt: module.get_function(f"preprocess_{spec.dtype}_{fmt}") for fmt in FORMATS}
        # Prepared launches pack the arguments with one struct format, not a look at each argument per call: a few
        # microseconds of the launch's Python overhead, which at 720p is a fifth of the upload.
        for kernel in self._kernels.values():
            kernel.prepare([np.uintp] * 4 + [PARAMS_DTYPE])
        # per frame size; a camera has one size, so each is filled once
        self._sizes: Dict[Tuple[int, int], _Tables] = {}
        self._params: Dict[Tuple[int, int, str, Colour], bytes] = {}
        self._grid = ((spec.width + _BLOCK[0] - 1) // _BLOCK[0], (spec.height + _BLOCK[1] - 1) // _BLOCK[1], 1)

    def transform(self, frame: Union[Frame, np.ndarray]) -> Transform:
        """The frame's geometry alone: all the CPU has to do for a frame on the GPU path (no CUDA call)."""
        w, h = as_frame(frame).size
        return plan_resize(self.spec, w, h)[2]

    def _tables(self, w: int, h: int, stream: Any) -> _Tables:
        """The tables of a frame size, uploaded on the first stream that needs them. Another stream waits for that
        upload (an event) before its first launch: work on different streams is unordered otherwise."""
        tables = self._sizes.get((w, h))
        if tables is None:
            _, xtab, ytab = kernel_params(self.spec, w, h)
            bufs = []
            for table in (xtab, ytab):
                buf = HostDeviceBuffer(table.shape, np.int32)
                buf.host[:] = table
                buf.upload(stream)
                bufs.append(buf)
            cuda = driver()
            ready = cuda.Event(cuda.event_flags.DISABLE_TIMING)
            ready.record(stream)
            tables = self._sizes[(w, h)] = _Tables(bufs[0], bufs[1], ready, stream)
        elif stream.handle not in tables.streams:
            stream.wait_for_event(tables.ready)
            tables.streams.add(stream.handle)
        return tables

    def prepare(self, frame: Union[Frame, np.ndarray], fin: FrameInput) -> None:
        """The CPU's part, before any stream work: decide how the frame reaches the kernel. Only a frame outside
        page-locked memory is copied (into ``fin``'s staging buffer, reused while its shape stays the same). The
        caller must not pass a ``fin`` whose previous upload is still pending."""
        frame = as_frame(frame)
        fin.size = frame.size  # refuses an array that does not hold its format, before any copy or launch
        image, buf = frame.image, frame.buffer
        if buf is not None and buf.device_ptr is not None:
            fin.upload, fin.src_ptr, fin.path = None, int(buf.device_ptr), "mapped"
        elif buf is not None and buf.pinned:
            if fin.device is None or fin.device_bytes < image.nbytes:
                if fin.device is not None:
                    fin.device.free()
                fin.device, fin.device_bytes = driver().mem_alloc(max(1, image.nbytes)), image.nbytes
            fin.upload, fin.src_ptr, fin.path = image, int(fin.device), "pinned"
        else:
            if fin.staging is None or fin.staging.host.shape != image.shape:
                if fin.staging is not None:
                    fin.staging.free()
                fin.staging = HostDeviceBuffer(image.shape, np.uint8)
            np.copyto(fin.staging.host, image)
            fin.upload, fin.src_ptr, fin.path = fin.staging.host, fin.staging.ptr, "staged"

    def enqueue(self, frame: Union[Frame, np.ndarray], fin: FrameInput, dst_ptr: int, stream: Any) -> None:
        """Upload the prepared frame on ``stream`` (unless the kernel reads it mapped), then the kernel."""
        frame = as_frame(frame)
        if fin.upload is not None:
            driver().memcpy_htod_async(fin.src_ptr, fin.upload, stream)
        self._launch(frame, fin.size, fin.src_ptr, dst_ptr, stream)

    def launch(self, frame: Union[Frame, np.ndarray], src_ptr: int, dst_ptr: int, stream: Any) -> None:
        """The kernel alone, on a frame already readable by the GPU at ``src_ptr``."""
        frame = as_frame(frame)
        self._launch(frame, frame.size, src_ptr, dst_ptr, stream)

    def _launch(self, frame: Frame, size: Tuple[int, int], src_ptr: int, dst_ptr: int, stream: Any) -> None:
        w, h = size
        t = self._tables(w, h, stream)
        key = (w, h, frame.format, frame.colour)
        params = self._params.get(key)
        if params is None:
            params = self._params[key] = kernel_params(self.spec, w, h, frame.format, frame.colour)[0].tobytes()
        kernel = self._kernels[frame.format]
        kernel.prepared_async_call(self._grid, _BLOCK, stream, src_ptr, t.xtab.ptr, t.ytab.ptr, dst_ptr, params)

    def free(self) -> None:
        """Release the tap tables (call with the context current)."""
        for t in self._sizes.values():
            t.xtab.free()
            t.ytab.free()
        self._sizes.clear()
