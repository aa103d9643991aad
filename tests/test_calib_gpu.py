"""GPU machine: a cache and its FP16 sidecar from `edge calib`, built by `edge-build` with a TensorRT that still has
implicit INT8 (<= 10.x, the Jetson's): the sidecar's layer runs in FP16, the others in INT8, per the engine
inspector. Skips where no such TensorRT or no GPU is available (TensorRT-RTX is strongly typed: no calibrators)."""

from __future__ import annotations

import json

import pytest

from edge import cli
from tests.test_calib_tiny import tiny_model, write_images

pytestmark = pytest.mark.gpu


def test_sidecar_layers_run_in_fp16_and_the_rest_in_int8(tmp_path, monkeypatch, capsys):
    trt = pytest.importorskip("tensorrt", reason="TensorRT (<= 10.x, with INT8 calibrators) is not installed here")
    if not hasattr(trt, "IInt8EntropyCalibrator2") or not hasattr(trt.BuilderFlag, "OBEY_PRECISION_CONSTRAINTS"):
        pytest.skip(f"TensorRT {trt.__version__} has no implicit INT8 (calibrators were removed in 11)")
    try:
        import pycuda.driver as cuda

        cuda.init()
    except Exception as exc:  # no pycuda, no driver, no GPU
        pytest.skip(f"pycuda cannot initialise a GPU here: {exc}")
    model = tiny_model(tmp_path / "tiny.onnx")
    write_images(tmp_path / "calib", 12, 1)
    monkeypatch.chdir(tmp_path)
    version = ".".join(trt.__version__.split(".")[:3])
    status = cli.main(["calib", str(model), "--images", "calib", "--set", "input.size=[16, 16]", "--cache", "t.cache",
                       "--keep-fp16", "conv2", "--trt-version", version])  # fmt: skip
    assert status == 0
    assert json.loads((tmp_path / "t.cache.json").read_text())["layers"] == ["conv2"]
    out = capsys.readouterr().out
    command = out.splitlines()[[k for k, line in enumerate(out.splitlines()) if line.startswith("next, on the Jetson")][0] + 1]
    assert cli.build_main(command.split()[1:] + ["-o", "t.engine"]) == 0
    layers = json.loads((tmp_path / "t.engine.layers.json").read_text())["layers"]
    conv2 = [x for x in layers if "conv2" in x["name"]]
    conv1 = [x for x in layers if "conv1" in x["name"] and "conv2" not in x["name"]]
    assert conv2 and all(x["precision"] == "FP16" for x in conv2), layers
    assert conv1 and all(x["precision"] == "INT8" for x in conv1), layers
