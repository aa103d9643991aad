"""``edge report RUN_DIR``: one HTML page with PNG plots and a summary table for a finished run.

Reads what it finds in the run folder, all optional but not all missing:
- the per-frame JSONL (``results.jsonl``): ``frame``, ``t_capture``, ``t_done`` (monotonic s) and ``latency_ms``
  (a dict stage -> ms, or one number); lines or keys that are missing or malformed are skipped, not fatal;
- ``summary.json`` from the run;
- ``telemetry.jsonl`` and ``telemetry_meta.json`` written by the sampler (``idle_baseline_w`` in the meta is
  subtracted when present).

Writes ``report.html`` and ``report_fps.png``, ``report_latency.png``, ``report_power.png``, ``report_gpu.png``
(each plot only when its data exists). matplotlib is imported only here, when a report is made.
"""

from __future__ import annotations

import html
import io
import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from edge.errors import EdgeError
from edge.inputs import read_capped
from edge.lazy import require
from edge.outputs import write_atomic
from edge.redact import redact_data
from edge.telemetry.energy import energy_summary
from edge.telemetry.files import JSONL_NAME, META_NAME, read_jsonl
from edge.telemetry.sample import Sample

FRAMES_NAME = "results.jsonl"
SUMMARY_NAME = "summary.json"
REPORT_NAME = "report.html"


def load_frames(path: Path) -> List[Dict[str, Any]]:
    """Per-frame records that have at least ``t_done``; anything unreadable is skipped."""
    frames = []
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                record = json.loads(line, parse_constant=lambda name: None)  # NaN/Infinity are not JSON: drop them
            except (ValueError, RecursionError):
                continue
            if isinstance(record, dict) and _finite(record.get("t_done")):
                if not _finite(record.get("t_capture")):
                    record.pop("t_capture", None)
                frames.append(record)
    return frames


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _stage_latencies(frame: Dict[str, Any]) -> Dict[str, float]:
    lat = frame.get("latency_ms")
    if isinstance(lat, dict):
        return {str(k): float(v) for k, v in lat.items() if _finite(v)}
    if _finite(lat):
        return {"total": float(lat)}
    if _finite(frame.get("t_capture")):
        return {"capture_to_done": (frame["t_done"] - frame["t_capture"]) * 1000.0}
    return {}


def _read_json(path: Path) -> Dict[str, Any]:
    try:
        data = json.loads(read_capped(path, 16 << 20), parse_constant=lambda name: None)
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _png(fig: Any, path: Path) -> str:
    """Grid every axis, lay the figure out, write it as PNG (atomically) and return its file name."""
    for ax in fig.axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    write_atomic(path, buf.getvalue())
    return path.name


def _plot_fps(Figure: Any, frames: List[Dict[str, Any]], t0: float, path: Path) -> Optional[str]:
    if len(frames) < 2:
        return None
    done = sorted(f["t_done"] - t0 for f in frames)
    first = int(done[0])
    counts = [0] * (int(done[-1]) - first + 1)
    for t in done:
        counts[int(t) - first] += 1
    fig = Figure(figsize=(8, 3))
    ax = fig.add_subplot()
    ax.step([first + i for i in range(len(counts))], counts, where="post")
    ax.set(xlabel="time (s)", ylabel="frames / s", title="Throughput (frames completed per second)")
    return _png(fig, path)


def _plot_latency(Figure: Any, frames: List[Dict[str, Any]], t0: float, path: Path) -> Optional[str]:
    series: Dict[str, Tuple[List[float], List[float]]] = {}
    for f in frames:
        for stage, ms in _stage_latencies(f).items():
            xs, ys = series.setdefault(stage, ([], []))
            xs.append(f["t_done"] - t0)
            ys.append(ms)
    if not series:
        return None
    fig = Figure(figsize=(8, 3))
    ax = fig.add_subplot()
    for stage, (xs, ys) in series.items():
        ax.plot(xs, ys, ".", markersize=3, label=stage)
    ax.set(xlabel="time (s)", ylabel="ms", title="Latency per stage")
    ax.legend(fontsize="small")
    return _png(fig, path)


def _plot_power(Figure: Any, samples: List[Sample], t0: float, path: Path) -> Optional[str]:
    rails = sorted({r for s in samples for r in s.power_mw})
    if not rails:
        return None
    fig = Figure(figsize=(8, 3))
    ax = fig.add_subplot()
    for rail in rails:
        pts = [(s.t_mono - t0, s.power_mw[rail] / 1000.0) for s in samples if rail in s.power_mw]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=rail, linewidth=1)
    total = [(s.t_mono - t0, s.total_mw / 1000.0) for s in samples if s.total_mw is not None]
    rule = next((s.total_rule for s in samples if s.total_rule), "")
    if rule not in rails:  # a summed total is not one of the plotted rails
        ax.plot([p[0] for p in total], [p[1] for p in total], "k--", label=f"total ({rule})", linewidth=1)
    ax.set(xlabel="time (s)", ylabel="W", title="Power per rail")
    ax.legend(fontsize="small")
    return _png(fig, path)


def _plot_gpu(Figure: Any, samples: List[Sample], t0: float, path: Path) -> Optional[str]:
    load = [(s.t_mono - t0, s.gpu_util_pct) for s in samples if s.gpu_util_pct is not None]
    sensors = sorted({n for s in samples for n, v in s.temps_c.items() if v is not None})
    if not load and not sensors:
        return None
    fig = Figure(figsize=(8, 5))
    ax_load, ax_temp = fig.subplots(2, 1, sharex=True)
    ax_load.plot([p[0] for p in load], [p[1] for p in load], linewidth=1)
    ax_load.set(ylabel="GPU load (%)", title="GPU load and temperatures", ylim=(0, 100))
    for name in sensors:
        pts = [(s.t_mono - t0, s.temps_c[name]) for s in samples if s.temps_c.get(name) is not None]
        ax_temp.plot([p[0] for p in pts], [p[1] for p in pts], label=name, linewidth=1)
    ax_temp.set(xlabel="time (s)", ylabel="°C")
    if sensors:
        ax_temp.legend(fontsize="small", ncol=4)
    return _png(fig, path)


def _rows(prefix: str, value: Any) -> List[Tuple[str, str]]:
    if isinstance(value, dict):
        return [row for k, v in value.items() for row in _rows(f"{prefix}.{k}" if prefix else str(k), v)]
    if isinstance(value, float):
        return [(prefix, f"{value:.4g}")]
    if isinstance(value, list):
        return [(prefix, "; ".join(str(v) for v in value))] if value else []
    return [(prefix, str(value))]


def _table(title: str, data: Dict[str, Any]) -> str:
    body = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in _rows("", data))
    return f"<h2>{html.escape(title)}</h2><table>{body}</table>"


def write_report(run_dir: str | Path, frames_name: str = FRAMES_NAME, out_name: str = REPORT_NAME) -> Path:
    """Write the report into ``run_dir`` and return the path of the HTML file."""
    run = Path(run_dir)
    if not run.is_dir():
        raise EdgeError(f"run folder '{run}' does not exist; pass the folder a run wrote its results to")
    frames_path, telemetry_path = run / frames_name, run / JSONL_NAME
    frames = load_frames(frames_path) if frames_path.is_file() else []
    samples = read_jsonl(telemetry_path) if telemetry_path.is_file() else []
    summary = _read_json(run / SUMMARY_NAME)
    meta = _read_json(run / META_NAME)
    if not frames and not samples and not summary:
        raise EdgeError(
            f"nothing to report in '{run}': no {frames_name}, {JSONL_NAME} or {SUMMARY_NAME}; "
            "pass a run folder (or --frames NAME for another per-frame file)"
        )
    Figure = require("matplotlib.figure", "edge report plots").Figure
    starts = [f["t_capture"] for f in frames if "t_capture" in f]
    t0 = min(starts + [f["t_done"] for f in frames] + [s.t_mono for s in samples], default=0.0)  # summary.json alone
    plots = [
        _plot_fps(Figure, frames, t0, run / "report_fps.png"),
        _plot_latency(Figure, frames, t0, run / "report_latency.png"),
        _plot_power(Figure, samples, t0, run / "report_power.png"),
        _plot_gpu(Figure, samples, t0, run / "report_gpu.png"),
    ]
    intervals = [(f["t_capture"], f["t_done"]) for f in frames if "t_capture" in f]
    sections = [f'<img src="{name}" alt="{name}">' for name in plots if name]
    if summary:
        sections.append(_table("Run summary", redact_data(summary)))  # a camera URI may carry a password
    if samples:
        idle = meta.get("idle_baseline_w")
        energy = energy_summary(samples, intervals, idle if _finite(idle) else None)
        sections.append(_table("Telemetry (computed from telemetry.jsonl)", energy))
    else:
        sections.append("<p>No telemetry was recorded for this run.</p>")
    if meta:
        sections.append(_table("Telemetry source", redact_data(meta)))
    page = (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>edge run report: {html.escape(run.name)}</title>"
        "<style>body{font-family:sans-serif;max-width:60em;margin:auto}img{max-width:100%}"
        "td{padding:2px 10px;border-bottom:1px solid #ddd;vertical-align:top}</style></head><body>"
        f"<h1>Run report: {html.escape(run.name)}</h1><p>{len(frames)} frames, {len(samples)} telemetry samples.</p>\n"
        + "\n".join(sections)
        + "\n</body></html>\n"
    )
    return write_atomic(run / out_name, page)
