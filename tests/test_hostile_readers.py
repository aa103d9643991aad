"""Readers of every file edge takes in, bounded work from small inputs, and --check (review hostile-inputs-2026-12,
"Tracebacks", "Hangs and blow-ups" and "Accepted silently"; issue 14 items 3 and 7).

Inputs are real where they exist (tegrastats lines from the reference, the BlazeFace demo, Megamind.avi, ONNX built
with onnx.helper) and made hostile by hand: impossible dates, NaN and Infinity, non-UTF-8 bytes, zero-byte and
random models, images that decode to gigabytes, constants that fold to gigabytes. Memory bombs run in children
capped with RLIMIT_AS, and their peak RSS (wait4) is the measure.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from edge import cli

from ._deploytools import write_engine
from ._hostile import (
    GiB,
    assert_clean,
    assert_failed_run,
    assert_no_traceback,
    assert_refused,
    call,
    command_parser,
    demo_config,
    edge,
    edge_run,
    entry,
    images,
    limits,
    measured,
    onnx_constant_bomb,
    onnx_conv,
    png_header_bomb,
    require_or_skip,
    run,
    strict_json_loads,
)
from .test_telemetry_tegrastats import REAL_LINES

pytest.importorskip("onnx")
pytest.importorskip("cv2")

L5 = next(line for line in REAL_LINES if line.startswith("11-15-2024"))  # Orin Nano JetPack 6, with a date prefix
IMPOSSIBLE_DATES = ["13-45-2024 25:61:61", "02-30-2024 08:38:09", "00-00-0000 00:00:00", "99-99-9999 99:99:99"]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, demo_model: Path, megamind: Path) -> Path:
    return demo_config(tmp_path_factory.mktemp("readers"))


def run_main(*argv: object, **kw: object):
    return call(argv, main=cli.run_main, **kw)


# -- tegrastats logs -----------------------------------------------------------------------------------------------


def _dated(date: str) -> str:
    return date + L5[len("11-15-2024 08:38:09") :]


@pytest.mark.parametrize("date", IMPOSSIBLE_DATES)
def test_a_tegrastats_line_with_an_impossible_date_is_not_a_traceback(tmp_path: Path, date: str) -> None:
    log = tmp_path / "t.log"
    log.write_text("\n".join([L5, _dated(date), L5]) + "\n")
    for extra in ([], ["--json"]):
        o = call(["telemetry", "parse", "--tegrastats", log, *extra])
        assert_clean(o)
        if o.code == 0 and extra:
            samples = strict_json_loads(o.out)
            assert len(samples) >= 2, "the good lines around a bad one are lost"


def test_replaying_a_log_with_an_impossible_date_is_not_a_traceback(base: Path, tmp_path: Path) -> None:
    log = tmp_path / "t.log"
    log.write_text("\n".join([L5, _dated(IMPOSSIBLE_DATES[0]), L5] * 5) + "\n")
    o = run_main(
        "-c",
        base,
        "-q",
        "--frames",
        10,
        "--telemetry",
        "replay",
        "--set",
        f"telemetry.replay_path={log}",
        "--results",
        tmp_path / "r.jsonl",
    )
    assert_clean(o)


def test_the_live_tegrastats_reader_survives_a_line_with_an_impossible_date(base: Path, tmp_path: Path) -> None:
    """Review: the reader thread died on such a line and left the run with 0 samples. The stand-in prints real lines
    (one with an impossible date first) every 50 ms, as tegrastats --interval does."""
    fake = tmp_path / "tegrastats"
    lines = json.dumps([_dated(IMPOSSIBLE_DATES[0]), *[L5] * 400])
    fake.write_text(
        f"#!{shutil.which('python3')}\nimport sys, time, json\nfor line in json.loads({lines!r}):\n"
        "    print(line, flush=True)\n    time.sleep(0.05)\n"
    )
    fake.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    o = edge_run(
        "-c",
        base,
        "-q",
        "--frames",
        60,
        "--results",
        out / "r.jsonl",
        "--telemetry",
        "tegrastats",
        "--set",
        f"telemetry.tegrastats_cmd=[{fake}]",
    )
    assert_clean(o, codes=(0,))
    samples = (out / "telemetry.jsonl").read_text().splitlines()
    assert len(samples) >= 3, f"the reader thread stopped after the bad line: {len(samples)} samples{o}"


def test_a_run_shorter_than_one_telemetry_period_still_ends_with_a_summary(base: Path, tmp_path: Path) -> None:
    """Found by the property tests' set-up: a run that got one telemetry sample (real Orin lines replayed, a 5 s
    period) ended with `unsupported format string passed to NoneType.__format__` after writing its results."""
    log = tmp_path / "t.log"
    log.write_text(L5 + "\n")
    o = edge_run(
        "-c", base, "-q", "--frames", 3, "--results", tmp_path / "r.jsonl", "--summary-json", tmp_path / "s.json",
        "--telemetry", "replay", "--set", f"telemetry.replay_path={log}", "--set", "telemetry.interval_s=5",
    )  # fmt: skip
    assert_clean(o, codes=(0,))
    strict_json_loads((tmp_path / "s.json").read_text())


NOT_TEGRASTATS = {
    "yaml": b"model:\n  asset: blazeface-back-256\nsource:\n  uri: asset://megamind\n" * 20,
    "binary": bytes(range(256)) * 64,
    "passwd": b"root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n" * 50,
    "empty": b"",
    "json": b'[{"t_mono": 1.0}]\n',
}


@pytest.mark.parametrize("kind", NOT_TEGRASTATS)
def test_parse_of_a_file_that_is_not_a_tegrastats_log_says_so(tmp_path: Path, kind: str) -> None:
    """Review: `edge telemetry parse` on another file printed hundreds of empty samples, exit 0."""
    log = tmp_path / f"not-tegrastats.{kind}"
    log.write_bytes(NOT_TEGRASTATS[kind])
    o = call(["telemetry", "parse", "--tegrastats", log])
    assert_refused(o, str(log), parser=command_parser("telemetry"))
    assert not o.out.strip(), "samples printed from a file that is not a tegrastats log"


@pytest.mark.slow
def test_telemetry_parse_streams_in_constant_memory(tmp_path: Path) -> None:
    """Review: `edge telemetry parse --json` on 100 MB took 69 s and 5.4 GB. Peak RSS must not grow with the log:
    a 1 MB and a 6 MB log of real lines differ by less than 30 MB (the unstreamed parser: about 250 MB)."""
    text = "\n".join(REAL_LINES) + "\n"
    rss = {}
    for mb in (1, 6):
        log = tmp_path / f"{mb}.log"
        log.write_text(text * (mb * (1 << 20) // len(text) + 1))
        with open(tmp_path / f"{mb}.json", "wb") as out:
            o = measured([*entry("edge"), "telemetry", "parse", "--tegrastats", log, "--json"], stdout=out.fileno(), timeout=300)
        assert_clean(o, codes=(0,))
        samples = json.loads((tmp_path / f"{mb}.json").read_text())
        assert len(samples) == len(log.read_text().splitlines())
        rss[mb] = o.peak_rss_mb
    assert rss[6] - rss[1] < 30, f"peak RSS grows with the log: {rss}"


# -- run folders for edge report -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_run(base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run folder: results.jsonl, summary.json and telemetry files (replayed real tegrastats lines)."""
    d = tmp_path_factory.mktemp("run")
    log = d.parent / "tegra.log"
    log.write_text("\n".join(REAL_LINES * 10) + "\n")
    o = edge_run(
        "-c", base, "-q", "--frames", 20, "--results", d / "results.jsonl", "--summary-json", d / "summary.json",
        "--telemetry", "replay", "--set", f"telemetry.replay_path={log}",
    )  # fmt: skip
    assert o.code == 0, o
    assert (d / "telemetry.jsonl").is_file()
    return d


REPORT_DAMAGE = {
    "summary only": lambda d: [p.unlink() for p in d.iterdir() if p.name != "summary.json"],
    "telemetry Infinity": lambda d: _append(d / "telemetry.jsonl", b'{"t_mono": Infinity, "power_mw": {"VDD_IN": Infinity}}\n'),
    "telemetry NaN": lambda d: _append(d / "telemetry.jsonl", b'{"t_mono": NaN, "t_wall": NaN, "power_mw": {"VDD_IN": NaN}}\n'),
    "telemetry list": lambda d: _append(d / "telemetry.jsonl", b"[1, 2, 3]\n"),
    "telemetry wrong types": lambda d: _append(d / "telemetry.jsonl", b'{"t_mono": "soon", "power_mw": [1], "temps_c": 3}\n'),
    "telemetry non-UTF-8": lambda d: _append(d / "telemetry.jsonl", b'{"backend": "\xff\xfe"}\n\xff\n'),
    "results non-UTF-8": lambda d: _append(d / "results.jsonl", b"\xff\xfe\x00garbage\n"),
    "results Infinity": lambda d: _append(d / "results.jsonl", b'{"frame": 99, "t_done": Infinity, "t_capture": -Infinity}\n'),
    "summary not JSON": lambda d: (d / "summary.json").write_bytes(b"{\xff"),
    "meta wrong types": lambda d: (d / "telemetry_meta.json").write_text('{"idle_baseline_w": "high", "interval_s": []}'),
    "empty folder": lambda d: [p.unlink() for p in d.iterdir()],
    "results empty": lambda d: (d / "results.jsonl").write_text(""),
}


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


@pytest.mark.parametrize("damage", REPORT_DAMAGE)
def test_edge_report_on_a_damaged_run_folder_is_a_report_or_one_line(real_run: Path, tmp_path: Path, damage: str) -> None:
    """Review: `edge report` on edge-run's own summary.json alone said `min() arg is an empty sequence`; telemetry lines
    with Infinity, a list or non-UTF-8 were tracebacks."""
    folder = tmp_path / "run"
    shutil.copytree(real_run, folder)
    REPORT_DAMAGE[damage](folder)
    o = call(["report", folder])
    assert_clean(o, parser=command_parser("report"))


# -- manifests and calibration caches ----------------------------------------------------------------------------------

GOOD_MANIFEST = {
    "manifest_version": 1,
    "engine": {"file": "m.engine", "sha256": None, "size": None},
    "tensorrt": {"version": "10.3.0.30"},
    "device": {"gpu_name": "Orin", "compute_capability": "8.7", "l4t": "36.4.3", "jetpack": "6.1/6.2"},
    "dla": {"core": 0, "gpu_fallback": True},
    "io": [],
}
MANIFEST_DAMAGE = {
    "dla.core a string": ("dla", {"core": "0", "gpu_fallback": True}),
    "engine a string": ("engine", "str"),
    "engine.size a string": ("engine", {"file": "m.engine", "sha256": "0" * 64, "size": "12"}),
    "tensorrt a list": ("tensorrt", []),
    "device null": ("device", None),
    "dla a number": ("dla", 3),
    "manifest_version a string": ("manifest_version", "1"),
    "manifest_version null": ("manifest_version", None),
    "io a string": ("io", "all"),
    "compute_capability a dict": ("device", {"compute_capability": {"major": 8}, "jetpack": "6.1/6.2"}),
    "dla.core huge": ("dla", {"core": 10**30, "gpu_fallback": True}),
    "dla.core a float": ("dla", {"core": 0.5, "gpu_fallback": True}),
}


@pytest.mark.parametrize("damage", MANIFEST_DAMAGE)
def test_a_manifest_with_fields_of_the_wrong_type_is_one_error(tmp_path: Path, damage: str) -> None:
    """Review: `dla.core: "0"` and `engine: "str"` were tracebacks. What edge-run does with a manifest before TensorRT
    sees the engine (read_manifest, then the gate with this device's facts; TensorRT itself is not here, so the
    facts of an AGX Orin are passed in), in a forked child: anything but EdgeError is a bug."""
    from edge.manifest import read_manifest
    from edge.runtime.engines.gate import DeviceFacts, gate

    engine = tmp_path / "m.engine"
    engine.write_bytes(b"serialized plan bytes")
    data = json.loads(json.dumps(GOOD_MANIFEST))
    data["engine"].update(sha256=hashlib.sha256(engine.read_bytes()).hexdigest(), size=engine.stat().st_size)
    key, value = MANIFEST_DAMAGE[damage]
    data[key] = value
    (tmp_path / "m.engine.json").write_text(json.dumps(data))
    agx_orin = DeviceFacts("10.3.0.30", "8.7", dla_cores=2, l4t="36.4.3", jetpack="6.1/6.2")

    def edge_run_gate(_argv) -> int:
        from edge.errors import EdgeError

        try:
            gate(engine, read_manifest(engine), agx_orin, None)
        except EdgeError as exc:
            print(f"edge-run: error: {exc}", file=sys.stderr)
            return 2
        return 0

    o = call([], main=edge_run_gate)
    assert_clean(o)
    # The same manifest through edge deploy's local check.
    cfg = tmp_path / "front.yaml"
    cfg.write_text("model:\n  engine: m.engine\n")
    o = call(
        [
            "deploy",
            "jetson@127.0.0.1",
            "--name",
            "front",
            "--engine",
            engine,
            "--config",
            cfg,
            "-p",
            "9",
            "--connect-timeout",
            "1",
        ]
    )
    assert_no_traceback(o)
    assert o.code in (2, 10), o  # refused here, or accepted and then the (absent) device refuses the connection


CACHE_DAMAGE = {
    "NaN": "7fc00000",
    "+inf": "7f800000",
    "-inf": "ff800000",
    "negative": "bf800000",
    "zero": "00000000",
    "denormal": "00000001",
}


@pytest.mark.parametrize("damage", CACHE_DAMAGE)
def test_a_calibration_cache_with_a_scale_that_is_not_a_positive_number_is_refused(tmp_path: Path, damage: str) -> None:
    """Review: the cache reader accepted NaN, -inf and negative scales. Checked where every reader goes through:
    CalibrationCache.from_bytes (edge-build's --calib-cache; TensorRT-RTX here has no INT8 to reach it by CLI)."""
    from edge.calib.cache import CalibrationCache, read_cache
    from edge.errors import EdgeError

    cache = tmp_path / "bad.cache"
    cache.write_text(f"TRT-100300-EntropyCalibration2\ninput: 3c010204\nconv_out: {CACHE_DAMAGE[damage]}\n")
    with pytest.raises(EdgeError) as exc:
        read_cache(cache)
    assert "conv_out" in str(exc.value) or "line 3" in str(exc.value), exc.value
    with pytest.raises(EdgeError):
        CalibrationCache.from_bytes(cache.read_bytes())


# -- models that are not models, and constants that fold to gigabytes ----------------------------------------------

BROKEN_MODELS = {
    "zero bytes": b"",
    "random": bytes(hashlib.sha256(str(i).encode()).digest()[0] for i in range(4096)),
    "text": b"this is not an onnx model\n",
    "truncated": None,  # the first half of a real model
    "json": b'{"graph": {}}',
}


def _broken(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"broken-{kind.replace(' ', '-')}.onnx"
    data = BROKEN_MODELS[kind]
    if data is None:
        real = onnx_conv(tmp_path / "real.onnx").read_bytes()
        data = real[: len(real) // 2]
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("kind", BROKEN_MODELS)
def test_a_file_that_is_not_an_onnx_model_is_exit_2_everywhere(base: Path, tmp_path: Path, kind: str) -> None:
    """Review: edge-build exited 1 (not 2) for a zero-byte or random ONNX."""
    model = _broken(tmp_path, kind)
    imgs = images(tmp_path / "imgs")
    for argv, main, name in (
        ([model, "-o", tmp_path / "x.engine", "--target-cc", "8.6"], cli.build_main, "edge-build"),
        (["dla", model, "--target", "orin"], None, "dla"),
        (["calib", model, "--images", imgs, "--cache", tmp_path / "x.cache"], None, "calib"),
        (["-c", base, "--model", model, "--check"], cli.run_main, "edge-run"),
    ):
        o = call(argv, main=main)
        assert_refused(o, model.name, parser=command_parser(name))
    assert not (tmp_path / "x.engine").exists() and not (tmp_path / "x.cache").exists()


def _external_outside(folder: Path) -> Path:
    """tiny.onnx with its Conv weight stored as external data at ../outside.bin: a real file, outside the model's folder."""
    import onnx
    from onnx import external_data_helper, numpy_helper

    model_dir = folder / "models"
    model_dir.mkdir()
    model = onnx.load(str(onnx_conv(folder / "tiny.onnx")))
    weight = next(t for t in model.graph.initializer if t.name == "weight")
    (folder / "outside.bin").write_bytes(numpy_helper.to_array(weight).tobytes())
    external_data_helper.set_external_data(weight, location="../outside.bin", offset=0, length=len(weight.raw_data))
    weight.ClearField("raw_data")
    weight.data_location = onnx.TensorProto.EXTERNAL
    path = model_dir / "escape.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_onnx_external_data_outside_the_model_folder_is_refused_by_every_tool(base: Path, tmp_path: Path) -> None:
    """Held in the review (all four tools refused it): keep it that way, as exit 2 and one line."""
    model = _external_outside(tmp_path)
    imgs = images(tmp_path / "imgs")
    for argv, main, name in (
        (["dla", model, "--target", "orin"], None, "dla"),
        (["calib", model, "--images", imgs, "--cache", tmp_path / "x.cache"], None, "calib"),
        (["-c", base, "--model", model, "--check"], cli.run_main, "edge-run"),
        ([model, "-o", tmp_path / "x.engine", "--target-cc", "8.6"], cli.build_main, "edge-build"),
    ):
        if name == "edge-build" and not _have_trt():
            continue
        o = call(argv, main=main)
        assert_refused(o, parser=command_parser(name))
    assert not (tmp_path / "x.engine").exists() and not (tmp_path / "x.cache").exists()


BOUNDED = {"address_space": 3 * GiB, "timeout": 60}


@pytest.mark.parametrize("command", ["dla", "edge-build", "calib"])
def test_an_onnx_constant_that_folds_to_gigabytes_is_bounded(tmp_path: Path, command: str) -> None:
    """Review: a 224-byte ONNX with ConstantOfShape [1,3,30000,30000]: `edge dla` 27 s and 10.6 GB, edge-build 10.7 GB.
    The child has 3 GiB of address space: an unbounded fold fails it (MemoryError, exit 1) instead of this machine."""
    model = onnx_constant_bomb(tmp_path / "bomb.onnx")
    assert model.stat().st_size < 400
    argv = {
        "dla": ["dla", model, "--target", "orin"],
        "edge-build": [model, "-o", tmp_path / "bomb.engine", "--target-cc", "8.6"],
        "calib": ["calib", model, "--images", images(tmp_path / "imgs"), "--cache", tmp_path / "bomb.cache"],
    }[command]
    if command == "edge-build":
        require_or_skip(_have_trt(), "tensorrt-rtx is not installed (pip install tensorrt-rtx-cu13)")
    o = call(argv, main=cli.build_main if command == "edge-build" else None, **BOUNDED)
    assert_clean(o)
    assert o.peak_rss_mb < 1024, f"{o.peak_rss_mb:.0f} MB for a {model.stat().st_size}-byte model{o}"


def _have_trt() -> bool:
    import importlib.util

    return any(importlib.util.find_spec(m) is not None for m in ("tensorrt_rtx", "tensorrt"))


@pytest.fixture(scope="module")
def png_bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid 30000 x 30000 grey PNG of about 1 MB: 2.7 GB once decoded to BGR."""
    return png_header_bomb(tmp_path_factory.mktemp("png") / "huge.png")


def test_a_30000_pixel_square_png_source_is_refused_without_allocating_it(base: Path, png_bomb: Path) -> None:
    """Review: a 30000 x 30000 PNG source took 5.4 GB. The child has 2 GiB of address space and is measured."""
    o = edge_run("-c", base, "-q", "--telemetry", "none", "--source", png_bomb, preexec=limits(address_space=2 * GiB))
    assert_refused(o, png_bomb.name, before_work=False)  # images are read by the capture thread
    assert o.peak_rss_mb < 600, f"{o.peak_rss_mb:.0f} MB peak{o}"


def test_a_huge_png_among_good_images_is_skipped_and_the_rest_run(base: Path, png_bomb: Path, tmp_path: Path) -> None:
    folder = images(tmp_path / "imgs", count=3, size=64)
    os.link(png_bomb, folder / "img01b.png")
    o = edge_run(
        "-c",
        base,
        "-q",
        "--telemetry",
        "none",
        "--source",
        folder,
        "--summary-json",
        tmp_path / "s.json",
        preexec=limits(address_space=2 * GiB),
    )
    assert_clean(o, codes=(0,))
    assert json.loads((tmp_path / "s.json").read_text())["frames"] == 3
    assert o.peak_rss_mb < 600, o


def test_a_huge_png_among_calibration_images_is_bounded(tmp_path: Path, png_bomb: Path) -> None:
    model = onnx_conv(tmp_path / "tiny.onnx")
    folder = images(tmp_path / "imgs", count=3, size=32)
    os.link(png_bomb, folder / "img01b.png")
    o = call(["calib", model, "--images", folder, "--cache", tmp_path / "c.cache"], address_space=2 * GiB)
    assert_clean(o)
    assert o.peak_rss_mb < 600, o


def test_a_folder_of_only_corrupt_images_is_exit_2(base: Path, tmp_path: Path) -> None:
    """Review: a folder of only corrupt images exited 1; the README says 2 (bad input)."""
    folder = tmp_path / "imgs"
    folder.mkdir()
    for i in range(3):
        (folder / f"bad{i}.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg" * (i + 1))
    (folder / "empty.png").write_bytes(b"")
    o = edge_run("-c", base, "-q", "--telemetry", "none", "--source", folder)
    assert_refused(o, str(folder), before_work=False)  # images are read by the capture thread
    o = call(["calib", onnx_conv(tmp_path / "tiny.onnx"), "--images", folder, "--cache", tmp_path / "c.cache"])
    assert_refused(o, str(folder))
    assert not (tmp_path / "c.cache").exists()


@pytest.mark.parametrize("name", ["clip[1].avi", "clip?.avi", "clip*.avi", "[ab].avi", "clip {1}.avi", "-clip.avi"])
def test_source_files_whose_names_look_like_globs_are_files(base: Path, tmp_path: Path, megamind: Path, name: str) -> None:
    """Review: file names containing `[`, `]`, `?` were treated as globs and refused."""
    clip = tmp_path / name
    shutil.copy(megamind, clip)
    (tmp_path / "other.avi").write_bytes(b"")  # a glob would match this too
    o = edge_run("-c", base, "-q", "--telemetry", "none", "--source", clip, "--frames", 5, "--summary-json", tmp_path / "s.json")
    assert_clean(o, codes=(0,))
    assert json.loads((tmp_path / "s.json").read_text())["frames"] == 5


def test_image_folders_and_files_whose_names_look_like_globs_work(base: Path, tmp_path: Path) -> None:
    folder = images(tmp_path / "imgs[1]", count=2, size=64)
    single = folder / "a?b.png"
    (folder / "img00.png").rename(single)
    for source, frames in ((folder, 2), (single, 1)):
        o = edge_run("-c", base, "-q", "--telemetry", "none", "--source", source, "--summary-json", tmp_path / "s.json")
        assert_clean(o, codes=(0,))
        assert json.loads((tmp_path / "s.json").read_text())["frames"] == frames


def _latin1(folder: Path, name: bytes) -> Path:
    """A path in ``folder`` whose name holds bytes that are not UTF-8 (Python hands it over with surrogate escapes)."""
    return Path(os.fsdecode(os.fsencode(folder) + b"/" + name))


def test_image_names_that_are_not_utf8_are_read_not_a_crash(base: Path, tmp_path: Path) -> None:
    """An attack on edge calib: OpenCV's binding ends the process with a segmentation fault on such a name (rc 139,
    no message). Images are now read as bytes and decoded, so the name never reaches OpenCV: all images count."""
    folder = images(tmp_path / "imgs", count=3, size=32)
    (folder / "img00.png").rename(_latin1(folder, b"caf\xe9.png"))
    (folder / "img01.png").rename(_latin1(folder, b"bad\xff\xfe.png"))
    o = call(["calib", onnx_conv(tmp_path / "tiny.onnx"), "--images", folder, "--cache", tmp_path / "c.cache"])
    assert_clean(o, codes=(0,))
    assert "3 images from" in o.err
    o = edge_run("-c", base, "-q", "--telemetry", "none", "--source", folder, "--summary-json", tmp_path / "s.json")
    assert_clean(o, codes=(0,))
    assert json.loads((tmp_path / "s.json").read_text())["frames"] == 3


def test_video_names_that_are_not_utf8_are_one_line_not_a_crash(base: Path, tmp_path: Path, megamind: Path) -> None:
    """OpenCV opens videos by name (capture and writer): such a name is refused with one line, exit 2."""
    clip = _latin1(tmp_path, b"clip\xe9.avi")
    shutil.copy(megamind, clip)
    o = edge_run("-c", base, "-q", "--telemetry", "none", "--source", clip, "--frames", 2)
    assert_refused(o, "not UTF-8", before_work=False)
    video = _latin1(tmp_path, b"out\xff.avi")
    o = edge_run("-c", base, "-q", "--telemetry", "none", "--frames", 2, "--video", video)
    assert_refused(o, "not UTF-8", before_work=False)
    assert not video.exists()


def test_a_result_line_naming_a_non_utf8_file_prints_under_a_strict_utf8_stdout(tmp_path: Path) -> None:
    """An attack on edge calib: with PYTHONIOENCODING=utf-8 the closing lines raised UnicodeEncodeError after the
    files were written (exit 1, "a bug in edge"). The name now prints with its odd byte escaped."""
    cache = _latin1(tmp_path, b"c\xff.cache")
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    o = edge("calib", onnx_conv(tmp_path / "tiny.onnx"), "--images", images(tmp_path / "imgs"), "--cache", cache, env=env)
    assert_clean(o, codes=(0,))
    assert cache.is_file() and "c\\udcff.cache" in o.out


def test_a_model_input_of_100000_pixels_a_side_is_refused_before_a_frame_is_made(base: Path, tmp_path: Path) -> None:
    """An attack on edge calib: a model declaring a 1x3x100000x100000 input ended in OpenCV's "Failed to allocate
    30000000000 bytes" as "unexpected error" (exit 1). input.size caps a side at 16384; the model's own size now too."""
    model = onnx_conv(tmp_path / "huge.onnx", shape=(1, 3, 100000, 100000))
    o = call(["calib", model, "--images", images(tmp_path / "imgs"), "--cache", tmp_path / "c.cache"], address_space=2 * GiB)
    assert_refused(o, "16384", "'input'")
    o = edge_run(
        "-c",
        base,
        "--set",
        f"model.path={model}",
        "--set",
        "model.asset=null",
        "--set",
        "input.layout=auto",
        "--set",
        "input.size=null",
        "--check",
    )
    assert_refused(o, "16384")


def _jpeg_claiming(width: int, height: int) -> bytes:
    """A JPEG header whose start-of-frame states ``width`` x ``height`` (no image data: never meant to decode)."""
    sof = b"\xff\xc0\x00\x11\x08" + height.to_bytes(2, "big") + width.to_bytes(2, "big") + b"\x03" + b"\x01\x22\x00" * 3
    return b"\xff\xd8" + b"\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00" + sof + b"\xff\xd9"


@pytest.mark.parametrize(
    "name, data, problem",
    [
        ("z.bmp", b"\x00" * 500, "not a BMP"),
        ("h.bmp", b"BM" + bytes(16) + (30000).to_bytes(4, "little") * 2 + bytes(30), "30000x30000"),
        ("h.pgm", b"P5\n# made by hand\n100000 100000\n255\n" + bytes(10), "100000x100000"),
        ("h.jpg", _jpeg_claiming(9000, 9000), "9000x9000"),
        ("t.tif", b"not a tiff at all", "not a TIFF"),
        ("w.webp", b"RIFF\x00\x00\x00\x00WEBX", "not a WebP"),
    ],
)
def test_calibration_images_whose_header_is_wrong_or_too_large_are_dropped_before_the_pass(
    tmp_path: Path, name: str, data: bytes, problem: str
) -> None:
    """An attack on edge calib: such files passed the header check (PNG and JPEG only) and stopped the statistics
    pass when it reached them. Their headers now say what they are and how large."""
    from edge.runtime.sources import image_problem

    folder = images(tmp_path / "imgs", count=3)
    (folder / name).write_bytes(data)
    assert problem in (image_problem(folder / name) or "")
    o = call(
        ["calib", onnx_conv(tmp_path / "tiny.onnx"), "--images", folder, "--cache", tmp_path / "c.cache"], address_space=2 * GiB
    )
    assert_clean(o, codes=(0,))
    assert "1 of 4 files skipped" in o.err and problem in o.err


def _calib_tiny(tmp_path: Path, *extra: object):
    """edge calib on the tiny Conv model and four images, writing c.cache, with ``extra`` flags (in a forked child)."""
    return call(
        [
            "calib",
            onnx_conv(tmp_path / "tiny.onnx"),
            "--images",
            images(tmp_path / "imgs"),
            "--cache",
            tmp_path / "c.cache",
            *extra,
        ]
    )


def test_a_labelled_image_that_cannot_be_read_is_refused_before_the_pass(tmp_path: Path) -> None:
    """An attack on edge calib: --eval folders were not checked at all, so a bad file stopped the run after the whole
    statistics pass. Skipping it would change the score, so it is refused, named, before the work."""
    labelled = tmp_path / "eval"
    images(labelled / "a", count=2)
    images(labelled / "b", count=2)
    (labelled / "a" / "broken.png").write_text("hi")
    o = _calib_tiny(tmp_path, "--eval", labelled)
    assert_refused(o, "--eval", "broken.png")
    assert "statistics" not in o.err and not (tmp_path / "c.cache").exists()


def test_an_eval_folder_of_one_class_without_labels_is_refused(tmp_path: Path) -> None:
    """An attack on edge calib: it was scored as class 0 (FP32 top-1 0.00 %), exit 0."""
    labelled = tmp_path / "eval"
    images(labelled / "only", count=2)
    o = _calib_tiny(tmp_path, "--eval", labelled)
    assert_refused(o, "--eval", "task.labels")


def test_a_named_set_of_another_size_names_dataset_not_a_shape_flag_never_given(tmp_path: Path) -> None:
    """An attack on edge calib: `--dataset opencv_digits` on a 32x32 model blamed `--shape x=1x3x48x96`."""
    o = call(
        [
            "calib",
            onnx_conv(tmp_path / "tiny.onnx", shape=(1, 3, 32, 32)),
            "--dataset",
            "opencv_digits[:5]",
            "--cache",
            tmp_path / "c.cache",
        ]
    )
    line = assert_refused(o, "--dataset", "--images")
    assert "--shape" not in line


def test_a_model_onnx_runtime_refuses_is_the_only_line(tmp_path: Path) -> None:
    """An attack on edge calib: an op ONNX Runtime lacks was refused after the "N activation tensors" line (two lines
    on stderr); that line now comes once ONNX Runtime has taken the model."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Frob", ["r"], ["y"], domain="com.example")]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    onnx.save(model, str(tmp_path / "custom.onnx"))
    o = call(["calib", tmp_path / "custom.onnx", "--images", images(tmp_path / "imgs"), "--cache", tmp_path / "c.cache"])
    assert_refused(o, "ONNX Runtime cannot load the model", "Frob")


def test_images_a_fixed_batch_leaves_out_are_reported(tmp_path: Path) -> None:
    """An attack on edge calib: a batch-4 model on 5 images used 4 and said nothing."""
    model = onnx_conv(tmp_path / "b4.onnx", shape=(4, 3, 16, 16))
    o = call(["calib", model, "--images", images(tmp_path / "imgs", count=6), "--cache", tmp_path / "c.cache"])
    assert_clean(o, codes=(0,))
    assert "batch is fixed at 4: the last 2 image(s) fill no batch and are left out" in o.err
    o = call(["calib", model, "--images", images(tmp_path / "three", count=3), "--cache", tmp_path / "c.cache"])
    assert_refused(o, "fixed batch of 4", before_work=False)


def test_agreement_image_errors_name_their_flag(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    o = _calib_tiny(tmp_path, "--agreement-images", empty)
    line = assert_refused(o, "--agreement-images")
    assert "calibration images" not in line


# -- edge calib: checked before the statistics pass ------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags, flag",
    [
        (["--method", "percentile", "--percentile", "150"], "--percentile"),
        (["--method", "percentile", "--percentile", "0"], "--percentile"),
        (["--method", "percentile", "--percentile", "-5"], "--percentile"),
        (["--eval", "no_such_set[:10]"], "--eval"),
        (["--eval", "mnist_5k[:0]"], "--eval"),
        (["--keep-fp16", "no_such_node"], "--keep-fp16"),
        (["--max-images", "0"], "--max-images"),
        (["--memory-mb", "0"], "--memory-mb"),
    ],
)
def test_calib_flags_are_checked_before_the_statistics_pass(tmp_path: Path, flags: list, flag: str) -> None:
    """Review: --percentile, --eval and --keep-fp16 were checked only after the statistics pass."""
    model = onnx_conv(tmp_path / "tiny.onnx")
    imgs = images(tmp_path / "imgs")
    o = call(["calib", model, "--images", imgs, "--cache", tmp_path / "c.cache", *flags])
    assert_refused(o, flag, parser=command_parser("calib"))
    assert "statistics" not in o.err and not (tmp_path / "c.cache").exists(), "refused only after the work"


def test_calib_on_a_model_with_non_ascii_tensor_names(tmp_path: Path) -> None:
    """Review: UnicodeEncodeError after the whole run. ONNX names are UTF-8 and TensorRT matches cache lines to them
    byte for byte, so the run succeeds: a cache whose every tensor reads back under its own name, a Q/DQ model that
    keeps the input's name."""
    import onnx

    from edge.calib.cache import read_cache

    model = onnx_conv(tmp_path / "naïve.onnx", input_name="entrée", output_name="sortie→", hidden_name="caché")
    imgs = images(tmp_path / "imgs")
    o = call(["calib", model, "--images", imgs, "--cache", tmp_path / "c.cache", "--qdq", tmp_path / "q.onnx"])
    assert_clean(o)
    assert o.code == 0, o
    cache = read_cache(tmp_path / "c.cache")
    assert set(cache.scales) == {"entrée", "caché", "sortie→"}, cache.scales
    assert all(0 < v < 1 for v in cache.scales.values()), cache.scales
    assert [i.name for i in onnx.load(str(tmp_path / "q.onnx")).graph.input] == ["entrée"]


# -- --check catches what would fail on frame one (issue 14 item 7) ---------------------------------------------------

MISMATCHES = [
    ("input.dtype=uint8", "input.dtype"),  # a float model
    ("task.type=yolo", "task.type"),  # BlazeFace's outputs are not YOLO's
    ("task.type=classify", "task.type"),
    ("input.layout=nchw", "input.layout"),  # BlazeFace takes NHWC
    ("input.size=[128,128]", "input.size"),  # a fixed 256x256 input
    ("input.name=no_such_input", "input.name"),
    ("task.anchor_grids=[[16,2]]", "task.anchor_grids"),  # anchors for one of its two feature maps
    ("task.anchor_grids=[[16,2],[8,7]]", "task.anchor_grids"),
]


@pytest.mark.parametrize("override, key", MISMATCHES, ids=[m[0] for m in MISMATCHES])
def test_check_fails_on_a_config_that_does_not_fit_the_model(base: Path, override: str, key: str) -> None:
    """Review: `--check` passed a config whose dtype or task did not fit the model; the run then failed on frame 1."""
    o = run_main("-c", base, "--set", override, "--check")
    assert_refused(o, key, parser=command_parser("edge-run"))


@pytest.mark.parametrize("override, key", MISMATCHES, ids=[m[0] for m in MISMATCHES])
def test_a_run_refuses_a_config_that_does_not_fit_the_model_before_frame_one(
    base: Path, tmp_path: Path, override: str, key: str
) -> None:
    """The run makes the same checks as --check before it reads a frame: bad input, exit 2, one line, no summary."""
    o = run_main("-c", base, "-q", "--telemetry", "none", "--set", override, "--frames", 5, "--summary-json", tmp_path / "s.json")
    assert_refused(o, key)
    assert not (tmp_path / "s.json").exists()


def test_check_passes_the_demo_config(base: Path) -> None:
    """The other side of the mismatch tests: the demo's own config fits its model."""
    o = run_main("-c", base, "--check")
    assert_clean(o, codes=(0,))
    assert "check ok" in o.out


# -- edge deploy's remote end ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory):
    from ._deploytools import sshd_fixture

    yield from sshd_fixture(tmp_path_factory)


@pytest.mark.slow
@pytest.mark.parametrize(
    "python",
    ["true", "false", "echo", "cat", "/bin/sh -c 'echo {'", "python3 -c pass", "python3;touch PWNED", "$(touch PWNED)"],
)
def test_a_remote_python_that_is_not_python_is_one_line(sshd, tmp_path: Path, python: str) -> None:
    """Review: `edge deploy --remote-python true` was a JSONDecodeError traceback."""
    pwned = tmp_path / "pwned"  # the same ids in every pytest process (xdist compares them)
    python = python.replace("PWNED", str(pwned))
    engine = write_engine(tmp_path / "e", b"engine bytes")
    o = run(
        [str(Path(__file__).resolve().parents[1] / "scripts" / "deploy.sh"), sshd.host, *sshd.ssh_args()]
        + ["--name", "front", "--engine", str(engine), "--config", str(engine.parent / "front.yaml")]
        + ["--root", str(tmp_path / "device"), "--no-check", "--remote-python", python],
        env={"PYTHON": sys.executable},
        timeout=60,
    )
    assert not pwned.exists(), "a shell ran what --remote-python said"
    last = assert_failed_run(o, code=10)  # the connect step
    if python in ("true", "echo", "python3 -c pass"):  # it ran and said nothing edge understands: say which flag to fix
        assert "--remote-python" in last, o


def test_stdin_is_never_read(base: Path) -> None:
    """Commands read the files they are given, never a terminal: garbage on stdin changes nothing."""
    o = run([*entry("edge-run"), "-c", str(base), "--check"], stdin=b"\xff" * 1000)
    assert_clean(o, codes=(0,))
