"""The one atomic-write path (edge.outputs): real files, real signals and a real file-size limit, no mocks."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.errors import EdgeError
from edge.outputs import Staged, check_outputs, commit_together, remove_stale_temps, settle, strict_json, write_atomic


def temps(folder: Path) -> list:
    return sorted(p.name for p in folder.iterdir() if ".partial" in p.name or p.name.endswith(".commit"))


def test_replaces_atomically_and_leaves_no_temp(tmp_path: Path):
    target = tmp_path / "out.json"
    target.write_text("old")
    write_atomic(target, "new")
    assert target.read_text() == "new" and temps(tmp_path) == []


def test_a_planted_symlink_at_any_temp_name_is_never_followed(tmp_path: Path):
    """The temp is created with O_EXCL under a random name; a link an attacker planted cannot be written through."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    for n in range(50):  # links at the names an older edge used (.NAME.PID.tmp) and then some
        (tmp_path / f".out.{os.getpid()}.tmp").unlink(missing_ok=True)
        (tmp_path / f".out.{os.getpid()}.tmp").symlink_to(victim)
        (tmp_path / f".out.json.{os.getpid() + n}.tmp").symlink_to(victim)
    write_atomic(tmp_path / "out.json", "data")
    assert victim.read_text() == "precious"
    assert (tmp_path / "out.json").read_text() == "data" and not (tmp_path / "out.json").is_symlink()


def test_a_symlink_at_the_target_is_replaced_not_written_through(tmp_path: Path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "out.json").symlink_to(victim)
    write_atomic(tmp_path / "out.json", "data")
    assert victim.read_text() == "precious" and (tmp_path / "out.json").read_text() == "data"


def _in_child(code: str, limit_bytes: int = 0) -> subprocess.CompletedProcess:
    """Run ``code`` in a child process, with RLIMIT_FSIZE when ``limit_bytes`` (a real EFBIG from the kernel)."""

    def limit() -> None:
        if limit_bytes:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, preexec_fn=limit, timeout=60
    )


def test_a_failed_write_keeps_the_old_file_and_removes_its_temp(tmp_path: Path):
    target = tmp_path / "big.bin"
    target.write_bytes(b"good old data")
    r = _in_child(
        f"""
        from edge.outputs import write_atomic
        from edge.errors import EdgeError
        try:
            write_atomic({str(target)!r}, b"x" * 1_000_000)
        except EdgeError as exc:
            print(exc)
        """,
        limit_bytes=100_000,
    )
    assert "file-size limit" in r.stdout and "previous file, if any, is unchanged" in r.stdout, r.stderr
    assert target.read_bytes() == b"good old data" and temps(tmp_path) == []


def test_sigkill_mid_write_keeps_the_old_file_and_the_next_writer_removes_the_temp(tmp_path: Path):
    target = tmp_path / "results.jsonl"
    target.write_bytes(b"old\n")
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, time
                from edge.outputs import Staged
                s = Staged({str(target)!r})
                s.write(b"partial line\\n")
                print("written", flush=True)
                time.sleep(60)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "written"
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert target.read_bytes() == b"old\n"
    assert len(temps(tmp_path)) == 1  # a killed process cannot clean up after itself...
    write_atomic(target, "new\n")  # ...the next writer of the same output does
    assert target.read_text() == "new\n" and temps(tmp_path) == []


def test_stale_temps_of_live_processes_and_other_files_are_left_alone(tmp_path: Path):
    target = tmp_path / "a.json"
    mine = Staged(target)  # this process is alive: its temp stays
    other = tmp_path / ".a.json.notours"
    other.write_text("x")
    assert remove_stale_temps(target) == []
    assert mine.tmp.exists() and other.exists()
    mine.discard()


def _pair(tmp_path: Path, engine: bytes, manifest: str) -> list:
    a, b = Staged(tmp_path / "m.engine"), Staged(tmp_path / "m.engine.json")
    a.write(engine)
    b.write(manifest.encode())
    return [a, b]


def test_a_pair_lands_together(tmp_path: Path):
    commit_together(_pair(tmp_path, b"E1", '{"v": 1}'))
    assert (tmp_path / "m.engine").read_bytes() == b"E1" and temps(tmp_path) == []


def test_a_pair_interrupted_between_its_renames_is_rolled_forward(tmp_path: Path):
    """A kill after the journal and before the second rename (simulated by doing the first rename by hand):
    settle() finishes the commit, so readers see the new pair, never the new engine with the old manifest."""
    commit_together(_pair(tmp_path, b"E1", '{"v": 1}'))
    staged = _pair(tmp_path, b"E2", '{"v": 2}')
    for s in staged:
        s.finish()
    journal = tmp_path / ".m.engine.commit"
    journal.write_text(json.dumps([[s.tmp.name, s.path.name] for s in staged]))
    os.replace(staged[0].tmp, staged[0].path)  # the process dies here
    assert (tmp_path / "m.engine").read_bytes() == b"E2" and json.loads((tmp_path / "m.engine.json").read_text()) == {"v": 1}
    assert settle(tmp_path / "m.engine") is True
    assert json.loads((tmp_path / "m.engine.json").read_text()) == {"v": 2} and temps(tmp_path) == []


def test_a_pair_killed_before_its_journal_keeps_the_old_pair(tmp_path: Path):
    commit_together(_pair(tmp_path, b"E1", '{"v": 1}'))
    staged = _pair(tmp_path, b"E2", '{"v": 2}')  # temps written, no journal yet: the process dies here
    assert settle(tmp_path / "m.engine") is False
    assert (tmp_path / "m.engine").read_bytes() == b"E1"
    for s in staged:
        s.discard()


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: {"--out": d / "missing" / "x.json"}, "folder .* does not exist"),
        (lambda d: {"--out": d}, "is a directory"),
        (lambda d: {"--a": d / "same.json", "--b": d / "." / "same.json"}, "same file as --a"),
    ],
)
def test_bad_outputs_are_refused_before_the_work(tmp_path: Path, make, message):
    with pytest.raises(EdgeError, match=message):
        check_outputs(make(tmp_path))


@pytest.mark.parametrize("spelling", [".", "..", "./", "sub/.", "sub/.."])
def test_a_folder_spelled_with_dots_is_a_directory_not_an_internal_error(tmp_path: Path, monkeypatch, spelling: str):
    """'.' has an empty name: measuring the temp beside it raised ValueError (an attack on the docs found it)."""
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub" if spelling.startswith(".") else tmp_path)
    with pytest.raises(EdgeError, match="is a directory|ends in '/'"):
        check_outputs({"--json": spelling})


def test_an_input_is_never_an_output_in_any_spelling(tmp_path: Path):
    model = tmp_path / "models" / "m.onnx"
    model.parent.mkdir()
    model.write_bytes(b"onnx")
    (tmp_path / "link").symlink_to(tmp_path / "models")
    os.link(model, tmp_path / "hard.onnx")
    spellings = [
        model,
        tmp_path / "models" / ".." / "models" / "m.onnx",
        tmp_path / "models" / "." / "m.onnx",
        tmp_path / "link" / "m.onnx",
        tmp_path / "hard.onnx",
    ]
    for out in spellings:
        with pytest.raises(EdgeError, match="same file as the input MODEL"):
            check_outputs({"--json": out}, {"MODEL": model})
    check_outputs({"--json": tmp_path / "models" / "m.json"}, {"MODEL": model})


def test_a_read_only_folder_is_refused(tmp_path: Path):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    with pytest.raises(EdgeError, match="not writable"):
        check_outputs({"--out": folder / "x"})


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.floats() | st.integers() | st.text(max_size=5) | st.none(),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
        max_leaves=20,
    )
)
def test_strict_json_is_always_valid_json(value):
    text = json.dumps(strict_json(value))
    json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in {text}"))
