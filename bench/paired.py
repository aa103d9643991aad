"""Statistics for comparing two quantized models on the same scored images."""

from __future__ import annotations

from math import comb, sqrt
from typing import Tuple

import numpy as np


def mcnemar(b: int, c: int) -> float:
    """Exact two-sided McNemar p for ``b`` images only the first model gets right and ``c`` only the second does:
    the binomial tail of the smaller count at one half, doubled (at most 1)."""
    n = b + c
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(comb(n, k) for k in range(min(b, c) + 1)) / 2**n)


def wilson(hits: int, n: int, z: float = 1.96) -> Tuple[float, float]:
    """The Wilson score interval of a proportion ``hits / n`` (95 % at z = 1.96)."""
    if n == 0:
        return 0.0, 1.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def cluster_interval(a: np.ndarray, b: np.ndarray, groups: np.ndarray, draws: int = 4000, seed: int = 0) -> Tuple[float, float]:
    """A 95 % percentile-bootstrap interval of ``a.mean() - b.mean()`` (two models' right/wrong on the same images)
    that draws whole groups with replacement: images made from one source are not independent, so the interval
    must not treat them as such."""
    labels, index = np.unique(groups, return_inverse=True)
    diff = np.bincount(index, weights=a.astype(float) - b.astype(float), minlength=len(labels))
    size = np.bincount(index, minlength=len(labels)).astype(float)
    pick = np.random.default_rng(seed).integers(0, len(labels), (draws, len(labels)))
    means = diff[pick].sum(axis=1) / size[pick].sum(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)
