"""The benchmark's rendered image sets (bench/calib_sets.py): the same set from the same seed, and labels that are
what the images show (a line filed under 180 is the upright line turned over, pixel for pixel)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")
pytest.importorskip("PIL")
pytest.importorskip("matplotlib")  # the fonts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import calib_sets  # noqa: E402


def test_text_lines_are_one_line_crops_and_the_same_for_the_same_seed():
    a, b, c = (calib_sets.render_lines("bench", 6, seed) for seed in (3, 3, 4))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a, c))
    for img in a:
        h, w, ch = img.shape
        assert img.dtype == np.uint8 and ch == 3
        assert 4 < h <= 44 + 16 + 16 and w > 4  # text 20-44 px (a word of x-height letters is about half), margins 2-8 px
        assert img.min() < 128 < img.max()  # ink on paper


def test_a_line_under_180_is_its_upright_twin_turned_over(tmp_path):
    folder = calib_sets.direction_folder(tmp_path / "d", "bench", 3, 5)
    up = sorted((folder / "0").iterdir())
    down = sorted((folder / "180").iterdir())
    assert [p.name for p in up] == [p.name for p in down] and len(up) == 3
    for u, d in zip(up, down):
        assert np.array_equal(cv2.rotate(cv2.imread(str(u)), cv2.ROTATE_180), cv2.imread(str(d)))
