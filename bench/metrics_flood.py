"""What a /metrics flood costs the pipeline: FPS while 8 clients request /metrics in a loop vs FPS without them.

    python bench/metrics_flood.py [--seconds 60] [--window 4] [--clients 8] [--source VIDEO]

One run of the demo (BlazeFace on ONNX Runtime, CPU; looped, or --source) with `--metrics-port` on. In every other
window of three a separate process at nice 19 (an attacker is not inside edge-run) runs --clients threads that each
open a connection, GET /metrics and read the answer, as fast as they can; in another the same process floods a
port nobody listens on (so the attacker's own CPU use on this machine is measured apart from edge's); in the third
nothing happens. All three see the same machine, interleaved. FPS per window comes from the frames' own completion times (the
first 0.5 s of each window is not counted; the first window is warm-up). Prints the medians, their ratio (target
>= 0.95: the server answers beyond 10 requests a second with 429 before encoding anything) and how the flood's
requests were answered.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.view import SETTLE_S, free_port  # noqa: E402
from edge.config import load_config  # noqa: E402
from edge.runtime.runner import Runner  # noqa: E402

DEMO = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"
# quiet; the flood on edge's /metrics; the same flood on a port nobody listens on (what the attacker's own CPU costs)
CONDITIONS = ("quiet", "flood", "flood elsewhere")

# The attacker: its own process, threads each looping connect + GET /metrics + read; prints its status counts.
FLOOD = r"""
import collections, http.client, json, sys, threading, time
port, seconds, clients = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
counts, lock, end = collections.Counter(), threading.Lock(), time.monotonic() + seconds
def hammer():
    while time.monotonic() < end:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/metrics")
            r = c.getresponse(); r.read(); code = r.status
            c.close()
        except OSError:
            code = "error"
        with lock:
            counts[str(code)] += 1
threads = [threading.Thread(target=hammer) for _ in range(clients)]
[t.start() for t in threads]; [t.join() for t in threads]
print(json.dumps(counts))
"""


def interleaved(seconds: float, window: float, clients: int, source: Optional[str]) -> tuple:
    values = {"logging.status": False, "telemetry.backend": "none", "source.loop": True}
    if source:
        values["source.uri"] = source
    port = free_port()
    values["metrics.port"] = port
    run = Runner(load_config(DEMO, values=values))
    p = run.pipeline
    p.start()
    t0 = time.monotonic()
    windows: List[tuple] = []
    answered: Dict[str, int] = {}
    i = 0
    closed = free_port()  # nothing listens there: the kernel refuses, edge never sees it
    while time.monotonic() - t0 < seconds:
        start = time.monotonic()
        end = start + window
        condition = CONDITIONS[i % len(CONDITIONS)]
        if condition != "quiet":
            target = port if condition == "flood" else closed
            out = subprocess.run(
                ["nice", "-n", "19", sys.executable, "-c", FLOOD, str(target), str(window - 0.1), str(clients)],
                capture_output=True,
                text=True,
            )
            if condition == "flood":
                for code, n in json.loads(out.stdout or "{}").items():
                    answered[code] = answered.get(code, 0) + n
        time.sleep(max(0.0, end - time.monotonic()))
        if i > 0:
            windows.append((condition, start, end))
        i += 1
    p.stop()
    p.wait()
    done = [t_done for _, t_done in p.metrics.intervals]
    run._close(failed=False)
    fps: Dict[str, List[float]] = {c: [] for c in CONDITIONS}
    for condition, start, end in windows:
        n = sum(1 for t in done if start + SETTLE_S <= t < end)
        fps[condition].append(n / (end - start - SETTLE_S))
    flood_s = sum(end - start - 0.1 for c, start, end in windows if c == "flood")
    return fps, answered, flood_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--window", type=float, default=4.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--source", help="a video file instead of the demo clip")
    args = ap.parse_args()
    fps, answered, flood_s = interleaved(args.seconds, args.window, args.clients, args.source)
    for condition, values in fps.items():
        print(f"{condition:<15} FPS per window: " + " ".join(f"{v:.1f}" for v in values))
    quiet, flood, elsewhere = (statistics.median(fps[c]) for c in CONDITIONS)
    total = sum(answered.values())
    print(f"\n{args.source or 'the demo clip'}, {args.seconds:g} s in {args.window:g} s windows, medians:")
    print(f"  quiet                                         {quiet:7.1f} fps")
    print(f"  {args.clients} clients (nice 19) flooding /metrics         {flood:7.1f} fps")
    print(f"  the same flood on a closed port (its own CPU) {elsewhere:7.1f} fps")
    print(
        f"flood on /metrics: {total} requests ({total / max(flood_s, 1e-9):.0f}/s): "
        + ", ".join(f"{code} x{n}" for code, n in sorted(answered.items()))
    )
    print(f"FPS under the flood / FPS with the flood elsewhere: {flood / elsewhere:.3f} (edge's own cost; target >= 0.95)")
    print(f"FPS under the flood / FPS quiet:                    {flood / quiet:.3f} (with the attacker's CPU on this machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
