"""The TensorRT backend's CPU-side logic: the manifest gate (every refusal), the import rule, dtype and shape
mapping, buffer planning, and the config/CLI keys. TensorRT itself is not installed here: the tests use a stand-in
``tensorrt`` module that has the runtime classes only (no Builder, OnnxParser or calibrators), as on a runtime-only
Jetson install; touching any builder-side name through it fails the test."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from edge.config import load_config
from edge.errors import ConfigError, EdgeError
from edge.manifest import sha256_file, write_manifest
from edge.runtime.engine_gate import DeviceFacts, check_file, check_platform, choose_dla_core, gate, normalise_cc

ORIN_NX_8GB = DeviceFacts("10.3.0.30", "8.7", dla_cores=1, l4t="36.4.3", jetpack="6.1/6.2")
AGX_ORIN = DeviceFacts("10.3.0.30", "8.7", dla_cores=2, l4t="36.4.3", jetpack="6.1/6.2")
ORIN_NANO = DeviceFacts("10.3.0.30", "8.7", dla_cores=0, l4t="36.4.3", jetpack="6.1/6.2")
_BUILDER_NAMES = {"Builder", "OnnxParser", "IInt8Calibrator", "IInt8EntropyCalibrator2", "IInt8MinMaxCalibrator", "BuilderFlag"}


def make_engine(tmp_path: Path, dla_core=1, **device) -> Path:
    engine = tmp_path / "m.engine"
    engine.write_bytes(b"serialized plan bytes")
    dev = {"gpu_name": "Orin", "compute_capability": "8.7", "l4t": "36.4.3", "jetpack": "6.1/6.2", **device}
    write_manifest(
        engine,
        {
            "manifest_version": 1,
            "engine": {"file": engine.name, "sha256": sha256_file(engine), "size": engine.stat().st_size},
            "tensorrt": {"version": "10.3.0.30"},
            "device": dev,
            "dla": {"core": dla_core, "gpu_fallback": True},
            "io": [],
        },
    )
    return engine


def manifest_of(engine: Path) -> dict:
    return json.loads(engine.with_name(engine.name + ".json").read_text())


# -- the gate -------------------------------------------------------------------------------------------------


def test_gate_accepts_a_matching_engine_and_keeps_its_build_core(tmp_path):
    engine = make_engine(tmp_path, dla_core=1)
    assert gate(engine, manifest_of(engine), AGX_ORIN, None) == 1
    assert gate(engine, manifest_of(engine), AGX_ORIN, 0) == 0  # the same plan loads on either core


def test_gate_refuses_changed_bytes(tmp_path):
    engine = make_engine(tmp_path)
    m = manifest_of(engine)
    engine.write_bytes(b"serialized plan bytez")  # same size, other content
    with pytest.raises(EdgeError, match=r"sha256 [0-9a-f]{12}… does not match its manifest"):
        check_file(engine, m)
    engine.write_bytes(b"short")
    with pytest.raises(EdgeError, match="5 bytes but its manifest says 21"):
        check_file(engine, m)


def test_gate_refuses_another_tensorrt(tmp_path):
    engine = make_engine(tmp_path)
    jp5 = DeviceFacts("8.5.2.2", "8.7", 2, "35.4.1", "5.1.2")
    with pytest.raises(EdgeError, match=r"built with TensorRT 10\.3\.0\.30 but this machine has TensorRT 8\.5\.2\.2"):
        check_platform(engine, manifest_of(engine), jp5)


def test_gate_refuses_another_compute_capability(tmp_path):
    engine = make_engine(tmp_path)
    xavier = DeviceFacts("10.3.0.30", "7.2", 2, "36.4.3", "6.1/6.2")
    with pytest.raises(EdgeError, match=r"built for compute capability 8\.7 \(Orin\) but this GPU is 7\.2"):
        check_platform(engine, manifest_of(engine), xavier)


def test_gate_refuses_another_jetpack_and_a_non_jetson(tmp_path):
    engine = make_engine(tmp_path)
    other = DeviceFacts("10.3.0.30", "8.7", 2, "36.3.0", "6.0")
    with pytest.raises(EdgeError, match=r"built on JetPack 6\.1/6\.2 \(L4T 36\.4\.3\) but this machine runs JetPack 6\.0"):
        check_platform(engine, manifest_of(engine), other)
    dgpu = DeviceFacts("10.3.0.30", "8.7", 0)
    with pytest.raises(EdgeError, match="this machine is not a Jetson"):
        check_platform(engine, manifest_of(engine), dgpu)


def test_dla_1_on_orin_nx_8gb_fails_instead_of_using_core_0(tmp_path):
    engine = make_engine(tmp_path, dla_core=0)
    with pytest.raises(EdgeError, match=r"--dla 1 asks for DLA core 1, but this module has only DLA core 0; use --dla 0"):
        choose_dla_core(engine, manifest_of(engine), 1, ORIN_NX_8GB)
    assert choose_dla_core(engine, manifest_of(engine), 0, ORIN_NX_8GB) == 0


def test_engine_built_for_core_1_is_refused_on_a_single_dla_module_without_dla_flag(tmp_path):
    engine = make_engine(tmp_path, dla_core=1)
    with pytest.raises(EdgeError, match=r"it was built for DLA core 1, but this module has only DLA core 0; use --dla 0"):
        choose_dla_core(engine, manifest_of(engine), None, ORIN_NX_8GB)


def test_dla_engine_on_a_module_without_dla(tmp_path):
    engine = make_engine(tmp_path, dla_core=0)
    with pytest.raises(EdgeError, match=r"this module has no DLA; use an engine built for the GPU"):
        choose_dla_core(engine, manifest_of(engine), None, ORIN_NANO)


def test_dla_flag_on_a_gpu_only_engine_is_refused(tmp_path):
    engine = make_engine(tmp_path, dla_core=None)
    with pytest.raises(EdgeError, match=r"built for the GPU only .* --dla 0 cannot put it on the DLA"):
        choose_dla_core(engine, manifest_of(engine), 0, AGX_ORIN)
    assert choose_dla_core(engine, manifest_of(engine), None, AGX_ORIN) is None
    engine = make_engine(tmp_path, dla_core=-1)  # TensorRT's own "no DLA"
    assert choose_dla_core(engine, manifest_of(engine), None, AGX_ORIN) is None


def test_each_refusal_is_one_line(tmp_path):
    engine = make_engine(tmp_path, dla_core=0)
    for here, core in ((DeviceFacts("8.5.2.2", "8.7", 2), None), (ORIN_NX_8GB, 1), (ORIN_NANO, None)):
        with pytest.raises(EdgeError) as info:
            gate(engine, manifest_of(engine), here, core)
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("value", ["8.7", 8.7, [8, 7], (8, 7), "sm_87", "87"])
def test_compute_capability_spellings(value):
    assert normalise_cc(value) == "8.7"


# -- a runtime-only stand-in tensorrt ---------------------------------------------------------------------------


class _StandInEnum:
    def __init__(self, *names: str) -> None:
        for n in names:
            setattr(self, n, f"<{n}>")


def runtime_only_tensorrt(num_dla_cores: int, tensors: dict, calls: list) -> types.ModuleType:
    """A stand-in for TensorRT's Python module with the runtime classes only; builder names raise."""
    trt = types.ModuleType("tensorrt")
    trt.__version__ = "10.3.0.30"
    trt.DataType = _StandInEnum("FLOAT", "HALF", "INT8", "INT32", "INT64", "UINT8", "BOOL", "BF16")
    trt.TensorIOMode = _StandInEnum("INPUT", "OUTPUT")
    trt.TensorFormat = _StandInEnum("LINEAR", "DLA_HWC4")

    class Logger:
        WARNING = 2

        def __init__(self, level=None):
            pass

    class Context:
        def __init__(self):
            self.shapes = {}

        def set_input_shape(self, name, shape):
            calls.append(("set_input_shape", name, tuple(shape)))
            self.shapes[name] = tuple(shape)
            return True

        def get_tensor_shape(self, name):
            return tensors[name][2] if -1 not in tensors[name][2] else (self.shapes["x"][0], 896, 16)

    class Engine:
        num_io_tensors = len(tensors)

        def get_tensor_name(self, i):
            return list(tensors)[i]

        def get_tensor_mode(self, name):
            return tensors[name][0]

        def get_tensor_shape(self, name):
            return tensors[name][2]

        def get_tensor_dtype(self, name):
            return tensors[name][1]

        def get_tensor_format(self, name):
            return tensors[name][3] if len(tensors[name]) > 3 else trt.TensorFormat.LINEAR

        def get_tensor_profile_shape(self, name, profile):
            return [(1, 256, 256, 3), (2, 256, 256, 3), (4, 256, 256, 3)]

        def create_execution_context(self):
            return Context()

    class Runtime:
        def __init__(self, logger):
            self.num_DLA_cores = num_dla_cores
            self._core = -1

        @property
        def DLA_core(self):
            return self._core

        @DLA_core.setter
        def DLA_core(self, value):
            calls.append(("DLA_core", value))
            self._core = value

        def deserialize_cuda_engine(self, data):
            calls.append(("deserialize", len(data)))
            return Engine()

    trt.Logger, trt.Runtime, trt.ICudaEngine, trt.IExecutionContext = Logger, Runtime, Engine, Context

    def __getattr__(name):
        if name in _BUILDER_NAMES:
            raise AssertionError(f"the runtime backend touched tensorrt.{name}, a builder-side name")
        raise AttributeError(name)

    trt.__getattr__ = __getattr__
    return trt


@pytest.fixture
def standin(monkeypatch):
    calls: list = []

    def make(num_dla_cores=2, tensors=None):
        placeholder = types.SimpleNamespace(
            INPUT="<INPUT>", OUTPUT="<OUTPUT>", FLOAT="<FLOAT>", HALF="<HALF>", LINEAR="<LINEAR>", DLA_HWC4="<DLA_HWC4>"
        )
        p = placeholder
        tensors = tensors or {
            "x": (p.INPUT, p.HALF, (1, 256, 256, 3)),
            "regressors": (p.OUTPUT, p.FLOAT, (1, 896, 16)),
            "classificators": (p.OUTPUT, p.HALF, (1, 896, 1)),
        }
        trt = runtime_only_tensorrt(num_dla_cores, tensors, calls)
        monkeypatch.setitem(sys.modules, "tensorrt", trt)
        return trt

    return make, calls


def test_backend_imports_and_loads_with_a_runtime_only_tensorrt(tmp_path, standin):
    from edge.runtime.backends import tensorrt as backend

    make, calls = standin
    trt = make(num_dla_cores=2)
    engine_file = make_engine(tmp_path, dla_core=0)
    runtime, engine, core = backend.load_engine(trt, engine_file, "8.7", 1, {"l4t": "36.4.3", "jetpack": "6.1/6.2"}, None)
    assert core == 1
    # The core is chosen on the runtime before the plan is deserialised, the only order TensorRT honours.
    assert calls == [("DLA_core", 1), ("deserialize", engine_file.stat().st_size)]


def test_backend_refuses_before_deserialising(tmp_path, standin):
    from edge.runtime.backends import tensorrt as backend

    make, calls = standin
    trt = make(num_dla_cores=1)  # Orin NX 8 GB
    engine_file = make_engine(tmp_path, dla_core=0)
    with pytest.raises(EdgeError, match="only DLA core 0"):
        backend.load_engine(trt, engine_file, "8.7", 1, {"l4t": "36.4.3", "jetpack": "6.1/6.2"}, None)
    assert calls == []  # nothing set, nothing deserialised


def test_dtype_mapping_both_ways(standin):
    from edge.runtime.backends.tensorrt import DTYPES, numpy_dtype, trt_dtype

    make, _ = standin
    trt = make()
    for trt_name, np_name in DTYPES:
        dt = getattr(trt.DataType, trt_name)
        assert numpy_dtype(trt, dt) == np.dtype(np_name)
        assert trt_dtype(trt, np.dtype(np_name)) == dt
    with pytest.raises(EdgeError, match="no numpy equivalent"):
        numpy_dtype(trt, trt.DataType.BF16)
    del trt.DataType.INT64  # TensorRT 8.5 has no INT64
    with pytest.raises(EdgeError, match="no matching DataType"):
        trt_dtype(trt, np.int64)


def test_buffer_plan_from_the_engine(standin):
    from edge.runtime.backends.tensorrt import plan_io

    make, calls = standin
    trt = make()
    engine = trt.Runtime(None).deserialize_cuda_engine(b"")
    plan = plan_io(trt, engine, engine.create_execution_context())
    assert [(t.name, t.is_input, t.shape, t.dtype.name, t.nbytes) for t in plan] == [
        ("x", True, (1, 256, 256, 3), "float16", 256 * 256 * 3 * 2),
        ("regressors", False, (1, 896, 16), "float32", 896 * 16 * 4),
        ("classificators", False, (1, 896, 1), "float16", 896 * 2),
    ]
    assert plan[0].info().static and plan[0].info().shape == (1, 256, 256, 3)


def test_buffer_plan_dynamic_input_takes_the_profile_opt_shape(standin):
    from edge.runtime.backends.tensorrt import plan_io

    make, calls = standin
    p = types.SimpleNamespace(INPUT="<INPUT>", OUTPUT="<OUTPUT>", FLOAT="<FLOAT>")
    trt = make(tensors={"x": (p.INPUT, p.FLOAT, (-1, 256, 256, 3)), "y": (p.OUTPUT, p.FLOAT, (-1, 896, 16))})
    engine = trt.Runtime(None).deserialize_cuda_engine(b"")
    plan = plan_io(trt, engine, engine.create_execution_context())
    assert ("set_input_shape", "x", (2, 256, 256, 3)) in calls
    assert [t.shape for t in plan] == [(2, 256, 256, 3), (2, 896, 16)]


def test_buffer_plan_refuses_dla_native_formats(standin):
    from edge.runtime.backends.tensorrt import plan_io

    make, _ = standin
    p = types.SimpleNamespace(INPUT="<INPUT>", OUTPUT="<OUTPUT>", FLOAT="<FLOAT>", HALF="<HALF>")
    trt = make(tensors={"x": (p.INPUT, p.HALF, (1, 3, 64, 64), "<DLA_HWC4>"), "y": (p.OUTPUT, p.FLOAT, (1, 10))})
    engine = trt.Runtime(None).deserialize_cuda_engine(b"")
    with pytest.raises(EdgeError, match="uses format <DLA_HWC4>; edge-run feeds and reads linear tensors"):
        plan_io(trt, engine, engine.create_execution_context())


# -- the import rule ---------------------------------------------------------------------------------------------

_DEVICE_SIDE = (
    "edge.runtime.backends.tensorrt",
    "edge.runtime.engine_gate",
    "edge.runtime.cuda.memory",
    "edge.runtime.cuda.preprocess",
    "edge.runtime.runner",
    "edge.runtime.cli",
)


def test_device_side_modules_load_neither_tensorrt_nor_cuda_at_import():
    # Which edge packages the device side may import is the import-linter contract (.importlinter); this checks
    # what the contract cannot: TensorRT and pycuda are imported lazily, so --help and --check work without them.
    probe = (
        f"import sys; import {', '.join(_DEVICE_SIDE)}; "
        "print(sorted(m for m in sys.modules if m.startswith(('tensorrt', 'pycuda'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_device_side_sources_name_no_builder_api():
    root = Path(__file__).resolve().parents[1] / "edge" / "runtime"
    for path in [root / "backends" / "tensorrt.py", root / "engine_gate.py", *sorted((root / "cuda").glob("*.py"))]:
        text = path.read_text()
        for name in _BUILDER_NAMES:
            assert f"trt.{name}" not in text and f"tensorrt.{name}" not in text, (path, name)


# -- config and CLI ----------------------------------------------------------------------------------------------


def test_config_keys_for_the_tensorrt_backend(tmp_path):
    engine = make_engine(tmp_path)
    cfg = load_config(None, values={"model.engine": str(engine), "backend": "tensorrt", "dla_core": 1, "preprocess": "gpu"})
    assert (cfg.backend, cfg.dla_core, cfg.preprocess) == ("tensorrt", 1, "gpu")
    with pytest.raises(ConfigError, match="key 'model.engine': file not found"):
        load_config(None, values={"model.engine": str(tmp_path / "none.engine"), "backend": "tensorrt"})
    with pytest.raises(ConfigError, match="backend tensorrt needs an engine file"):
        load_config(None, values={"model.asset": "blazeface-back-256", "backend": "tensorrt"})
    assert load_config(None, values={"model.engine": str(engine)}).backend == "tensorrt"  # auto: an engine alone means TensorRT
    assert load_config(None, values={"model.asset": "blazeface-back-256"}).backend == "onnxruntime"
    with pytest.raises(ConfigError, match="key 'dla_core': the DLA runs TensorRT engines"):
        load_config(None, values={"model.asset": "blazeface-back-256", "dla_core": 0})
    with pytest.raises(ConfigError, match="key 'dla_core': expected a DLA core index"):
        load_config(None, values={"model.engine": str(engine), "backend": "tensorrt", "dla_core": -1})
    with pytest.raises(ConfigError, match="key 'preprocess': gpu writes straight into TensorRT's input buffer"):
        load_config(None, values={"model.asset": "blazeface-back-256", "preprocess": "gpu"})


def test_cli_engine_flag_selects_tensorrt_and_bad_input_exits_2(tmp_path):
    from tests.conftest import run_cli

    engine = make_engine(tmp_path)
    r = run_cli("--engine", str(engine), "--dla", "-1")
    assert r.returncode == 2 and "argument --dla" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("--model", str(engine), "--preprocess", "gpu")
    assert r.returncode == 2 and "--preprocess: gpu writes straight into TensorRT's input buffer" in r.stderr
    r = run_cli("--engine", str(tmp_path / "missing.engine"))
    assert r.returncode == 2 and "--engine: file not found" in r.stderr
