"""`edge doctor`: here for real (not a Jetson: it must say so, exit 1, no traceback), and on a stand-in Jetson per
TensorRT release. The stand-in machine is a fake root (nv_tegra_release, device-tree model, a sysfs tree with
jetson-stats' and jetson_clocks' names, /dev/video0), the stand-in ``tensorrt`` of each release (its ONNX parser is
the real TensorRT-RTX one) and the stand-in pycuda; what "executes" the tiny engine is ONNX Runtime on the same
model, so the doctor's comparison is exercised, not TensorRT's numbers. Only a Jetson can confirm those."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from edge.doctor import Doctor, render, write_tiny_model
from tests import pycuda_standin
from tests.conftest import require_or_skip
from tests.test_telemetry_sysfs import agx_orin_tree
from tests.trt_standin import RELEASED, VERSIONS, Machine, make_tensorrt

ROOT = Path(__file__).resolve().parents[1]
# /etc/nv_tegra_release first lines of the JetPacks that ship each release (L4T R35.2.1 = JetPack 5.1, R36.3 = 6.0,
# R36.4.3 = 6.2).
NV_TEGRA_RELEASE = {
    "8.5.2": "# R35 (release), REVISION: 2.1, GCID: 32413640, BOARD: t186ref, EABI: aarch64, DATE: Tue Jan 24 23:38:33 UTC 2023",
    "8.6.1": "# R36 (release), REVISION: 3.0, GCID: 36923193, BOARD: generic, EABI: aarch64, DATE: Fri Jul 19 23:24:25 UTC 2024",
    "10.3.0": "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed Jan  8 01:49:37 UTC 2025",
}


def test_here_it_says_not_a_jetson_and_exits_1_without_a_traceback(tmp_path):
    import subprocess

    from tests.conftest import edge_run_cmd  # noqa: F401  (the same interpreter as the other CLI tests)

    out = tmp_path / "doctor.json"
    r = subprocess.run(
        [sys.executable, "-m", "edge", "doctor", "--json", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    if Path("/etc/nv_tegra_release").exists():
        pytest.skip("this is a Jetson")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    assert "not a Jetson: no /etc/nv_tegra_release" in r.stdout and "fix platform: run edge doctor on the Jetson" in r.stdout
    # jtop's own advice (`sudo jtop --install-service`) cannot work off a Jetson
    assert "install-service" not in r.stdout
    jtop_row = next(c for c in json.loads(out.read_text())["checks"] if c["name"] == "telemetry jtop")
    assert jtop_row["detail"].startswith(("jtop: not a Jetson (no ", "jtop is not installed", "jetson-stats")), jtop_row
    data = json.loads(out.read_text())
    assert data["checks"][0]["name"] == "platform" and data["checks"][0]["status"] == "fail"
    assert {c["status"] for c in data["checks"]} <= {"fail", "skip", "ok", "warn"}


def test_json_to_a_folder_is_refused_before_any_check(tmp_path, capsys):
    from edge.cli import main

    assert main(["doctor", "--json", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--json" in err[0]


def jetson_root(tmp_path: Path, version: str) -> Path:
    root = tmp_path / "jetson"
    (root / "etc").mkdir(parents=True)
    (root / "etc/nv_tegra_release").write_text(NV_TEGRA_RELEASE[version] + "\n")
    (root / "proc/device-tree").mkdir(parents=True)
    (root / "proc/device-tree/model").write_text("NVIDIA Jetson AGX Orin Developer Kit\x00")
    agx_orin_tree(root / "sys")
    (root / "dev").mkdir()
    (root / "dev/video0").write_text("")
    (root / "sys/class/video4linux/video0").mkdir(parents=True)
    (root / "sys/class/video4linux/video0/name").write_text("vi-output, imx219 10-0010\n")
    return root


@pytest.fixture(params=VERSIONS)
def stand_in_jetson(request, tmp_path, monkeypatch):
    try:
        import onnxruntime as ort
        import tensorrt_rtx  # noqa: F401
    except ImportError as exc:
        require_or_skip(False, f"needs onnxruntime and TensorRT-RTX: {exc}")
    from edge.builder import trt as trt_api

    version = request.param
    machine = Machine(dla_cores=2, gpu=True)
    driver = pycuda_standin.install(monkeypatch)
    machine.memory = driver.memory
    monkeypatch.setitem(sys.modules, "tensorrt", make_tensorrt(version, machine))
    monkeypatch.setattr(trt_api, "_module", None)
    monkeypatch.setattr(trt_api, "_logger", None)
    session = ort.InferenceSession(str(write_tiny_model(tmp_path / "tiny.onnx")), providers=["CPUExecutionProvider"])
    machine.run_with = lambda feeds: {"y": session.run(None, feeds)[0]}  # stands in for the engine executing
    return version, machine, jetson_root(tmp_path, version)


def by_name(checks):
    return {c.name: c for c in checks}


def test_doctor_on_a_stand_in_jetson_of_each_release(stand_in_jetson):
    version, machine, root = stand_in_jetson
    checks = by_name(Doctor(root, service=False).run())
    assert checks["platform"].status == "ok" and "NVIDIA Jetson AGX Orin Developer Kit, L4T" in checks["platform"].detail
    assert checks["tensorrt"].status == "ok", checks["tensorrt"]
    assert checks["tensorrt"].detail == f"TensorRT {RELEASED[version]}, builder present, 2 DLA core(s)"
    assert checks["cuda"].detail.startswith("stand-in GPU, compute capability 8.7")
    for where in ("GPU", "DLA 0", "DLA 1"):
        c = checks[f"engine {where}"]
        assert "max |diff| vs ONNX Runtime 0.0000" in c.detail, c
    assert checks["engine GPU"].status == "ok"
    # Placement is not modelled by the stand-in: the doctor's "nothing on the DLA" warning is what shows.
    assert checks["engine DLA 0"].status == "warn" and "nothing on the DLA" in checks["engine DLA 0"].fix
    built = [c for c in machine.calls if c[0] == "built"]
    assert [b[3] for b in built] == [None, 0, 1] and all("FP16" in b[1] for b in built)
    assert checks["telemetry sysfs"].status == "ok" and checks["GPU clock"].detail == "918 MHz"
    assert checks["DLA state"].detail == "DLA0 on, DLA1 off"
    assert checks["cameras"].detail == "video0 (vi-output, imx219 10-0010)"
    assert not [c for c in checks.values() if c.status == "fail"]
    if importlib.util.find_spec("jtop") is not None and not Path("/run/jtop.sock").exists():
        # on a Jetson without jtop's service, jtop's own advice is the right one
        assert "sudo jtop --install-service" in checks["telemetry jtop"].detail


def test_a_wrong_engine_result_fails_with_its_fix(stand_in_jetson):
    _, machine, root = stand_in_jetson
    honest = machine.run_with
    machine.run_with = lambda feeds: {"y": honest(feeds)["y"] + np.float32(0.5)}
    checks = by_name(Doctor(root, service=False).run())
    assert checks["engine GPU"].status == "fail" and "max |diff| vs ONNX Runtime 0.5000" in checks["engine GPU"].detail
    text = "\n".join(render(list(checks.values())))
    assert "fix engine GPU: the FP16 engine differs from FP32 by more than 0.05" in text


def test_a_tensorrt_that_is_not_the_jetpacks_own_is_a_warning(stand_in_jetson, tmp_path):
    version, _, root = stand_in_jetson
    other = {"8.5.2": "10.3.0", "8.6.1": "8.5.2", "10.3.0": "8.6.1"}[version]
    (root / "etc/nv_tegra_release").write_text(NV_TEGRA_RELEASE[other] + "\n")
    c = by_name(Doctor(root, build=False, service=False).run())["tensorrt"]
    assert c.status == "warn" and "ships TensorRT" in c.detail
