"""GPU machine: the fleet endpoints on the TensorRT backend path (pycuda buffers, the manifest gate), with the
stand-in TensorRT runtime of test_gpu_trt.py (ONNX Runtime does the inference; no engine executes there).

    python -m pytest -q -p no:cacheprovider tests/test_gpu_fleet.py
"""

from __future__ import annotations

import json
import sys
import threading

import numpy as np
import pytest

from edge.manifest import sha256_file

from ._deploytools import free_port
from ._fleettools import http_get, wait_until
from .test_gpu_trt import OnnxRuntimeStandInContext, _engine_with_manifest, standin_tensorrt  # noqa: F401

pytestmark = pytest.mark.gpu


def test_metrics_and_view_name_the_engine_on_the_tensorrt_path(cuda_ctx, tmp_path, monkeypatch, demo_model):  # noqa: F811
    import onnxruntime as ort

    from edge.config import load_config
    from edge.runtime.runner import Runner
    from tests.conftest import DEMO_CONFIG

    session = ort.InferenceSession(str(demo_model), providers=["CPUExecutionProvider"])
    tensors = {t.name: (True, tuple(t.shape), np.float32) for t in session.get_inputs()}
    tensors.update({t.name: (False, tuple(t.shape), np.float32) for t in session.get_outputs()})
    monkeypatch.setitem(sys.modules, "tensorrt", standin_tensorrt(tensors, lambda data: OnnxRuntimeStandInContext(data, tensors)))
    engine = _engine_with_manifest(tmp_path, demo_model.read_bytes(), "stand-in", cuda_ctx.compute_capability)
    metrics_port, view_port = free_port(), free_port()
    cfg = load_config(
        DEMO_CONFIG,
        values={
            "model.engine": str(engine), "backend": "tensorrt", "preprocess": "gpu", "source.loop": True, "telemetry.backend": "nvml",
            "metrics.port": metrics_port, "view.port": view_port, "logging.status": False,
        },
    )  # fmt: skip
    runner = Runner(cfg)
    p = runner.pipeline
    runner.sampler.start()
    p.start()
    try:
        assert wait_until(lambda: p.metrics.frames >= 30, 60)
        status, body, _ = http_get(f"http://127.0.0.1:{metrics_port}/metrics")
        text = body.decode()
        assert status == 200, text
        info = next(line for line in text.splitlines() if line.startswith("edge_info{"))
        assert (
            f'engine_sha256="{sha256_file(engine)[:12]}"' in info and 'backend="tensorrt"' in info and 'device="cuda:0"' in info
        )
        assert 'runtime_version="stand-in"' in info and 'model="standin.engine"' in info
        assert "edge_power_total_watts" in text or "edge_gpu_utilization_ratio" in text  # NVML on the H200
        got = {}
        viewer = threading.Thread(
            target=lambda: got.update(jpeg=http_get(f"http://127.0.0.1:{view_port}/frame.jpg")), daemon=True
        )
        viewer.start()
        viewer.join(10)
        assert got["jpeg"][0] == 200 and got["jpeg"][1][:2] == b"\xff\xd8"
        stats = json.loads(http_get(f"http://127.0.0.1:{view_port}/stats.json")[1])
        assert stats["backend"] == "tensorrt" and stats["fps"] > 0
    finally:
        p.stop()
        p.wait(30)
        runner._close(failed=False)
