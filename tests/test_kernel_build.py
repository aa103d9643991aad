"""preprocess.cu compiles for the GPUs edge runs on, where a CUDA compiler is installed: nvcc for Orin (sm_87) and
the H200 that runs the GPU tests (sm_90), with no spills. (Xavier's sm_72 left CUDA 13; its build is checked by
hand with ptxas 12.9 on this PTX, see docs/verified.md.) pycuda compiles the same source on the device."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import require_or_skip

KERNEL = Path(__file__).resolve().parents[1] / "edge/runtime/engines/cuda/preprocess.cu"


@pytest.mark.parametrize("arch", ["sm_87", "sm_90"])
def test_kernel_compiles_without_spills(tmp_path, arch):
    nvcc = shutil.which("nvcc")
    require_or_skip(nvcc is not None, "nvcc (the CUDA toolkit) is not installed")
    r = subprocess.run(
        [nvcc, "-c", f"-arch={arch}", "-Xptxas", "-v", str(KERNEL), "-o", str(tmp_path / "k.o")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    kernels = re.findall(r"Compiling entry function '(\w+)'", r.stderr)
    assert len(kernels) == 18  # 3 output types x 6 camera formats
    assert "warning" not in r.stderr.lower()
    assert all(int(n) == 0 for n in re.findall(r"(\d+) bytes spill", r.stderr))
