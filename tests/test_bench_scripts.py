"""The benchmarks are commands too: one that cannot run here says so in one line, not a traceback."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(importlib.util.find_spec("pycuda") is not None, reason="pycuda is installed: the benchmark would run")
def test_the_gpu_preprocessing_benchmark_without_pycuda_is_one_line():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "preprocess.py")], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "pycuda" in proc.stderr and "Traceback" not in proc.stderr
