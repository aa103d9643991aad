"""Energy from power samples: trapezoidal integration with the window edges interpolated.

Times are ``time.monotonic()`` seconds (the frame clock) and power is mW, so mW x s gives mJ directly.
Outside the sampled span the nearest sample's value is held, and the summary warns about it.

Energy per frame is the window's energy divided by the frames in it: a 10 Hz sensor cannot resolve one frame,
so the per-frame figure is only meaningful as an average over many frames. ``frame_interval_energy_mj_mean``
integrates each frame's own capture-to-done interval instead; with frames in flight at once (a pipeline) those
intervals overlap and share energy, so it is larger than the per-frame figure.
"""

from __future__ import annotations

import bisect
from typing import Any, Dict, List, Optional, Sequence, Tuple

from edge.telemetry.sample import Sample

# A window shorter than this many sample periods gives an energy dominated by the edges.
MIN_PERIODS = 5


def value_at(ts: Sequence[float], vs: Sequence[float], t: float) -> float:
    """Linear interpolation of the series at ``t``; the nearest value outside the series."""
    i = bisect.bisect_left(ts, t)
    if i == 0:
        return vs[0]
    if i == len(ts):
        return vs[-1]
    t0, t1 = ts[i - 1], ts[i]
    return vs[i - 1] + (vs[i] - vs[i - 1]) * (t - t0) / (t1 - t0)


def integrate_mj(ts: Sequence[float], ps_mw: Sequence[float], t0: float, t1: float) -> float:
    """Integral of power (mW) over [t0, t1] (s) in mJ, by trapezoids, interpolating at both edges."""
    if not ts or t1 <= t0:
        return 0.0
    lo, hi = bisect.bisect_right(ts, t0), bisect.bisect_left(ts, t1)
    points = [(t0, value_at(ts, ps_mw, t0))] + list(zip(ts[lo:hi], ps_mw[lo:hi])) + [(t1, value_at(ts, ps_mw, t1))]
    return sum((tb - ta) * (pa + pb) / 2.0 for (ta, pa), (tb, pb) in zip(points, points[1:]))


def mean_power_w(samples: Sequence[Sample], t0: float, t1: float) -> Optional[float]:
    """Time-weighted mean total power (W) over [t0, t1], e.g. an idle window before the run; None without power."""
    ts, ps = _power_series(samples)
    if not ts or t1 <= t0:
        return None
    return integrate_mj(ts, ps, t0, t1) / (t1 - t0) / 1000.0


def _power_series(samples: Sequence[Sample]) -> Tuple[List[float], List[float]]:
    pairs = sorted((s.t_mono, s.total_mw) for s in samples if s.total_mw is not None)
    return [t for t, _ in pairs], [p for _, p in pairs]


def energy_summary(
    samples: Sequence[Sample],
    frame_intervals: Sequence[Tuple[float, float]],
    idle_baseline_w: Optional[float] = None,
) -> Dict[str, Any]:
    """Power, energy and load over the frames' window ``[first start, last end]``.

    ``frame_intervals`` are (t_capture, t_done) per completed frame. Keys: ``backend``, ``total_rule``,
    ``window_s``, ``frames``, ``samples``, ``max_gap_s``, ``power_w`` {mean, max}, ``rails_w_mean``, ``energy_j``,
    ``energy_source`` (``nvml_counter`` when every sample has the hardware counter, else ``trapezoid``),
    ``energy_mj_per_frame``, ``frame_interval_energy_mj_mean``, ``idle_baseline_w``,
    ``energy_mj_per_frame_dynamic`` (minus idle), ``gpu_load_mean`` (%), ``dla_online_frac``, ``warnings``.
    Values that cannot be computed are None.
    """
    warnings: List[str] = []
    backend = samples[0].backend if samples else None
    if frame_intervals:
        t0 = min(a for a, _ in frame_intervals)
        t1 = max(b for _, b in frame_intervals)
    elif samples:
        t0, t1 = min(s.t_mono for s in samples), max(s.t_mono for s in samples)
    else:
        t0 = t1 = 0.0
    window = [s for s in samples if t0 <= s.t_mono <= t1]
    ts, ps = _power_series(samples)
    times = sorted(s.t_mono for s in window)
    gaps = [b - a for a, b in zip(times, times[1:])]
    summary: Dict[str, Any] = {
        "backend": backend,
        "total_rule": next((s.total_rule for s in window if s.total_rule), None),
        "window_s": t1 - t0,
        "frames": len(frame_intervals),
        "samples": len(window),
        "max_gap_s": max(gaps) if gaps else None,
        "power_w": {"mean": None, "max": None},
        "rails_w_mean": {},
        "energy_j": None,
        "energy_source": None,
        "energy_mj_per_frame": None,
        "frame_interval_energy_mj_mean": None,
        "idle_baseline_w": idle_baseline_w,
        "energy_mj_per_frame_dynamic": None,
        "gpu_load_mean": _mean(s.gpu_util_pct for s in window),
        "dla_online_frac": _dla_online_frac(window),
        "warnings": warnings,
    }
    if not ts:
        warnings.append("no power readings: energy not computed")
        return summary
    if t1 <= t0:
        warnings.append("empty window: energy not computed")
        return summary

    energy_mj = integrate_mj(ts, ps, t0, t1)
    summary["energy_source"] = "trapezoid"
    counter = sorted((s.t_mono, s.energy_mj) for s in samples if s.energy_mj is not None)
    if counter and len(counter) == len(samples):
        # NVML's power is a ~1 s average; its energy counter is the better number (interpolated at the edges too).
        cts, cvs = [t for t, _ in counter], [e for _, e in counter]
        summary["energy_trapezoid_j"] = energy_mj / 1000.0
        energy_mj = value_at(cts, cvs, t1) - value_at(cts, cvs, t0)
        summary["energy_source"] = "nvml_counter"

    # The max of the curve the mean integrates: the samples inside plus the interpolated edges (a window shorter than
    # the sampling period holds no sample at all, and its mean then comes from the edges alone).
    curve = [s.total_mw for s in window if s.total_mw is not None] + [value_at(ts, ps, t0), value_at(ts, ps, t1)]
    summary["power_w"] = {"mean": energy_mj / (t1 - t0) / 1000.0, "max": max(curve) / 1000.0}
    summary["rails_w_mean"] = _rails_mean_w(samples, window, t0, t1)
    summary["energy_j"] = energy_mj / 1000.0
    if frame_intervals:
        summary["energy_mj_per_frame"] = energy_mj / len(frame_intervals)
        summary["frame_interval_energy_mj_mean"] = sum(integrate_mj(ts, ps, a, b) for a, b in frame_intervals) / len(
            frame_intervals
        )
        if idle_baseline_w is not None:
            dynamic_mj = energy_mj - idle_baseline_w * 1000.0 * (t1 - t0)
            summary["energy_mj_per_frame_dynamic"] = dynamic_mj / len(frame_intervals)

    if ts[0] > t0 or ts[-1] < t1:
        warnings.append(f"power samples cover {ts[0]:.3f}..{ts[-1]:.3f} s, not all of {t0:.3f}..{t1:.3f} s; edges held")
    if len(ts) > 1:
        period = (ts[-1] - ts[0]) / (len(ts) - 1)
        if t1 - t0 < MIN_PERIODS * period:
            warnings.append(f"window {t1 - t0:.3f} s is shorter than {MIN_PERIODS} sample periods ({period:.3f} s)")
    return summary


def _rails_mean_w(samples: Sequence[Sample], window: Sequence[Sample], t0: float, t1: float) -> Dict[str, float]:
    """Each rail's mean over the window in W: its readings inside, or, for a window shorter than the sampling period
    (no reading inside), its interpolated values at the two edges, as the power's max above."""
    out = {}
    for rail in sorted({name for s in samples for name in s.power_mw}):
        inside = [s.power_mw[rail] for s in window if rail in s.power_mw]
        if not inside:
            pairs = sorted((s.t_mono, s.power_mw[rail]) for s in samples if rail in s.power_mw)
            ts, vs = [t for t, _ in pairs], [v for _, v in pairs]
            inside = [value_at(ts, vs, t0), value_at(ts, vs, t1)]
        out[rail] = sum(inside) / len(inside) / 1000.0
    return out


def _mean(values: Any) -> Optional[float]:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def _dla_online_frac(window: Sequence[Sample]) -> Dict[str, float]:
    names = sorted({n for s in window for n in s.dla})
    out = {}
    for name in names:
        states = [s.dla[name].get("online") for s in window if name in s.dla and s.dla[name].get("online") is not None]
        if states:
            out[name] = sum(1 for on in states if on) / len(states)
    return out
