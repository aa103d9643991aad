"""A pool over gpu, dla0 and dla1 through the TensorRT backend: what edge asks of TensorRT's runtime, in order.

TensorRT's runtime, a DLA and CUDA do not run here: the stand-in ``tensorrt`` is generated from NVIDIA's binding
sources of each release and refuses what that release lacks (tests/trt_standin.py), and pycuda is
tests/pycuda_standin.py. Everything around them (config, pool runner, pool, sources, sinks) is edge's real code. No
DLA ran this; docs/verified.md says what a Jetson still has to confirm."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from edge.config import load_config
from edge.errors import EdgeError
from tests import pycuda_standin
from tests.test_trt_runtime import engine_for
from tests.trt_standin import EnginePlan, Machine, make_tensorrt

CLASSIFIER = {"x": (True, "HALF", (1, 64, 64, 3)), "logits": (False, "FLOAT", (1, 10))}


@pytest.fixture
def trt(monkeypatch):
    machine = Machine(dla_cores=2)
    driver = pycuda_standin.install(monkeypatch)
    machine.memory = driver.memory
    machine.run_with = lambda feeds: {"logits": np.eye(10, dtype=np.float32)[3:4] * 5}
    module = make_tensorrt("10.3.0", machine, lean=True)
    monkeypatch.setitem(sys.modules, "tensorrt", module)
    monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    return module, machine


def plans(tmp_path: Path, trt) -> Path:
    module, machine = trt
    gpu = engine_for(tmp_path, module, machine, EnginePlan("10.3.0", CLASSIFIER), name="face.engine")
    engine_for(tmp_path, module, machine, EnginePlan("10.3.0", CLASSIFIER, dla_core=0), dla_core=0, name="face.dla.engine")
    return gpu


def pool_cfg(tmp_path: Path, engine: Path, engines: list, **extra):
    frames = tmp_path / "frames"
    frames.mkdir(exist_ok=True)
    import cv2

    for i in range(4):
        cv2.imwrite(str(frames / f"{i}.png"), np.full((120, 160, 3), 40 * i, np.uint8))
    values = {
        "model.engine": str(engine),
        "backend": "tensorrt",
        "task.type": "classify",
        "sources": [{"name": f"c{i}", "uri": str(frames), "sinks": {"results": str(tmp_path / f"c{i}.jsonl")}} for i in range(4)],
        "pool.engines": engines,
        "logging.status": False,
        **extra,
    }
    return load_config(None, values=values)


def test_the_gpu_plan_once_and_the_dla_plan_once_per_core_each_core_set_before_deserialising(tmp_path, trt):
    from edge.runtime.pool_runner import PoolRunner

    module, machine = trt
    engine = plans(tmp_path, trt)
    runner = PoolRunner(pool_cfg(tmp_path, engine, ["gpu", "dla0", "dla1"]))
    loads = [c for c in machine.calls if c[0] in ("Runtime.DLA_core", "deserialize_cuda_engine")]
    gpu_size, dla_size = engine.stat().st_size, (tmp_path / "face.dla.engine").stat().st_size
    assert loads == [
        ("deserialize_cuda_engine", gpu_size),
        ("Runtime.DLA_core", 0),
        ("deserialize_cuda_engine", dla_size),
        ("Runtime.DLA_core", 1),
        ("deserialize_cuda_engine", dla_size),
    ]
    assert {n: b.device for n, b in runner.backends.items()} == {"gpu": "cuda:0", "dla0": "dla:0", "dla1": "dla:1"}
    assert os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"  # set before the first backend started CUDA
    summary, error = runner.run()
    assert error is None
    assert set(summary["engines"]) == {"gpu", "dla0", "dla1"}
    for i in range(4):
        recs = [json.loads(x) for x in (tmp_path / f"c{i}.jsonl").read_text().splitlines()]
        assert [r["frame"] for r in recs] == [0, 1, 2, 3] and all(r["classes"][0]["class_id"] == 3 for r in recs)
    assert summary["frames"] == 16 and sum(e["frames"] for e in summary["engines"].values()) == 16


def test_a_user_setting_of_cuda_connections_is_kept(tmp_path, trt, monkeypatch):
    from edge.runtime.pool_runner import PoolRunner

    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "8")
    runner = PoolRunner(pool_cfg(tmp_path, plans(tmp_path, trt), ["gpu", "dla0"]))
    runner._close(failed=False)
    assert os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] == "8"


def test_a_dla_core_the_module_lacks_is_refused_before_any_source_opens(tmp_path, trt):
    from edge.runtime.pool_runner import PoolRunner

    module, machine = trt
    machine.dla_cores = 1  # an Orin NX 8 GB
    cfg = pool_cfg(tmp_path, plans(tmp_path, trt), ["gpu", "dla0", "dla1"])
    with pytest.raises(EdgeError, match="only DLA core 0"):
        PoolRunner(cfg)
    assert not list(tmp_path.glob("c*.jsonl*")), "a sink was opened before the engines were known to load"


def test_plans_of_other_tensors_are_refused_naming_both_engines(tmp_path, trt):
    from edge.runtime.pool_runner import PoolRunner

    module, machine = trt
    gpu = engine_for(tmp_path, module, machine, EnginePlan("10.3.0", CLASSIFIER), name="face.engine")
    other = dict(CLASSIFIER, logits=(False, "FLOAT", (1, 5)))
    engine_for(tmp_path, module, machine, EnginePlan("10.3.0", other, dla_core=0), dla_core=0, name="face.dla.engine")
    with pytest.raises(EdgeError, match=r"engine dla0 has other outputs than gpu.*edge-build --engines gpu,dla"):
        PoolRunner(pool_cfg(tmp_path, gpu, ["gpu", "dla0"]))
