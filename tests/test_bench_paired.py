"""The benchmarks' paired statistics against their definitions and published values."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from paired import mcnemar, wilson  # noqa: E402


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
