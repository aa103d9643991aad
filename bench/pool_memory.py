"""Memory of one pool process against one process per source, side by side on a GPU machine.

    python bench/pool_memory.py [--sources 4] [--engines 3] [--size 640] [--frame 1920x1080]

What each layout holds, allocated with edge's own classes (edge.runtime.engines.cuda.memory, the FrameRing) the way
the TensorRT backend and the runners allocate them, short of TensorRT itself (no TensorRT engine runs here):
  - pool: one process, one retained primary CUDA context, per engine the backend's buffer sets (a stream, timing
    events, a page-locked and a device buffer per I/O tensor of a YOLO head: 1x3xSxS float input, 1x84xN output), per
    source a frame ring of pool.queue_size + engines + 4 host frames (CPU preprocessing);
  - single: one process per source, each with its own context, one engine's buffer sets and the single-source
    pipeline's frame ring (frames_in_flight(pipeline.queue_size)).
The children allocate, say so, and wait; the parent reads each one's GPU memory from NVML (used memory per process)
and its resident host memory from /proc, then prints the sums and the ratio single / pool. Engine weights and
TensorRT's activation memory are not in either (they would be once per engine in the pool, once per process
otherwise), and on a Jetson CPU and GPU share one DRAM: the sum of both columns is what a Jetson would feel.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TENSORS = 2  # input and output of the head
SETS = 2  # edge.runtime.engines.tensorrt.BUFFER_SETS


def child(engines: int, sources: int, ring: int, size: int, frame: tuple) -> None:
    import numpy as np

    from edge.runtime.engines.cuda.memory import CudaContext, HostDeviceBuffer, driver, timing_event
    from edge.runtime.sources.frames import FrameRing

    anchors = (size // 8) ** 2 + (size // 16) ** 2 + (size // 32) ** 2
    held = []
    contexts = [CudaContext(0) for _ in range(engines)]  # each backend retains the primary context
    with contexts[0].active():
        for _ in range(engines):
            for _ in range(SETS):
                held.append(driver().Stream())
                held += [timing_event() for _ in range(4)]
                held.append(HostDeviceBuffer((1, 3, size, size), np.float32))
                held.append(HostDeviceBuffer((1, 84, anchors), np.float32))
        driver().Context.synchronize()
    for _ in range(sources):
        r = FrameRing(ring)
        bufs = [r.acquire((frame[1], frame[0], 3)) for _ in range(ring)]
        for b in bufs:
            b.array[...] = 1  # touched, so resident
        held.append((r, bufs))
    print("ready", flush=True)
    sys.stdin.readline()


def measure(procs: list) -> tuple:
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    used = {p.pid: p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    gpu = sum(used.get(p.pid, 0) or 0 for p in procs)
    rss = 0
    for p in procs:
        for line in Path(f"/proc/{p.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss += int(line.split()[1]) * 1024
    return gpu, rss


def run(layout: list) -> tuple:
    """Start one child per (engines, sources, ring) in ``layout``, all at once; their summed memory."""
    procs = []
    try:
        for engines, sources, ring, size, frame in layout:
            args = [
                sys.executable,
                __file__,
                "--child",
                str(engines),
                str(sources),
                str(ring),
                str(size),
                f"{frame[0]}x{frame[1]}",
            ]
            procs.append(subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        for p in procs:
            assert p.stdout.readline().strip() == "ready", "a child failed"
        time.sleep(0.5)
        return measure(procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.stdin.write("\n")
                p.stdin.flush()
            p.wait(30)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        e, s, ring, size = (int(v) for v in sys.argv[2:6])
        w, h = (int(v) for v in sys.argv[6].split("x"))
        child(e, s, ring, size, (w, h))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sources", type=int, default=4)
    ap.add_argument("--engines", type=int, default=3)
    ap.add_argument("--size", type=int, default=640)
    ap.add_argument("--frame", default="1920x1080")
    args = ap.parse_args()
    from edge.config import PipelineConfig, PoolConfig
    from edge.runtime.schedule.pipeline import frames_in_flight

    frame = tuple(int(v) for v in args.frame.split("x"))
    pool_ring = PoolConfig().queue_size + args.engines + 4
    single_ring = frames_in_flight(PipelineConfig().queue_size)
    pool = run([(args.engines, args.sources, pool_ring, args.size, frame)])
    single = run([(1, 1, single_ring, args.size, frame)] * args.sources)
    mib = 1 << 20
    print(f"{args.sources} sources, {args.engines} engines, input {args.size}x{args.size}, frames {args.frame}")
    print(f"{'layout':<34}{'GPU MiB':>9}{'host MiB':>10}{'sum MiB':>9}")
    print(f"{'one pool process':<34}{pool[0] / mib:>9.0f}{pool[1] / mib:>10.0f}{(pool[0] + pool[1]) / mib:>9.0f}")
    print(
        f"{f'{args.sources} single-source processes':<34}{single[0] / mib:>9.0f}{single[1] / mib:>10.0f}{(single[0] + single[1]) / mib:>9.0f}"
    )
    print(
        f"ratio single / pool: GPU {single[0] / max(pool[0], 1):.2f}, host {single[1] / max(pool[1], 1):.2f}, "
        f"sum {(single[0] + single[1]) / max(pool[0] + pool[1], 1):.2f}"
    )


if __name__ == "__main__":
    main()
