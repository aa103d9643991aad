"""The benchmarks' paired statistics against their definitions and published values."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from paired import cluster_interval, mcnemar, wilson  # noqa: E402


def test_mcnemar_by_its_definition():
    assert mcnemar(0, 0) == 1.0
    assert mcnemar(3, 11) == pytest.approx(2 * (1 + 14 + 91 + 364) / 2**14)  # C(14, 0..3) / 2^14, doubled
    assert mcnemar(11, 3) == mcnemar(3, 11)
    assert mcnemar(0, 5) == pytest.approx(2 / 32)
    assert mcnemar(5, 5) == 1.0  # the doubled tail passes 1


def test_wilson_against_published_intervals():
    # Newcombe (1998), Statistics in Medicine 17:857, table I: 81/263 -> 0.2553 to 0.3662; 15/148 -> 0.0624 to 0.1605
    assert wilson(81, 263) == pytest.approx((0.2553, 0.3662), abs=1e-4)
    assert wilson(15, 148) == pytest.approx((0.0624, 0.1605), abs=1e-4)
    assert wilson(0, 20) == pytest.approx((0.0, 0.1611), abs=1e-4)  # the same table: 0/20 -> 0 to 0.1611
    assert wilson(0, 0) == (0.0, 1.0)


def test_the_cluster_interval_draws_whole_groups():
    # two groups of one image each: the first only the first model gets right, the second both. Drawing two groups
    # with replacement gives a mean difference of 1 (first twice, p = 1/4), 1/2 (one of each, 1/2) or 0 (1/4): the
    # 2.5th and 97.5th percentiles are 0 and 1.
    a, b = np.array([True, True]), np.array([False, True])
    assert cluster_interval(a, b, np.array([0, 1])) == (0.0, 1.0)
    # the same two images in one group: every draw is that group, so the difference is exactly its mean, 1/2
    assert cluster_interval(a, b, np.array([7, 7])) == (0.5, 0.5)
    # groups of unequal size: draws weigh each group by its images (a ratio estimate), so one group of three images
    # all +1 and one group of one image at 0 give 1 (p = 1/4), 3/4 (1/2) or 0 (1/4)
    a, b = np.array([1, 1, 1, 0], bool), np.array([0, 0, 0, 0], bool)
    assert cluster_interval(a, b, np.array([2, 2, 2, 5])) == (0.0, 1.0)


def test_the_cluster_interval_is_wider_than_a_naive_one_when_views_repeat_a_source():
    # 40 sources, each seen 24 times with the same outcome: the information is that of 40 images, not 960, so the
    # interval must be about sqrt(24) wider than one drawn over images (here: at least 3 times)
    rng = np.random.default_rng(3)
    per_source = rng.random(40) < 0.3
    a = np.repeat(per_source, 24)
    b = np.zeros_like(a)
    groups = np.repeat(np.arange(40), 24)
    lo, hi = cluster_interval(a, b, groups)
    n_lo, n_hi = cluster_interval(a, b, np.arange(len(a)))
    assert lo <= a.mean() <= hi and n_lo <= a.mean() <= n_hi
    assert (hi - lo) > 3 * (n_hi - n_lo)


def test_the_default_choice_ranks_ties_alike():
    """bench/calibration.py --only choose: tied scores share their places' mean (three methods reading the same
    top-1 on a model got places 1, 2, 3 by the order they ran, which decided the default)."""
    from calibration import tied_rank

    scores = [0.9760, 0.9760, 0.9760, 0.9750, 0.9934]
    assert tied_rank(scores, 0.9934) == 1.0
    assert tied_rank(scores, 0.9760) == 3.0  # places 2, 3 and 4
    assert tied_rank(scores, 0.9750) == 5.0
    assert tied_rank([0.5], 0.5) == 1.0


def test_the_worst_case_is_each_rows_lowest_share_of_the_best():
    from calibration import worst_share

    table = {"a": {"x": 0.9, "y": 1.0}, "b": {"x": 0.45, "y": 0.5}, "c": {"x": 0.0, "y": 0.0}}
    assert worst_share(table) == {"a": 1.0, "b": 0.5, "c": 0.0}
    assert worst_share({"a": {"x": 0.0}}) == {"a": 1.0}  # nobody scores: nobody is worse
