"""Outputs versus inputs (review hostile-inputs-2026-12, data loss 2, 5, 6, 7; issue 14 item 2): an output that is
one of the inputs in any spelling, that two flags share, or that cannot be written (missing folder, a directory, a
read-only place) is refused with exit 2 and one line naming the flag, BEFORE any work, and nothing is touched.

Every command runs in this process through ``edge.cli`` on small real inputs (the BlazeFace demo model and clip,
a two-node ONNX, four PNGs), so a case the code does not yet refuse costs a short run, not a long one.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import pytest

from edge import cli

from ._hostile import (
    assert_refused,
    assert_unchanged,
    call,
    command_parser,
    images,
    onnx_conv,
    snapshot,
    temps,
    tmpfs,
)

pytest.importorskip("onnx")
pytest.importorskip("cv2")


REPLAY = ["--telemetry", "replay", "--set", "telemetry.replay_path={w}/tegra.log"]  # the real tegrastats lines


@pytest.fixture
def work(tmp_path: Path, demo_model: Path, megamind: Path) -> Path:
    """model.onnx (BlazeFace), clip.avi (Megamind), run.yaml, tiny.onnx, build.yaml, calib.yaml, imgs/: plain copies."""
    shutil.copy(demo_model, tmp_path / "model.onnx")
    shutil.copy(megamind, tmp_path / "clip.avi")
    (tmp_path / "run.yaml").write_text(
        "model:\n  path: model.onnx\ninput:\n  size: [256, 256]\n  layout: nhwc\n  scale: 0.0078431373\n  offset: -1.0\n"
        "task:\n  type: blazeface\n  labels: labels.txt\nsource:\n  uri: clip.avi\n"
    )
    (tmp_path / "labels.txt").write_text("face\n")
    onnx_conv(tmp_path / "tiny.onnx")
    (tmp_path / "build.yaml").write_text("model:\n  path: tiny.onnx\n")
    (tmp_path / "calib.yaml").write_text("model:\n  path: tiny.onnx\ninput:\n  layout: nchw\n")  # fits tiny.onnx
    images(tmp_path / "imgs")
    (tmp_path / "sub").mkdir()
    return tmp_path


def _all_files(folder: Path) -> List[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]


# -- an output that is an input --------------------------------------------------------------------------------------

# (id, command, argv with {out} where the output goes, the flag, the input it collides with)
COLLISIONS: List[Tuple[str, str, List[str], str, str]] = [
    ("build --log = model", "edge-build", ["{w}/tiny.onnx", "-o", "{w}/tiny.engine", "--log", "{out}"], "--log", "tiny.onnx"),
    ("build -o = model", "edge-build", ["{w}/tiny.onnx", "-o", "{out}"], "-o", "tiny.onnx"),
    (
        "build --log = config",
        "edge-build",
        ["-c", "{w}/build.yaml", "-o", "{w}/t.engine", "--log", "{out}"],
        "--log",
        "build.yaml",
    ),
    ("build -o = config", "edge-build", ["-c", "{w}/build.yaml", "-o", "{out}"], "-o", "build.yaml"),
    (
        "build --timing-cache = model",
        "edge-build",
        ["{w}/tiny.onnx", "-o", "{w}/t.engine", "--timing-cache", "{out}"],
        "--timing-cache",
        "tiny.onnx",
    ),
    ("calib --cache = model", "calib", ["{w}/tiny.onnx", "--images", "{w}/imgs", "--cache", "{out}"], "--cache", "tiny.onnx"),
    (
        "calib --qdq = model",
        "calib",
        ["{w}/tiny.onnx", "--images", "{w}/imgs", "--cache", "{w}/c.cache", "--qdq", "{out}"],
        "--qdq",
        "tiny.onnx",
    ),
    (
        "calib --cache = image",
        "calib",
        ["{w}/tiny.onnx", "--images", "{w}/imgs", "--cache", "{out}"],
        "--cache",
        "imgs/img00.png",
    ),
    (
        "calib --cache = config",
        "calib",
        ["{w}/tiny.onnx", "--images", "{w}/imgs", "-c", "{w}/calib.yaml", "--cache", "{out}"],
        "--cache",
        "calib.yaml",
    ),
    ("dla --json = model", "dla", ["{w}/tiny.onnx", "--target", "orin", "--json", "{out}"], "--json", "tiny.onnx"),
    ("dla --fix = model", "dla", ["{w}/tiny.onnx", "--target", "orin", "--fix", "{out}"], "--fix", "tiny.onnx"),
    ("run --video = source", "edge-run", ["-c", "{w}/run.yaml", "--frames", "5", "--video", "{out}"], "--video", "clip.avi"),
    (
        "run --results = model",
        "edge-run",
        ["-c", "{w}/run.yaml", "--frames", "5", "--results", "{out}"],
        "--results",
        "model.onnx",
    ),
    (
        "run --summary-json = config",
        "edge-run",
        ["-c", "{w}/run.yaml", "--frames", "5", "--summary-json", "{out}"],
        "--summary-json",
        "run.yaml",
    ),
    (
        "run --results = labels",
        "edge-run",
        ["-c", "{w}/run.yaml", "--frames", "5", "--results", "{out}"],
        "--results",
        "labels.txt",
    ),
    (
        "run --summary-json = source",
        "edge-run",
        ["-c", "{w}/run.yaml", "--frames", "5", "--summary-json", "{out}"],
        "--summary-json",
        "clip.avi",
    ),
]


def _spell(work: Path, target: Path, spelling: str) -> Path:
    """``target`` named another way: through .., ., a symlinked folder, a hard link, a symlink, a relative path."""
    if spelling == "same":
        return target
    if spelling == "dotdot":
        return work / "sub" / ".." / target.relative_to(work)
    if spelling == "dot":
        return target.parent / "." / target.name
    if spelling == "symlinked-folder":
        link = work / "link-to-work"
        if not link.exists():
            link.symlink_to(work, target_is_directory=True)
        return link / target.relative_to(work)
    if spelling == "hardlink":
        other = work / f"hard-{target.name}"
        os.link(target, other)
        return other
    if spelling == "symlink":
        other = work / f"soft-{target.name}"
        other.symlink_to(target)
        return other
    if spelling == "relative":
        return Path(os.path.relpath(target))
    raise ValueError(spelling)


SPELLINGS = ["same", "dotdot", "dot", "symlinked-folder", "hardlink", "symlink", "relative"]
MAINS: Dict[str, Callable] = {"edge-run": cli.run_main, "edge-build": cli.build_main}


def _call(command: str, argv: List[str], work: Path, out: Path):
    args = [a.replace("{w}", str(work)).replace("{out}", str(out)) for a in argv]
    if command in MAINS:
        return call(args, main=MAINS[command])
    return call([command, *args])


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("case, command, argv, flag, victim", COLLISIONS, ids=[c[0] for c in COLLISIONS])
def test_an_output_that_is_an_input_is_refused_and_the_input_kept(
    work: Path, case: str, command: str, argv: List[str], flag: str, victim: str, spelling: str
) -> None:
    target = work / victim
    out = _spell(work, target, spelling)
    before = snapshot(*_all_files(work))
    o = _call(command, argv, work, out)
    assert_refused(o, flag, parser=command_parser(command))
    assert not o.out.strip(), f"work was done before the refusal{o}"
    assert_unchanged(before, o)
    assert not temps(work), temps(work)


TWO_OUTPUTS = [
    ("calib --cache = --qdq", "calib", ["{w}/tiny.onnx", "--images", "{w}/imgs", "--cache", "{out}", "--qdq", "{out}"], "--qdq"),
    ("dla --json = --fix", "dla", ["{w}/tiny.onnx", "--target", "orin", "--json", "{out}", "--fix", "{out}"], "--fix"),
    (
        "run --results = --summary-json",
        "edge-run",
        ["-c", "{w}/run.yaml", "--frames", "5", "--results", "{out}", "--summary-json", "{out}"],
        "--summary-json",
    ),
    (
        "build --log = manifest of -o",
        "edge-build",
        ["{w}/tiny.onnx", "-o", "{w}/t.engine", "--log", "{w}/t.engine.json"],
        "--log",
    ),
    ("build --log = -o", "edge-build", ["{w}/tiny.onnx", "-o", "{out}", "--log", "{out}"], "--log"),
]


@pytest.mark.parametrize("case, command, argv, flag", TWO_OUTPUTS, ids=[c[0] for c in TWO_OUTPUTS])
def test_two_outputs_in_one_file_are_refused(work: Path, case: str, command: str, argv: List[str], flag: str) -> None:
    out = work / "out.bin"
    before = snapshot(*_all_files(work))
    o = _call(command, argv, work, out)
    assert_refused(o, parser=command_parser(command))
    assert not out.exists() and not (work / "t.engine").exists(), "an output was written before the refusal"
    assert_unchanged(before, o)


# -- outputs that cannot be written ----------------------------------------------------------------------------------

# (id, command, argv with {out}, flag)
OUTPUTS: List[Tuple[str, str, List[str], str]] = [
    ("run --results", "edge-run", ["-c", "{w}/run.yaml", "--frames", "5", "--results", "{out}"], "--results"),
    ("run --video", "edge-run", ["-c", "{w}/run.yaml", "--frames", "5", "--video", "{out}.avi"], "--video"),
    ("run --summary-json", "edge-run", ["-c", "{w}/run.yaml", "--frames", "5", "--summary-json", "{out}"], "--summary-json"),
    (
        "run telemetry.dir",
        "edge-run",
        [
            "-c",
            "{w}/run.yaml",
            "--frames",
            "5",
            *REPLAY,
            "--set",
            "telemetry.dir={out}/x",
        ],
        "telemetry.dir",
    ),
    ("build -o", "edge-build", ["{w}/tiny.onnx", "-o", "{out}"], "-o"),
    ("build --log", "edge-build", ["{w}/tiny.onnx", "-o", "{w}/t.engine", "--log", "{out}"], "--log"),
    ("build --timing-cache", "edge-build", ["{w}/tiny.onnx", "-o", "{w}/t.engine", "--timing-cache", "{out}"], "--timing-cache"),
    ("calib --cache", "calib", ["{w}/tiny.onnx", "--images", "{w}/imgs", "--cache", "{out}"], "--cache"),
    ("calib --qdq", "calib", ["{w}/tiny.onnx", "--images", "{w}/imgs", "--cache", "{w}/c.cache", "--qdq", "{out}"], "--qdq"),
    ("dla --json", "dla", ["{w}/tiny.onnx", "--target", "orin", "--json", "{out}"], "--json"),
    ("dla --fix", "dla", ["{w}/tiny.onnx", "--target", "orin", "--fix", "{out}"], "--fix"),
    ("doctor --json", "doctor", ["--no-build", "--no-service", "--json", "{out}"], "--json"),
]


def _tegra_log(work: Path) -> None:
    from tests.test_telemetry_tegrastats import REAL_LINES

    (work / "tegra.log").write_text("\n".join(REAL_LINES) + "\n")


def _outputs_case(work: Path, command: str, argv: List[str], out: Path) -> Tuple[object, Dict[Path, object]]:
    _tegra_log(work)
    before = snapshot(*_all_files(work))
    o = _call(command, argv, work, out)
    return o, before


@pytest.mark.parametrize("case, command, argv, flag", OUTPUTS, ids=[c[0] for c in OUTPUTS])
def test_an_output_into_a_missing_folder_is_refused_before_the_work(work: Path, case, command, argv, flag) -> None:
    missing = work / "no-such-folder" / "out"
    o, before = _outputs_case(work, command, argv, missing)
    if flag == "telemetry.dir" and o.code == 0:  # a folder output: making it is as good as refusing
        assert (missing / "x" / "telemetry.jsonl").is_file(), o
        return
    line = assert_refused(o, flag, parser=command_parser(command))
    assert "no-such-folder" in line, o
    assert not o.out.strip(), f"work was done before the refusal{o}"
    assert not (work / "no-such-folder").exists()
    assert_unchanged(before, o)


@pytest.mark.parametrize("case, command, argv, flag", OUTPUTS, ids=[c[0] for c in OUTPUTS])
def test_an_output_that_is_a_directory_is_refused_before_the_work(work: Path, case, command, argv, flag) -> None:
    """Review: `--results DIR` / `--video DIR.avi` said "close failed: Is a directory", exit 0, data in a hidden file."""
    target = work / "adir"
    target.mkdir()
    (work / "adir.avi").mkdir()
    (target / "keep").write_text("kept")
    o, before = _outputs_case(work, command, argv, target)
    if flag == "telemetry.dir":  # a folder is right there; a file where the folder should be is the hostile case
        return
    assert_refused(o, flag, parser=command_parser(command))
    assert not o.out.strip(), f"work was done before the refusal{o}"
    assert (target / "keep").read_text() == "kept" and sorted(p.name for p in target.iterdir()) == ["keep"]
    assert not temps(work), temps(work)
    assert_unchanged(before, o)


def test_a_telemetry_dir_that_is_a_file_is_refused_before_the_work(work: Path) -> None:
    _tegra_log(work)
    (work / "tdir").write_text("a file")
    o = _call(
        "edge-run",
        [
            "-c",
            "{w}/run.yaml",
            "--frames",
            "5",
            *REPLAY,
            "--set",
            "telemetry.dir={w}/tdir",
        ],
        work,
        work / "unused",
    )
    assert_refused(o, "telemetry.dir")
    assert (work / "tdir").read_text() == "a file"


@pytest.mark.parametrize("case, command, argv, flag", OUTPUTS, ids=[c[0] for c in OUTPUTS])
def test_an_output_on_a_read_only_file_system_is_refused_before_the_work(work: Path, case, command, argv, flag) -> None:
    """A read-only tmpfs (root can write anywhere else, so the place itself must be read-only)."""
    with tmpfs(work / "ro", size="1m", options="ro") as ro:
        o, before = _outputs_case(work, command, argv, ro / "out")
        assert_refused(o, flag, parser=command_parser(command))
        assert not o.out.strip(), f"work was done before the refusal{o}"
        assert_unchanged(before, o)


# -- names no file can have ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [300, 240])
@pytest.mark.parametrize("case, command, argv, flag", OUTPUTS, ids=[c[0] for c in OUTPUTS])
def test_an_output_name_too_long_for_its_temp_is_refused_before_the_work(
    work: Path, case, command, argv, flag, length: int
) -> None:
    """An attack on edge calib: a 300-byte name was "unexpected OSError" (exit 1), and a 240-byte one, legal itself,
    failed only when its temp (the name and 24 bytes more) was made, after the work. The limit is the file system's
    (255 bytes here), read with pathconf."""
    if flag == "telemetry.dir":
        return  # a folder: no temp beside it
    out = work / ("n" * length)
    o, before = _outputs_case(work, command, argv, out)
    line = assert_refused(o, flag, parser=command_parser(command))
    assert "too long" in line, o
    assert not o.out.strip(), f"work was done before the refusal{o}"
    assert_unchanged(before, o)
    assert not temps(work), temps(work)


@pytest.mark.parametrize("value", ["", "newfolder/"])
@pytest.mark.parametrize("case, command, argv, flag", OUTPUTS, ids=[c[0] for c in OUTPUTS])
def test_an_empty_output_or_a_folder_spelled_with_a_slash_is_refused(work: Path, case, command, argv, flag, value) -> None:
    """An attack on edge calib: `--cache ''` wrote the default cache into the current folder, and `--cache out/new/`
    (a folder that does not exist) wrote a file named `new`."""
    if "{out}" not in argv:
        return  # a value built around the name (`{out}.avi`), or a config key
    args = [a.replace("{w}", str(work)) for a in argv]
    args[argv.index("{out}")] = value if not value else f"{work}/{value}"
    before = snapshot(*_all_files(work))
    o = call(args, main=MAINS[command]) if command in MAINS else call([command, *args])
    assert_refused(o, flag, parser=command_parser(command))
    assert not (work / "newfolder").exists()
    assert_unchanged(before, o)


@pytest.mark.parametrize("dangling", [False, True])
@pytest.mark.parametrize("case, command, argv, flag", OUTPUTS, ids=[c[0] for c in OUTPUTS])
def test_an_output_that_is_a_symbolic_link_is_refused_and_both_ends_kept(work: Path, case, command, argv, flag, dangling) -> None:
    """An attack on edge dla: `--json link` replaced the link with a file and left its target as it was; run as root
    with `--json /dev/stdout` and stdout in a file, that was the system's /dev/stdout link."""
    if flag == "telemetry.dir":
        return
    target = work / "real" / "out.bin"
    target.parent.mkdir()
    if not dangling:
        target.write_text("previous")
    out = work / "link"
    for name in ("link", "link.avi"):  # the video flag appends .avi
        (work / name).symlink_to(target)
    o, before = _outputs_case(work, command, argv, out)
    line = assert_refused(o, flag, parser=command_parser(command))
    assert "symbolic link" in line, o
    assert (work / "link").is_symlink() and os.readlink(work / "link") == str(target)
    assert target.read_text() == "previous" if not dangling else not target.exists()


def test_a_run_that_fails_before_its_first_result_says_what_became_of_the_results_file(tmp_path):
    """It printed 'no sinks' although --results was given: now the note names the file and says it is unchanged."""
    from edge.runtime.outputs.sinks import JsonlSink

    out = tmp_path / "r.jsonl"
    out.write_text('{"earlier": 1}\n')
    note = JsonlSink(str(out)).close(failed=True)
    assert note == f"results: no frame got this far, nothing written; {out} is as it was"
    assert out.read_text() == '{"earlier": 1}\n' and sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]
