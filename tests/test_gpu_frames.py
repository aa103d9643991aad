"""GPU machine tests of issue 16: every camera format through the fused kernel against OpenCV cvtColor + the CPU
preprocessing, the ring of frame buffers on real page-locked and mapped memory, and the kernel reading a mapped
frame in place. Run them with ``python3 -m pytest -m gpu tests/test_gpu_frames.py`` (or ``scripts/gpu_check.sh``).

On the H200 mapped page-locked memory stands in for a Jetson's shared DRAM: the kernel reads it across PCIe there,
so these tests show the path is correct, not what it costs on a Jetson.
"""

from __future__ import annotations

import threading

import cv2
import numpy as np
import pytest

from edge.runtime.engines.preprocess import Preprocessor, PreprocessSpec
from edge.runtime.sources.frames import Frame, FrameRing
from edge.runtime.sources.pixels import BT601_LIMITED, FORMATS, colour, from_bgr
from tests.kernel_reference import emulate
from tests.test_gpu_trt import SIZES, SPECS

pytestmark = pytest.mark.gpu

COLOURS = [colour(m, r) for m in ("bt601", "bt709") for r in ("limited", "full")]
CASES = [(fmt, col) for fmt in FORMATS for col in (COLOURS if FORMATS[fmt].yuv else [BT601_LIMITED])]


def gpu_run(ctx, spec, frames, memory=None):
    """Each frame through prepare + enqueue on one stream, as a buffer set does; outputs and each frame's path."""
    from edge.runtime.engines.cuda.memory import HostDeviceBuffer, driver
    from edge.runtime.engines.cuda.preprocess import FrameInput, GpuPreprocessor

    cuda = driver()
    pre = GpuPreprocessor(spec, ctx)
    outs, paths = [], []
    with ctx.active():
        stream = cuda.Stream()
        out = HostDeviceBuffer(spec.input_shape, np.dtype(spec.dtype))
        fin = FrameInput()
        try:
            for frame in frames:
                pre.prepare(frame, fin)
                pre.enqueue(frame, fin, out.ptr, stream)
                out.download(stream)
                stream.synchronize()
                outs.append(out.host.copy())
                paths.append(fin.path)
        finally:
            fin.free()
            out.free()
            pre.free()
    return outs, paths


@pytest.mark.parametrize("fmt, col", CASES, ids=[f"{f}-{c.key}" if FORMATS[f].yuv else f for f, c in CASES])
def test_every_format_matches_cvtcolor_and_the_cpu_preprocessing(cuda_ctx, megamind_frames, fmt, col):
    """Real frames of every size and spec of tests/test_gpu_trt.py, laid out as the camera format: the kernel
    equals its numpy copy bit for bit, and OpenCV cvtColor + Preprocessor within 1/255 of the pixel range."""
    frames = []
    for index, base in megamind_frames.items():
        for w, h in SIZES:
            bgr = base if (w, h) == base.shape[1::-1] else cv2.resize(base, (w, h), interpolation=cv2.INTER_AREA)
            frames.append(Frame(index, 0.0, from_bgr(bgr, fmt), format=fmt, colour=col))
    converted = [f.bgr() for f in frames]  # OpenCV's cvtColor (or the same arithmetic where OpenCV has none)
    for name, spec in SPECS.items():
        cpu = Preprocessor(spec)
        level = float(np.abs(spec.channel_affine()[0]).max()) if spec.dtype != "uint8" else 1.0
        got, paths = gpu_run(cuda_ctx, spec, frames)
        assert set(paths) == {"staged"}
        worst = 0.0
        for frame, bgr, out in zip(frames, converted, got):
            np.testing.assert_array_equal(out, emulate(spec, frame), err_msg=f"{name} {frame.size}")
            diff = np.abs(out.astype(np.float64) - cpu(bgr)[0].astype(np.float64))
            worst = max(worst, float(diff.max()) / level)
            assert diff.max() <= level * (1 + 1e-3) + (2e-3 if spec.dtype == "float16" else 1e-6), (name, frame.size)
        print(f"{fmt} {col.key} {name}: {len(frames)} frames, max |GPU - OpenCV| {worst:.2f} intensity levels")


@pytest.mark.parametrize("mapped", [True, False], ids=["mapped", "pinned"])
def test_ring_recycles_real_page_locked_memory_through_the_kernel(cuda_ctx, megamind, mapped):
    """A video decoded into the ring (real cuMemHostAlloc memory, mapped or not), each frame through the kernel
    while two earlier ones are still held: the right output every time, three buffers for 60 frames, the kernel
    reading mapped buffers where they lie and uploading page-locked ones as they are, all freed at the end."""
    from edge.config import SourceConfig
    from edge.runtime.engines.cuda.memory import HostDeviceBuffer, PinnedFrameMemory, driver
    from edge.runtime.engines.cuda.preprocess import FrameInput, GpuPreprocessor
    from edge.runtime.sources import open_source

    spec = SPECS["demo nhwc [-1,1] fp32 letterbox"]
    cpu = Preprocessor(spec)
    memory = PinnedFrameMemory(cuda_ctx, mapped=mapped)
    src = open_source(SourceConfig(uri=str(megamind)), threading.Event())
    src.ring = FrameRing(4, memory)
    cuda = driver()
    pre, fin, held = GpuPreprocessor(spec, cuda_ctx), FrameInput(), []
    with cuda_ctx.active():
        stream = cuda.Stream()
        out = HostDeviceBuffer(spec.input_shape, np.float32)
        try:
            for _ in range(60):
                f = src.read()
                assert isinstance(f.image.base, cuda.HostAllocation) and (f.buffer.device_ptr is not None) is mapped
                pre.prepare(f, fin)
                pre.enqueue(f, fin, out.ptr, stream)
                out.download(stream)
                stream.synchronize()
                assert fin.path == ("mapped" if mapped else "pinned")
                np.testing.assert_allclose(out.host, cpu(f.image)[0], atol=1 / 255 + 1e-6)
                held.append(f)
                if len(held) > 2:
                    held.pop(0).release()
        finally:
            fin.free()
            out.free()
            pre.free()
    src.close()
    for f in held:
        f.release()
    assert src.ring.allocations == 3 and src.ring.in_use == 0 and src.ring.info()["frames"] == 60
    src.ring.close()
    memory.close()


def test_mapped_kernel_reads_the_frame_in_place(cuda_ctx):
    """The kernel reads the mapped buffer through its device pointer: change the host bytes, launch again with
    nothing uploaded, and the output follows."""
    from edge.runtime.engines.cuda.memory import HostDeviceBuffer, PinnedFrameMemory, driver
    from edge.runtime.engines.cuda.preprocess import GpuPreprocessor

    spec = PreprocessSpec(64, 64, layout="nhwc", color="bgr", dtype="uint8", resize="stretch")
    memory = PinnedFrameMemory(cuda_ctx, mapped=True)
    ring = FrameRing(1, memory)
    buf = ring.acquire((64, 64, 3))
    frame = Frame(0, 0.0, buf.array, buffer=buf)
    pre = GpuPreprocessor(spec, cuda_ctx)
    cuda = driver()
    with cuda_ctx.active():
        stream = cuda.Stream()
        out = HostDeviceBuffer(spec.input_shape, np.uint8)
        try:
            for value in (17, 201):
                buf.array[:] = value  # the CPU writes the frame where it was decoded; no copy, no upload
                pre.launch(frame, buf.device_ptr, out.ptr, stream)
                out.download(stream)
                stream.synchronize()
                assert (out.host == value).all()
        finally:
            out.free()
            pre.free()
    buf.release()
    ring.close()
    memory.close()
