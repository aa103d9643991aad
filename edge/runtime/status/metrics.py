"""Per-stage timings: a periodic one-line status and the final summary with p50/p90/p99."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Dict, List, Optional, Tuple

import numpy as np

STAGES = ("capture", "preprocess", "infer", "postprocess", "sink")
_KEEP = 100_000  # samples per stage for the percentiles; a service runs for days, memory must not grow


class Metrics:
    def __init__(self, stages: tuple = STAGES) -> None:
        self.stages = stages
        # queued: end_to_end less the stages after capture, i.e. the time a frame waited between stages
        self._lat: Dict[str, deque] = {s: deque(maxlen=_KEEP) for s in (*stages, "queued", "end_to_end")}
        self.intervals: deque = deque(maxlen=_KEEP)  # (t_capture, t_done) per frame, for energy per frame
        self.frames = 0
        self.captured = 0
        self.dropped = 0
        self.abandoned = 0  # frames in flight when an abort left them (a second SIGTERM, a drain past its time)
        self.t_first: Optional[float] = None
        self.t_last: Optional[float] = None
        self._lock = threading.Lock()
        self._window_start = time.monotonic()
        self._window_frames = 0
        self._window_sums: Dict[str, float] = dict.fromkeys(stages, 0.0)

    def frame_done(self, t_capture: float, timings: Dict[str, float], t_done: float) -> None:
        """Called once per frame by the last stage, with each stage's seconds."""
        with self._lock:
            for stage, seconds in timings.items():
                self._lat[stage].append(seconds)
                self._window_sums[stage] += seconds
            worked = sum(seconds for stage, seconds in timings.items() if stage != "capture")
            self._lat["queued"].append(max(0.0, t_done - t_capture - worked))
            self._lat["end_to_end"].append(t_done - t_capture)
            self.intervals.append((t_capture, t_done))
            self.frames += 1
            self._window_frames += 1
            if self.t_first is None:
                self.t_first = t_capture
            self.t_last = t_done

    def status_line(self, extra: str = "") -> str:
        """FPS and mean per-stage ms since the previous status line."""
        with self._lock:
            now = time.monotonic()
            n, span = self._window_frames, max(now - self._window_start, 1e-9)
            parts = [f"{n / span:6.1f} fps"]
            parts += [f"{s} {self._window_sums[s] / n * 1e3:5.1f}" if n else f"{s}   -  " for s in self.stages]
            self._window_start, self._window_frames = now, 0
            self._window_sums = dict.fromkeys(self.stages, 0.0)
            line = f"{parts[0]} | ms: " + " ".join(parts[1:]) + f" | frames {self.frames} drops {self.dropped}"
        return f"{line} | {extra}" if extra else line

    def recent(self, window_s: float = 5.0) -> Tuple[float, Optional[float]]:
        """FPS and mean end-to-end latency (s) over the last ``window_s`` seconds, for live readers (the metrics
        endpoint, the live view); unlike status_line it leaves the status window alone."""
        now = time.monotonic()
        n, latency = 0, 0.0
        with self._lock:
            for t_capture, t_done in reversed(self.intervals):
                if t_done < now - window_s:
                    break
                n += 1
                latency += t_done - t_capture
            span = min(window_s, now - self.t_first) if self.t_first is not None else window_s
        return (n / span if span > 0 else 0.0), (latency / n if n else None)

    def summary(self) -> dict:
        with self._lock:
            span = (self.t_last - self.t_first) if self.frames > 1 else 0.0
            out = {
                "frames": self.frames,
                "captured": self.captured,
                "dropped": self.dropped,
                "abandoned": self.abandoned,
                "duration_s": round(span, 3),
                "fps": round((self.frames - 1) / span, 2) if span > 0 else 0.0,
                "latency_ms": {k: _percentiles(v) for k, v in self._lat.items() if v},
            }
        return out


def _percentiles(values: deque) -> dict:
    a = np.fromiter(values, np.float64) * 1e3
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {
        "p50": round(p50, 3),
        "p90": round(p90, 3),
        "p99": round(p99, 3),
        "mean": round(float(a.mean()), 3),
        "max": round(float(a.max()), 3),
    }


def format_summary(summary: dict) -> str:
    """The end-of-run table, one row per stage and end to end."""
    lines = [
        f"frames {summary['frames']} (captured {summary['captured']}, dropped {summary['dropped']}"
        + (f", abandoned in flight {summary['abandoned']}" if summary.get("abandoned") else "")
        + f") in {summary['duration_s']:.2f} s = {summary['fps']:.1f} fps",
        f"{'stage':<12}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'mean ms':>9}{'max ms':>9}",
    ]
    rows: List[str] = []
    for stage, p in summary["latency_ms"].items():
        rows.append(f"{stage:<12}{p['p50']:>9.2f}{p['p90']:>9.2f}{p['p99']:>9.2f}{p['mean']:>9.2f}{p['max']:>9.2f}")
    return "\n".join(lines + rows + latency_note(summary))


def latency_note(summary: dict) -> List[str]:
    """What end_to_end means for this run's source: a camera's capture-to-result latency, or, for a file read
    ahead as far as the queues allow, mostly time spent waiting in them."""
    lat = summary["latency_ms"]
    if "end_to_end" not in lat or "queued" not in lat:
        return []
    e2e, queued = lat["end_to_end"], lat["queued"]
    source = summary.get("source") or {}
    if source.get("live"):
        return [
            f"capture to result (live source): p50 {e2e['p50']:.1f} ms, p99 {e2e['p99']:.1f} ms, "
            f"of which p50 {queued['p50']:.1f} ms waiting between stages"
        ]
    if "live" not in source:
        return []
    return [
        f"end_to_end: reading a frame to its result. A file source is read ahead as far as the queues allow, so "
        f"p50 {queued['p50']:.1f} ms of it is waiting between stages (queued); a camera's frames wait only when the "
        "pipeline falls behind"
    ]
