"""Thresholds (amax) from a tensor's |x| histogram: mse, entropy (KL divergence), percentile and min-max.

The mse method picks the threshold T whose INT8 round trip (step s = T / 127, values above T clipped to T) has the
smallest expected squared error, with the values of each bin taken as spread evenly over it:

    err(T) = sum over bins below s/2 of n (c^2 + w^2/12)       (rounded to zero)
           + (s^2 / 12) * (count from s/2 to T)                 (rounding noise of a step s)
           + sum over bins above T of n ((c - T)^2 + w^2/12)    (clipped)

with c a bin's centre, w its width and n its count. Every term comes from prefix sums of n, n c and n c^2, so all
2048 candidates cost a few array operations, on the histograms the statistics pass already streamed.

The entropy method is the one NVIDIA published for TensorRT (GTC 2017, S7310): for every candidate bin i from 128
to 2047, P is the first i bins with everything beyond folded into bin i-1, Q is the first i bins merged into 128
levels and spread back evenly over P's non-zero bins, and the threshold is where KL(P||Q) is smallest. Written out,

    KL(i) = (sum p log p) / T - log T + log C_i - (sum_g P_g log(S_g / N_g)) / T

with T the total count, C_i the count below bin i, and per merged level g: S_g its count, P_g the count P puts there
(S_g plus the outliers for the last level) and N_g how many non-zero P bins it spreads over. Every sum comes from
cumulative sums of the histogram, and candidates with the same bins per level share all levels but the last, so the
1920 candidates cost a few thousand numpy element operations instead of a loop over bins.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np

from edge.errors import EdgeError

METHODS = ("mse", "entropy", "percentile", "minmax")
LEVELS = 128  # positive INT8 levels the KL method quantises to


def _xlogx(x: np.ndarray) -> np.ndarray:
    out = np.zeros_like(x)
    pos = x > 0
    out[pos] = x[pos] * np.log(x[pos])
    return out


def kl_divergences(hist: np.ndarray, levels: int = LEVELS) -> Tuple[np.ndarray, np.ndarray]:
    """(candidate bins i, KL(P||Q) for each) for i in [levels, len(hist)); inf where Q misses mass that P has."""
    h = np.asarray(hist, np.float64)
    n = h.size
    if n <= levels:
        raise ValueError(f"a histogram of {n} bins has no candidate above {levels} levels")
    total = h.sum()
    cum = np.concatenate(([0.0], np.cumsum(h)))
    nonzero = np.concatenate(([0], np.cumsum(h > 0)))
    cum_hlogh = np.concatenate(([0.0], np.cumsum(_xlogx(h))))

    i = np.arange(levels, n)
    outliers = total - cum[i]
    sum_plogp = cum_hlogh[i - 1] + _xlogx(h[i - 1] + outliers)

    # Candidates with the same bins per level (i // levels) share every level but the last: sum those once.
    merged = i // levels
    widths = np.arange(1, merged.max() + 1)[:, None]
    edges = np.arange(levels)[None, :] * widths  # level starts; level g spans [edges[g], edges[g + 1])
    s = cum[edges[:, 1:]] - cum[edges[:, :-1]]
    spread = nonzero[edges[:, 1:]] - nonzero[edges[:, :-1]]
    shared = (_xlogx(s) - s * np.log(np.maximum(spread, 1))).sum(axis=1)

    first = (levels - 1) * merged  # the last level runs from here to i
    s_last = cum[i] - cum[first]
    spread_last = nonzero[i] - nonzero[first] + ((h[i - 1] == 0) & (outliers > 0))  # outliers make bin i-1 non-zero
    p_last = s_last + outliers
    with np.errstate(divide="ignore", invalid="ignore"):
        last = np.where(p_last > 0, p_last * np.log(s_last / np.maximum(spread_last, 1)), 0.0)
        kl = sum_plogp / total - np.log(total) + np.log(cum[i]) - (shared[merged - 1] + last) / total
    kl[~np.isfinite(kl)] = np.inf
    return i, kl


def entropy_bin(hist: np.ndarray, levels: int = LEVELS) -> int:
    """The bin count i whose upper edge is the threshold with the smallest KL divergence (the largest on ties).

    Bin 0 first gets the count of bin 1, as NVIDIA's pytorch-quantization does: the spike of exact zeros after
    ReLU-like layers would otherwise dominate the divergence and pull every threshold down to the first candidates.
    """
    h = np.array(hist, np.float64)
    if h.size > 1:
        h[0] = h[1]
    i, kl = kl_divergences(h, levels)
    return int(i[len(kl) - 1 - int(np.argmin(kl[::-1]))])


def mse_errors(hist: np.ndarray, levels: int = 127) -> np.ndarray:
    """Expected squared error (times the count) of clipping at the upper edge of bin i, for i in 1..len(hist)."""
    h = np.asarray(hist, np.float64)
    n = h.size
    centre = np.arange(n) + 0.5  # in units of the bin width
    zero = np.zeros(1)
    count = np.concatenate((zero, np.cumsum(h)))
    first = np.concatenate((zero, np.cumsum(h * centre)))
    second = np.concatenate((zero, np.cumsum(h * centre * centre)))
    i = np.arange(1, n + 1)
    t = i.astype(np.float64)  # the threshold, in bin widths
    step = t / levels
    # Bins whose centre is below half a step round to zero: their error is their own square.
    k = np.clip(np.ceil(step / 2 - 0.5), 0, i).astype(np.int64)
    rounded_to_zero = second[k] + count[k] / 12
    rounding = step * step / 12 * (count[i] - count[k])
    above = count[n] - count[i]
    clipped = (second[n] - second[i]) - 2 * t * (first[n] - first[i]) + t * t * above + above / 12
    return rounded_to_zero + rounding + clipped


def mse_bin(hist: np.ndarray) -> int:
    """The bin count whose upper edge has the smallest expected INT8 round-trip error (the largest on ties)."""
    err = mse_errors(hist)
    return len(err) - int(np.argmin(err[::-1]))


def percentile_bin(hist: np.ndarray, percentile: float) -> int:
    """The bin count whose upper edge holds at least ``percentile`` % of the values."""
    cum = np.cumsum(np.asarray(hist, np.float64))
    return int(np.searchsorted(cum, cum[-1] * percentile / 100.0, side="left")) + 1


def amax(method: str, hist: np.ndarray, hist_range: float, absmax: float, percentile: float = 99.9) -> float:
    """The clipping threshold for one tensor; never above the largest |x| seen (the histogram may reach past it)."""
    if method == "minmax" or absmax == 0.0 or not np.any(hist):
        return absmax
    width = hist_range / len(hist)
    if method == "mse":
        threshold = mse_bin(hist) * width
    elif method == "entropy":
        threshold = entropy_bin(hist) * width
    elif method == "percentile":
        if not 0.0 < percentile <= 100.0:
            raise EdgeError(f"--percentile {percentile}: must be in (0, 100], e.g. 99.99")
        threshold = percentile_bin(hist, percentile) * width
    else:
        raise EdgeError(f"--method {method}: expected one of {', '.join(METHODS)}")
    return min(threshold, absmax)
