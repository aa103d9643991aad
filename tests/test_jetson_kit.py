"""The Jetson run kit, checked where it cannot do its real work: the bundle it makes, its refusals, its comparison.

The Jetson tests themselves only run on a Jetson (tests/test_jetson.py); here the kit runs with ``--here``, where each
of them must skip and say why, and ``edge doctor`` must fail on "not a Jetson", all inside the bundle.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import PROMPT_S, ROOT
from tests.test_jetson import frames_that_agree

KIT = ROOT / "scripts" / "jetson_check.sh"


def _kit(*args: str, env: dict = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(KIT), *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


@pytest.mark.slow
def test_here_the_kit_bundles_every_step_with_each_jetson_test_skipped_and_why(tmp_path):
    if Path("/etc/nv_tegra_release").exists():
        pytest.skip("this is a Jetson: the kit's real run is scripts/jetson_check.sh without --here")
    env = {**os.environ, "PYTHON": sys.executable, "EDGE_JETSON_DEVICE_TESTS": "tests/test_engine_gate.py"}
    r = _kit("--here", "--out", str(tmp_path), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    (bundle,) = tmp_path.glob("edge-jetson-*.tar.gz")
    assert f"wrote {bundle}: attach it to the issue" in r.stdout
    assert not list(tmp_path.glob("*.partial"))
    with tarfile.open(bundle) as tar:
        names = {Path(m.name).name: m for m in tar.getmembers()}
        kept = {"facts.log", "doctor.log", "doctor.json", "tests.log", "jetson-tests.xml", "device-tests.xml"}
        assert kept | {"summary.txt"} <= set(names)
        summary = tar.extractfile(names["summary.txt"]).read().decode()
        junit = ET.fromstring(tar.extractfile(names["jetson-tests.xml"]).read())
        doctor = tar.extractfile(names["doctor.json"]).read().decode()
        facts = tar.extractfile(names["facts.log"]).read().decode()
    steps = {line.split()[0]: line for line in summary.splitlines()}
    assert set(steps) == {"facts", "doctor", "tests", "device"}  # no setup, bench or tegrastats off a Jetson
    assert "FAILED (exit 1)" in steps["doctor"] and '"not a Jetson' in doctor
    assert " ok " in steps["tests"] and " ok " in steps["device"] and " ok " in steps["facts"]
    assert os.uname().release in facts and "no /etc/nv_tegra_release" in facts  # the facts step ran its function
    cases = junit.findall(".//testcase")
    skipped = [c.find("skipped") for c in cases]
    assert len(cases) == 9 and all(s is not None and "not a Jetson" in s.get("message", "") for s in skipped)


def test_off_a_jetson_without_here_the_kit_refuses_in_one_line():
    if Path("/etc/nv_tegra_release").exists():
        pytest.skip("this is a Jetson")
    r = _kit()
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [
        "jetson_check.sh: not a Jetson (/etc/nv_tegra_release is missing); run it on the Jetson, or --here to check the kit"
    ]


@pytest.mark.parametrize(
    "args, line",
    [
        (["--out", "/nonexistent/x"], "jetson_check.sh: --out /nonexistent/x is not a writable folder"),
        (["--frames"], "jetson_check.sh: unknown argument --frames (see --help)"),
        (["--out", "/no/\x1b[2Jx"], "jetson_check.sh: --out $'/no/\\E[2Jx' is not a writable folder"),
        (["x\ny"], "jetson_check.sh: unknown argument $'x\\ny' (see --help)"),
    ],
)
def test_a_bad_argument_is_one_line_and_exit_2(args, line):
    r = _kit(*args)
    assert (r.returncode, r.stderr.splitlines()) == (2, [line])


def _steps(tmp_path, script):
    """Runs SCRIPT in bash after sourcing scripts/steps.sh with its logs in tmp_path; returns (stdout, summary)."""
    body = f"step_log={shlex.quote(str(tmp_path))}\nsource scripts/steps.sh\n{script}\nprintf '%s\\n' \"${{summary[@]}}\"\n"
    r = subprocess.run(["bash", "-c", body], capture_output=True, text=True, timeout=PROMPT_S, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_step_runs_a_function_of_the_script_with_its_arguments(tmp_path):
    """The kit's facts and setup steps are functions; timeout(1) runs only programs, so a function needs a bash
    given its body (before this, both steps failed with exit 127 and setup never made the Jetson's venv)."""
    out = _steps(tmp_path, 'greet() { echo "hello $1"; return 3; }\nstep greet 5 greet "a b"')
    assert (tmp_path / "greet.log").read_text() == "hello a b\n"
    assert re.search(r"^greet +FAILED \(exit 3\) +\d+ s  hello a b$", out, re.M)


def test_a_step_past_its_limit_is_named_timed_out_and_the_next_step_runs(tmp_path):
    out = _steps(tmp_path, "step slow 1 sleep 30\nstep next 5 echo done")
    # coreutils' timeout exits 124 when the command ran out of time
    assert re.search(r"^slow +FAILED \(exit 124, timed out\) ", out, re.M)
    assert re.search(r"^next +ok +\d+ s  done$", out, re.M)


def test_show_all_prints_the_output_as_it_comes_and_keeps_the_exit_status(tmp_path):
    out = _steps(tmp_path, "STEP_SHOW=all\nstep two 5 bash -c 'echo one; echo two; exit 4'")
    assert out.splitlines()[:3] == ["=== two (at most 5 s)", "one", "two"]
    assert re.search(r"^two +FAILED \(exit 4\) ", out, re.M)


def _det(x, y, w, h, score):
    return {"box": [x, y, x + w, y + h], "score": score, "class_id": 0}


def test_frames_agree_when_their_detections_pair_up_within_iou_and_score():
    ref = [{"detections": [_det(0, 0, 100, 100, 0.9), _det(200, 0, 50, 50, 0.8)]}, {"detections": []}]
    assert frames_that_agree(ref, ref, min_iou=0.9, max_score=0.02) == 1.0
    swapped = [{"detections": list(reversed(ref[0]["detections"]))}, {"detections": []}]
    assert frames_that_agree(swapped, ref, min_iou=0.9, max_score=0.02) == 1.0
    # 5 px off on a 100 px box: IoU 95 * 100 / (2 * 10000 - 9500) = 0.905
    shifted = [{"detections": [_det(5, 0, 100, 100, 0.9), _det(200, 0, 50, 50, 0.8)]}, {"detections": []}]
    assert frames_that_agree(shifted, ref, min_iou=0.9, max_score=0.02) == 1.0
    assert frames_that_agree(shifted, ref, min_iou=0.91, max_score=0.02) == 0.5
    scored = [{"detections": [_det(0, 0, 100, 100, 0.87), _det(200, 0, 50, 50, 0.8)]}, {"detections": []}]
    assert frames_that_agree(scored, ref, min_iou=0.9, max_score=0.02) == 0.5
    missing = [{"detections": ref[0]["detections"][:1]}, {"detections": [_det(0, 0, 10, 10, 0.5)]}]
    assert frames_that_agree(missing, ref, min_iou=0.5, max_score=1.0) == 0.0
