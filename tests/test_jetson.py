"""What only a Jetson can confirm: TensorRT engines executing on the GPU and the DLA, INT8 from edge calib's cache and
Q/DQ model, the GPU and both DLA cores at once, telemetry rails, the service unit's device rules and the cameras.

Marked ``jetson`` and left out of CI (``-m "not gpu and not jetson"``): on anything but a Jetson with JetPack's
TensorRT they skip with the reason. ``scripts/jetson_check.sh`` runs them on a Jetson together with ``edge doctor``
and the benchmarks and bundles the results (docs/verified.md, "Confirming on a Jetson").

The expected values are not ours: every engine's detections are compared with ONNX Runtime running the same ONNX
model on the same frames. FP16 must match closely; INT8 is held to edge calib's own agreement measure, so a Jetson
that disagrees with the laptop's prediction fails here.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest
import yaml

from tests._hostile import entry
from tests.conftest import DEMO_CONFIG, ROOT, run_cli, run_results

pytestmark = pytest.mark.jetson

FRAMES = 60
L4T = Path("/etc/nv_tegra_release")
UNIT = ROOT / "systemd" / "edge-camera@.service"


def not_a_jetson_reason() -> str:
    """Why these tests cannot run here, or '' on a Jetson with JetPack's TensorRT bindings."""
    if not L4T.is_file():
        return f"not a Jetson ({L4T} is missing)"
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        return "JetPack's TensorRT Python bindings are not importable (a venv needs --system-site-packages)"
    return ""


@pytest.fixture(scope="module", autouse=True)
def _on_a_jetson() -> None:
    reason = not_a_jetson_reason()
    if reason:
        pytest.skip(reason)


def _out() -> Path | None:
    """The kit's bundle folder (scripts/jetson_check.sh sets it): placement reports and summaries are kept there."""
    out = os.environ.get("EDGE_JETSON_OUT")
    return Path(out) if out else None


def _keep(*paths: Path) -> None:
    out = _out()
    if out is not None:
        for p in paths:
            if p.exists():
                shutil.copy(p, out / p.name)


def _iou(a: List[float], b: List[float]) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def frames_that_agree(ours: List[dict], reference: List[dict], min_iou: float, max_score: float) -> float:
    """The share of frames whose detections pair one to one with the reference's (IoU, score difference)."""
    agree = 0
    for a, b in zip(ours, reference):
        da, db = a["detections"], b["detections"]
        if len(da) != len(db):
            continue
        left = list(db)
        for d in sorted(da, key=lambda d: -d["score"]):
            best = max(left, key=lambda r: _iou(d["box"], r["box"]), default=None)
            if best is None or _iou(d["box"], best["box"]) < min_iou or abs(d["score"] - best["score"]) > max_score:
                break
            left.remove(best)
        else:
            agree += 1
    return agree / len(reference)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("jetson")


@pytest.fixture(scope="module")
def reference(work: Path, demo_model: Path, megamind: Path) -> List[dict]:
    """ONNX Runtime on the CPU: the demo model on the clip's first frames."""
    return run_results(DEMO_CONFIG, work / "onnxruntime.jsonl", FRAMES)


@pytest.fixture(scope="module")
def calib_images(work: Path, megamind: Path) -> Path:
    import cv2

    folder = work / "calib"
    folder.mkdir()
    cap = cv2.VideoCapture(str(megamind))
    for i in range(270):
        ok, frame = cap.read()
        assert ok
        if i % 9 == 4:  # 30 frames that are not the ones compared
            cv2.imwrite(str(folder / f"{i:03d}.png"), frame)
    return folder


def _cli(*args: object, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([*entry("edge"), *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def _build(*args: object) -> None:
    r = subprocess.run([*entry("edge-build"), *map(str, args)], capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]


def _target_and_trt() -> List[str]:
    """edge dla's --target and --trt for this module and its TensorRT (major.minor, as edge dla names releases)."""
    import tensorrt as trt

    model = Path("/proc/device-tree/model").read_bytes().decode(errors="replace")
    target = "xavier" if "Xavier" in model else "orin"
    return ["--target", target, "--trt", ".".join(trt.__version__.split(".")[:2])]


def _run(out: Path, *args: object) -> List[dict]:
    r = run_cli("-c", str(DEMO_CONFIG), "--frames", str(FRAMES), "--results", str(out), "-q", *map(str, args), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.fixture(scope="module")
def calib(work: Path, calib_images: Path, demo_model: Path) -> Dict[str, Path]:
    """edge calib on the laptop's path: a TensorRT cache and a Q/DQ model from the same statistics."""
    cache, qdq = work / "demo.cache", work / "demo.qdq.onnx"
    r = _cli("calib", demo_model, "--images", calib_images, "--cache", cache, "--qdq", qdq)
    assert r.returncode == 0, r.stderr[-3000:]
    return {"cache": cache, "qdq": qdq}


def test_doctor_passes_on_this_jetson(work: Path) -> None:
    report = work / "doctor.json"
    r = _cli("doctor", "--json", report)
    _keep(report)
    checks = json.loads(report.read_text())["checks"]
    failed = [c for c in checks if c["status"] == "fail"]
    assert r.returncode == 0 and not failed, failed or r.stdout


def test_an_fp16_gpu_engine_gives_onnxruntimes_detections(work: Path, demo_model: Path, reference: List[dict]) -> None:
    engine = work / "gpu_fp16.engine"
    _build(demo_model, "--fp16", "-o", engine)
    got = _run(work / "gpu_fp16.jsonl", "--engine", engine)
    _keep(engine.with_name(engine.name + ".layers.json"))
    assert frames_that_agree(got, reference, min_iou=0.9, max_score=0.02) >= 0.95


def test_an_int8_dla_engine_from_edge_calibs_cache_runs_on_dla_0(
    work: Path, demo_model: Path, calib: Dict[str, Path], reference: List[dict]
) -> None:
    engine = work / "dla_int8.engine"
    _build(demo_model, "--int8", "--calib-cache", calib["cache"], "--dla", "0", "-o", engine)
    report = engine.with_name(engine.name + ".layers.json")
    _keep(report, calib["cache"])
    placement = json.loads(report.read_text())
    assert placement["summary"]["dla_layers"] > 0, placement["summary"]
    got = _run(work / "dla_int8.jsonl", "--engine", engine, "--dla", "0")
    assert frames_that_agree(got, reference, min_iou=0.7, max_score=0.1) >= 0.8


def test_edge_dla_predicted_what_tensorrt_placed(work: Path, demo_model: Path) -> None:
    """The laptop's prediction against this Jetson's FP16 DLA build of the same model: the same number of DLA
    subgraphs (loadables), and GPU fallback predicted exactly when TensorRT left layers on the GPU."""
    engine = work / "dla_fp16.engine"
    _build(demo_model, "--fp16", "--dla", "0", "-o", engine)
    report = engine.with_name(engine.name + ".layers.json")
    predicted = work / "predicted.json"
    r = _cli("dla", demo_model, *_target_and_trt(), "--json", predicted)
    assert r.returncode == 0, r.stderr[-3000:]
    _keep(report, predicted)
    placed, prediction = json.loads(report.read_text())["summary"], json.loads(predicted.read_text())["summary"]
    assert placed["dla_subgraphs"] == prediction["subgraphs"], (placed, prediction)
    assert (placed["gpu_layers"] > 0) == (prediction["gpu_nodes"] > 0), (placed, prediction)


def test_the_qdq_model_builds_and_gives_onnxruntimes_detections(
    work: Path, calib: Dict[str, Path], reference: List[dict]
) -> None:
    engine = work / "gpu_qdq.engine"
    _build(calib["qdq"], "-o", engine)
    got = _run(work / "gpu_qdq.jsonl", "--engine", engine)
    assert frames_that_agree(got, reference, min_iou=0.7, max_score=0.1) >= 0.8


def test_the_gpu_and_both_dla_cores_serve_one_process(work: Path, demo_model: Path, calib: Dict[str, Path]) -> None:
    import tensorrt as trt

    cores = trt.Runtime(trt.Logger(trt.Logger.ERROR)).num_DLA_cores
    if cores < 2:
        pytest.skip(f"this module has {cores} DLA core(s); the pool test needs an AGX Orin or Orin NX with two")
    engine = work / "pool.engine"
    _build(demo_model, "--int8", "--calib-cache", calib["cache"], "--engines", "gpu,dla", "-o", engine)
    demo = yaml.safe_load(DEMO_CONFIG.read_text())
    cfg = {k: v for k, v in demo.items() if k != "source"}
    cfg["model"] = {**cfg.get("model", {}), "engine": str(engine)}
    cfg["pool"] = {"engines": ["gpu", "dla0", "dla1"]}
    cfg["sources"] = [{"name": f"cam{i}", "uri": "asset://megamind", "spread": True} for i in range(3)]
    path = work / "pool.yaml"
    path.write_text(yaml.safe_dump(cfg))
    summary = work / "pool.summary.json"
    r = run_cli("-c", str(path), "--loop", "--duration", "20", "-q", "--summary-json", str(summary), timeout=300)
    _keep(summary)
    assert r.returncode == 0, r.stderr[-3000:]
    engines = json.loads(summary.read_text())["engines"]
    assert {name: e["frames"] > 0 for name, e in engines.items()} == {"gpu": True, "dla0": True, "dla1": True}


def test_a_dla_run_shows_in_the_power_rails_and_the_dla_state(work: Path, demo_model: Path) -> None:
    engine = work / "dla_fp16_tel.engine"
    _build(demo_model, "--fp16", "--dla", "0", "-o", engine)
    summary = work / "telemetry.summary.json"
    r = run_cli(
        "-c", str(DEMO_CONFIG), "--engine", str(engine), "--dla", "0", "--loop", "--duration", "15", "-q",
        "--telemetry", "auto", "--summary-json", str(summary), timeout=300,
    )  # fmt: skip
    _keep(summary)
    assert r.returncode == 0, r.stderr[-3000:]
    tel = json.loads(summary.read_text())["telemetry"]
    assert tel["backend"] != "none" and tel["power_w"]["mean"] > 0, tel
    assert tel["dla_online_frac"].get("DLA0", 0) > 0.5, tel


def _device_allow() -> List[str]:
    return re.findall(r"^DeviceAllow=(\S+)", UNIT.read_text(), re.M)


def _char_classes() -> Dict[int, str]:
    """Major number -> driver name, from /proc/devices' character section (what DeviceAllow=char-NAME matches)."""
    majors, section = {}, None
    for line in Path("/proc/devices").read_text().splitlines():
        if line.endswith("devices:"):
            section = line.split()[0]
        elif section == "Character" and line.strip():
            number, name = line.split(None, 1)
            majors[int(number)] = name
    return majors


def test_the_units_device_rules_cover_this_jetsons_gpu_and_dla_nodes() -> None:
    """Every GPU, DLA and memory node CUDA and the DLA open here is allowed by the camera unit's DeviceAllow=."""
    nodes = [
        str(p)
        for pattern in ("nvhost-*", "nvgpu/igpu0/*", "nvmap", "host1x*", "nvidia*", "nvsciipc", "dri/*")
        for p in sorted(Path("/dev").glob(pattern))
        if p.is_char_device()
    ]
    assert nodes, "no GPU device nodes under /dev"
    allowed, majors = _device_allow(), _char_classes()
    uncovered = []
    for node in nodes:
        driver = majors.get(os.major(os.stat(node).st_rdev), "")
        if not any(rule == node or (rule.startswith("char-") and fnmatch.fnmatch(driver, rule[5:])) for rule in allowed):
            uncovered.append(f"{node} ({driver})")
    out = _out()
    if out is not None:
        (out / "device-nodes.txt").write_text("\n".join(nodes) + "\n")
    assert not uncovered, f"{UNIT.name} does not allow: {', '.join(uncovered)}"


def test_each_camera_gives_frames(work: Path) -> None:
    """Each camera's first node (index 0; uvcvideo adds a metadata node at index 1) through edge-run's V4L2 source."""
    cameras = [
        f"/dev/{p.name}"
        for p in sorted(Path("/sys/class/video4linux").glob("video*"))
        if (p / "index").read_text().strip() == "0"
    ]
    if not cameras:
        pytest.skip("no camera on this Jetson (/sys/class/video4linux has no capture node)")
    for cam in cameras:
        out = work / f"{Path(cam).name}.jsonl"
        r = run_cli("-c", str(DEMO_CONFIG), "--source", cam, "--frames", "30", "-q", "--results", str(out), timeout=120)
        assert r.returncode == 0, f"{cam}: {r.stderr[-2000:]}"
        assert len(out.read_text().splitlines()) == 30, cam
