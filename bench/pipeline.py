"""Pipelined loop vs sequential loop on the demo, side by side in one run.

    python bench/pipeline.py [--frames 270] [--repeats 3]

Prints, for the same frames of the demo clip (BlazeFace on ONNX Runtime, CPU):
  - sequential FPS (every stage in turn on one thread) and each stage's mean time there,
  - pipelined FPS (one thread per stage, bounded queues),
  - the slowest stage's rate (1 / its sequential mean) and the ratio pipelined FPS / slowest-stage rate
    (target >= 0.9: the pipeline runs as fast as its slowest stage allows),
  - the runner's own overhead per frame outside the stages' work: CPU time per frame of the same pipeline
    with every stage doing nothing (target <= 0.5 ms).
Runs alternate sequential/pipelined so machine noise hits both alike; the best of --repeats is kept for each.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge.config import load_config  # noqa: E402
from edge.runtime.postprocess import Result  # noqa: E402
from edge.runtime.runner import Runner  # noqa: E402
from edge.runtime.schedule.pipeline import Pipeline  # noqa: E402
from edge.runtime.sources import Source  # noqa: E402

DEMO = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"


def demo_run(frames: int, pipelined: bool, threads: int) -> dict:
    cfg = load_config(DEMO, values={"pipeline.frames": frames, "logging.status": False, "threads": threads})
    runner = Runner(cfg)
    p = runner.pipeline
    t0 = time.perf_counter()
    if pipelined:
        p.start()
        p.wait()
    else:
        p.run_inline()
    wall = time.perf_counter() - t0
    summary = p.metrics.summary()
    runner._close(failed=False)
    stage_ms = {k: v["mean"] for k, v in summary["latency_ms"].items() if k != "end_to_end"}
    return {"fps": summary["frames"] / wall, "stage_ms": stage_ms, "frames": summary["frames"]}


class MemorySource(Source):
    description, live = "memory", False

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.image = n, np.zeros((8, 8, 3), np.uint8)

    def read(self):
        return self._frame(self.image) if self._index < self.n else None


class NullSink:
    name, wants_image = "null", False

    def write(self, frame, result, record, annotated) -> None:
        pass

    def close(self, failed: bool = False) -> None:
        return None


def overhead_ms(frames: int) -> float:
    """CPU ms per frame spent by the pipeline machinery itself (threads, queues, timing, records)."""
    empty = Result()
    p = Pipeline(MemorySource(frames), lambda img: (img, None), lambda feeds: feeds, "x", lambda out, tf: empty, [NullSink()])
    c0 = time.process_time()
    p.start()
    p.wait()
    return (time.process_time() - c0) / frames * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=270, help="frames per run (the clip has 270)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--threads", type=int, default=0, help="ONNX Runtime intra-op threads (0 = the runner's default: all cores but one)"
    )
    args = ap.parse_args()

    demo_run(20, False, args.threads)  # warm-up: model load, first-inference allocations, file cache
    seq, pipe = [], []
    for _ in range(args.repeats):
        seq.append(demo_run(args.frames, False, args.threads))
        pipe.append(demo_run(args.frames, True, args.threads))
    best_seq = max(seq, key=lambda r: r["fps"])
    best_pipe = max(pipe, key=lambda r: r["fps"])
    slowest_stage, slowest_ms = max(best_seq["stage_ms"].items(), key=lambda kv: kv[1])
    slowest_rate = 1e3 / slowest_ms
    overhead = min(overhead_ms(2000) for _ in range(args.repeats))

    print(f"demo: BlazeFace 256 on ONNX Runtime (CPU), {args.frames} frames of Megamind.avi, best of {args.repeats}")
    print("sequential stage means (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in best_seq["stage_ms"].items()))
    print(f"sequential FPS        {best_seq['fps']:8.1f}")
    print(f"pipelined FPS         {best_pipe['fps']:8.1f}   (x{best_pipe['fps'] / best_seq['fps']:.2f} over sequential)")
    print(f"slowest stage         {slowest_stage} {slowest_ms:.2f} ms = {slowest_rate:.1f} frames/s")
    ratio = best_pipe["fps"] / slowest_rate
    print(f"ratio pipelined FPS / slowest-stage rate = {ratio:.3f}   (target >= 0.9: {'PASS' if ratio >= 0.9 else 'FAIL'})")
    print(
        f"runner overhead per frame (CPU, empty stages) = {overhead:.3f} ms   (target <= 0.5 ms: {'PASS' if overhead <= 0.5 else 'FAIL'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
