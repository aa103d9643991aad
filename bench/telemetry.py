"""The demo loop with telemetry sampling at 10 Hz against the same loop without, side by side in one run.

    python bench/telemetry.py [--frames 270] [--repeats 3] [--backend sysfs] [--interval 0.1]

Without a Jetson, the default samples the real sysfs reader over a fake AGX Orin tree (real file reads, the
same parsing as on the device); on a Jetson pass --backend sysfs --sysfs-root /sys, or jtop / tegrastats.
Prints both FPS and the ratio with/without (target >= 0.98). Runs alternate so noise hits both alike.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge.config import load_config  # noqa: E402
from edge.runtime.runner import Runner  # noqa: E402

DEMO = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"


def fps(frames: int, backend: str, interval: float, sysfs_root: str) -> tuple:
    values = {"pipeline.frames": frames, "logging.status": False, "telemetry.backend": backend}
    values.update({"telemetry.interval_s": interval, "telemetry.sysfs_root": sysfs_root})
    runner = Runner(load_config(DEMO, values=values))
    summary, error = runner.run()
    assert error is None, error
    return summary["fps"], summary["telemetry"]["samples"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=270)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--backend", default="sysfs")
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("--sysfs-root", help="default: a fake AGX Orin tree in a temporary folder")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.sysfs_root
        if root is None:
            from tests.test_telemetry_sysfs import agx_orin_tree

            agx_orin_tree(Path(tmp))
            root = tmp
        fps(30, "none", args.interval, root)  # warm-up
        off, on, samples = [], [], 0
        for _ in range(args.repeats):
            off.append(fps(args.frames, "none", args.interval, root)[0])
            f, samples = fps(args.frames, args.backend, args.interval, root)
            on.append(f)
    best_off, best_on = max(off), max(on)
    ratio = best_on / best_off
    print(
        f"demo: {args.frames} frames, best of {args.repeats}; telemetry {args.backend} every {args.interval:g} s ({samples} samples in the last run)"
    )
    print(f"FPS without telemetry {best_off:8.1f}   runs: {', '.join(f'{v:.1f}' for v in off)}")
    print(f"FPS with telemetry    {best_on:8.1f}   runs: {', '.join(f'{v:.1f}' for v in on)}")
    print(f"ratio with/without = {ratio:.3f}   (target >= 0.98: {'PASS' if ratio >= 0.98 else 'FAIL'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
