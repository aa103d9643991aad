"""edge-build on each TensorRT a JetPack ships: 8.5.2 (JetPack 5.1), 8.6.x (JetPack 6.0), 10.3 (JetPack 6.1/6.2).

None of them can run here, so each test runs once per release on a stand-in ``tensorrt`` generated from that
release's binding sources (tests/trt_standin.py): it has exactly the classes, methods, enum members and ParserError
fields of the release, the builder drives calibrators the way the pybind11 trampolines do, and the ONNX parser
behind it is the real TensorRT-RTX parser (so network tensors carry real parser names). pycuda is a stand-in too
(tests/pycuda_standin.py). Kernel timing, real calibration numbers, DLA placement and the engine inspector are not
modelled; what only a Jetson can confirm is listed in docs/verified.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from edge.calib.cache import CalibrationCache, read_cache, version_tag, write_cache
from tests import pycuda_standin
from tests.conftest import require_or_skip, write_frames
from tests.trt_standin import RELEASED, VERSIONS, Machine, make_tensorrt


def _install(version: str, monkeypatch) -> tuple:
    """(stand-in tensorrt of ``version``, its machine, stand-in pycuda.driver) with edge's TensorRT module reset."""
    try:
        import tensorrt_rtx  # noqa: F401  (the parser behind the stand-in)
    except ImportError as exc:
        require_or_skip(False, f"TensorRT-RTX is not installed (pip install tensorrt-rtx-cu13==1.7.1.116): {exc}")
    from edge.builder import trt as trt_api

    machine = Machine(dla_cores=2, gpu=False)  # engines are not loaded back: no engine inspector here
    driver = pycuda_standin.install(monkeypatch)
    trt = make_tensorrt(version, machine)
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    monkeypatch.setattr(trt_api, "_module", None)
    monkeypatch.setattr(trt_api, "_logger", None)
    return trt, machine, driver


@pytest.fixture(autouse=True)
def _free_parsed_networks():
    """A stand-in network holds the TensorRT-RTX parser, builder and logger it was parsed with. TensorRT-RTX keeps
    the logger of a live builder for every later one (and tells the newcomer so), so one left in a reference cycle
    would turn the next test's first edge-build line into that notice: collected at the end of each test."""
    yield
    gc.collect()


@pytest.fixture(params=VERSIONS)
def release(request, monkeypatch):
    """(version, stand-in tensorrt, its machine, stand-in pycuda.driver)."""
    return (request.param, *_install(request.param, monkeypatch))


def edge_build(*argv: str) -> int:
    from edge.builder import cli
    from edge.errors import guard

    parser = argparse.ArgumentParser(prog="edge-build")
    cli.add_arguments(parser)
    return guard("edge-build", cli.main, parser.parse_args(list(argv)))


def built(machine: Machine) -> list:
    return [c for c in machine.calls if c[0] == "built"]


# Expected from each release's pyCore.cpp / pyInt8.cpp (the NetworkDefinitionCreationFlag members, the calibrator
# classes, the absence of compute-capability targets, which only TensorRT-RTX has).
CAPS = {
    "8.5.2": dict(strongly_typed_flag=False, explicit_batch_flag=True),
    "8.6.1": dict(strongly_typed_flag=False, explicit_batch_flag=True),
    "10.3.0": dict(strongly_typed_flag=True, explicit_batch_flag=True),
}


def test_capabilities_come_from_each_release_api(release):
    from edge.builder import trt as trt_api

    version, trt, _, _ = release
    caps = trt_api.detect(trt, trt.Builder(trt_api.logger()))
    assert (caps.module, caps.version) == ("tensorrt", RELEASED[version])
    assert caps.int8_flag and caps.fp16_flag and caps.calibrators and caps.minmax_calibrator and caps.weakly_typed
    assert caps.dla_api and caps.dla_cores == 2 and caps.memory_pools and caps.timing_cache
    assert caps.compute_capabilities == ()  # JetPack's TensorRT builds for the GPU it runs on
    assert {k: getattr(caps, k) for k in CAPS[version]} == CAPS[version]


def test_fp16_dla_build_with_gpu_fallback(release, demo_model, tmp_path, capsys):
    version, trt, machine, _ = release
    out = tmp_path / "m.engine"
    assert edge_build(str(demo_model), "-o", str(out), "--dla", "1", "-c", "configs/build.example.yaml") == 0, (
        capsys.readouterr().err
    )
    assert built(machine) == [("built", ["FP16", "GPU_FALLBACK"], 1, 1)]
    assert ("IBuilderConfig.default_device_type", trt.DeviceType.DLA) in machine.calls
    from edge.manifest import read_manifest

    manifest = read_manifest(out)
    assert manifest["tensorrt"] == {"version": RELEASED[version], "api": "tensorrt"}
    assert manifest["dla"] == {"core": 1, "gpu_fallback": True} and manifest["precisions"] == ["fp32", "fp16"]
    assert out.read_bytes() in machine.plans  # byte for byte what the builder serialised


def test_the_dla_memory_pools_reach_the_builder_config(release, demo_model, tmp_path, monkeypatch, capsys):
    """dla.sram_mib, local_dram_mib and global_dram_mib set IBuilderConfig's DLA_MANAGED_SRAM, DLA_LOCAL_DRAM and
    DLA_GLOBAL_DRAM pools (NvInfer.h's MemoryPoolType), in bytes."""
    version, trt, machine, _ = release
    seen = {}
    original = trt.IBuilderConfig.set_memory_pool_limit

    def record(self, pool, size):
        seen[pool.name] = size
        return original(self, pool, size)

    monkeypatch.setattr(trt.IBuilderConfig, "set_memory_pool_limit", record)
    argv = [str(demo_model), "-o", str(tmp_path / "m.engine"), "--dla", "0", "--fp16", "--dla-sram", "0.5"]
    argv += ["--set", "dla.local_dram_mib=64", "--set", "dla.global_dram_mib=128", "--set", "workspace_mib=256"]
    assert edge_build(*argv) == 0, capsys.readouterr().err
    pools = {"DLA_MANAGED_SRAM": 1 << 19, "DLA_LOCAL_DRAM": 64 << 20, "DLA_GLOBAL_DRAM": 128 << 20, "WORKSPACE": 256 << 20}
    assert seen == pools


def test_dynamic_onnx_gets_one_profile_per_buffer_set_and_runs_on_two_buffer_sets(release, tmp_path, monkeypatch):
    """PP-OCRv4 det keeps -1 dims in the engine; edge-build adds an identical profile per buffer set, and the
    backend (on the lean runtime of the same release) gives each set its own."""
    from edge.assets import resolve
    from edge.runtime.engines.tensorrt import BUFFER_SETS, TensorRTBackend

    version, trt, machine, driver = release
    out = tmp_path / "det.engine"
    assert edge_build(str(resolve("ppocrv4-det", quiet=True)), "-o", str(out), "--shape", "x=1x3x64x64") == 0
    plan = machine.plans[out.read_bytes()]
    assert plan.dynamic and len(plan.profiles) == BUFFER_SETS
    assert all(p == {"x": ((1, 3, 64, 64),) * 3} for p in plan.profiles)
    machine.gpu, machine.memory = True, driver.memory
    runtime_trt = make_tensorrt(version, machine, lean=True)
    backend = TensorRTBackend(str(out), trt=runtime_trt, l4t_file="/nonexistent")
    try:
        assert len(backend._slots) == BUFFER_SETS and backend.outputs[0].shape == (1, 1, 64, 64)
        assert sorted(s.context.active_optimization_profile for s in backend._slots) == list(range(BUFFER_SETS))
        jobs = [backend.submit({"x": np.zeros((1, 3, 64, 64), np.float32)}) for _ in range(3)]
        for job in jobs:
            backend.collect(job)
        assert not [c for c in machine.calls if c[0] == "error"]
    finally:
        backend.close()


def test_a_dla_build_of_a_dynamic_onnx_keeps_one_profile(release, tmp_path):
    from edge.assets import resolve

    _, _, machine, _ = release
    out = tmp_path / "det.engine"
    assert edge_build(str(resolve("ppocrv4-det", quiet=True)), "-o", str(out), "--shape", "x=1x3x64x64", "--dla", "0") == 0
    assert len(machine.plans[out.read_bytes()].profiles) == 1


def test_int8_from_images_calibrates_in_the_primary_context_and_writes_the_cache(release, demo_model, megamind_frames, tmp_path):
    """The calibrator trampolines as pyInt8.cpp calls them: get_batch(names) -> device pointers as ints, the
    written cache through edge's writer; pycuda's primary context, never pycuda.autoinit."""

    version, trt, machine, driver = release
    images = write_frames(tmp_path / "calib", megamind_frames)
    cache = tmp_path / "m.cache"
    out = tmp_path / "m.engine"
    code = edge_build(
        str(demo_model), "-o", str(out), "--int8", "--calib-images", str(images), "--calib-cache", str(cache),
        "-c", "configs/build.example.yaml",
    )  # fmt: skip
    assert code == 0
    assert ("calibration batches", len(megamind_frames)) in machine.calls  # batch 1: one per image
    assert read_cache(cache).header == f"TRT-{version_tag(RELEASED[version])}-EntropyCalibration2"
    allocations = [op for op in driver.log if op[0] == "mem_alloc"]
    assert allocations and all(primary for *_, primary in allocations)
    assert driver.contexts_made == [] and "pycuda.autoinit" not in sys.modules
    assert driver.Context.get_current() is None  # nothing left current on the builder's thread
    assert [op for op in driver.log if op[0] == "mem_free"]  # the batch buffer was freed after the build
    from edge.builder.engine import report_path

    assert json.loads(report_path(out).read_text())["int8"] == "calibrated from images"


def test_int8_from_an_edge_calib_cache_alone(release, demo_model, tmp_path, capsys):
    """The offline workflow on each release: the cache edge calib writes (ONNX names, this release's header) builds
    without images; TensorRT is handed the cache fitted to the parsed network, the file is not touched."""
    from tests.test_build_engine import onnx_name_cache

    version, trt, machine, _ = release
    cache = tmp_path / "m.cache"
    write_cache(cache, onnx_name_cache("blazeface-back-256", version_tag(RELEASED[version])))
    before = cache.read_bytes()
    out = tmp_path / "m.engine"
    assert edge_build(str(demo_model), "-o", str(out), "--int8", "--calib-cache", str(cache), "--dla", "0") == 0
    used = [c[1] for c in machine.calls if c[0] == "calibration cache used"]
    assert len(used) == 1 and not [c for c in machine.calls if c[0] == "calibration batches"]
    assert set(CalibrationCache.from_bytes(before).scales) <= set(CalibrationCache.from_bytes(used[0].encode()).scales)
    assert cache.read_bytes() == before
    assert "have no scale; TensorRT runs the layers that touch them in FP16/FP32" in capsys.readouterr().err
    from edge.builder.engine import report_path

    assert json.loads(report_path(out).read_text())["int8"] == "calibration cache"


def test_a_cache_for_another_release_stops_a_build_without_images(release, demo_model, tmp_path, capsys):
    from tests.test_build_engine import onnx_name_cache

    version, _, machine, _ = release
    other = {"8.5.2": "10.3.0", "8.6.1": "8.5.2", "10.3.0": "8.6.2"}[version]
    cache = tmp_path / "m.cache"
    write_cache(cache, onnx_name_cache("blazeface-back-256", version_tag(other)))
    assert edge_build(str(demo_model), "-o", str(tmp_path / "m.engine"), "--int8", "--calib-cache", str(cache)) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and f"tag {version_tag(other)}, this is {RELEASED[version]}" in err[0] and "--calib-images" in err[0]
    assert built(machine) == []


def test_minmax_with_dla_is_refused_with_the_way_to_minmax_scales(release, demo_model, tmp_path, capsys):
    cache = tmp_path / "m.cache"
    cache.write_text("TRT-8502-EntropyCalibration2\ninput:0: 3c010204\n")
    argv = [str(demo_model), "-o", str(tmp_path / "m.engine"), "--int8", "--calib-cache", str(cache)]
    assert edge_build(*argv, "--dla", "0", "--calib-method", "minmax") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the required calibrator for DLA" in err[0] and "edge calib MODEL --method minmax" in err[0]


def test_a_node_the_parser_cannot_import_is_named_on_every_release(release, tmp_path, capsys):
    """8.5 and 8.6 ParserError has no node_name()/node_operator() (pyOnnx.cpp): the name comes from the ONNX file."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    conv = helper.make_node("Conv", ["x", "w"], ["c"], name="conv")
    weird = helper.make_node("FrobnicateNMS", ["c"], ["y"], name="postprocess", domain="com.example")
    w = onnx.numpy_helper.from_array(np.ones((4, 3, 3, 3), "float32"), "w")
    graph = helper.make_graph([conv, weird], "g", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    assert edge_build(str(path), "-o", str(tmp_path / "m.engine")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "TensorRT cannot import node 1 'postprocess' (op FrobnicateNMS)" in err[0]


def test_refusals_that_depend_on_the_machine(release, demo_model, tmp_path, capsys):
    version, _, machine, _ = release
    assert edge_build(str(demo_model), "-o", str(tmp_path / "m.engine"), "--dla", "2") == 2
    assert "this Jetson has 2 DLA core(s), numbered 0 to 1" in capsys.readouterr().err
    assert edge_build(str(demo_model), "-o", str(tmp_path / "m.engine"), "--target-cc", "8.7") == 2
    assert "builds only for the GPU it runs on" in capsys.readouterr().err
    machine.dla_cores = 0  # Orin Nano
    assert edge_build(str(demo_model), "-o", str(tmp_path / "m.engine"), "--dla", "0") == 2
    assert "this machine has no DLA" in capsys.readouterr().err
    assert built(machine) == [] and not list(Path(tmp_path).iterdir())


@pytest.fixture(scope="module")
def edge_qdq(tmp_path_factory, demo_model, megamind_frames):
    """The demo model's Q/DQ model as `edge calib --qdq` writes it (its cache and FP16 list in the metadata)."""
    from edge import cli

    d = tmp_path_factory.mktemp("qdq")
    images = write_frames(d / "frames", megamind_frames)
    qdq = d / "demo.qdq.onnx"
    argv = [
        "calib",
        "--config",
        "configs/demo.yaml",
        "--images",
        str(images),
        "--cache",
        str(d / "demo.cache"),
        "--qdq",
        str(qdq),
    ]
    assert cli.main(argv) == 0
    return qdq, read_cache(d / "demo.cache")


def test_a_dla_build_of_edges_qdq_model_uses_its_embedded_cache(release, edge_qdq, tmp_path, capsys):
    """JetPack 5/6's DLA takes no Q/DQ: edge-build removes the pairs and hands TensorRT edge calib's own scales
    (those of the cache it wrote beside the model) as the calibration cache; no image is read, no --int8 needed."""
    version, trt, machine, _ = release
    qdq, cache = edge_qdq
    out = tmp_path / "q.engine"
    assert edge_build(str(qdq), "-o", str(out), "--dla", "0") == 0, capsys.readouterr().err
    printed = capsys.readouterr()
    assert {"FP16", "INT8"} <= set(built(machine)[0][1])
    used = [c[1] for c in machine.calls if c[0] == "calibration cache used"]
    assert len(used) == 1 and not [c for c in machine.calls if c[0] == "calibration batches"]
    handed = CalibrationCache.from_bytes(used[0].encode())
    assert handed.header == f"TRT-{version_tag(RELEASED[version])}-EntropyCalibration2"
    assert all(handed.scales[n] == pytest.approx(s) for n, s in cache.scales.items() if n in handed.scales)
    assert len(set(cache.scales) & set(handed.scales)) > 100
    from edge.builder.engine import report_path

    report = json.loads(report_path(out).read_text())
    assert (
        report["int8"].startswith("the Q/DQ model's scales as a calibration cache")
        and "from edge calib's cache in the model" in report["int8"]
    )
    assert "note: INT8 for the DLA from the Q/DQ model: " in printed.out
    assert "calibration cache (from the Q/DQ model): names " in printed.err  # how the scales fit the parsed network


def test_a_dla_build_of_model_optimizers_qdq_model_follows_nvidias_translator(release, tmp_path, capsys):
    """A Q/DQ model edge did not write (Model Optimizer's, tests/fixtures/qdq): the scales its pairs carry, passed on
    as NVIDIA's translator does, and its ten FP16 layers with precision constraints obeyed."""
    from edge.builder.engine import report_path

    version, trt, machine, _ = release
    qdq = Path(__file__).parent / "fixtures" / "qdq" / "blazeface-back-256.modelopt.qdq.onnx"
    reference = json.loads((qdq.parent / "blazeface-back-256.modelopt.translator.json").read_text())
    out = tmp_path / "m.engine"
    assert edge_build(str(qdq), "-o", str(out), "--dla", "1") == 0, capsys.readouterr().err
    used = [c[1] for c in machine.calls if c[0] == "calibration cache used"]
    handed = CalibrationCache.from_bytes(used[0].encode())
    assert all(handed.scales[n] == pytest.approx(s, rel=1e-6) for n, s in reference["int8_tensor_scales"].items())
    halves = [c[1] for c in machine.calls if c[0] == "ILayer.precision" and c[2] == trt.DataType.HALF]
    assert len(halves) == len(reference["fp16_nodes"]) == 10
    assert sorted(n for n in halves if not n.startswith("node_of_")) == sorted(n for n in reference["fp16_nodes"] if n)
    report = json.loads(report_path(out).read_text())
    assert "from the Q/DQ pairs (NVIDIA QDQ Translator's rules), 10 layer(s) in FP16" in report["int8"]


def test_a_gpu_build_takes_the_qdq_model_as_it_is_and_int8_with_qdq_on_the_dla_is_one_line(release, edge_qdq, tmp_path, capsys):
    from edge.builder.engine import report_path

    version, trt, machine, _ = release
    qdq, cache = edge_qdq
    out = tmp_path / "g.engine"
    assert edge_build(str(qdq), "-o", str(out)) == 0, capsys.readouterr().err
    assert not [c for c in machine.calls if c[0] == "calibration cache used"]
    assert json.loads(report_path(out).read_text())["int8"] == "explicit quantization: the Q/DQ model as it is"
    capsys.readouterr()
    write_cache(tmp_path / "c.cache", cache)
    assert (
        edge_build(str(qdq), "-o", str(tmp_path / "x.engine"), "--dla", "0", "--int8", "--calib-cache", str(tmp_path / "c.cache"))
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--int8: demo.qdq.onnx has Q/DQ pairs, and a DLA build takes its INT8 scales from them" in err


@pytest.fixture
def release11(monkeypatch):
    """TensorRT 11.1 (tests/trt_surfaces/11.1.0.json, from NVIDIA's open sources): no calibrators, no INT8/FP16
    builder flags, strongly typed always; the DLA API is still bound. No JetPack for Orin ships it (JetPack 7.2.2's
    11.4.1 has no open sources here), so these tests check the path edge takes on TensorRT 11, not a Jetson."""
    trt, machine, _ = _install("11.1.0", monkeypatch)
    return trt, machine


def test_tensorrt_11_is_strongly_typed_without_calibrators(release11):
    from edge.builder import trt as trt_api

    trt, _ = release11
    caps = trt_api.detect(trt, trt.Builder(trt_api.logger()))
    assert caps.version == "11.1.0.106" and not caps.weakly_typed
    assert not (caps.int8_flag or caps.fp16_flag or caps.calibrators or caps.minmax_calibrator or caps.explicit_batch_flag)
    assert caps.strongly_typed_flag and caps.dla_api  # kSTRONGLY_TYPED is kept (ignored) in 11.x


@pytest.mark.parametrize("dla", [[], ["--dla", "0"]], ids=["gpu", "dla"])
def test_on_tensorrt_11_edges_qdq_model_builds_as_it_is_and_the_report_says_so(release11, edge_qdq, tmp_path, capsys, dla):
    """No translation on TensorRT 11, on the GPU or the DLA (whose 11.4.1 takes strongly typed Q/DQ networks): the
    pairs stay, nothing is calibrated and no builder flag is set."""
    from edge.builder.engine import report_path

    trt, machine = release11
    qdq, _ = edge_qdq
    out = tmp_path / "m.engine"
    assert edge_build(str(qdq), "-o", str(out), *dla, *(["--dla-target", "orin"] if dla else [])) == 0, capsys.readouterr().err
    said = capsys.readouterr()
    assert "strongly typed" in said.out and "Q/DQ pairs removed" not in said.out + said.err
    if dla:  # edge dla has no rules for 11.1 (no DLA there): the build goes on without the offline prediction
        assert "pre-build: offline prediction skipped: no DLA rules for orin with TensorRT 11.1" in said.err
    assert json.loads(report_path(out).read_text())["int8"] == "explicit quantization: the Q/DQ model as it is"
    assert not [c for c in machine.calls if c[0] == "calibration cache used"]


@pytest.mark.parametrize("flag, said", [("--int8", "--int8: this TensorRT (tensorrt 11.1.0.106) is strongly typed"),
                                        ("--fp16", "--fp16: this TensorRT (tensorrt 11.1.0.106) is strongly typed")])  # fmt: skip
def test_on_tensorrt_11_precision_flags_are_one_line_and_exit_2(release11, demo_model, edge_qdq, tmp_path, capsys, flag, said):
    write_cache(tmp_path / "c.cache", edge_qdq[1])  # scales at hand: the refusal is TensorRT 11's, not a missing cache
    extra = ["--calib-cache", str(tmp_path / "c.cache")] if flag == "--int8" else []
    assert edge_build(str(demo_model), "-o", str(tmp_path / "m.engine"), flag, *extra) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err, err
    assert not (tmp_path / "m.engine").exists()


def test_a_timing_cache_is_saved_after_the_build_and_handed_to_the_next_one(release, demo_model, tmp_path, monkeypatch, capsys):
    """--timing-cache: a new file starts from an empty cache; after the build the file holds what the builder
    config's cache serialises to; the next build hands those bytes back; one from another release (set_timing_cache
    returns False: NvInfer.h, "another GPU or TensorRT") is said and replaced by a new one."""
    version, trt, machine, _ = release
    handed = []
    original = trt.IBuilderConfig.create_timing_cache

    def record(self, data):
        handed.append(bytes(data))
        return original(self, data)

    monkeypatch.setattr(trt.IBuilderConfig, "create_timing_cache", record)
    timing = tmp_path / "t.timing"
    argv = [str(demo_model), "-o", str(tmp_path / "m.engine"), "--timing-cache", str(timing)]
    assert edge_build(*argv) == 0, capsys.readouterr().err
    ours = f"timing {version}".encode()  # what this release's stand-in cache serialises to
    assert handed == [b""] and timing.read_bytes() == ours
    handed.clear()
    assert edge_build(*argv) == 0
    assert handed == [b"", ours]
    assert f"timing cache: reusing {timing} ({len(ours)} bytes)" in capsys.readouterr().err
    timing.write_bytes(b"timing 7.1.3")  # an older TensorRT's
    handed.clear()
    assert edge_build(*argv) == 0
    assert handed == [b"", b"timing 7.1.3", b""]
    assert f"timing cache {timing} is from another GPU or TensorRT; starting a new one" in capsys.readouterr().err
    assert timing.read_bytes() == ours


@pytest.mark.parametrize("version", ["8.5.2", "8.6.1"])
def test_the_8x_parser_takes_only_explicit_batch_networks(version, demo_model, monkeypatch):
    """onnx-tensorrt 8.x's importModel refuses a network made without kEXPLICIT_BATCH (its ASSERT, node -1); edge
    sets the flag, so the same file parses through edge's parse()."""
    from edge.builder import trt as trt_api
    from edge.builder.engine import parse

    trt, _, _ = _install(version, monkeypatch)
    builder = trt.Builder(trt_api.logger())
    parser = trt.OnnxParser(builder.create_network(0), trt_api.logger())
    assert not parser.parse_from_file(str(demo_model))
    error = parser.get_error(0)
    assert error.node() == -1 and "explicit batch dimension" in error.desc() and error.code() == trt.ErrorCode.INVALID_VALUE
    caps = trt_api.detect(trt, builder)
    network, _ = parse(trt, builder, caps, demo_model, strongly_typed=False)
    assert network.num_layers > 50 and not network.has_implicit_batch_dimension


def test_a_cache_of_another_calibrator_is_refused_without_images_and_replaced_with_them(
    release, demo_model, megamind_frames, tmp_path, capsys
):
    """--calib-method minmax with an entropy cache: TensorRT would use the entropy scales as they are (the cache names
    its algorithm in the header), so without images it stops in one line, and with them it calibrates again."""
    from tests.test_build_engine import onnx_name_cache

    version, trt, machine, _ = release
    cache = tmp_path / "m.cache"
    write_cache(cache, onnx_name_cache("blazeface-back-256", version_tag(RELEASED[version])))
    argv = [str(demo_model), "-o", str(tmp_path / "m.engine"), "--int8", "--calib-cache", str(cache), "--calib-method", "minmax"]
    assert edge_build(*argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and "it holds EntropyCalibration2 scales, the build asks for MinMaxCalibration" in err[0], err
    assert built(machine) == []
    images = write_frames(tmp_path / "calib", dict(list(megamind_frames.items())[:2]))
    assert edge_build(*argv, "--calib-images", str(images)) == 0
    assert "calibrating again from the images and replacing it" in capsys.readouterr().err
    assert read_cache(cache).header == f"TRT-{version_tag(RELEASED[version])}-MinMaxCalibration"


def test_a_failed_build_names_the_last_three_errors_tensorrt_logged(release, demo_model, tmp_path, monkeypatch, capsys):
    """A build TensorRT gives up on (None from build_serialized_network) is one line with its last three ERROR lines;
    the lines are TensorRT 8.5's own from a published failure (no implementation for a node)."""
    from tests import trt_standin

    version, trt, machine, _ = release
    said = [
        "1: [stand-in] an earlier error",
        "10: [optimizer.cpp::computeCosts::3728] Error Code 10: Internal Error (Could not find any implementation for node Conv_0.)",
        "2: [builder.cpp::buildSerializedNetwork::751] Error Code 2: Internal Error (Assertion engine != nullptr failed. )",
        "3: [stand-in] the last error",
    ]

    def fail(self, network, config):
        for line in said:
            trt_standin._log(self, "ERROR", line)
        return None

    monkeypatch.setattr(trt.Builder, "build_serialized_network", fail)
    out = tmp_path / "m.engine"
    assert edge_build(str(demo_model), "-o", str(out)) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if "could not build" in line]
    assert err == [f"edge-build: error: TensorRT could not build the engine: {'; '.join(said[1:])}"], err
    assert not out.exists()


def test_calibrating_again_into_a_cache_replaces_its_sidecar_too(release, demo_model, megamind_frames, tmp_path, capsys):
    """A cache from `edge calib` has a sidecar (FP16 layers, the equalized model its scales fit). edge-build
    calibrating again into that cache makes new scales: the old sidecar must not outlive them, or the next build with
    the cache alone applies the old FP16 list to the new scales, or refuses them as another model's."""
    from edge.calib.sidecar import Sidecar, read_sidecar, sidecar_path
    from tests.test_build_engine import onnx_name_cache

    version, trt, machine, _ = release
    cache = tmp_path / "m.cache"
    write_cache(cache, onnx_name_cache("blazeface-back-256", version_tag(RELEASED[version])))
    old = Sidecar(["conv2d_1"], {"model": "m.equalized.onnx", "model_sha256": "0" * 64, "equalized": {"from": "m.onnx"}})
    sidecar_path(cache).write_text(old.to_json())
    images = write_frames(tmp_path / "calib", dict(list(megamind_frames.items())[:2]))
    argv = [str(demo_model), "-o", str(tmp_path / "m.engine"), "--int8", "--calib-cache", str(cache)]
    assert edge_build(*argv, "--calib-images", str(images), "--calib-method", "minmax") == 0, capsys.readouterr().err
    assert read_cache(cache).header.endswith("MinMaxCalibration")
    fresh = read_sidecar(cache)
    assert fresh is not None and fresh.layers == [] and "equalized" not in fresh.info
    assert fresh.info["model"] == demo_model.name
    capsys.readouterr()
    assert edge_build(*argv, "--calib-method", "minmax") == 0, capsys.readouterr().err
    assert not [c for c in machine.calls if c[0] == "ILayer.precision"]
    assert json.loads(sidecar_path(cache).read_text())["layers"] == []


def test_a_build_while_another_edge_writes_its_engine_or_cache_is_refused_naming_the_flag(
    release, demo_model, megamind_frames, tmp_path, capsys
):
    """The engine set is held for the whole build, and so is the calibration cache when the build may rewrite it
    (images given); a build that only reads the cache does not take it."""
    import os

    from edge.outputs import hold
    from tests.test_build_engine import onnx_name_cache

    version, _, machine, _ = release
    out, cache = tmp_path / "m.engine", tmp_path / "m.cache"
    held = hold(out, "edge-run")
    assert edge_build(str(demo_model), "-o", str(out)) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert err == [f"edge-build: error: --output {out}: another edge (pid {os.getpid()}) is writing it now; wait for it to "
                   "finish, or choose another path"], err  # fmt: skip
    held.close()
    write_cache(cache, onnx_name_cache("blazeface-back-256", version_tag(RELEASED[version])))
    before = cache.read_bytes()
    held = hold(cache, "--cache")  # edge calib writing it
    images = write_frames(tmp_path / "calib", dict(list(megamind_frames.items())[:2]))
    argv = [str(demo_model), "-o", str(out), "--int8", "--calib-cache", str(cache)]
    assert edge_build(*argv, "--calib-images", str(images)) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and f"--calib-cache {cache}: another edge (pid {os.getpid()})" in err[0], err
    assert built(machine) == [] and cache.read_bytes() == before
    assert edge_build(*argv) == 0  # reading it only
    held.close()


def test_sigterm_during_a_build_cancels_it_through_the_progress_monitor(demo_model, tmp_path, monkeypatch, capsys):
    """TensorRT 10.3's build asks its IProgressMonitor after each step (NvInfer.h: stepComplete returns false to
    stop). A SIGTERM while it builds makes edge's monitor say stop, so the build returns within a step, the command
    ends "terminated" (143) with the old engine kept, and TensorRT's BuildCanceled error is not shown as a failure."""
    import os
    import signal
    import threading
    import time

    from edge import stoppable
    from tests import trt_standin

    trt, _, _ = _install("10.3.0", monkeypatch)
    steps = []
    building = threading.Event()

    def long_build(self, network, config):
        building.set()
        monitor = config.progress_monitor
        monitor.phase_start("Building the engine (stand-in)", None, 400)
        for step in range(400):  # 4 s if nothing says stop
            steps.append(step)
            if not monitor.step_complete("Building the engine (stand-in)", step):
                break
            time.sleep(0.01)
        monitor.phase_finish("Building the engine (stand-in)")
        trt_standin._log(self, "ERROR", "IBuilder::buildSerializedNetwork: Error Code 7: BuildCanceled")
        return None

    monkeypatch.setattr(trt.Builder, "build_serialized_network", long_build)
    out = tmp_path / "m.engine"
    out.write_bytes(b"the previous engine")
    done = threading.Event()

    def stop_once_building() -> None:  # when the build runs, however slow the machine is to get there
        if building.wait(60) and not done.is_set():
            time.sleep(0.1)
            os.kill(os.getpid(), signal.SIGTERM)

    killer = threading.Thread(target=stop_once_building, daemon=True)
    try:
        killer.start()
        assert edge_build(str(demo_model), "-o", str(out)) == 128 + signal.SIGTERM
        assert not stoppable.abandoned(), "the build ran on past the grace period: the monitor did not stop it"
    finally:
        done.set()
        building.set()
        killer.join(5)
        stoppable._abandoned.clear()
    err = capsys.readouterr().err
    assert err.rstrip().splitlines()[-1] == "edge-build: terminated" and "BuildCanceled" not in err, err
    assert 0 < len(steps) < 200 and out.read_bytes() == b"the previous engine"


def test_warnings_during_the_build_are_shown_and_counted_dla_fallbacks_only_counted(
    release, demo_model, tmp_path, monkeypatch, capsys
):
    from tests import trt_standin

    version, trt, machine, _ = release
    original = trt.Builder.build_serialized_network
    fallback = "Layer 'head/Transpose' (SHUFFLE): Unsupported on DLA. Switching this layer's device type to GPU."
    other = "Detected layernorm nodes in FP16: this may cause overflow (a warning TensorRT 10 gives)"

    def warn_then_build(self, network, config):
        trt_standin._log(self, "WARNING", fallback)
        trt_standin._log(self, "WARNING", other)
        return original(self, network, config)

    monkeypatch.setattr(trt.Builder, "build_serialized_network", warn_then_build)
    assert edge_build(str(demo_model), "-o", str(tmp_path / "m.engine"), "--dla", "0") == 0
    said = capsys.readouterr()
    assert f"edge-build: TensorRT warning: {other}" in said.err.splitlines() and "Switching this layer" not in said.err
    assert "; 2 TensorRT warning(s)" in said.out


def test_a_dla_build_with_a_target_runs_the_offline_prediction_before_the_build(release, demo_model, tmp_path, capsys):
    out = tmp_path / "m.engine"
    assert edge_build(str(demo_model), "-o", str(out), "--dla", "0", "--dla-target", "orin") == 0
    err = capsys.readouterr().err
    assert "pre-build: edge dla predicts " in err and " ONNX nodes on the DLA in " in err, err
    from edge.builder.engine import report_path

    prediction = json.loads(report_path(out).read_text())["prebuild"]["prediction"]
    assert prediction["summary"]["dla_nodes"] > 0 and prediction["target"] == "orin"


def test_a_qdq_model_whose_fp16_list_names_a_layer_the_network_lacks_is_refused(release, edge_qdq, tmp_path, capsys):
    """The FP16 list travels in the Q/DQ model's metadata; an edited one naming no layer of the parsed network stops
    the DLA build in one line that says where the list came from."""
    import onnx

    from edge.graph.qdq_translate import FP16_KEY

    qdq, _ = edge_qdq
    model = onnx.load(str(qdq))
    entry = next(p for p in model.metadata_props if p.key == FP16_KEY)
    entry.value = json.dumps(["no_such_layer"])
    edited = tmp_path / "edited.qdq.onnx"
    onnx.save(model, str(edited))
    assert edge_build(str(edited), "-o", str(tmp_path / "m.engine"), "--dla", "0") == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and "the Q/DQ model's FP16 layers: layer 'no_such_layer'" in err[0], err


def test_a_full_disk_while_the_new_sidecar_is_written_keeps_the_old_cache_and_sidecar(
    release, demo_model, megamind_frames, tmp_path, monkeypatch, capsys
):
    """The recalibrated cache and its sidecar go in together: a write that fails on the second (ENOSPC from os.write
    for the sidecar's temp) leaves both old files as they were, no temp behind, and one line."""
    import errno
    import os

    from edge import outputs
    from edge.calib.sidecar import Sidecar, sidecar_path
    from tests.test_build_engine import onnx_name_cache

    version, _, _, _ = release
    cache = tmp_path / "m.cache"
    write_cache(cache, onnx_name_cache("blazeface-back-256", version_tag(RELEASED[version])))
    sidecar_path(cache).write_text(Sidecar(["conv2d_1"], {"model": "m.onnx"}).to_json())
    before = {p.name: p.read_bytes() for p in (cache, sidecar_path(cache))}
    real_write = os.write
    sidecar_fds = set()
    original_init = outputs.Staged.__init__

    def init(self, path, *a, **k):
        original_init(self, path, *a, **k)
        if str(path).endswith(".cache.json"):
            sidecar_fds.add(self.fd)

    def write(fd, data):
        if fd in sidecar_fds:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(outputs.Staged, "__init__", init)
    monkeypatch.setattr(outputs.os, "write", write)
    images = write_frames(tmp_path / "calib", dict(list(megamind_frames.items())[:2]))
    argv = [str(demo_model), "-o", str(tmp_path / "m.engine"), "--int8", "--calib-cache", str(cache)]
    code = edge_build(*argv, "--calib-images", str(images), "--calib-method", "minmax")
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert code == 2 and len(err) == 1 and "m.cache.json" in err[0] and "No space left" in err[0], (code, err)
    assert {p.name: p.read_bytes() for p in (cache, sidecar_path(cache))} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calib", "m.cache", "m.cache.json"]


@pytest.mark.parametrize("version", ["8.6.1", "10.3.0"])  # 8.5 has no CAST layer for the tiny model's Cast
def test_edge_calibs_fp16_layers_reach_the_builder_on_each_release(version, tmp_path, monkeypatch, capsys):
    """tests/test_calib_gpu.py's flow where it cannot run (no TensorRT with INT8 here): edge calib keeps conv2 in FP16
    for this release, and its printed edge-build command sets that layer to FP16 with precision constraints obeyed
    and FP16 beside INT8 (the calls as the stand-in records them, checked against the release's bindings)."""
    from edge import cli
    from tests.test_calib_tiny import tiny_model, write_images

    trt, machine, _ = _install(version, monkeypatch)
    model = tiny_model(tmp_path / "tiny.onnx")
    write_images(tmp_path / "calib", 12, 1)
    monkeypatch.chdir(tmp_path)
    argv = ["calib", str(model), "--images", "calib", "--set", "input.size=[16, 16]", "--cache", "t.cache",
            "--keep-fp16", "conv2", "--trt-version", ".".join(RELEASED[version].split(".")[:3])]  # fmt: skip
    assert cli.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    command = out[[k for k, line in enumerate(out) if line.startswith("next, on the Jetson")][0] + 1].split()
    assert edge_build(*command[1:], "-o", "t.engine") == 0, capsys.readouterr().err
    halves = [c[1] for c in machine.calls if c[0] == "ILayer.precision" and c[2] == trt.DataType.HALF]
    assert halves == ["conv2"]
    assert {"FP16", "INT8", "OBEY_PRECISION_CONSTRAINTS"} <= set(built(machine)[0][1])
    said = capsys.readouterr().out
    assert "note: 1 layer(s) in FP16 from t.cache.json (precision constraints obeyed)" in said


def test_a_fifo_where_the_caches_sidecar_goes_is_refused_by_name_before_the_build(release, demo_model, tmp_path, capsys):
    """The sidecar is read and may be rewritten: a FIFO there would hold the build on its first read."""
    import os

    from tests.test_build_engine import onnx_name_cache

    version, _, machine, _ = release
    cache = tmp_path / "m.cache"
    write_cache(cache, onnx_name_cache("blazeface-back-256", version_tag(RELEASED[version])))
    os.mkfifo(tmp_path / "m.cache.json")
    assert edge_build(str(demo_model), "-o", str(tmp_path / "m.engine"), "--int8", "--calib-cache", str(cache)) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert err == [f"edge-build: error: --calib-cache (its sidecar) {tmp_path / 'm.cache.json'}: exists and is not a "
                   "regular file; choose another path"], err  # fmt: skip
    assert built(machine) == []
