"""Entropy (KL), percentile and min-max thresholds against cases worked out by hand and a literal loop of the slide."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edge.calib.methods import amax, entropy_bin, kl_divergences, mse_errors, percentile_bin
from edge.errors import EdgeError


def slide_kl(hist, levels):
    """NVIDIA's GTC 2017 pseudocode, one candidate at a time, as plainly as it reads."""
    h = np.asarray(hist, float)
    out = []
    for i in range(levels, len(h)):
        p = h[:i].copy()
        p[i - 1] += h[i:].sum()
        merged = i // levels
        q = np.zeros(i)
        for g in range(levels):
            start, stop = g * merged, (i if g == levels - 1 else (g + 1) * merged)
            nonzero = p[start:stop] != 0
            if nonzero.any():
                q[start:stop][nonzero] = h[start:stop].sum() / nonzero.sum()
        p, q = p / p.sum(), q / q.sum()
        used = p > 0
        out.append(math.inf if (q[used] == 0).any() else float(np.sum(p[used] * np.log(p[used] / q[used]))))
    return np.array(out)


def test_kl_of_a_four_bin_histogram_matches_the_hand_computation():
    # h = [4, 2, 0, 1], 2 levels. i=2: P=[4,3]/7, Q=[4,2]/6. i=3: P=[4,2,1]/7, Q=[4,1,1]/6 (2 spread over 2 bins).
    i, kl = kl_divergences([4, 2, 0, 1], levels=2)
    assert list(i) == [2, 3]
    assert kl[0] == pytest.approx(4 / 7 * math.log(6 / 7) + 3 / 7 * math.log(9 / 7))
    assert kl[1] == pytest.approx(5 / 7 * math.log(6 / 7) + 2 / 7 * math.log(12 / 7))


def test_kl_is_infinite_where_q_has_no_mass_for_p_outliers():
    _, kl = kl_divergences([1, 0, 0, 5], levels=2)
    assert np.isinf(kl).all()
    # a single outlier is mass Q misses just the same (i=2: P=[1,1]/2, Q=[1,0]/1)
    _, kl = kl_divergences([1, 0, 0, 1], levels=2)
    assert np.isinf(kl).all()


def test_kl_does_not_depend_on_the_histograms_scale():
    # KL(P||Q) is of the normalised distributions: counts, or the same counts as fractions, give the same divergences
    h = np.array([4, 2, 0, 1, 3, 0, 2, 1, 1], float)
    np.testing.assert_allclose(kl_divergences(h / h.sum(), 2)[1], kl_divergences(h, 2)[1], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(kl_divergences(h, 2)[1], slide_kl(h, 2), rtol=1e-12, atol=1e-15)


def test_kl_with_one_level():
    # h = [2, 1, 1], one level. i=1: P=[4]/4, Q=[2]/2: KL 0. i=2: P=[2,2]/4, Q=[1.5,1.5]/3 (3 spread over 2): KL 0.
    i, kl = kl_divergences([2, 1, 1], levels=1)
    assert i.tolist() == [1, 2] and kl == pytest.approx([0.0, 0.0], abs=1e-12)
    # h = [1, 3, 2]: i=1: KL 0. i=2: P=[1,5]/6, Q=[2,2]/4: 1/6 ln(1/3) + 5/6 ln(5/3).
    _, kl = kl_divergences([1, 3, 2], levels=1)
    assert kl == pytest.approx([0.0, math.log(1 / 3) / 6 + 5 / 6 * math.log(5 / 3)], abs=1e-12)


def test_a_histogram_without_a_candidate_is_refused():
    with pytest.raises(ValueError, match="^a histogram of 128 bins has no candidate above 128 levels$"):
        kl_divergences(np.ones(128))


def test_vectorised_kl_equals_the_slide_loop_on_random_histograms():
    rng = np.random.default_rng(7)
    for _ in range(100):
        n, levels = int(rng.integers(8, 64)), int(rng.integers(2, 8))
        h = rng.integers(0, 6, n) * (rng.random(n) < 0.6)
        h[0] += 1
        ours, ref = kl_divergences(h, levels)[1], slide_kl(h, levels)
        assert np.array_equal(np.isinf(ours), np.isinf(ref))
        np.testing.assert_allclose(ours[np.isfinite(ours)], ref[np.isfinite(ref)], rtol=1e-9, atol=1e-12)


def test_full_size_histogram_matches_the_slide_loop():
    x = np.abs(np.random.default_rng(1).standard_normal(200_000))
    hist, _ = np.histogram(x, 2048, (0, x.max()))
    ours, ref = kl_divergences(hist)[1], slide_kl(hist, 128)
    finite = np.isfinite(ref)
    np.testing.assert_allclose(ours[finite], ref[finite], rtol=1e-9, atol=1e-12)


def test_entropy_bin_gives_the_zero_bin_the_count_of_bin_one():
    # With h[0] := h[1] the histogram is [2, 2, 0, 1]: i=2 has KL 0.4 ln .8 + .6 ln 1.2 = 0.020, i=3 has 0.054.
    assert entropy_bin([4, 2, 0, 1], levels=2) == 2
    # A spike of exact zeros no longer decides the threshold: half the values are 0, the rest uniform up to 1.
    rng = np.random.default_rng(3)
    x = np.concatenate([np.zeros(500_000), rng.random(500_000)])
    hist, _ = np.histogram(x, 2048, (0, 1))
    assert entropy_bin(hist) > 1900


def test_entropy_clips_a_heavy_tail_but_not_a_uniform_distribution():
    rng = np.random.default_rng(5)
    tail = np.abs(rng.standard_t(3, 500_000))  # max about 105, 99.9 % below about 13
    hist, _ = np.histogram(tail, 2048, (0, tail.max()))
    assert 13 < amax("entropy", hist, float(tail.max()), float(tail.max())) < 0.5 * tail.max()
    flat = rng.random(500_000)
    hist, _ = np.histogram(flat, 2048, (0, 1))
    assert amax("entropy", hist, 1.0, float(flat.max())) > 0.95


def test_entropy_keeps_the_whole_range_when_every_candidate_has_infinite_divergence():
    # Outliers far from an empty last level: Q has no mass where P puts them, for every candidate.
    x = np.concatenate([np.random.default_rng(6).random(100_000), np.full(10, 100.0)])
    hist, _ = np.histogram(x, 2048, (0, 100))
    assert entropy_bin(hist) == 2047


def test_percentile_takes_the_upper_edge_of_the_bin_that_reaches_it():
    hist = [5, 3, 2, 0]  # cumulative 5, 8, 10, 10; range 4 -> bins of width 1
    assert percentile_bin(hist, 50) == 1
    assert percentile_bin(hist, 80) == 2
    assert percentile_bin(hist, 80.01) == 3
    assert amax("percentile", np.array(hist), 4.0, 3.5, percentile=80) == 2.0
    assert amax("percentile", np.array(hist), 4.0, 2.5, percentile=100) == 2.5  # never above the largest |x|
    # counts up to the last bin: 100 % needs all four
    assert percentile_bin([1, 1, 1, 1], 100) == 4
    assert percentile_bin([1, 1, 1, 1], 75.01) == 4


def test_mse_error_by_hand():
    # h = [1, 0, 0, 1], bins of width 1, centres 0.5 and 3.5; INT8 step s = T / 127, so T <= 4 rounds nothing to
    # zero (both centres are above s / 2). Clipping at T costs (c - T)^2 + 1/12 for the bin above, rounding s^2 / 12
    # per value below T.
    err = mse_errors([1, 0, 0, 1])
    rounding = [(t / 127) ** 2 / 12 for t in (1, 2, 3, 4)]
    assert err[0] == pytest.approx(rounding[0] + (3.5 - 1) ** 2 + 1 / 12, rel=1e-12)
    assert err[2] == pytest.approx(rounding[2] + (3.5 - 3) ** 2 + 1 / 12, rel=1e-12)
    assert err[3] == pytest.approx(2 * rounding[3], rel=1e-12)


def test_values_below_half_a_step_round_to_zero_and_cost_their_own_square():
    """2048 bins of width 1, clipped at T = 2048: the INT8 step is 2048 / 127 = 16.13, so every value below 8.06
    rounds to 0. One value uniform in bin 6, [6, 7), then costs E[x^2] = (7^3 - 6^3) / 3 = 127 / 3 exactly; in bin 3,
    (4^3 - 3^3) / 3 = 37 / 3."""
    for b, want in ((6, 127 / 3), (3, 37 / 3)):
        hist = np.zeros(2048, np.int64)
        hist[b] = 1
        assert mse_errors(hist)[-1] == pytest.approx(want, rel=1e-12)


def test_a_histogram_without_counts_keeps_the_largest_absolute_value():
    for method in ("entropy", "mse", "percentile"):
        assert amax(method, np.zeros(2048, np.int64), 4.0, 2.5) == 2.5


def test_minmax_is_the_largest_absolute_value_and_zero_tensors_stay_zero():
    assert amax("minmax", np.array([1, 2, 3]), 8.0, 7.25) == 7.25
    assert amax("entropy", np.zeros(2048, np.int64), 0.0, 0.0) == 0.0


def test_bad_percentile_and_method_are_user_errors():
    with pytest.raises(EdgeError, match="--percentile 0"):
        amax("percentile", np.ones(2048), 1.0, 1.0, percentile=0)
    with pytest.raises(EdgeError, match=r"--percentile 100.5: must be in \(0, 100\]"):
        amax("percentile", np.ones(2048), 1.0, 1.0, percentile=100.5)
    with pytest.raises(EdgeError, match="--method kl"):
        amax("kl", np.ones(2048), 1.0, 1.0)


def test_each_method_gives_its_bin_count_times_the_bin_width():
    """Bins cover [0, range] in equal widths: a threshold of b bins is b * range / bins, for any range."""
    from edge.calib.methods import mse_bin

    hist = np.zeros(2048, np.int64)
    hist[:300] = 1000
    hist[1500] = 3  # a far outlier that MSE and entropy clip
    assert amax("mse", hist, 4.0, 4.0) == pytest.approx(mse_bin(hist) * 4.0 / 2048, rel=1e-12)
    assert amax("entropy", hist, 4.0, 4.0) == pytest.approx(entropy_bin(hist) * 4.0 / 2048, rel=1e-12)
    assert amax("percentile", hist, 4.0, 4.0, 50.0) == pytest.approx(percentile_bin(hist, 50.0) * 4.0 / 2048)
    # the default percentile is edge calib's (docs/edge-calib.md: 99.9), kept in cli.py too so --help needs no numpy
    from edge.calib.cli import DEFAULT_PERCENTILE

    assert DEFAULT_PERCENTILE == 99.9
    assert amax("percentile", hist, 4.0, 4.0) == pytest.approx(percentile_bin(hist, DEFAULT_PERCENTILE) * 4.0 / 2048)
    assert 0 < amax("mse", hist, 4.0, 4.0) < 1500 * 4.0 / 2048
