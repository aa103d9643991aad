"""Energy integration and the summary against hand-computed values."""

from __future__ import annotations

import pytest

from edge.telemetry.energy import energy_summary, integrate_mj, mean_power_w
from edge.telemetry.sample import Sample


def _samples(points, **kw):
    return [
        Sample(t_mono=t, t_wall=0.0, backend="test", total_mw=p, total_rule="VDD_IN", power_mw={"VDD_IN": p}, **kw)
        for t, p in points
    ]


def test_constant_power_is_power_times_time():
    ts = [i * 0.1 for i in range(31)]
    assert integrate_mj(ts, [5000.0] * 31, 0.0, 3.0) == pytest.approx(15_000.0)  # 5 W x 3 s = 15 J
    assert integrate_mj(ts, [5000.0] * 31, 0.25, 0.75) == pytest.approx(2500.0)


def test_ramp_is_exact_with_interpolated_edges():
    ts = [i * 0.1 for i in range(11)]
    ps = [1000.0 * t for t in ts]  # P = 1000 t mW
    # integral of 1000 t from 0.25 to 0.75 = 500 (0.5625 - 0.0625) = 250 mJ; the edges fall between samples
    assert integrate_mj(ts, ps, 0.25, 0.75) == pytest.approx(250.0)
    assert integrate_mj(ts, ps, 0.0, 1.0) == pytest.approx(500.0)


def test_hand_computed_uneven_trapezoids():
    # (0,2000) (1,4000) (3,1000): 1 x 3000 + 2 x 2500 = 8000 mJ
    assert integrate_mj([0.0, 1.0, 3.0], [2000.0, 4000.0, 1000.0], 0.0, 3.0) == pytest.approx(8000.0)
    # window [0.5, 2]: P(0.5)=3000, P(2)=2500: 0.5 x 3500 + 1 x 3250 = 5000 mJ
    assert integrate_mj([0.0, 1.0, 3.0], [2000.0, 4000.0, 1000.0], 0.5, 2.0) == pytest.approx(5000.0)


def test_summary_per_frame_idle_baseline_and_load():
    samples = _samples([(i * 0.1, 6000.0) for i in range(21)], gpu_util_pct=50.0)
    samples[10].power_mw = {"VDD_IN": 6000.0}
    samples[10].dla = {"DLA0": {"online": True}}
    samples[11].dla = {"DLA0": {"online": False}}
    frames = [(0.1 * i, 0.1 * i + 0.1) for i in range(20)]  # 20 frames over [0, 2] s
    out = energy_summary(samples, frames, idle_baseline_w=4.0)
    assert out["energy_j"] == pytest.approx(12.0)  # 6 W x 2 s
    assert out["energy_mj_per_frame"] == pytest.approx(600.0)
    assert out["frame_interval_energy_mj_mean"] == pytest.approx(600.0)  # frames do not overlap here
    assert out["energy_mj_per_frame_dynamic"] == pytest.approx(200.0)  # (6 - 4) W x 2 s / 20
    assert out["power_w"] == {"mean": pytest.approx(6.0), "max": 6.0}
    assert out["rails_w_mean"] == {"VDD_IN": pytest.approx(6.0)}
    assert out["gpu_load_mean"] == 50.0 and out["dla_online_frac"] == {"DLA0": 0.5}
    assert out["energy_source"] == "trapezoid" and out["total_rule"] == "VDD_IN" and out["backend"] == "test"
    assert out["samples"] == 21 and out["max_gap_s"] == pytest.approx(0.1) and out["warnings"] == []


def test_overlapping_frames_share_energy():
    samples = _samples([(i * 0.1, 1000.0) for i in range(21)])
    frames = [(0.0, 1.0), (0.5, 1.5), (1.0, 2.0)]  # three frames in flight
    out = energy_summary(samples, frames)
    assert out["energy_mj_per_frame"] == pytest.approx(2000.0 / 3)
    assert out["frame_interval_energy_mj_mean"] == pytest.approx(1000.0)


def test_mean_power_for_an_idle_window():
    samples = _samples([(0.0, 3000.0), (1.0, 5000.0)])
    assert mean_power_w(samples, 0.0, 1.0) == pytest.approx(4.0)
    assert mean_power_w([], 0.0, 1.0) is None


def test_guards_short_window_partial_cover_and_no_power():
    samples = _samples([(i * 0.1, 1000.0) for i in range(11)])
    out = energy_summary(samples, [(0.5, 0.6)])
    assert any("shorter than 5 sample periods" in w for w in out["warnings"])
    out = energy_summary(samples, [(0.5, 1.5)])
    assert out["energy_j"] == pytest.approx(1.0) and any("edges held" in w for w in out["warnings"])
    bare = [Sample(t_mono=0.1 * i, t_wall=0.0, backend="none") for i in range(5)]
    out = energy_summary(bare, [(0.0, 0.4)])
    assert out["energy_j"] is None and out["power_w"] == {"mean": None, "max": None}
    assert out["warnings"] == ["no power readings: energy not computed"]


def test_a_window_between_two_readings_takes_each_rails_value_at_its_edges():
    """Readings at 0 s (GPU 1000 mW, CPU 500 mW) and 1 s (GPU 3000 mW, CPU 500 mW); ten frames inside [0.25, 0.5]
    s, where no reading falls (tegrastats reads once a second; a short run fits between two). By hand: GPU 1500 and
    2000 mW at the edges, 1.75 W; CPU 0.5 W; the total 2.0 and 2.5 W at the edges, 2.25 W. A rail read only outside a
    window that holds readings of others takes its edge values too (here VDD_SOC, read once at 1 s: 0.9 W)."""
    a, b = _samples([(0.0, 1500.0), (1.0, 3500.0)])
    a.power_mw, b.power_mw = {"VDD_GPU": 1000.0, "VDD_CPU": 500.0}, {"VDD_GPU": 3000.0, "VDD_CPU": 500.0}
    frames = [(0.25 + 0.025 * i, 0.275 + 0.025 * i) for i in range(10)]
    out = energy_summary([a, b], frames)
    assert out["samples"] == 0
    assert out["rails_w_mean"] == {"VDD_CPU": 0.5, "VDD_GPU": 1.75}
    assert out["power_w"] == {"mean": pytest.approx(2.25), "max": pytest.approx(2.5)}
    c = _samples([(0.5, 2000.0)])[0]
    c.power_mw = {"VDD_GPU": 2000.0}
    b.power_mw = {**b.power_mw, "VDD_SOC": 900.0}
    out = energy_summary([a, c, b], [(0.4, 0.6)])
    assert out["rails_w_mean"] == {"VDD_CPU": 0.5, "VDD_GPU": 2.0, "VDD_SOC": 0.9}


SUMMARY_KEYS = {  # the docstring's list: the run summary's "energy" section, read by people and dashboards
    "backend", "total_rule", "window_s", "frames", "samples", "max_gap_s", "power_w", "rails_w_mean", "energy_j",
    "energy_source", "energy_mj_per_frame", "frame_interval_energy_mj_mean", "idle_baseline_w",
    "energy_mj_per_frame_dynamic", "gpu_load_mean", "dla_online_frac", "warnings",
}  # fmt: skip


def test_nothing_at_all_is_an_empty_summary_not_an_error():
    out = energy_summary([], [])
    assert set(out) == SUMMARY_KEYS
    assert (out["backend"], out["window_s"], out["frames"], out["samples"], out["energy_j"]) == (None, 0.0, 0, 0, None)
    assert out["idle_baseline_w"] is None and out["warnings"] == ["no power readings: energy not computed"]


def test_one_reading_and_no_frames_is_an_empty_window():
    out = energy_summary(_samples([(2.0, 4000.0)]), [], idle_baseline_w=1.5)
    assert set(out) == SUMMARY_KEYS and out["backend"] == "test" and out["idle_baseline_w"] == 1.5
    assert (out["window_s"], out["samples"], out["energy_j"]) == (0.0, 1, None)
    assert out["warnings"] == ["empty window: energy not computed"]


def test_the_window_is_the_frames_span_and_the_short_window_warning_its_edge():
    """Readings once a second from 10 s: the period is 1 s, so a window of 5 s (MIN_PERIODS periods) is long enough and
    4.5 s is not; the window is measured from the first frame's start, not from 0."""
    samples = _samples([(10.0 + i, 2000.0) for i in range(8)])
    out = energy_summary(samples, [(11.0, 12.0), (15.0, 16.0)])
    assert out["window_s"] == 5.0 and out["warnings"] == [] and out["energy_j"] == pytest.approx(10.0)
    out = energy_summary(samples, [(11.0, 15.5)])
    assert out["window_s"] == 4.5
    assert out["warnings"] == ["window 4.500 s is shorter than 5 sample periods (1.000 s)"]
    uneven = _samples([(10.0, 2000.0), (12.0, 2000.0), (13.0, 2000.0)])  # period: 3 s over 2 gaps, 1.5 s
    out = energy_summary(uneven, [(10.0, 13.0)])
    assert out["warnings"] == ["window 3.000 s is shorter than 5 sample periods (1.500 s)"]
    two = _samples([(10.0, 2000.0), (11.0, 2000.0)])  # two readings make a period too
    assert energy_summary(two, [(10.0, 11.0)])["warnings"] == ["window 1.000 s is shorter than 5 sample periods (1.000 s)"]
