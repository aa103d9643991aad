"""The CUDA preprocessing kernel against the CPU path (OpenCV + numpy), on real frames, to the demo's input.

Frames: Megamind.avi (the demo clip, 720x528) scaled up to 720p, 1080p and 4K with INTER_CUBIC, so the content is
real. For each size it prints the CPU path's ms per frame, the GPU path's ms per frame (copy into page-locked
memory + upload + kernel, as edge-run does it) and its parts, the ratio, and the kernel's achieved bytes/s against
the device's memory bandwidth (measured here with a device-to-device copy). Needs a CUDA GPU and pycuda.

    python bench/preprocess.py [--iters 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge.config import load_config  # noqa: E402
from edge.runtime.backends import TensorInfo  # noqa: E402
from edge.runtime.cuda.memory import CudaContext, HostDeviceBuffer, driver  # noqa: E402
from edge.runtime.cuda.preprocess import GpuPreprocessor  # noqa: E402
from edge.runtime.model import preprocess_spec  # noqa: E402
from edge.runtime.preprocess import Preprocessor  # noqa: E402

DEMO = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"
SIZES = {"720p": (1280, 720), "1080p": (1920, 1080), "4K": (3840, 2160)}


def demo_frame() -> np.ndarray:
    import cv2

    from edge import assets

    cap = cv2.VideoCapture(str(assets.resolve("megamind", quiet=True)))
    for _ in range(125):  # a frame with a face in it
        ok, frame = cap.read()
        assert ok
    cap.release()
    return frame


def median_ms(fn, iters: int) -> float:
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


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


def measure(cuda, stream, cpu, gpu, frame, staging, out, bw, iters) -> tuple:
    """(CPU ms, GPU path ms, copy-to-pinned ms, upload ms, kernel ms, bytes, bound ms); GPU parts from CUDA events."""
    cpu_ms = median_ms(lambda: cpu(frame), iters)

    def gpu_path() -> None:
        gpu.enqueue(frame, staging, out.ptr, stream)
        stream.synchronize()

    gpu_ms = median_ms(gpu_path, iters)
    copy_ms = median_ms(lambda: np.copyto(staging.host, frame), iters)
    ev = [cuda.Event() for _ in range(3)]
    up, kern = [], []
    for _ in range(iters):
        ev[0].record(stream)
        staging.upload(stream)
        ev[1].record(stream)
        gpu.launch(staging, out.ptr, stream)
        ev[2].record(stream)
        ev[2].synchronize()
        up.append(ev[1].time_since(ev[0]))
        kern.append(ev[2].time_since(ev[1]))
    nbytes = frame.nbytes + out.nbytes  # one pass over the frame plus the tensor written
    bound_ms = nbytes / bw * 1e3
    return cpu_ms, gpu_ms, copy_ms, statistics.median(up), statistics.median(kern), nbytes, bound_ms


def main() -> int:
    import cv2

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=200)
    args = ap.parse_args()
    cfg = load_config(DEMO)
    spec = preprocess_spec(cfg, TensorInfo("input", (1, 256, 256, 3), np.dtype(np.float32)))
    cpu = Preprocessor(spec)
    ctx = CudaContext(0)
    gpu = GpuPreprocessor(spec, ctx)
    cuda = driver()
    base = demo_frame()
    rows = []
    with ctx.active():
        stream = cuda.Stream()
        bw = device_bandwidth(cuda, stream)
        print(f"GPU {ctx.name} (compute capability {ctx.compute_capability}); device-to-device copy {bw / 1e12:.2f} TB/s")
        print(f"demo input {spec.width}x{spec.height} {spec.layout} {spec.dtype} {spec.resize}; median of {args.iters} runs")
        out = HostDeviceBuffer(spec.input_shape, np.dtype(spec.dtype))
        staging = None
        for label, (w, h) in SIZES.items():
            frame = cv2.resize(base, (w, h), interpolation=cv2.INTER_CUBIC)
            staging = gpu.enqueue(frame, staging, out.ptr, stream)  # warm-up: tables, allocation, module load
            stream.synchronize()
            rows.append((label, *measure(cuda, stream, cpu, gpu, frame, staging, out, bw, args.iters)))
        out.free()
        staging.free()
        gpu.free()
    ctx.close()

    print(
        f"{'frame':<7}{'CPU ms':>9}{'GPU ms':>9}{'CPU/GPU':>9}{'copy→pinned':>13}{'upload':>9}{'kernel':>9}{'kernel GB/s':>13}{'x bound':>9}"
    )
    for label, cpu_ms, gpu_ms, copy_ms, up_ms, kern_ms, nbytes, bound_ms in rows:
        print(
            f"{label:<7}{cpu_ms:>9.3f}{gpu_ms:>9.3f}{cpu_ms / gpu_ms:>9.1f}{copy_ms:>13.3f}{up_ms:>9.3f}{kern_ms:>9.4f}"
            f"{nbytes / (kern_ms * 1e-3) / 1e9:>13.0f}{kern_ms / bound_ms:>9.2f}"
        )
    print(
        "GPU ms = copy into page-locked memory + upload + kernel + sync, what edge-run pays per frame; upload and kernel\n"
        "are CUDA-event times (median). 'kernel GB/s' counts one pass over the frame plus the tensor written; 'x bound' is\n"
        "the kernel time over the time those bytes take at the measured copy bandwidth. A downscaling bilinear kernel\n"
        "reads only the source rows it samples, and a launch has a fixed cost of a few microseconds, so small frames sit\n"
        "far above the bound and large ones approach it."
    )
    four_k = rows[-1]
    ratio = four_k[5] / four_k[7]
    print(f"4K kernel within 3x of the bandwidth bound: {ratio:.2f}x ({'PASS' if ratio <= 3.0 else 'FAIL'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
