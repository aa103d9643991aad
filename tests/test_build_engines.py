"""edge-build --engines gpu,dla: a GPU engine and a DLA plan from one command and one calibration.

The DLA cannot build here: TensorRT-RTX (the real builder installed here) reports 0 DLA cores. So, exactly as
tests/test_build_versions.py covers `--dla`, the two-engine builds run on the stand-in ``tensorrt`` of each JetPack
release (tests/trt_standin.py, generated from NVIDIA's binding sources, with the real TensorRT-RTX ONNX parser behind
it, on a simulated machine with two DLA cores). What the real TensorRT-RTX builder checks here: `--engines gpu`
builds the one GPU engine as a plain build does, and `--engines gpu,dla` / `--engines dla` are refused the way
`--dla 0` is, before any work. No DLA engine was built or loaded on a DLA here.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

import pytest

from edge.calib.cache import CalibrationCache, version_tag, write_cache
from edge.manifest import dla_engine_path, read_manifest, sha256_file
from tests.conftest import write_frames
from tests.test_build_engine import trt  # noqa: F401  (the real TensorRT-RTX module, skipping where it is missing)
from tests.test_build_versions import _free_parsed_networks, built, edge_build, release  # noqa: F401  (the stand-in of each JetPack release)
from tests.trt_standin import RELEASED

ENGINE_FILES = ["m.engine", "m.engine.json", "m.engine.layers.json"]
DLA_FILES = ["m.dla.engine", "m.dla.engine.json", "m.dla.engine.layers.json"]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("edge-build: error: "), err
    return err[0]


def names_in(folder: Path) -> list:
    return sorted(p.name for p in folder.iterdir())


# -- the naming rule -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "engine, expected",
    [
        ("yolo.engine", "yolo.dla.engine"),
        ("/nonexistent/dir/yolo.engine", "/nonexistent/dir/yolo.dla.engine"),  # beside it; nothing is looked up
        ("models/det.v2.engine", "models/det.v2.dla.engine"),  # only the last suffix is the extension
        ("model.plan", "model.dla.engine"),  # <stem>.dla.engine whatever the GPU engine is called
        ("model", "model.dla.engine"),
    ],
)
def test_the_dla_plan_is_stem_dot_dla_dot_engine_beside_the_engine(engine, expected):
    assert dla_engine_path(Path(engine)) == Path(expected)
    assert dla_engine_path(PurePosixPath(engine)) == PurePosixPath(expected)  # pure: no file system involved


def test_the_naming_rule_lives_in_the_shared_manifest_module():
    """The runtime side imports it from edge.manifest; edge-build's two-engine build uses that same function."""
    import inspect

    from edge.builder import engines

    assert engines.dla_engine_path is dla_engine_path
    assert "dla_engine_path(" in inspect.getsource(engines.engine_jobs)


# -- refusals before any work --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--engines", "gpu,tpu"], "--engines gpu,tpu: unknown engine 'tpu'; give gpu, dla or both, e.g. --engines gpu,dla"),
        (["--engines", "gpu,gpu"], "--engines gpu,gpu: 'gpu' is listed twice; list each engine once"),
        (["--engines", "dla,gpu,dla"], "'dla' is listed twice"),
        (["--engines", ""], "--engines '': names no engine; give gpu, dla or both"),
        (["--engines", "gpu,,dla"], "--engines gpu,,dla: an empty engine name (a stray comma?)"),
        (["--engines", "GPU"], "unknown engine 'GPU'"),
        (["--set", "engines=[]"], "--set engines '[]': names no engine"),
        (["--set", "engines=[gpu, npu]"], "unknown engine 'npu'"),
        (["--engines", "gpu", "--dla", "1"], "key 'dla.core' applies to DLA builds only and engines lists no dla"),
        (["--engines", "gpu", "--no-gpu-fallback"], "'dla.gpu_fallback' applies to DLA builds only; add dla to --engines"),
        (
            ["--engines", "gpu,dla", "--int8", "--calib-images", ".", "--calib-method", "minmax"],
            "minmax with --engines gpu,dla: the DLA takes its INT8 scales from IInt8EntropyCalibrator2",
        ),
    ],
)
def test_a_bad_engines_value_is_one_line_exit_2_before_tensorrt_loads(demo_model, tmp_path, capsys, monkeypatch, argv, message):
    from edge.builder import trt as trt_api

    loaded = []
    monkeypatch.setattr(trt_api, "load", lambda: loaded.append(1))
    assert edge_build(str(demo_model), "-o", str(tmp_path / "m.engine"), *argv) == 2
    line = one_error_line(capsys)
    assert message in line and "--engines" in line
    assert loaded == [] and names_in(tmp_path) == []


def test_a_bad_engines_key_in_the_build_file_names_the_key(demo_model, tmp_path, capsys, monkeypatch):
    from edge.builder import trt as trt_api

    monkeypatch.setattr(trt_api, "load", lambda: pytest.fail("TensorRT loaded before the config was checked"))
    config = tmp_path / "build.yaml"
    config.write_text(f"model:\n  path: {demo_model}\nengines: [gpu, npu]\n")
    assert edge_build("-c", str(config), "-o", str(tmp_path / "m.engine")) == 2
    line = one_error_line(capsys)
    assert f"{config}: key 'engines': unknown engine 'npu'" in line
    config.write_text(f"model:\n  path: {demo_model}\nengines: gpu\n")  # a list, not a string
    assert edge_build("-c", str(config), "-o", str(tmp_path / "m.engine")) == 2
    assert "key 'engines': expected a list (each item a string) or null, got 'gpu'" in one_error_line(capsys)
    assert names_in(tmp_path) == ["build.yaml"]


def test_an_engine_output_that_is_taken_is_refused_before_any_build(release, demo_model, tmp_path, capsys):  # noqa: F811
    _, _, machine, _ = release
    (tmp_path / "m.dla.engine.json").mkdir()  # where the DLA plan's manifest goes
    assert edge_build(str(demo_model), "-o", str(tmp_path / "m.engine"), "--engines", "gpu,dla") == 2
    line = one_error_line(capsys)
    assert "the manifest of the DLA engine" in line and "m.dla.engine.json: is a directory" in line
    assert built(machine) == []


def test_gpu_and_dla_on_tensorrt_rtx_is_refused_as_dla_0_is(trt, demo_model, tmp_path, capsys, monkeypatch):  # noqa: F811
    """TensorRT-RTX 1.7 has the DLA API and 0 DLA cores: `--dla 0` says so in one line, and --engines with dla says
    the same thing naming --engines, before the ONNX is even parsed (no GPU engine is built first)."""
    from edge.builder import engine

    parsed = []
    real_parse = engine.parse
    monkeypatch.setattr(engine, "parse", lambda *a, **k: parsed.append(1) or real_parse(*a, **k))
    assert edge_build(str(demo_model), "-o", str(tmp_path / "m.engine"), "--dla", "0") == 2
    single = one_error_line(capsys)
    reason = "this machine has no DLA: build on a Jetson with the target's JetPack (this TensorRT (tensorrt_rtx 1.7.1.116) reports 0 DLA cores)"
    assert single.endswith(f"--dla 0: {reason}")
    for engines in ("gpu,dla", "dla", "dla,gpu"):
        assert edge_build(str(demo_model), "-o", str(tmp_path / "m.engine"), "--engines", engines) == 2
        assert one_error_line(capsys).endswith(f"--engines {engines} (DLA core 0): {reason}")
    assert edge_build(str(demo_model), "-o", str(tmp_path / "m.engine"), "--engines", "gpu,dla", "--dla", "1") == 2
    assert one_error_line(capsys).endswith(f"--engines gpu,dla (DLA core 1): {reason}")
    assert parsed == [] and names_in(tmp_path) == []


# -- builds --------------------------------------------------------------------------------------------------------


def test_engines_gpu_on_tensorrt_rtx_writes_the_engine_a_plain_build_writes(trt, demo_model, tmp_path, capsys):  # noqa: F811
    """The real TensorRT-RTX builder: `--engines gpu` is today's GPU build at -o, with its manifest and report."""
    plain, listed = tmp_path / "plain", tmp_path / "listed"
    plain.mkdir(), listed.mkdir()
    common = ["--target-cc", "8.6", "-c", "configs/build.example.yaml"]
    assert edge_build(str(demo_model), "-o", str(plain / "m.engine"), *common) == 0
    capsys.readouterr()
    assert edge_build(str(demo_model), "-o", str(listed / "m.engine"), *common, "--engines", "gpu") == 0
    out, err = capsys.readouterr()
    assert names_in(listed) == ENGINE_FILES == names_in(plain)
    assert "edge-build: build 1/1: gpu" in err.splitlines()
    assert f"wrote {listed / 'm.engine'} (" in out and "engines from one build" not in out
    a, b = read_manifest(plain / "m.engine"), read_manifest(listed / "m.engine")
    assert b["engine"]["sha256"] == sha256_file(listed / "m.engine") and b["engine"]["file"] == "m.engine"
    for key in ("tensorrt", "device", "dla", "precisions", "io", "preprocess", "source"):
        assert a[key] == b[key], key
    assert b["dla"] == {"core": None, "gpu_fallback": None} and b["build"]["options"]["engines"] == ["gpu"]
    ra, rb = (json.loads((d / "m.engine.layers.json").read_text()) for d in (plain, listed))
    assert ra["summary"] == rb["summary"] and rb["summary"]["dla_layers"] == 0


def test_gpu_and_dla_engines_from_one_command(release, demo_model, tmp_path, capsys):  # noqa: F811
    """Two builds, each written as a single build writes its engine: engine + manifest + placement report."""
    version, _, machine, _ = release
    out = tmp_path / "m.engine"
    log = tmp_path / "build.log"
    code = edge_build(
        str(demo_model), "-o", str(out), "--engines", "gpu,dla", "-c", "configs/build.example.yaml", "--log", str(log)
    )
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    assert names_in(tmp_path) == sorted(["build.log", *ENGINE_FILES, *DLA_FILES])
    # The builder was asked for a GPU engine, then a DLA plan on core 0 with GPU fallback (FP16: the DLA needs it).
    assert built(machine) == [("built", [], 1, None), ("built", ["FP16", "GPU_FALLBACK"], 1, 0)]
    dla = tmp_path / "m.dla.engine"
    assert machine.plans[out.read_bytes()].dla_core is None  # byte for byte what the builder serialised
    assert machine.plans[dla.read_bytes()].dla_core == 0
    gpu_manifest, dla_manifest = read_manifest(out), read_manifest(dla)
    for path, manifest in ((out, gpu_manifest), (dla, dla_manifest)):
        assert manifest["engine"] == {"file": path.name, "sha256": sha256_file(path), "size": path.stat().st_size}
        assert manifest["build"]["placement_report"] == path.name + ".layers.json"
        assert manifest["tensorrt"] == {"version": RELEASED[version], "api": "tensorrt"}
        assert manifest["build"]["options"]["engines"] == ["gpu", "dla"]
    assert gpu_manifest["dla"] == {"core": None, "gpu_fallback": None} and gpu_manifest["precisions"] == ["fp32"]
    assert dla_manifest["dla"] == {"core": 0, "gpu_fallback": True} and dla_manifest["precisions"] == ["fp32", "fp16"]
    assert gpu_manifest["io"] == dla_manifest["io"] and gpu_manifest["source"] == dla_manifest["source"]
    gpu_report = json.loads((tmp_path / "m.engine.layers.json").read_text())
    dla_report = json.loads((tmp_path / "m.dla.engine.layers.json").read_text())
    assert gpu_report["source"] == "builder log" and gpu_report["prebuild"] is None  # a GPU build has no DLA pass
    assert dla_report["source"] == "builder log and the pre-build pass" and dla_report["prebuild"]["layers"] > 0
    # Progress, then each engine's usual summary, then one closing line naming both files.
    progress = [line for line in stderr.splitlines() if line.startswith("edge-build: build ")]
    assert progress == ["edge-build: build 1/2: gpu", "edge-build: build 2/2: dla (core 0)"]
    lines = stdout.splitlines()
    wrote = [line for line in lines if line.startswith("wrote ")]
    assert wrote[0].startswith(f"wrote {out} (") and wrote[1].startswith(f"wrote {dla} (")
    assert any("; GPU; " in line for line in lines) and any("; DLA core 0 (with GPU fallback); " in line for line in lines)
    assert lines[-1] == (
        f"wrote 2 engines from one build: {out} (GPU), {dla} (DLA, built for core 0); a DLA plan runs on either DLA core"
    )
    text = log.read_text()  # one log for the command, both builds in it
    assert text.index("[edge-build] build 1/2: gpu") < text.index("[edge-build] build 2/2: dla (core 0)")


def test_only_dla_writes_just_the_dla_plan_for_the_core_given(release, demo_model, tmp_path, capsys):  # noqa: F811
    _, _, machine, _ = release
    code = edge_build(str(demo_model), "-o", str(tmp_path / "m.engine"), "--engines", "dla", "--dla", "1", "--no-gpu-fallback")
    assert code == 0, capsys.readouterr().err
    assert names_in(tmp_path) == DLA_FILES
    assert built(machine) == [("built", ["FP16"], 1, 1)]
    assert read_manifest(tmp_path / "m.dla.engine")["dla"] == {"core": 1, "gpu_fallback": False}
    out, err = capsys.readouterr()
    assert "edge-build: build 1/1: dla (core 1)" in err and "engines from one build" not in out


@pytest.mark.parametrize("with_cache_file", [True, False], ids=["calib-cache", "no-calib-cache"])
def test_int8_calibrates_once_and_the_dla_build_reads_what_the_gpu_build_wrote(
    release,  # noqa: F811
    demo_model,
    megamind_frames,
    tmp_path,
    capsys,
    with_cache_file,
):
    """The calibrator runs once (one pass over the images); the second build is handed the cache the first one
    wrote, byte for byte, so both engines carry the same scales. Without --calib-cache no cache file is left."""

    version, _, machine, _ = release
    images = write_frames(tmp_path / "calib", megamind_frames)
    out = tmp_path / "m.engine"
    cache = tmp_path / "m.cache"
    argv = [str(demo_model), "-o", str(out), "--engines", "gpu,dla", "--int8", "--calib-images", str(images)]
    argv += ["-c", "configs/build.example.yaml"] + (["--calib-cache", str(cache)] if with_cache_file else [])
    assert edge_build(*argv) == 0, capsys.readouterr().err
    batches = [c for c in machine.calls if c[0] == "calibration batches"]
    used = [c[1] for c in machine.calls if c[0] == "calibration cache used"]
    assert batches == [("calibration batches", len(megamind_frames))]  # one calibration, in the first build
    assert len(used) == 1  # the second build read a cache instead of calibrating
    assert [c[3] for c in built(machine)] == [None, 0]
    header = f"TRT-{version_tag(RELEASED[version])}-EntropyCalibration2"
    assert used[0].splitlines()[0] == header
    if with_cache_file:
        assert used[0].encode() == cache.read_bytes()  # byte-identical to the cache the first build wrote
    else:
        assert not any(p.suffix == ".cache" or "partial" in p.name for p in tmp_path.iterdir())
    scales = CalibrationCache.from_bytes(used[0].encode()).scales
    assert len(scales) > 100 and all(s > 0 for s in scales.values())
    for engine in (out, tmp_path / "m.dla.engine"):
        assert "int8" in read_manifest(engine)["precisions"]
    err = capsys.readouterr().err
    assert "using the scales in the cache an earlier build calibrated; no images are read" in err
    assert err.count("calibration: 4 images from") == 1


def test_int8_from_a_cache_alone_gives_both_builds_the_same_fitted_scales(release, demo_model, tmp_path, capsys):  # noqa: F811
    from tests.test_build_engine import onnx_name_cache

    version, _, machine, _ = release
    cache = tmp_path / "m.cache"
    write_cache(cache, onnx_name_cache("blazeface-back-256", version_tag(RELEASED[version])))
    before = cache.read_bytes()
    argv = [str(demo_model), "-o", str(tmp_path / "m.engine"), "--engines", "gpu,dla", "--int8", "--calib-cache", str(cache)]
    assert edge_build(*argv) == 0, capsys.readouterr().err
    used = [c[1] for c in machine.calls if c[0] == "calibration cache used"]
    assert len(used) == 2 and used[0] == used[1]  # the fitted cache of the first build, handed to the second
    assert not [c for c in machine.calls if c[0] == "calibration batches"]
    assert set(CalibrationCache.from_bytes(before).scales) <= set(CalibrationCache.from_bytes(used[1].encode()).scales)
    assert cache.read_bytes() == before
    err = capsys.readouterr().err
    assert err.count(f"calibration cache {cache}: names") == 1  # fitted once
    assert err.count(f"calibration: using the scales in {cache}; no images are read") == 2


def test_a_failing_second_build_leaves_the_first_engine_and_the_old_dla_plan_intact(release, demo_model, tmp_path, capsys):  # noqa: F811
    """The DLA goes away between the DLA build's pre-build pass and its build (machine.can_run_on_dla is the
    stand-in's hook for that pass): TensorRT fails the second build; the GPU engine written by the first stays
    whole and matches its manifest, and the DLA plan from an earlier run is not replaced."""
    _, _, machine, _ = release
    old = {name: f"old {name}".encode() for name in DLA_FILES}
    for name, data in old.items():
        (tmp_path / name).write_bytes(data)

    def dla_lost(layer):
        machine.dla_cores = 0
        return False

    machine.can_run_on_dla = dla_lost
    out = tmp_path / "m.engine"
    assert edge_build(str(demo_model), "-o", str(out), "--engines", "gpu,dla") == 1
    stdout, stderr = capsys.readouterr()
    error = stderr.strip().splitlines()[-1]
    assert error.startswith("edge-build: error: build 2/2: dla (core 0) failed: TensorRT could not build the engine: ")
    assert "DLA core 0 requested, the machine has 0" in error
    assert error.endswith(f"; {out} (build 1) is written and unchanged")
    assert [c[3] for c in built(machine)] == [None]
    assert names_in(tmp_path) == sorted(ENGINE_FILES + DLA_FILES)  # no temp file or journal left behind
    manifest = read_manifest(out)
    assert manifest["engine"]["sha256"] == sha256_file(out) and out.read_bytes() in machine.plans
    assert {name: (tmp_path / name).read_bytes() for name in DLA_FILES} == old
    assert f"wrote {out} (" in stdout and "engines from one build" not in stdout
