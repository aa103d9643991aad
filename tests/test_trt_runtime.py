"""The TensorRT backend's CPU-side logic: the manifest gate (every refusal), the import rule, dtype and shape
mapping, buffer sets with their execution contexts and optimisation profiles, and the config/CLI keys.

TensorRT cannot run here: the backend tests run once per TensorRT release a JetPack ships (8.5.2, 8.6.x, 10.3) on a
stand-in ``tensorrt`` generated from that release's binding sources (the runtime-only part where the release has
one), which refuses what the release lacks and models the documented context/profile rules; pycuda is a stand-in
too. What only a GPU or a Jetson shows is in tests/test_gpu_trt.py and docs/verified.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edge.config import load_config
from edge.errors import ConfigError, EdgeError, RunFailed
from edge.manifest import sha256_file, write_manifest
from edge.runtime.engines.gate import DeviceFacts, check_file, check_platform, choose_dla_core, gate, normalise_cc

ORIN_NX_8GB = DeviceFacts("10.3.0.30", "8.7", dla_cores=1, l4t="36.4.3", jetpack="6.1/6.2")
AGX_ORIN = DeviceFacts("10.3.0.30", "8.7", dla_cores=2, l4t="36.4.3", jetpack="6.1/6.2")
ORIN_NANO = DeviceFacts("10.3.0.30", "8.7", dla_cores=0, l4t="36.4.3", jetpack="6.1/6.2")


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


# -- the TensorRT backend on each release's stand-in -----------------------------------------------------------------
# The stand-in tensorrt is generated from NVIDIA's binding sources of each release (tests/trt_standin.py) and
# refuses what that release lacks; pycuda is replaced by tests/pycuda_standin.py (no GPU here). The parts that
# only a GPU or a Jetson shows (real streams, real engines) are in tests/test_gpu_trt.py and docs/verified.md.

from tests import pycuda_standin  # noqa: E402
from tests.trt_standin import VERSIONS, EnginePlan, Machine, make_tensorrt  # noqa: E402

FACE = {
    "x": (True, "HALF", (1, 256, 256, 3)),
    "regressors": (False, "FLOAT", (1, 896, 16)),
    "classificators": (False, "HALF", (1, 896, 1)),
}


def dynamic_plan(version: str, profiles: int) -> EnginePlan:
    """What edge-build makes of PP-OCR det with --shape x=1x3x64x64: -1 dims kept, min = opt = max per profile."""
    shape = (1, 3, 64, 64)
    return EnginePlan(
        version,
        {"x": (True, "FLOAT", (-1, 3, -1, -1)), "y": (False, "FLOAT", (-1, 1, -1, -1))},
        [{"x": (shape, shape, shape)} for _ in range(profiles)],
        outputs=lambda shapes: {"y": (shapes["x"][0], 1, shapes["x"][2], shapes["x"][3])},
        run=lambda feeds: {"y": feeds["x"][:, :1] * 2.0},
    )


def engine_for(tmp_path: Path, trt, machine: Machine, plan: EnginePlan, dla_core=None, name="m.engine") -> Path:
    """An engine file holding a registered plan, with a manifest that fits this stand-in machine."""
    engine = tmp_path / name
    engine.write_bytes(machine.register(plan))
    write_manifest(
        engine,
        {
            "manifest_version": 1,
            "engine": {"file": engine.name, "sha256": sha256_file(engine), "size": engine.stat().st_size},
            "tensorrt": {"version": trt.__version__},
            "device": {"gpu_name": "stand-in", "compute_capability": "8.7", "l4t": None, "jetpack": None},
            "dla": {"core": dla_core, "gpu_fallback": True},
            "io": [],
        },
    )
    return engine


@pytest.fixture(params=VERSIONS)
def release(request, monkeypatch):
    """(version, stand-in tensorrt, its machine, stand-in pycuda.driver) for one TensorRT release."""
    machine = Machine(dla_cores=2)
    driver = pycuda_standin.install(monkeypatch)
    machine.memory = driver.memory
    trt = make_tensorrt(request.param, machine, lean=True)  # a runtime-only install
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    return request.param, trt, machine, driver


def backend_for(engine: Path, trt, **kw):
    from edge.runtime.engines.tensorrt import TensorRTBackend

    return TensorRTBackend(str(engine), trt=trt, l4t_file="/nonexistent", **kw)


def test_backend_loads_on_the_chosen_dla_core_set_before_deserialising(tmp_path, release):
    from edge.runtime.engines import tensorrt as backend

    version, trt, machine, _ = release
    engine_file = engine_for(tmp_path, trt, machine, EnginePlan(version, FACE, dla_core=0), dla_core=0)
    runtime, engine, core = backend.load_engine(trt, engine_file, "8.7", 1, None, trt.Logger(trt.Logger.WARNING))
    assert core == 1 and engine._dla_core == 1  # the engine runs where the runtime pointed before deserialising
    assert [c for c in machine.calls if c[0] in ("Runtime.DLA_core", "deserialize_cuda_engine")] == [
        ("Runtime.DLA_core", 1),
        ("deserialize_cuda_engine", engine_file.stat().st_size),
    ]


def test_backend_refuses_before_deserialising(tmp_path, release):
    from edge.runtime.engines import tensorrt as backend

    version, trt, machine, _ = release
    machine.dla_cores = 1  # Orin NX 8 GB
    engine_file = engine_for(tmp_path, trt, machine, EnginePlan(version, FACE, dla_core=0), dla_core=0)
    with pytest.raises(EdgeError, match=rf"^engine '{engine_file}': .*only DLA core 0"):
        backend.load_engine(trt, engine_file, "8.7", 1, None, trt.Logger(trt.Logger.WARNING))
    assert not [c for c in machine.calls if c[0] in ("Runtime.DLA_core", "deserialize_cuda_engine")]


def test_dtype_mapping_both_ways_follows_each_release(release):
    from edge.runtime.engines.tensorrt import DTYPES, numpy_dtype, trt_dtype

    version, trt, _, _ = release
    for trt_name, np_name in DTYPES:
        if not hasattr(trt.DataType, trt_name):
            assert (version, trt_name) in {("8.5.2", "INT64"), ("8.6.1", "INT64")}  # INT64 arrived in 9.0
            with pytest.raises(EdgeError, match="no matching DataType"):
                trt_dtype(trt, np.dtype(np_name))
            continue
        dt = getattr(trt.DataType, trt_name)
        assert numpy_dtype(trt, dt) == np.dtype(np_name)
        assert trt_dtype(trt, np.dtype(np_name)) == dt
    for exotic in ("BF16", "FP8", "INT4"):
        if hasattr(trt.DataType, exotic):
            with pytest.raises(EdgeError, match="no numpy equivalent"):
                numpy_dtype(trt, getattr(trt.DataType, exotic))


def test_buffer_plan_from_a_static_engine(tmp_path, release):
    version, trt, machine, _ = release
    b = backend_for(engine_for(tmp_path, trt, machine, EnginePlan(version, FACE)), trt)
    try:
        assert [(t.name, t.is_input, t.shape, t.dtype.name, t.nbytes) for t in b.io] == [
            ("x", True, (1, 256, 256, 3), "float16", 256 * 256 * 3 * 2),
            ("regressors", False, (1, 896, 16), "float32", 896 * 16 * 4),
            ("classificators", False, (1, 896, 1), "float16", 896 * 2),
        ]
        assert b.inputs[0].static and len(b._slots) == 2
        # A static engine needs no profile selection: every context uses profile 0 (setOptimizationProfileAsync docs).
        assert not [c for c in machine.calls if c[0] == "set_optimization_profile_async"]
    finally:
        b.close()


def test_two_buffer_sets_on_a_dynamic_engine_each_select_their_own_profile(tmp_path, release):
    """Before 9.0 a second context of an engine with dynamic inputs has no profile; from 9.0 it shares profile 0,
    which contexts in concurrent use must not. Each buffer set must select its own profile on its own stream."""
    version, trt, machine, _ = release
    b = backend_for(engine_for(tmp_path, trt, machine, dynamic_plan(version, profiles=2)), trt, buffer_sets=2)
    try:
        assert [(t.name, t.shape) for t in b.io] == [("x", (1, 3, 64, 64)), ("y", (1, 1, 64, 64))]
        x = np.arange(3 * 64 * 64, dtype=np.float32).reshape(1, 3, 64, 64)
        jobs = [b.submit({"x": x + k}) for k in range(4)]  # both sets in flight
        for k, job in enumerate(jobs):
            np.testing.assert_array_equal(b.collect(job)["y"], (x + k)[:, :1] * 2.0)
        selected = [c for c in machine.calls if c[0] == "set_optimization_profile_async"]
        assert sorted(c[2] for c in selected) == [0, 1]
        assert sorted(c[3] for c in selected) == sorted(s.stream.handle for s in b._slots)  # on each set's stream
        assert {s.context.active_optimization_profile for s in b._slots} == {0, 1}
        assert not [c for c in machine.calls if c[0] == "error"]
    finally:
        b.close()


def test_an_engine_with_one_profile_gets_one_buffer_set(tmp_path, release, caplog):
    caplog.set_level("WARNING", "edge.run")
    version, trt, machine, _ = release
    b = backend_for(engine_for(tmp_path, trt, machine, dynamic_plan(version, profiles=1)), trt, buffer_sets=2)
    try:
        assert len(b._slots) == 1 and b.info()["buffer_sets"] == 1
        x = np.ones((1, 3, 64, 64), np.float32)
        np.testing.assert_array_equal(b.infer({"x": x})["y"], x[:, :1] * 2.0)
        assert (
            "engine has 1 optimization profile(s) for its dynamic inputs: 1 buffer set(s) instead of 2, frames do not "
            "overlap on the GPU; rebuild it with edge-build, which adds one profile per buffer set" in caplog.text
        )
        assert not [c for c in machine.calls if c[0] == "error"]
    finally:
        b.close()


def test_gpu_preprocessing_waits_for_the_tap_tables_on_every_other_stream(tmp_path, release):
    """The tap tables of a new frame size are uploaded on the stream of the frame that brought it; a frame on
    another buffer set's stream must wait for that upload (an event) before its kernel reads them."""
    from edge.runtime.engines.preprocess import PreprocessSpec

    version, trt, machine, driver = release
    tensors = {"x": (True, "FLOAT", (1, 64, 64, 3)), "y": (False, "FLOAT", (1, 10))}
    plan = EnginePlan(version, tensors, run=lambda feeds: {"y": np.zeros((1, 10), np.float32)})
    b = backend_for(engine_for(tmp_path, trt, machine, plan), trt, buffer_sets=2)
    try:
        b.use_gpu_preprocess(PreprocessSpec(64, 64, layout="nhwc"), "x")
        frame = np.zeros((48, 80, 3), np.uint8)
        jobs = [b.submit({"x": frame}) for _ in range(2)]
        for job in jobs:
            b.collect(job)
        log = driver.log
        launches = [i for i, op in enumerate(log) if op[0] == "launch"]
        first_stream, second_stream = log[launches[0]][2], log[launches[1]][2]
        assert first_stream != second_stream
        tables = max(i for i, op in enumerate(log[: launches[0]]) if op[0] == "htod" and op[3] == first_stream)
        recorded = [op for op in log[tables : launches[0]] if op[0] == "event.record" and op[2] == first_stream]
        waits = [op for op in log[: launches[1]] if op[0] == "wait_for_event" and op[1] == second_stream]
        assert recorded and waits and waits[-1][2] in {op[1] for op in recorded}
    finally:
        b.close()


# -- the import rule ---------------------------------------------------------------------------------------------

_DEVICE_SIDE = (
    "edge.runtime.engines.tensorrt",
    "edge.runtime.engines.gate",
    "edge.runtime.engines.cuda.memory",
    "edge.runtime.engines.cuda.preprocess",
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


# -- verify an engine anywhere -----------------------------------------------------------------------------------

BLAZEFACE_IO = [
    {"name": "input:0", "mode": "input", "shape": [1, 256, 256, 3], "dtype": "float32", "format": "LINEAR"},
    {"name": "Identity:0", "mode": "output", "shape": [1, 512, 1], "dtype": "float32", "format": "LINEAR"},
    {"name": "Identity_1:0", "mode": "output", "shape": [1, 384, 1], "dtype": "float32", "format": "LINEAR"},
    {"name": "Identity_2:0", "mode": "output", "shape": [1, 512, 16], "dtype": "float32", "format": "LINEAR"},
    {"name": "Identity_3:0", "mode": "output", "shape": [1, 384, 16], "dtype": "float32", "format": "LINEAR"},
]


@pytest.mark.skipif(Path("/etc/nv_tegra_release").exists(), reason="on a Jetson --check loads the engine with TensorRT")
def test_check_verifies_an_engine_artefact_on_a_host_without_tensorrt(tmp_path):
    """No TensorRT here (only TensorRT-RTX, which is not `tensorrt`) and not a Jetson: `edge-run --check` checks the
    manifest, the bytes and the config against the manifest's tensors, without loading TensorRT or CUDA."""
    from tests.conftest import DEMO_CONFIG, run_cli

    engine = make_engine(tmp_path, dla_core=0)
    data = manifest_of(engine)
    data["io"] = BLAZEFACE_IO
    write_manifest(engine, data)
    r = run_cli("--check", "--config", str(DEMO_CONFIG), "--engine", str(engine))
    assert r.returncode == 0, r.stderr
    assert "check ok (artefact only)" in r.stdout and "matches its manifest (21 bytes" in r.stdout
    assert "DLA core 0" in r.stdout and "input input:0 [1, 256, 256, 3] float32" in r.stdout
    engine.write_bytes(b"serialized plan bytez")  # same size, one byte changed
    r = run_cli("--check", "--config", str(DEMO_CONFIG), "--engine", str(engine))
    assert r.returncode == 2 and "does not match its manifest" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    data["dla"] = {"core": "zero"}
    write_manifest(engine, data)
    r = run_cli("--check", "--config", str(DEMO_CONFIG), "--engine", str(engine))
    assert r.returncode == 2 and "key 'dla.core' should be a DLA core number" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.skipif(Path("/etc/nv_tegra_release").exists(), reason="on a Jetson --check loads the engine with TensorRT")
def test_check_refuses_dla_for_a_gpu_only_artefact_as_the_device_would(tmp_path):
    """`edge deploy` runs this check before it uploads: --dla on an engine built for the GPU must fail here too, with
    the line docs/edge-run.md promises (a docs walk found it passed, ignoring --dla)."""
    from tests.conftest import DEMO_CONFIG, run_cli

    engine = make_engine(tmp_path, dla_core=None, compute_capability=None)  # as a TensorRT-RTX build records it
    data = manifest_of(engine)
    data["io"] = BLAZEFACE_IO
    write_manifest(engine, data)
    r = run_cli("--check", "--config", str(DEMO_CONFIG), "--engine", str(engine), "--dla", "0")
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "was built for the GPU only (manifest dla.core is null), so --dla 0 cannot put it on the DLA" in r.stderr
    r = run_cli("--check", "--config", str(DEMO_CONFIG), "--engine", str(engine))
    assert r.returncode == 0, r.stderr
    assert "built for TensorRT 10.3.0.30, JetPack 6.1/6.2;" in r.stdout and "None" not in r.stdout


def test_an_engine_built_with_tensorrt_rtx_is_named_as_such_not_as_a_missing_tensorrt(tmp_path, monkeypatch):
    """edge-build off a Jetson (its tests) records api tensorrt_rtx; edge-run said "install python3-libnvinfer"."""
    from edge.runtime.engines.tensorrt import TensorRTBackend

    engine = make_engine(tmp_path)
    data = manifest_of(engine)
    data["tensorrt"] = {"version": "1.7.1.116", "api": "tensorrt_rtx"}
    write_manifest(engine, data)
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    with pytest.raises(EdgeError, match="was built with TensorRT-RTX .* build the engine on the Jetson with edge-build"):
        TensorRTBackend(str(engine))


def test_the_backend_checks_the_file_before_tensorrt_or_cuda(tmp_path, monkeypatch):
    """A tampered engine is named as such before `tensorrt` or `pycuda` is imported (neither exists here)."""
    from edge.runtime.engines.tensorrt import TensorRTBackend

    engine = make_engine(tmp_path)
    engine.write_bytes(b"serialized plan bytez")
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # importing it would fail
    monkeypatch.setitem(sys.modules, "pycuda", None)
    with pytest.raises(EdgeError, match="does not match its manifest"):
        TensorRTBackend(str(engine))


# -- issue 16: frames reach the kernel without copies ------------------------------------------------------------


@pytest.mark.parametrize("memory", ["mapped", "upload"])
def test_ring_frames_reach_the_kernel_without_a_copy(tmp_path, release, memory):
    """Mapped ring buffers: the kernel is launched on the buffer's own device pointer and nothing is uploaded.
    Page-locked ones: uploaded straight from the ring buffer, no staging copy. A plain array is still staged."""
    from edge.runtime.engines.preprocess import PreprocessSpec
    from edge.runtime.sources import Source
    from edge.runtime.sources.frames import FrameRing
    from edge.runtime.sources.pixels import from_bgr

    version, trt, machine, driver = release
    tensors = {"x": (True, "FLOAT", (1, 64, 64, 3)), "y": (False, "FLOAT", (1, 10))}
    plan = EnginePlan(version, tensors, run=lambda feeds: {"y": np.zeros((1, 10), np.float32)})
    b = backend_for(engine_for(tmp_path, trt, machine, plan), trt, buffer_sets=2)
    try:
        pre = b.use_gpu_preprocess(PreprocessSpec(64, 64, layout="nhwc"), "x")
        ring = FrameRing(4, b.frame_memory(memory))
        assert ring.memory.name == ("mapped" if memory == "mapped" else "pinned")
        src = Source()
        src.format = "nv12"
        frames = []
        for k in range(4):
            buf = ring.acquire((72, 80))
            buf.array[:] = from_bgr(np.full((48, 80, 3), 40 * k, np.uint8), "nv12")
            frames.append(src._frame(buf.array, buffer=buf))
        before = len(driver.log)
        for k, f in enumerate(frames):
            feed, transform = pre(f)
            b.collect(b.submit({"x": feed}))
            assert (transform.frame_width, transform.frame_height) == (80, 48)
            if k == len(b._slots) - 1:
                warm = len(driver.log)  # tap tables (once), each buffer set's device frame buffer (once per set)
        ops = driver.log[before:]
        launches = [op for op in ops if op[0] == "launch"]
        assert [op[1] for op in launches] == ["preprocess_float32_nv12"] * 4
        assert not [op for op in driver.log[warm:] if op[0] in ("pagelocked_empty", "mem_alloc")]  # nothing per frame
        frame_uploads = [op for op in ops if op[0] == "htod" and op[2] == 72 * 80]
        if memory == "mapped":
            assert [op[3][0] for op in launches] == [f.buffer.device_ptr for f in frames]  # reads the ring in place
            assert frame_uploads == []
        else:
            assert len(frame_uploads) == 4 and [op[3][0] for op in launches] == [op[1] for op in frame_uploads]
            assert b.info()["frame_memory"] == "pinned"
        plain = np.zeros((48, 80, 3), np.uint8)  # not from the ring: copied into page-locked staging first
        b.collect(b.submit({"x": pre(plain)[0]}))
        assert [op for op in driver.log if op[0] == "pagelocked_empty" and op[1] == (48, 80, 3)]
        for f in frames:
            f.release()
    finally:
        b.close()
    assert all(buf.array.base.freed for buf in ring._all)  # the backend freed the frame buffers on close
    ring.close()


def test_mapped_frame_memory_is_refused_where_the_gpu_cannot_map(tmp_path, release, monkeypatch):
    version, trt, machine, driver = release
    b = backend_for(engine_for(tmp_path, trt, machine, EnginePlan(version, FACE)), trt)
    try:
        monkeypatch.setattr(b._cuda, "can_map_host_memory", False)
        with pytest.raises(EdgeError, match="frame_memory: mapped, but GPU stand-in GPU cannot map host memory"):
            b.frame_memory("mapped")
        assert b.frame_memory("auto").name == "pinned"
    finally:
        b.close()


# -- engines edge did not build, and plugins -------------------------------------------------------------------------


def ultralytics_engine(tmp_path: Path, machine: Machine, plan: EnginePlan, header: dict) -> Path:
    """The layout `yolo export format=engine` writes: int32 little-endian length, JSON, then the plan."""
    text = json.dumps(header).encode()
    engine = tmp_path / "yolo.engine"
    engine.write_bytes(len(text).to_bytes(4, "little") + text + machine.register(plan))
    return engine


def test_an_ultralytics_engine_gives_tensorrt_only_its_plan_and_edge_its_names(tmp_path, release, caplog):
    version, trt, machine, _ = release
    header = {"names": {"0": "person", "1": "bicycle"}, "imgsz": [256, 256], "stride": 32, "task": "detect", "batch": 1}
    engine = ultralytics_engine(tmp_path, machine, EnginePlan(version, FACE), header)
    plan_size = len(machine.register(EnginePlan(version, FACE), next(iter(machine.plans))))
    with caplog.at_level("WARNING", logger="edge.run"):
        b = backend_for(engine, trt)
    try:
        assert ("deserialize_cuda_engine", plan_size) in machine.calls  # the plan alone, not the header
        assert b.model_metadata.names == ("person", "bicycle") and b.model_metadata.imgsz == (256, 256)
        (warning,) = [r.getMessage() for r in caplog.records if "Ultralytics" in r.getMessage()]
        assert warning.startswith(
            f"engine {engine}: an Ultralytics export without an edge manifest; its sha256 and the TensorRT, GPU, JetPack "
            "and DLA core it was built for are not checked before TensorRT reads it"
        )
    finally:
        b.close()


def test_an_ultralytics_engine_on_a_core_the_module_lacks_is_refused_before_tensorrt(tmp_path, release):
    version, trt, machine, _ = release
    machine.dla_cores = 1
    engine = ultralytics_engine(tmp_path, machine, EnginePlan(version, FACE), {"names": {"0": "a"}, "task": "detect"})
    with pytest.raises(EdgeError, match="--dla 1 asks for DLA core 1, but this module has only DLA core 0"):
        backend_for(engine, trt, dla_core=1)
    assert not [c for c in machine.calls if c[0] == "deserialize_cuda_engine"]


def test_plugins_are_loaded_only_for_an_engine_that_needs_them(tmp_path, release, monkeypatch, caplog):
    """TensorRT's plugin registry is what libnvinfer_plugin fills (init_libnvinfer_plugins, NvInferPlugin.h); the
    stand-in makes a plan with a plugin layer unreadable until that call, as TensorRT's runtime is."""
    from edge.runtime.engines import tensorrt as backend

    version, trt, machine, _ = release
    calls = []
    plain = engine_for(tmp_path, trt, machine, EnginePlan(version, FACE), name="plain.engine")
    needs = EnginePlan(version, FACE)
    payload = b"plan with an EfficientNMS_TRT layer"
    nms = tmp_path / "nms.engine"
    nms.write_bytes(payload)

    def init(logger, namespace):
        calls.append(namespace)
        machine.register(needs, payload)  # from now on the runtime knows the plugin's creator

    monkeypatch.setattr(trt, "init_libnvinfer_plugins", init, raising=False)
    logger = trt.Logger(trt.Logger.WARNING)
    backend.load_engine(trt, plain, "8.7", None, None, logger)
    assert calls == []  # a plain engine runs on libnvinfer alone
    write_manifest(
        nms,
        {
            **manifest_of(plain),
            "engine": {"file": nms.name, "sha256": sha256_file(nms), "size": nms.stat().st_size},
            "plugins": ["EfficientNMS_TRT"],
        },
    )
    with caplog.at_level("INFO", logger="edge.run"):
        _, engine, _ = backend.load_engine(trt, nms, "8.7", None, None, logger)
    assert engine is not None and calls == [""]
    assert "TensorRT plugins: loaded libnvinfer_plugin (the engine has EfficientNMS_TRT)" in caplog.text
    # without the manifest's word, a plan that does not deserialise gets the library and one more try
    machine.plans.pop(payload)
    calls.clear()
    data = manifest_of(nms)
    data.pop("plugins")
    write_manifest(nms, data)
    _, engine, _ = backend.load_engine(trt, nms, "8.7", None, None, logger)
    assert engine is not None and calls == [""]


def test_check_on_a_host_without_tensorrt_reads_an_ultralytics_header_and_says_what_it_cannot_check(tmp_path):
    from tests.conftest import run_cli

    text = json.dumps({"names": {"0": "person", "1": "car"}, "imgsz": [480, 640], "task": "detect"}).encode()
    engine = tmp_path / "y.engine"
    engine.write_bytes(len(text).to_bytes(4, "little") + text + b"\x00" * 64)
    r = run_cli("--engine", str(engine), "--check")
    assert r.returncode == 0, r.stderr
    assert "Ultralytics export (2 class names, task detect, imgsz 640x480" in r.stdout
    assert f"plan starts at byte {4 + len(text)}" in r.stdout and "no edge manifest" in r.stdout
    engine.write_bytes(b"\x00" * 64)  # a plain plan without a manifest is still refused
    r = run_cli("--engine", str(engine), "--check")
    assert r.returncode == 2 and "no manifest" in r.stderr


# -- one frame's work on its buffer set, and what the backend tells the run summary ---------------------------------


def test_a_frames_copies_inference_and_events_all_go_on_its_buffer_sets_stream_in_order(tmp_path, release):
    """What lets frames overlap (the module's docstring): upload, execute_async_v3 and download of one frame are
    enqueued on its own set's stream, bracketed by that stream's events, so no work lands on the default stream
    (handle 0), which would serialise every frame."""
    version, trt, machine, driver = release
    plan = EnginePlan(
        version, FACE, run=lambda feeds: {"regressors": np.ones((1, 896, 16)), "classificators": np.ones((1, 896, 1))}
    )
    b = backend_for(engine_for(tmp_path, trt, machine, plan), trt, buffer_sets=2)
    try:
        for _ in range(2):  # a frame on each set
            start = len(driver.log)
            calls = len(machine.calls)
            job = b.submit({"x": np.zeros((1, 256, 256, 3), np.float16)})
            stream = job.slot.stream.handle
            ops = driver.log[start:]
            assert stream != 0
            kinds = [op[0] for op in ops if op[0] in ("htod", "dtoh", "event.record")]
            assert kinds == ["event.record", "htod", "event.record", "event.record", "dtoh", "dtoh", "event.record"]
            assert {op[-1] for op in ops if op[0] in ("htod", "dtoh")} == {stream}
            assert {op[2] for op in ops if op[0] == "event.record"} == {stream}
            executed = [c for c in machine.calls[calls:] if c[0] == "execute_async_v3"]
            assert [c[3] for c in executed] == [stream]
            out = b.collect(job)
            assert out["regressors"].dtype == np.float32 and (out["regressors"] == 1).all()
        assert len({s.stream.handle for s in b._slots}) == 2
    finally:
        b.close()


def test_a_failed_enqueue_names_the_engine_and_frees_its_set(tmp_path, release, monkeypatch):
    version, trt, machine, _ = release
    engine = engine_for(tmp_path, trt, machine, EnginePlan(version, FACE))
    b = backend_for(engine, trt, buffer_sets=1)
    try:
        monkeypatch.setattr(type(b._slots[0].context), "execute_async_v3", lambda self, handle: False)
        with pytest.raises(RunFailed, match=rf"^engine '{engine}': TensorRT execute_async_v3 failed \(its log above"):
            b.submit({"x": np.zeros((1, 256, 256, 3), np.float16)})
        assert list(b._free) == b._slots  # the set is free again for the next frame
    finally:
        b.close()


def test_info_before_any_frame_and_the_tensors_edge_run_reads(tmp_path, release):
    version, trt, machine, _ = release
    engine = engine_for(tmp_path, trt, machine, EnginePlan(version, FACE, dla_core=0), dla_core=0)
    b = backend_for(engine, trt, dla_core=1)
    try:
        info = b.info()
        assert info == {
            "engine": str(engine),
            "tensorrt": trt.__version__,
            "gpu": f"{b._cuda.name} (compute capability {b._cuda.compute_capability})",
            "dla_core": 1,
            "buffer_sets": 2,
            "preprocess": "cpu",
            "frame_memory": None,
            "gpu_ms_mean": {"upload": None, "compute": None, "download": None},  # no frame yet: no mean
        }
        assert b.device == "dla:1"
        assert [(t.name, t.dtype) for t in b.inputs + b.outputs] == [
            ("x", np.float16), ("regressors", np.float32), ("classificators", np.float16),
        ]  # fmt: skip
    finally:
        b.close()
    gpu = backend_for(engine_for(tmp_path, trt, machine, EnginePlan(version, FACE), name="gpu.engine"), trt)
    try:
        assert gpu.device == "cuda:0" and gpu.info()["dla_core"] is None
    finally:
        gpu.close()


def test_auto_frame_memory_maps_frames_on_an_integrated_gpu_and_uploads_on_a_discrete_one(tmp_path, release, monkeypatch, caplog):
    version, trt, machine, _ = release
    for integrated, want in ((True, "mapped"), (False, "pinned")):
        b = backend_for(engine_for(tmp_path, trt, machine, EnginePlan(version, FACE), name=f"{want}.engine"), trt)
        try:
            monkeypatch.setattr(b._cuda, "integrated", integrated)
            monkeypatch.setattr(b._cuda, "can_map_host_memory", True)
            with caplog.at_level("INFO", logger="edge.run"):
                assert b.frame_memory("auto").name == want
            kind = "integrated" if integrated else "discrete"
            assert f"frame buffers: {want} memory (frame_memory auto; {kind} GPU)" in caplog.text
            caplog.clear()
        finally:
            b.close()


def test_an_output_whose_size_depends_on_the_data_is_refused_by_name(tmp_path, release):
    """TensorRT's own NMS layer (INMSLayer) and NonZero give outputs whose size is known only after inference; edge-run
    makes every buffer once, so it names the output instead of guessing a size."""
    version, trt, machine, _ = release
    tensors = {"x": (True, "FLOAT", (1, 3, 8, 8)), "boxes": (False, "FLOAT", (-1, 4))}
    engine = engine_for(tmp_path, trt, machine, EnginePlan(version, tensors))
    with pytest.raises(EdgeError, match=r"^engine output 'boxes' has a data-dependent shape \[-1, 4\]; edge-run needs fixed"):
        backend_for(engine, trt)


def test_the_backend_reads_jetpack_from_the_release_file_nvidia_documents(tmp_path, release, monkeypatch):
    """L4T names its release in /etc/nv_tegra_release (NVIDIA's Jetson Linux guide, "Identify the L4T release")."""
    from edge.runtime.engines import tensorrt as backend

    version, trt, machine, _ = release
    read = []
    monkeypatch.setattr(backend, "read_l4t", lambda path: read.append(path))
    engine = engine_for(tmp_path, trt, machine, EnginePlan(version, FACE))
    backend.TensorRTBackend(str(engine), trt=trt).close()
    assert read == ["/etc/nv_tegra_release"]


def test_an_ultralytics_engine_runs_where_its_export_put_it_unless_the_user_says_otherwise(tmp_path, release):
    """Ultralytics' own loader puts an engine exported with device=dla:1 on core 1 (the header's "dla"); --dla wins."""
    version, trt, machine, _ = release
    header = {"names": {"0": "a"}, "task": "detect", "dla": 1}
    engine = ultralytics_engine(tmp_path, machine, EnginePlan(version, FACE, dla_core=1), header)
    for asked, want in ((None, 1), (0, 0)):
        b = backend_for(engine, trt, dla_core=asked)
        try:
            assert b.dla_core == want and b.device == f"dla:{want}"
        finally:
            b.close()


@pytest.mark.parametrize("cores,asked,have", [(0, 0, "no DLA"), (2, 2, "DLA cores 0..1")])
def test_an_ultralytics_engine_names_the_cores_the_module_has(tmp_path, release, cores, asked, have):
    version, trt, machine, _ = release
    machine.dla_cores = cores
    engine = ultralytics_engine(tmp_path, machine, EnginePlan(version, FACE), {"names": {"0": "a"}, "task": "detect"})
    with pytest.raises(EdgeError, match=rf"--dla {asked} asks for DLA core {asked}, but this module has {have}$"):
        backend_for(engine, trt, dla_core=asked)


def test_without_tensorrt_the_backend_says_what_it_needs(tmp_path, release, monkeypatch):
    from edge.runtime.engines.tensorrt import TensorRTBackend

    version, trt, machine, _ = release
    engine = engine_for(tmp_path, trt, machine, EnginePlan(version, FACE))
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # not importable, as on a laptop without JetPack
    with pytest.raises(EdgeError) as err:
        TensorRTBackend(str(engine), l4t_file="/nonexistent")
    assert "tensorrt" in str(err.value) and "the TensorRT backend" in str(err.value) and "\n" not in str(err.value)


def test_an_empty_output_is_planned_and_read_as_empty(tmp_path, release):
    """A static output with a 0 dimension (TensorRT allows empty tensors) is a fixed shape, not a data-dependent one:
    it gets a buffer (a valid address, no bytes) and every frame reads an empty array of that shape."""
    version, trt, machine, _ = release
    tensors = {"x": (True, "FLOAT", (1, 3, 8, 8)), "none": (False, "FLOAT", (1, 0, 6)), "y": (False, "FLOAT", (1, 2))}
    plan = EnginePlan(version, tensors, run=lambda feeds: {"none": np.zeros((1, 0, 6)), "y": np.ones((1, 2))})
    b = backend_for(engine_for(tmp_path, trt, machine, plan), trt)
    try:
        assert [(t.name, t.shape, t.nbytes) for t in b.io if not t.is_input] == [("none", (1, 0, 6), 0), ("y", (1, 2), 8)]
        out = b.infer({"x": np.zeros((1, 3, 8, 8), np.float32)})
        assert out["none"].shape == (1, 0, 6) and (out["y"] == 1).all()
    finally:
        b.close()
