"""Writers under faults (review hostile-inputs-2026-12, data loss 1, 3, 4, 6, 8; issue 14 items 1 and 8): a full disk,
a file-size limit, SIGKILL at any moment, a planted symlink. A good file from an earlier run survives byte for byte
(or is replaced by a complete new one), a failed write exits non-zero with one line, and no temp file stays behind:
temps a SIGKILL left are removed by the next run that writes the same output.

Faults are real: a tmpfs of a few MB (mounted as root), RLIMIT_FSIZE in the child, SIGKILL from outside at seeded
random moments, and SIGKILL injected by strace at the K-th rename(2) of a run, which walks every step of a commit.
Builds are real TensorRT-RTX builds (``--target-cc 8.6``), runs are the BlazeFace demo on Megamind.avi.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import stat
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from ._hostile import (
    B,
    Child,
    Outcome,
    assert_failed_run,
    assert_no_traceback,
    assert_unchanged,
    demo_config,
    edge,
    edge_build,
    entry,
    fill,
    have,
    images,
    limits,
    onnx_conv,
    require_or_skip,
    run,
    snapshot,
    strict_json_loads,
    temps,
    tmpfs,
)

pytest.importorskip("cv2")
SEED = 14  # the random kill moments are the same on every run of the suite


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, demo_model: Path, megamind: Path) -> Path:
    return demo_config(tmp_path_factory.mktemp("faults"))


def _video_frames(path: Path) -> int:
    import cv2

    cap = cv2.VideoCapture(str(path))
    try:
        return int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) if cap.isOpened() else -1
    finally:
        cap.release()


def _assert_failed_and_kept(o: Outcome, before: Dict[Path, Optional[bytes]], folder: Path) -> None:
    """A write that failed: one line and exit 1 or 2 (never 0), the previous files byte for byte, no temp left."""
    assert_no_traceback(o)
    assert o.code in (1, 2), f"a failed write must fail the run{o}"
    assert_failed_run(o, code=o.code)
    assert_unchanged(before, o)
    assert not temps(folder), temps(folder)


def _outputs(folder: Path) -> List[Any]:
    """edge-run's three output flags, each file in ``folder``."""
    return ["--results", folder / "r.jsonl", "--video", folder / "v.avi", "--summary-json", folder / "s.json"]


def _good_outputs(base: Path, folder: Path, frames: int = 40, telemetry: bool = False) -> Dict[Path, Optional[bytes]]:
    """A first, successful run's results, video and summary in ``folder`` (and telemetry files with ``telemetry``)."""
    extra = _replay(base, folder) if telemetry else []
    o = B(
        base,
        "--frames",
        frames,
        *_outputs(folder),
        *extra,
    )
    assert o.code == 0, o
    return snapshot(*[p for p in folder.iterdir() if p.is_file() and p.name != "filler"])


def _replay(base: Path, folder: Path) -> List[str]:
    from tests.test_telemetry_tegrastats import REAL_LINES

    log = base.parent / "tegra.log"
    if not log.exists():
        log.write_text("\n".join(REAL_LINES * 20) + "\n")
    return ["--telemetry", "replay", "--set", f"telemetry.replay_path={log}", "--set", f"telemetry.dir={folder}"]


# -- a full disk and a file-size limit ---------------------------------------------------------------------------------


def test_video_on_a_full_disk_keeps_the_previous_video_and_exits_1(base: Path, tmp_path: Path) -> None:
    """Review data loss 1: a 2 MiB tmpfs turned a good video into a 28 KB one, "video: 270 frames", exit 0."""
    with tmpfs(tmp_path / "disk", size="8m") as disk:
        before = _good_outputs(base, disk)
        video = snapshot(disk / "v.avi")
        fill(disk, leave=400_000)
        o = B(base, "--frames", 40, "--video", disk / "v.avi")
        last = assert_failed_run(o, "v.avi")
        assert_unchanged(video, o)
        assert _video_frames(disk / "v.avi") == 40
        assert not temps(disk), temps(disk)
        assert "full" in last.lower() or "space" in last.lower(), o
        # With the results on the same full disk too (review: exit 1, yet the video was still replaced).
        o = B(base, "--frames", 40, "--video", disk / "v.avi", "--results", disk / "r.jsonl")
        assert_failed_run(o)
        assert_unchanged({k: v for k, v in before.items() if k.name in ("v.avi", "r.jsonl")}, o)
        assert not temps(disk), temps(disk)


def test_video_over_the_file_size_limit_keeps_the_previous_video(base: Path, tmp_path: Path) -> None:
    """Review data loss 1 with `ulimit -f 100`: the good 517 KB video became 100 KB, exit 0."""
    before = _good_outputs(base, tmp_path)
    o = B(base, "--frames", 40, "--video", tmp_path / "v.avi", preexec=limits(fsize=100 * 1024))
    assert_failed_run(o, "v.avi")
    assert_unchanged({tmp_path / "v.avi": before[tmp_path / "v.avi"]}, o)
    assert not temps(tmp_path), temps(tmp_path)


@pytest.mark.parametrize("output", ["results", "summary", "telemetry"])
def test_other_run_outputs_on_a_full_disk_keep_the_previous_file(base: Path, tmp_path: Path, output: str) -> None:
    """Review data loss 6: `--summary-json` into a full target was a traceback after the whole run, a 0-byte temp left."""
    with tmpfs(tmp_path / "disk", size="4m") as disk:
        before = _good_outputs(base, disk, frames=20, telemetry=True)
        assert (disk / "telemetry.jsonl").is_file()
        flags = {
            "results": ["--results", disk / "r.jsonl"],
            "summary": ["--summary-json", disk / "s.json"],
            "telemetry": _replay(base, disk),
        }[output]
        fill(disk, leave=0)
        o = B(base, "--frames", 20, *flags)
        _assert_failed_and_kept(o, before, disk)


def test_build_over_the_file_size_limit_keeps_the_previous_engine_pair(tmp_path: Path) -> None:
    require_or_skip(_have_trt_rtx(), "tensorrt-rtx is not installed (pip install tensorrt-rtx-cu13)")
    model = _demo_copy(tmp_path)
    o = edge_build(model, "-o", tmp_path / "m.engine", "--target-cc", "8.6")
    assert o.code == 0, o
    before = snapshot(*tmp_path.glob("m.engine*"))
    o = edge_build(
        model, "-o", tmp_path / "m.engine", "--target-cc", "8.6", "--log", tmp_path / "b.log", preexec=limits(fsize=200_000)
    )
    _assert_failed_and_kept(o, before, tmp_path)


def test_calib_outputs_over_the_file_size_limit_keep_the_previous_files(tmp_path: Path) -> None:
    model = onnx_conv(tmp_path / "tiny.onnx")
    imgs = images(tmp_path / "imgs")
    args = ["calib", model, "--images", imgs, "--cache", tmp_path / "c.cache", "--qdq", tmp_path / "q.onnx"]
    assert edge(*args).code == 0
    before = snapshot(tmp_path / "c.cache", tmp_path / "q.onnx")
    o = edge(*args, preexec=limits(fsize=50))
    _assert_failed_and_kept(o, before, tmp_path)


def _conv_fc(path: Path, equalizable: bool = False) -> Path:
    """Conv + Flatten + MatMul with a 1024x256 weight: its Q/DQ model (~260 KB) is far larger than the cache and
    sidecar (a few KB), so a file-size limit between the two fails the Q/DQ model alone. ``equalizable`` puts a second
    convolution after the ReLU and spreads the first one's channels: edge calib then also writes the equalized model
    (~1 MB, the FC weight included) beside the cache."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    spread = np.array([0.1, 1, 10, 100] if equalizable else [1, 1, 1, 1])[:, None, None, None]
    inits = [
        numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * spread).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal((1024, 256)).astype(np.float32) * 0.05, "fc"),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("MatMul", ["f", "fc"], ["output"]),
    ]
    if equalizable:
        inits.append(numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), "w2"))
        nodes[2:3] = [helper.make_node("Conv", ["r", "w2"], ["c2"]), helper.make_node("Flatten", ["c2"], ["f"])]
    graph = helper.make_graph(
        nodes,
        "conv_fc",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 256])],
        inits,
    )
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    return path


@pytest.mark.parametrize("qdq_folder", ["same", "other"])
def test_calib_keeps_the_previous_cache_and_sidecar_when_only_the_qdq_model_cannot_be_written(
    tmp_path: Path, qdq_folder: str
) -> None:
    """An attack on edge calib: the new cache and sidecar were committed before the Q/DQ model was written, so a
    file-size limit (or a full disk, or a kill) there left a new cache beside the old Q/DQ model, and the error said
    "the previous file, if any, is unchanged". Now nothing is replaced unless all three are complete."""
    model = _conv_fc(tmp_path / "fc.onnx")
    imgs = images(tmp_path / "imgs")
    out = tmp_path / ("q" if qdq_folder == "other" else "")
    out.mkdir(exist_ok=True)
    args = ["calib", model, "--images", imgs, "--cache", tmp_path / "c.cache", "--qdq", out / "q.onnx"]
    assert edge(*args, "--method", "minmax").code == 0
    sizes = {p.name: p.stat().st_size for p in (tmp_path / "c.cache", tmp_path / "c.cache.json", out / "q.onnx")}
    assert max(sizes["c.cache"], sizes["c.cache.json"]) < 50_000 < sizes["q.onnx"], sizes
    before = snapshot(tmp_path / "c.cache", tmp_path / "c.cache.json", out / "q.onnx")
    o = edge(*args, "--method", "percentile", preexec=limits(fsize=50_000))  # another method: other scales
    assert_no_traceback(o)
    assert o.code == 2 and "error: cannot write" in o.err.splitlines()[-1] and "q.onnx" in o.err.splitlines()[-1], o
    assert {p: p.read_bytes() for p in before} == before
    assert not temps(tmp_path) and not temps(out)


@pytest.mark.parametrize("folder", ["same", "other"])
def test_calib_keeps_the_previous_set_when_only_the_equalized_model_cannot_be_written(tmp_path: Path, folder: str) -> None:
    """The equalized model belongs to the cache (its scales fit only those weights): a file-size limit while it is
    written must leave the earlier cache, sidecar and equalized model as they were."""
    model = _conv_fc(tmp_path / "fc.onnx", equalizable=True)
    imgs = images(tmp_path / "imgs")
    out = tmp_path / ("e" if folder == "other" else "")
    out.mkdir(exist_ok=True)
    args = [
        "calib",
        model,
        "--images",
        imgs,
        "--cache",
        tmp_path / "c.cache",
        "--equalized",
        out / "fc.eq.onnx",
        "--equalize",
        "1",
    ]
    assert edge(*args, "--method", "minmax").code == 0
    files = (tmp_path / "c.cache", tmp_path / "c.cache.json", out / "fc.eq.onnx")
    sizes = {p.name: p.stat().st_size for p in files}
    assert max(sizes["c.cache"], sizes["c.cache.json"]) < 50_000 < sizes["fc.eq.onnx"], sizes
    before = snapshot(*files)
    o = edge(*args, "--method", "percentile", preexec=limits(fsize=50_000))
    assert_no_traceback(o)
    assert o.code == 2 and "error: cannot write" in o.err.splitlines()[-1] and "fc.eq.onnx" in o.err.splitlines()[-1], o
    assert {p: p.read_bytes() for p in before} == before
    assert not temps(tmp_path) and not temps(out)


def test_calib_killed_at_each_rename_keeps_the_cache_with_its_own_equalized_model(tmp_path: Path) -> None:
    """An attack on edge calib's new output: SIGKILL as each rename(2) of the commit starts: the cache, its sidecar and the equalized model are all the
    earlier run's or all this run's (the sidecar's model_sha256 names the equalized model beside it)."""
    from edge.outputs import settle

    model = _conv_fc(tmp_path / "fc.onnx", equalizable=True)
    imgs = images(tmp_path / "imgs")
    args = ["calib", str(model), "--images", str(imgs), "--cache", str(tmp_path / "c.cache")]
    assert edge(*args, "--equalize", "0.5").code == 0
    eq = tmp_path / "c.equalized.onnx"
    n = _renames([*entry("edge"), *args, "--equalize", "1"])
    assert n >= 3
    for k in range(1, n + 1):  # another strength each time: other weights, so a mixed set would show
        o = _strace_kill_at([*entry("edge"), *args, "--equalize", "1" if k % 2 else "0.5"], k)
        assert o.code < 0 or o.code == 137, f"rename {k}: the kill did not land{o}"
        settle(tmp_path / "c.cache")  # what edge-build does before it reads the cache
        side = json.loads((tmp_path / "c.cache.json").read_text())
        assert side["model_sha256"] == hashlib.sha256(eq.read_bytes()).hexdigest(), k


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_report_printed_to_a_full_disk_is_one_line_not_a_bug(tmp_path: Path) -> None:
    """An attack on edge dla: stdout onto /dev/full (or past ulimit -f) said "unexpected OSError ... a bug in edge"."""
    import subprocess

    model = onnx_conv(tmp_path / "tiny.onnx")
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [*entry("edge"), "dla", str(model), "--target", "orin"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120
        )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0] and "bug" not in lines[0], proc.stderr


def test_dla_outputs_on_a_full_disk_keep_the_previous_files(tmp_path: Path) -> None:
    model = onnx_conv(tmp_path / "tiny.onnx")
    with tmpfs(tmp_path / "disk", size="1m") as disk:
        args = ["dla", model, "--target", "orin", "--json", disk / "p.json", "--fix", disk / "f.onnx"]
        assert edge(*args).code == 0
        before = snapshot(disk / "p.json", disk / "f.onnx")
        fill(disk, leave=0)
        o = edge(*args)
        _assert_failed_and_kept(o, before, disk)


# -- SIGKILL at every rename and at random moments -----------------------------------------------------------------


def _strace_kill_at(argv: List[str], k: int, **kw: object):
    """``argv`` under strace, SIGKILLed as it enters its k-th rename(2): every step of every commit, one at a time."""
    require_or_skip(have("strace"), "strace is not installed (apt-get install -y strace)")
    calls = "rename,renameat,renameat2"
    return run(
        ["strace", "-f", "-qq", "-o", "/dev/null", f"-etrace={calls}", f"-einject={calls}:signal=KILL:when={k}", *argv], **kw
    )


def _renames(argv: List[str], **kw: object) -> int:
    """How many rename(2) calls a complete run of ``argv`` makes."""
    require_or_skip(have("strace"), "strace is not installed (apt-get install -y strace)")
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"renames-{os.getpid()}-{time.monotonic_ns()}.txt"
    o = run(["strace", "-f", "-qq", "-o", str(log), "-etrace=rename,renameat,renameat2", *argv], **kw)
    assert o.code == 0, o
    count = len([line for line in log.read_text().splitlines() if "rename" in line and "= 0" in line])
    log.unlink()
    return count


def test_sigterm_at_each_rename_of_the_outputs_leaves_whole_files_and_no_temp(tmp_path: Path) -> None:
    """An attack on edge calib: SIGTERM while a temp existed left `.c.PID.*.partial.cache` (its default action killed
    the process). SIGTERM is now raised in the main thread like Ctrl-C. strace delivers it as each rename(2) of the
    commit starts: the run ends 143 with one line, each file is the earlier one or a whole new one, no temp is left."""
    require_or_skip(have("strace"), "strace is not installed (apt-get install -y strace)")
    model = onnx_conv(tmp_path / "tiny.onnx")
    imgs = images(tmp_path / "imgs")
    args = ["calib", str(model), "--images", str(imgs), "--cache", str(tmp_path / "c.cache"), "--qdq", str(tmp_path / "q.onnx")]
    assert edge(*args, "--method", "minmax").code == 0
    outputs = (tmp_path / "c.cache", tmp_path / "c.cache.json", tmp_path / "q.onnx")
    n = _renames([*entry("edge"), *args])
    for k in range(1, n + 1):
        before = snapshot(*outputs)
        calls = "rename,renameat,renameat2"
        o = run(
            [
                "strace",
                "-f",
                "-qq",
                "-o",
                "/dev/null",
                f"-etrace={calls}",
                f"-einject={calls}:signal=TERM:when={k}",
                *entry("edge"),
                *args,
            ]
        )
        assert o.code == 143 and o.err.strip().splitlines()[-1] == "edge calib: terminated", o
        assert not temps(tmp_path), (k, temps(tmp_path))
        for path in outputs:
            assert path.read_bytes() == before[path] or path.stat().st_size > 0, (k, path)
        from edge.calib.cache import CalibrationCache

        CalibrationCache.from_bytes((tmp_path / "c.cache").read_bytes())


def _check_run_outputs(folder: Path, before: Dict[Path, Optional[bytes]], frames: int) -> None:
    """Each output is the earlier run's bytes or a complete file of this run (never a mix inside one file)."""
    for path, old in before.items():
        now = path.read_bytes() if path.is_file() else None
        assert now is not None, f"{path} was lost"
        if now == old:
            continue
        if path.suffix == ".jsonl":
            lines = now.decode().splitlines()
            if path.name == "r.jsonl":
                assert len(lines) == frames, f"{path}: {len(lines)} lines, neither the old file nor a complete new one"
            for line in lines:
                strict_json_loads(line)
        elif path.suffix == ".json":
            strict_json_loads(now.decode())
        elif path.suffix == ".avi":
            assert _video_frames(path) == frames, f"{path}: not a complete video of this run"


@pytest.mark.slow
def test_edge_run_killed_at_each_rename_keeps_old_or_new_outputs_and_the_next_run_cleans_up(base: Path, tmp_path: Path) -> None:
    before = _good_outputs(base, tmp_path, frames=20, telemetry=True)

    def argv(folder: Path) -> List[str]:
        outs = _outputs(folder)
        return [*entry("edge-run"), *map(str, ["-c", base, "-q", "--frames", 30, *outs, *_replay(base, folder)])]

    scratch = tmp_path / "count"
    scratch.mkdir()
    n = _renames(argv(scratch))
    assert n >= 4, f"expected a rename per output, saw {n}"
    for k in range(1, n + 1):
        o = _strace_kill_at(argv(tmp_path), k)
        assert o.code < 0 or o.code == 137, f"rename {k}: the kill did not land{o}"
        _check_run_outputs(tmp_path, before, frames=30)
    o = B(
        base,
        "--frames",
        20,
        *_outputs(tmp_path),
        *_replay(base, tmp_path),
    )
    assert o.code == 0, o
    assert not temps(tmp_path), f"the next run left the killed runs' temps: {temps(tmp_path)}"


@pytest.mark.slow
def test_edge_run_killed_at_random_moments_keeps_old_or_new_outputs(base: Path, tmp_path: Path) -> None:
    before = _good_outputs(base, tmp_path, frames=20)
    rng = random.Random(SEED)
    for delay in sorted(rng.uniform(0.3, 4.0) for _ in range(3)):
        child = Child(
            [
                *entry("edge-run"),
                "-c",
                str(base),
                "-q",
                "--telemetry",
                "none",
                "--frames",
                "30",
                *map(str, _outputs(tmp_path)),
            ]
        )
        time.sleep(delay)
        child.signal(9)
        child.finish(60)
        _check_run_outputs(tmp_path, before, frames=30)
    o = B(
        base,
        "--frames",
        20,
        *_outputs(tmp_path),
    )
    assert o.code == 0, o
    assert not temps(tmp_path), temps(tmp_path)


def _have_trt_rtx() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorrt_rtx") is not None or importlib.util.find_spec("tensorrt") is not None


def _demo_copy(folder: Path) -> Path:
    from edge import assets

    model = folder / "m.onnx"
    shutil.copy(assets.resolve("blazeface-back-256", quiet=True), model)
    return model


def _pair_is_whole(engine: Path) -> str:
    """The engine and its manifest as edge-run reads them (a half-done commit is finished first): they must agree."""
    from edge.manifest import read_manifest

    manifest = read_manifest(engine)
    data = engine.read_bytes()
    assert manifest["engine"]["size"] == len(data), "manifest and engine sizes differ: a mixed pair"
    assert manifest["engine"]["sha256"] == hashlib.sha256(data).hexdigest(), "manifest and engine differ: a mixed pair"
    report = engine.with_name(engine.name + ".layers.json")
    strict_json_loads(report.read_text())
    return manifest["engine"]["sha256"]


@pytest.mark.slow
def test_edge_build_killed_at_each_rename_and_at_random_leaves_a_whole_pair(tmp_path: Path) -> None:
    """Review data loss 3: the engine was renamed into place before its manifest; a kill between left a mix."""
    require_or_skip(_have_trt_rtx(), "tensorrt-rtx is not installed (pip install tensorrt-rtx-cu13)")
    tiny = onnx_conv(tmp_path / "tiny.onnx")
    model = _demo_copy(tmp_path)
    engine = tmp_path / "m.engine"
    assert edge_build(tiny, "-o", engine, "--target-cc", "8.6").code == 0  # the previous good pair: another model
    old = _pair_is_whole(engine)
    argv = [*entry("edge-build"), str(model), "-o", str(engine), "--target-cc", "8.6"]
    scratch = tmp_path / "count"
    scratch.mkdir()
    n = _renames([*argv[:-3], str(scratch / "m.engine"), *argv[-2:]])
    assert n >= 3, f"engine, manifest and report: at least 3 renames, saw {n}"
    seen = {old}
    for k in range(1, n + 1):
        o = _strace_kill_at(argv, k)
        assert o.code < 0 or o.code == 137, f"rename {k}: the kill did not land{o}"
        seen.add(_pair_is_whole(engine))
    rng = random.Random(SEED)
    for delay in sorted(rng.uniform(0.5, 6.0) for _ in range(2)):
        child = Child(argv)
        time.sleep(delay)
        child.signal(9)
        child.finish(60)
        seen.add(_pair_is_whole(engine))
    o = edge_build(model, "-o", engine, "--target-cc", "8.6")
    assert o.code == 0, o
    _pair_is_whole(engine)
    assert not temps(tmp_path) and not list(tmp_path.glob(".*.commit")), temps(tmp_path)


@pytest.mark.slow
def test_edge_calib_killed_at_each_rename_keeps_old_or_new_files(tmp_path: Path) -> None:
    model = onnx_conv(tmp_path / "tiny.onnx")
    imgs = images(tmp_path / "imgs")
    args = ["calib", str(model), "--images", str(imgs), "--cache", str(tmp_path / "c.cache"), "--qdq", str(tmp_path / "q.onnx")]
    assert edge(*args, "--method", "minmax").code == 0
    before = snapshot(tmp_path / "c.cache", tmp_path / "q.onnx")
    argv = [*entry("edge"), *args]
    n = _renames([*entry("edge"), *args[:4], "--cache", str(tmp_path / "n.cache"), "--qdq", str(tmp_path / "n.onnx")])
    for k in range(1, n + 1):
        o = _strace_kill_at(argv, k)
        assert o.code < 0 or o.code == 137, o
        for path, data in before.items():
            now = path.read_bytes()
            assert now == data or len(now) > 0, f"{path}: lost"
            if path.suffix == ".cache":
                from edge.calib.cache import CalibrationCache

                CalibrationCache.from_bytes(now)
    for p in (tmp_path / "n.cache", tmp_path / "n.onnx"):
        p.unlink(missing_ok=True)
    assert edge(*args).code == 0
    assert not temps(tmp_path), temps(tmp_path)


# -- planted symlinks ----------------------------------------------------------------------------------------------


def _predictable_names(folder: Path, target: str, pid: int) -> List[Path]:
    """Temp names an attacker can guess from a pid: the ones the review found, and the same with a suffix."""
    stem, suffix = os.path.splitext(target)
    return [
        folder / f".{target}.{pid}.tmp",
        folder / f".{stem}.{pid}.partial{suffix}",
        folder / f".{target}.{pid}.partial",
        folder / f".{stem}.{pid}.tmp{suffix}",
    ]


def test_symlinks_planted_at_guessable_temp_names_are_never_followed(base: Path, tmp_path: Path) -> None:
    """Review data loss 4 / security 2: a link at `.s.json.<pid>.tmp` made the run overwrite the link's target."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    outputs = ["s.json", "r.jsonl", "v.avi"]
    child = Child(
        [
            *entry("edge-run"),
            "-c",
            str(base),
            "-q",
            "--telemetry",
            "none",
            "--frames",
            "10",
            "--summary-json",
            str(shared / "s.json"),
            "--results",
            str(shared / "r.jsonl"),
            "--video",
            str(shared / "v.avi"),
        ]
    )
    for name in outputs:
        for link in _predictable_names(shared, name, child.pid):
            link.symlink_to(victim)
    o = child.finish(120)
    assert o.code == 0, o
    assert victim.read_text() == "precious\n", f"a planted link was followed{o}"
    for name in outputs:
        p = shared / name
        assert p.is_file() and not p.is_symlink() and p.stat().st_size > 0, name


def test_a_symlink_planted_at_the_engine_temp_is_never_followed(tmp_path: Path) -> None:
    require_or_skip(_have_trt_rtx(), "tensorrt-rtx is not installed (pip install tensorrt-rtx-cu13)")
    model = onnx_conv(tmp_path / "tiny.onnx")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    child = Child([*entry("edge-build"), str(model), "-o", str(tmp_path / "t.engine"), "--target-cc", "8.6"])
    for name in ("t.engine", "t.engine.json", "t.engine.layers.json"):
        for link in _predictable_names(tmp_path, name, child.pid):
            link.symlink_to(victim)
    o = child.finish(120)
    assert o.code == 0, o
    assert victim.read_text() == "precious\n", f"a planted link was followed{o}"
    _pair_is_whole(tmp_path / "t.engine")


# -- one mode for every output -------------------------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o027])  # not the usual 022: a mode fixed in the code (0644, 0600) shows
def test_every_output_gets_the_documented_mode(base: Path, tmp_path: Path, umask: int) -> None:
    """Review: output files were 0600 in one place and 0644 in another. edge.outputs documents: what open() gives
    under the process umask (0666 & ~umask) for outputs; only files that may hold credentials are private."""
    out = tmp_path / "out"
    out.mkdir()
    model = onnx_conv(tmp_path / "tiny.onnx")
    imgs = images(tmp_path / "imgs")
    mask = limits(umask=umask)
    o = B(
        base,
        "--frames",
        5,
        *_outputs(out),
        *_replay(base, out),
        preexec=mask,
    )
    assert o.code == 0, o
    o = edge("calib", model, "--images", imgs, "--cache", out / "c.cache", "--qdq", out / "q.onnx", preexec=mask)
    assert o.code == 0, o
    o = edge("dla", model, "--target", "orin", "--json", out / "p.json", "--fix", out / "f.onnx", preexec=mask)
    assert o.code == 0, o
    if _have_trt_rtx():
        o = edge_build(model, "-o", out / "t.engine", "--target-cc", "8.6", "--log", out / "b.log", preexec=mask)
        assert o.code == 0, o
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir() if p.is_file()}
    want = 0o666 & ~umask
    wrong = {name: oct(m) for name, m in modes.items() if m != want}
    assert not wrong, f"expected {oct(want)} for every output under umask {oct(umask)}, got {wrong}"
    assert {"r.jsonl", "v.avi", "s.json", "telemetry.jsonl", "c.cache", "q.onnx", "p.json", "f.onnx"} <= set(modes)


def test_temps_of_a_live_writer_are_left_alone(tmp_path: Path) -> None:
    """The cleanup of temps a killed writer left must not remove a temp another process is still writing."""
    from edge.outputs import write_atomic

    other = Child(["sleep", "30"])
    try:
        live = tmp_path / f".out.{other.pid}.abcdefgh.partial.json"
        live.write_text("{}")
        dead_pid = _dead_pid()
        dead = tmp_path / f".out.{dead_pid}.abcdefgh.partial.json"
        dead.write_text("{}")
        write_atomic(tmp_path / "out.json", "{}\n")
        assert live.exists(), "a live writer's temp was removed"
        assert not dead.exists(), "a dead writer's temp was left"
    finally:
        other.signal(9)
        other.finish(5)


def _dead_pid() -> int:
    for pid in range(os.getpid() + 50000, 10, -7):
        if pid < (1 << 22) and not Path(f"/proc/{pid}").exists():
            return pid
    raise AssertionError("no free pid")


def test_json_outputs_are_strict_json(base: Path, tmp_path: Path) -> None:
    """Review: NaN written into JSONL/JSON. Whatever a run writes parses with a strict JSON parser."""
    o = B(base, "--frames", 5, "--results", tmp_path / "r.jsonl", "--summary-json", tmp_path / "s.json", *_replay(base, tmp_path))
    assert o.code == 0, o
    for path in tmp_path.iterdir():
        if path.suffix == ".jsonl":
            for line in path.read_text().splitlines():
                strict_json_loads(line)
        elif path.suffix == ".json":
            strict_json_loads(path.read_text())
    assert json.loads((tmp_path / "s.json").read_text())["frames"] == 5
    assert re.search(r"\bNaN\b|\bInfinity\b", (tmp_path / "s.json").read_text()) is None


def test_sigterm_during_the_equalize_pass_ends_the_run_with_one_line_and_writes_nothing(tmp_path: Path) -> None:
    """The equalization's range pass is a wait of its own (ONNX Runtime over every calibration image): a stop signal
    sent once its opening line is out ends the run 143 with one line, and no cache, sidecar, model or temp appears."""
    import signal
    import subprocess

    imgs = images(tmp_path / "imgs", count=200, size=256)
    argv = [
        *entry("edge"),
        "calib",
        "--config",
        str(demo_config(tmp_path / "cfg")),
        "--images",
        str(imgs),
        "--cache",
        str(tmp_path / "c.cache"),
    ]
    proc = subprocess.Popen([*argv, "--equalize", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stderr.readline()  # printed when the range pass's ONNX Runtime took the model
    assert "activation tensors" in first, first
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and err.strip().splitlines() == ["edge calib: terminated"], (proc.returncode, err)
    assert "equalized:" not in err  # it was still measuring
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg", "imgs"]
