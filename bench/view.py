"""What the live view costs: pipeline FPS with one viewer on the MJPEG stream vs without one, side by side.

    python bench/view.py [--seconds 60] [--window 3] [--source VIDEO] [--idle-runs 3]

1. One run of the demo (BlazeFace on ONNX Runtime, CPU; looped, or --source) with the view on. A viewer reads
   /stream.mjpg as fast as it comes in every other window of --window seconds and is gone in the others, so both
   conditions see the same machine load, interleaved. FPS per window comes from the frames' own completion times
   (the first 0.5 s of each window, while the viewer connects or leaves, is not counted; the first window is
   warm-up). Prints the median FPS of each condition and their ratio (target >= 0.95).
2. The cost of the view when nobody watches: separate runs without the view and with it on, alternating, the best
   of --idle-runs each.
"""

from __future__ import annotations

import argparse
import http.client
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge.config import load_config  # noqa: E402
from edge.runtime.runner import Runner  # noqa: E402

DEMO = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"
SETTLE_S = 0.5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def runner(source: Optional[str], view: bool, frames: Optional[int] = None) -> tuple:
    values = {"logging.status": False, "telemetry.backend": "none", "source.loop": True, "pipeline.frames": frames}
    if source:
        values["source.uri"] = source
    port = free_port()
    if view:
        values["view.port"] = port
    return Runner(load_config(DEMO, values=values)), port


def watch(port: int, until: float, received: List[int]) -> None:
    """A viewer: reads the MJPEG stream until ``until`` (monotonic), counting the JPEG parts."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=0.5)
    conn.request("GET", "/stream.mjpg")
    r = conn.getresponse()
    while time.monotonic() < until:
        try:
            chunk = r.read1(1 << 16)
        except socket.timeout:
            continue
        if not chunk:
            break
        received[0] += chunk.count(b"--edgeframe")
    conn.close()


def interleaved(seconds: float, window: float, source: Optional[str]) -> Dict[str, List[float]]:
    run, port = runner(source, view=True)
    p = run.pipeline
    p.start()
    t0 = time.monotonic()
    windows: List[tuple] = []  # (condition, start, end)
    received = [0]
    i = 0
    while time.monotonic() - t0 < seconds:
        start = time.monotonic()
        end = start + window
        viewer = i % 2 == 1
        if viewer:
            watch(port, end, received)
        else:
            time.sleep(max(0.0, end - time.monotonic()))
        if i > 0:
            windows.append(("viewer" if viewer else "no viewer", start, end))
        i += 1
    p.stop()
    p.wait()
    encoded = run.servers.view.encoded
    done = [t_done for _, t_done in p.metrics.intervals]
    run._close(failed=False)
    fps: Dict[str, List[float]] = {"no viewer": [], "viewer": []}
    for condition, start, end in windows:
        n = sum(1 for t in done if start + SETTLE_S <= t < end)
        fps[condition].append(n / (end - start - SETTLE_S))
    viewer_s = sum(end - start for c, start, end in windows if c == "viewer")
    print(
        f"viewer windows: {received[0]} JPEG frames received, {received[0] / max(viewer_s, 1e-9):.1f}/s; {encoded} encoded in all"
    )
    return fps


def idle_cost(frames: int, runs: int, source: Optional[str]) -> Dict[str, float]:
    best = {"no view": 0.0, "view on, nobody watching": 0.0}
    for _ in range(runs):
        for condition in best:
            run, _ = runner(source, view=condition != "no view", frames=frames)
            p = run.pipeline
            t0 = time.perf_counter()
            p.start()
            p.wait()
            fps = p.metrics.frames / (time.perf_counter() - t0)
            run._close(failed=False)
            best[condition] = max(best[condition], fps)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--window", type=float, default=3.0)
    ap.add_argument("--source", help="a video file instead of the demo clip")
    ap.add_argument("--idle-runs", type=int, default=3, help="0 skips part 2")
    ap.add_argument("--idle-frames", type=int, default=540)
    args = ap.parse_args()
    what = args.source or "the demo clip"
    fps = interleaved(args.seconds, args.window, args.source)
    for condition, values in fps.items():
        print(f"{condition:<10} FPS per window: " + " ".join(f"{v:.1f}" for v in values))
    without, with_viewer = statistics.median(fps["no viewer"]), statistics.median(fps["viewer"])
    print(f"\n{what}, {args.seconds:g} s in {args.window:g} s windows, medians:")
    print(f"  without a viewer {without:7.1f} fps")
    print(f"  one viewer       {with_viewer:7.1f} fps")
    print(f"FPS with one viewer / FPS without: {with_viewer / without:.3f} (target >= 0.95)")
    if args.idle_runs:
        best = idle_cost(args.idle_frames, args.idle_runs, args.source)
        base = best["no view"]
        print(f"\nview on but nobody watching, best of {args.idle_runs} runs of {args.idle_frames} frames:")
        for condition, value in best.items():
            print(f"  {condition:<26} {value:7.1f} fps ({value / base:.3f} x no view)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
