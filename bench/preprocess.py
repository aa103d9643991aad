"""Frames to the network input on the GPU against the CPU path, per frame, on real frames, in one run.

Frames: Megamind.avi (the demo clip, 720x528) scaled up to 720p, 1080p and 4K with INTER_CUBIC, so the content is
real; the spec is the demo's input (BlazeFace: 256x256 NHWC float32 in [-1, 1], letterbox). For each size:

  CPU ms     OpenCV + numpy (Preprocessor) on the decoded BGR frame: what preprocess: cpu costs
  GPU ms     capture buffer -> tensor ready: the frame sits in a page-locked ring buffer (where the source decoded
             it), is uploaded on the stream and the kernel writes the tensor; wall clock, synchronised per frame
  2 sets ms  the same per frame with two buffer sets in flight, as edge-run runs it (frame k+1 is enqueued on the
             other stream while frame k's copy and kernel run): total time / frames
  mapped ms  the same frame in a mapped ring buffer: no upload, the kernel reads it in place (on a Jetson, where
             this is the default, in shared DRAM; here across PCIe, as a stand-in)
  staged ms  the path before issue 16: copy into page-locked staging memory, upload, kernel
  upload, kernel, mapped kernel   CUDA-event times of the parts
  NV12 kernel   the fused NV12 -> BGR -> tensor kernel on the same frame as NV12, against the BGR kernel

and the issue's targets as ratios: GPU ms <= 1.2 x (upload + kernel) and GPU ms < CPU ms at every size; the NV12
kernel at 4K within 2x of the BGR kernel. Needs a CUDA GPU, pycuda, numpy and OpenCV (no YAML, no ONNX).

    python3 bench/preprocess.py [--iters 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge.runtime.engines.cuda.memory import CudaContext, HostDeviceBuffer, PinnedFrameMemory, driver  # noqa: E402
from edge.runtime.engines.cuda.preprocess import FrameInput, GpuPreprocessor  # noqa: E402
from edge.runtime.engines.preprocess import Preprocessor, PreprocessSpec  # noqa: E402
from edge.runtime.sources.frames import Frame, FrameRing  # noqa: E402
from edge.runtime.sources.pixels import from_bgr  # noqa: E402

SIZES = {"720p": (1280, 720), "1080p": (1920, 1080), "4K": (3840, 2160)}
DEMO_SPEC = PreprocessSpec(256, 256, layout="nhwc", scale=1 / 127.5, offset=-1.0)  # configs/demo.yaml's input


def demo_frame() -> np.ndarray:
    """Frame 125 of Megamind.avi (a face in it) from the edge cache; a test pattern where the cache lacks it."""
    import cv2

    from edge import assets
    from edge.errors import EdgeError

    try:
        path = assets.resolve("megamind", fetch=False)
    except EdgeError as exc:
        print(f"note: {exc}; timing a generated pattern instead (set EDGE_CACHE to a cache that has it)")
        yy, xx = np.mgrid[0:528, 0:720]
        return np.stack([(xx * 255 // 719), (yy * 255 // 527), ((xx + yy) % 256)], axis=-1).astype(np.uint8)
    cap = cv2.VideoCapture(str(path))
    for _ in range(126):
        ok, frame = cap.read()
        assert ok, "Megamind.avi ended early"
    cap.release()
    return frame


def median_ms(fn, iters: int) -> float:
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def event_ms(cuda, stream, fn, iters: int) -> float:
    """Median CUDA-event time of what ``fn`` enqueues on ``stream``."""
    start, end = cuda.Event(), cuda.Event()
    times = []
    for _ in range(iters):
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        times.append(end.time_since(start))
    return statistics.median(times)


def two_sets_ms(cuda, gpu, frame: Frame, out, iters: int) -> float:
    """Per frame with two frames in flight on two streams, each waited for only when its set comes round again;
    median of 5 runs of ``iters`` frames."""
    streams, inputs = [cuda.Stream(), cuda.Stream()], [FrameInput(), FrameInput()]
    outs = [HostDeviceBuffer(out.host.shape, out.host.dtype) for _ in streams]
    runs = []
    for _ in range(6):  # the first run warms up each set's device buffer and the second stream's table wait
        t0 = time.perf_counter()
        for i in range(iters):
            k = i % 2
            streams[k].synchronize()  # this set's previous frame is done: its input may be reused
            gpu.prepare(frame, inputs[k])
            gpu.enqueue(frame, inputs[k], outs[k].ptr, streams[k])
        for stream in streams:
            stream.synchronize()
        runs.append((time.perf_counter() - t0) * 1e3 / iters)
    for fin, buf in zip(inputs, outs):
        fin.free()
        buf.free()
    return statistics.median(runs[1:])


def device_bandwidth(cuda, stream) -> float:
    """Bytes/s of a 1 GiB device-to-device copy (read + write counted), best of 5."""
    n = 1 << 30
    a, b = cuda.mem_alloc(n), cuda.mem_alloc(n)
    start, end = cuda.Event(), cuda.Event()
    best = 0.0
    for _ in range(6):
        start.record(stream)
        cuda.memcpy_dtod_async(b, a, n, stream)
        end.record(stream)
        end.synchronize()
        best = max(best, 2 * n / (end.time_since(start) * 1e-3))
    a.free()
    b.free()
    return best


def ring_frame(ring: FrameRing, image: np.ndarray, fmt: str = "bgr") -> Frame:
    """``image`` in a ring buffer, as a source leaves a decoded frame."""
    buf = ring.acquire(image.shape)
    np.copyto(buf.array, image)
    return Frame(0, 0.0, buf.array, format=fmt, buffer=buf)


def measure(cuda, stream, cpu, gpu, rings, base, w, h, out, iters) -> dict:
    import cv2

    bgr = cv2.resize(base, (w, h), interpolation=cv2.INTER_CUBIC)
    pinned, mapped = ring_frame(rings["pinned"], bgr), ring_frame(rings["mapped"], bgr)
    nv12 = ring_frame(rings["pinned"], from_bgr(bgr, "nv12"), "nv12")
    staged = Frame(0, 0.0, bgr)  # pageable: copied into page-locked staging first
    inputs = {name: FrameInput() for name in ("pinned", "mapped", "staged", "nv12")}

    def path(frame: Frame, fin: FrameInput) -> None:
        gpu.prepare(frame, fin)
        gpu.enqueue(frame, fin, out.ptr, stream)
        stream.synchronize()

    for frame, name in ((pinned, "pinned"), (mapped, "mapped"), (staged, "staged"), (nv12, "nv12")):
        path(frame, inputs[name])  # warm-up: tap tables, device buffers, module load
    r = {"cpu": median_ms(lambda: cpu(bgr), iters)}
    r["gpu"] = median_ms(lambda: path(pinned, inputs["pinned"]), iters)
    r["two_sets"] = two_sets_ms(cuda, gpu, pinned, out, iters)
    r["mapped"] = median_ms(lambda: path(mapped, inputs["mapped"]), iters)
    r["staged"] = median_ms(lambda: path(staged, inputs["staged"]), iters)
    src = inputs["pinned"].src_ptr  # the device copy of the frame, uploaded by the GPU path above
    r["upload"] = event_ms(cuda, stream, lambda: cuda.memcpy_htod_async(src, pinned.image, stream), iters)
    r["kernel"] = event_ms(cuda, stream, lambda: gpu.launch(pinned, src, out.ptr, stream), iters)
    r["mapped_kernel"] = event_ms(cuda, stream, lambda: gpu.launch(mapped, mapped.buffer.device_ptr, out.ptr, stream), iters)
    nv12_src = inputs["nv12"].src_ptr
    r["nv12_kernel"] = event_ms(cuda, stream, lambda: gpu.launch(nv12, nv12_src, out.ptr, stream), iters)
    r["bytes"] = bgr.nbytes + out.nbytes
    for fin in inputs.values():
        fin.free()
    for frame in (pinned, mapped, nv12):
        frame.release()
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=200)
    args = ap.parse_args()
    spec = DEMO_SPEC
    cpu = Preprocessor(spec)
    ctx = CudaContext(0)
    gpu = GpuPreprocessor(spec, ctx)
    cuda = driver()
    base = demo_frame()
    memories = {"pinned": PinnedFrameMemory(ctx, mapped=False), "mapped": PinnedFrameMemory(ctx, mapped=True)}
    rings = {name: FrameRing(2, memory) for name, memory in memories.items()}
    rows = {}
    with ctx.active():
        stream = cuda.Stream()
        bw = device_bandwidth(cuda, stream)
        kind = "integrated" if ctx.integrated else "discrete"
        print(f"GPU {ctx.name} (compute capability {ctx.compute_capability}, {kind}); device-to-device copy {bw / 1e12:.2f} TB/s")
        print(f"input {spec.width}x{spec.height} {spec.layout} {spec.dtype} {spec.resize}; median of {args.iters} runs")
        out = HostDeviceBuffer(spec.input_shape, np.dtype(spec.dtype))
        for label, (w, h) in SIZES.items():
            rows[label] = measure(cuda, stream, cpu, gpu, rings, base, w, h, out, args.iters)
        out.free()
        gpu.free()
        for ring in rings.values():
            ring.close()
    ctx.close()

    head = [
        "frame",
        "CPU ms",
        "GPU ms",
        "2 sets ms",
        "mapped ms",
        "staged ms",
        "upload",
        "kernel",
        "mapped kernel",
        "NV12 kernel",
    ]
    print("".join(f"{h:>14}" if i else f"{h:<7}" for i, h in enumerate(head)))
    for label, r in rows.items():
        keys = ("cpu", "gpu", "two_sets", "mapped", "staged", "upload", "kernel", "mapped_kernel", "nv12_kernel")
        cells = [r[k] for k in keys]
        print(f"{label:<7}" + "".join(f"{v:>14.4f}" for v in cells))
    print(
        "ms per frame, median. GPU/mapped/staged ms: wall clock from the frame in host memory to the tensor ready\n"
        "(synchronised), Python's launch overhead included; upload and kernels: CUDA events."
    )
    verdicts = []
    for label, r in rows.items():
        ratio = r["gpu"] / (r["upload"] + r["kernel"])
        verdicts.append(ratio <= 1.2 and r["gpu"] < r["cpu"])
        print(
            f"{label:<6} GPU path / (upload + kernel) = {ratio:.2f} (target <= 1.2: {'PASS' if ratio <= 1.2 else 'FAIL'}); "
            f"CPU / GPU path = {r['cpu'] / r['gpu']:.2f} (target > 1: {'PASS' if r['gpu'] < r['cpu'] else 'FAIL'}); "
            f"2 sets / (upload + kernel) = {r['two_sets'] / (r['upload'] + r['kernel']):.2f}; "
            f"mapped / GPU path = {r['mapped'] / r['gpu']:.2f}; staged / GPU path = {r['staged'] / r['gpu']:.2f}"
        )
    four_k = rows["4K"]
    nv12 = four_k["nv12_kernel"] / four_k["kernel"]
    print(f"4K NV12 kernel / BGR kernel = {nv12:.2f} (target <= 2: {'PASS' if nv12 <= 2.0 else 'FAIL'})")
    bound = four_k["kernel"] / (four_k["bytes"] / bw * 1e3)
    print(f"4K BGR kernel / bandwidth bound (one pass over frame + tensor) = {bound:.2f} (issue 12's target <= 3)")
    print("all targets: " + ("PASS" if all(verdicts) and nv12 <= 2.0 else "FAIL"))
    return 0


if __name__ == "__main__":
    from edge.errors import guard

    # Without pycuda or a GPU: the one line edge's commands print, not a traceback.
    raise SystemExit(guard("bench/preprocess.py", lambda _: main(), argparse.Namespace()))
