"""Shared fixtures: the real demo assets (fetched once into the edge cache) and helpers to run the CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings

from tests.skiplist import pytest_runtest_logreport, pytest_sessionfinish  # noqa: F401 (hooks: CI's skip allow-list)

# No wall-clock budget in any test: Hypothesis's default 200 ms deadline per example failed a cache round trip
# (252 ms) with the machine loaded. tests/test_hostile_properties.py loads its own profile, also without one.
settings.register_profile("edge", deadline=None)
settings.load_profile("edge")

ROOT = Path(__file__).resolve().parents[1]
DEMO_CONFIG = ROOT / "configs" / "demo.yaml"

# edge-run quiets OpenCV's FFmpeg before cv2 loads (FFmpeg reads its level once, at its first capture). Tests that
# call a CLI in this process (forked, tests/_hostile.py) need the same, so it is set here, before any test imports
# cv2; real child processes get the environment they were started with (_hostile strips what was not inherited).
OPENCV_QUIET = {"OPENCV_FFMPEG_LOGLEVEL": "8", "OPENCV_LOG_LEVEL": "ERROR"}
OPENCV_INHERITED = {k: os.environ.get(k) for k in OPENCV_QUIET}
os.environ.update({k: v for k, v in OPENCV_QUIET.items() if k not in os.environ})


# The files that take longest run first (the suite's --durations lists, 2026-12-03): scripts/test.sh keeps each file on
# one worker, and a long file that starts last is the whole suite's tail (the calibration benchmark's quick run, 111-185
# s, started in the last two minutes of a 13-minute run).
LONG_FILES_FIRST = (
    "test_calib_cli.py",
    "test_centerface_picodet_real.py",
    "test_ultralytics.py",
    "test_mqtt.py",
    "test_hostile_faults.py",
    "test_calib_fusions.py",
    "test_ansible.py",
    "test_dla_corpus.py",
)


def pytest_collection_modifyitems(items: list) -> None:
    rank = {name: i for i, name in enumerate(LONG_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: every other file keeps its place


# "At once" for a wait that a signal, a deadline or a refusal must cut short. Every wait those tests cut short lasts
# 40 s or more (many never end), so this bound still catches one that runs its course. At 10 s a SIGTERM'd
# calibration failed once with the 2-core machine five times oversubscribed (10.06 s): 20 s leaves that margin.
# The tests check behaviour; timing ratios live in bench/.
PROMPT_S = 20.0


@pytest.fixture(autouse=True)
def _drop_cli_log_handler():
    """A CLI called in this process (edge.errors.setup_logging) leaves a root handler on the stderr pytest captured for
    that test; a later test's thread logging through it wrote "Logging error ... I/O operation on closed file"."""
    yield
    from edge.errors import drop_log_handler

    drop_log_handler()


def require_or_skip(ok: bool, reason: str) -> None:
    """Skip when a real server or tool is missing, except in CI (EDGE_REQUIRE_SERVERS=1), where that is a failure."""
    if ok:
        return
    if os.environ.get("EDGE_REQUIRE_SERVERS") == "1":
        pytest.fail(f"{reason} (EDGE_REQUIRE_SERVERS=1: CI must have it)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def demo_model() -> Path:
    from edge import assets

    return assets.resolve("blazeface-back-256", quiet=True)


@pytest.fixture(scope="session")
def megamind() -> Path:
    from edge import assets

    return assets.resolve("megamind", quiet=True)


@pytest.fixture(scope="session")
def megamind_every_9th(megamind: Path) -> list:
    """Every 9th frame of the real clip's 270 (30 frames: faces near and far, turned, two at once, none)."""
    import cv2

    cap = cv2.VideoCapture(str(megamind))
    frames = []
    for i in range(270):
        ok, frame = cap.read()
        assert ok, f"Megamind.avi ended at frame {i}"
        if i % 9 == 0:
            frames.append(frame)
    cap.release()
    return frames


@pytest.fixture(scope="session")
def megamind_frames(megamind: Path) -> dict:
    """Frames of the real clip by index (a handful that the tests use)."""
    import cv2

    wanted = {0, 1, 125, 200}
    cap = cv2.VideoCapture(str(megamind))
    frames, i = {}, 0
    while len(frames) < len(wanted):
        ok, f = cap.read()
        assert ok, f"Megamind.avi ended at frame {i}"
        if i in wanted:
            frames[i] = f
        i += 1
    cap.release()
    return frames


def write_frames(folder: Path, frames: dict) -> Path:
    """``frames`` ({index: BGR array}) as f<index>.png in a new ``folder``, e.g. calibration images."""
    import cv2

    folder.mkdir()
    for index, frame in frames.items():
        cv2.imwrite(str(folder / f"f{index}.png"), frame)
    return folder


def edge_run_cmd() -> list:
    """The installed `edge-run` script when there is one, else the same entry point through this Python."""
    exe = shutil.which("edge-run")
    return [exe] if exe else [sys.executable, "-c", "import sys; from edge.cli import run_main; sys.exit(run_main())"]


def run_cli(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """edge-run as a user runs it: a separate process, output captured."""
    return subprocess.run([*edge_run_cmd(), *args], capture_output=True, text=True, timeout=timeout, **kw)


def run_edge(*args: str, cwd: Path) -> str:
    """An `edge` command (dla, calib, build...) in ``cwd`` that must succeed; its stdout and stderr together."""
    proc = subprocess.run([sys.executable, "-m", "edge", *args], capture_output=True, text=True, timeout=600, cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def run_results(config: Path, out: Path, frames: int) -> list:
    """edge-run with ``config`` on its first ``frames`` frames; the JSONL lines it wrote, one per frame."""
    import json

    proc = run_cli("-c", str(config), "--results", str(out), "--frames", str(frames), timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == frames
    return lines


def blank(h: int = 480, w: int = 640, value: int = 0) -> np.ndarray:
    return np.full((h, w, 3), value, np.uint8)


@pytest.fixture(scope="module")
def cuda_ctx():
    """The GPU's primary context through edge's own wrapper; GPU tests skip, saying why, where pycuda cannot start."""
    from edge.errors import EdgeError

    try:
        from edge.runtime.engines.cuda.memory import CudaContext

        ctx = CudaContext(0)
    except EdgeError as exc:
        pytest.skip(f"pycuda.driver cannot initialise here: {exc}")
    yield ctx
    ctx.close()
