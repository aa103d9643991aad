"""What a run tells the outside about itself (edge.runtime.status.live): run_info and the recent FPS/latency window."""

from __future__ import annotations

import time
import types

import pytest

from edge import assets
from edge.config import load_config
from edge.manifest import sha256_file, write_manifest
from edge.runtime.status.live import run_info
from edge.runtime.status.metrics import Metrics

from .conftest import DEMO_CONFIG


def test_run_info_on_onnxruntime_names_the_pinned_model(demo_model):
    import onnxruntime

    cfg = load_config(DEMO_CONFIG)
    backend = types.SimpleNamespace(name="onnxruntime", device="cpu", dla_core=None)
    info = run_info(cfg, backend)
    assert info["model"] == "blazeface-back-256" and info["model_sha256"] == assets.lookup("blazeface-back-256").sha256[:12]
    assert info["engine_sha256"] == "" and info["dla_core"] == "" and info["runtime_version"] == onnxruntime.__version__
    assert all(isinstance(v, str) for v in info.values())  # they become Prometheus labels


def test_run_info_on_tensorrt_reads_the_engine_hash_from_its_manifest(tmp_path):
    """The TensorRT runtime cannot run here: a stand-in backend object reports what TensorRTBackend.info() does."""
    engine = tmp_path / "yolo.engine"
    engine.write_bytes(b"an engine's bytes")
    write_manifest(
        engine,
        {
            "manifest_version": 1,
            "engine": {"file": engine.name, "sha256": sha256_file(engine), "size": 17},
            "tensorrt": {"version": "10.3.0"},
            "device": {"gpu_name": "Orin", "compute_capability": "8.7", "l4t": "36.4.3", "jetpack": "6.2"},
            "dla": {"core": 1, "gpu_fallback": True},
            "io": [],
            "source": {"onnx": "yolo.onnx", "sha256": "ab" * 32},
        },
    )
    cfg = load_config(None, values={"model.engine": str(engine)})
    backend = types.SimpleNamespace(name="tensorrt", device="dla:1", dla_core=1, info=lambda: {"tensorrt": "10.3.0"})
    info = run_info(cfg, backend)
    assert info["engine_sha256"] == sha256_file(engine)[:12] and info["model_sha256"] == "ab" * 6
    assert (info["model"], info["dla_core"], info["device"], info["runtime_version"]) == ("yolo.engine", "1", "dla:1", "10.3.0")


def test_recent_counts_only_the_last_window():
    m = Metrics()
    now = time.monotonic()
    for i in range(100):  # 100 frames over the last 10 s, 50 ms each from capture to done
        t_done = now - 10 + i * 0.1
        m.frame_done(t_done - 0.05, {"infer": 0.01}, t_done)
    fps, latency = m.recent(5.0)
    assert fps == pytest.approx(10.0, abs=0.5) and latency == pytest.approx(0.05)
    assert Metrics().recent(5.0) == (0.0, None)


def test_the_fleet_modules_import_neither_paho_nor_prometheus_client_until_used():
    import subprocess
    import sys

    probe = (
        "import sys, edge.runtime.runner, edge.runtime.outputs.mqtt, edge.runtime.outputs.metrics_http, edge.runtime.outputs.view, edge.runtime.outputs.serve; "
        "print(sorted(m for m in ('paho', 'prometheus_client', 'cv2') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "[]", r.stderr
