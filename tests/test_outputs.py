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
from edge.outputs import (
    Staged,
    check_outputs,
    commit_together,
    remove_stale_temps,
    settle,
    strict_json,
    write_atomic,
    write_together,
)


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


@pytest.mark.parametrize(
    "private, mode, expected",
    [(False, None, "umask"), (True, None, 0o600), (True, 0o640, 0o640), (False, 0o604, 0o604)],
)
def test_the_mode_is_the_callers_else_private_else_what_open_gives(tmp_path: Path, private, mode, expected):
    """Module docstring: outputs get a plain open()'s mode under the umask; private=True gives 0600; a mode wins."""
    old = os.umask(0o027)
    try:
        path = write_atomic(tmp_path / "f.yaml", "secret: x\n", private=private, mode=mode)
    finally:
        os.umask(old)
    assert oct(path.stat().st_mode & 0o777) == oct(0o640 if expected == "umask" else expected)  # 0666 & ~027


@pytest.mark.parametrize("umask, expected", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_an_output_gets_the_mode_a_plain_open_gives_under_any_umask(tmp_path: Path, umask: int, expected: int):
    """The expected modes are 0666 & ~umask, what open(2) with O_CREAT gives; checked against Python's own open()."""
    old = os.umask(umask)
    try:
        path = write_atomic(tmp_path / "f.json", "{}")
        with open(tmp_path / "plain.json", "w"):
            pass
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == (tmp_path / "plain.json").stat().st_mode & 0o777 == expected


def test_files_of_two_folders_cannot_be_committed_together(tmp_path: Path):
    (tmp_path / "b").mkdir()
    pair = [Staged(tmp_path / "a.engine"), Staged(tmp_path / "b" / "a.engine.json")]
    with pytest.raises(ValueError) as info:
        commit_together(pair)
    assert str(info.value) == "files committed together must share a folder"
    for s in pair:
        s.discard()


def test_a_folder_this_user_cannot_write_is_named_with_the_flag(tmp_path: Path, monkeypatch):
    """os.access stands in for a folder the user may not write (root writes anywhere, so a real one cannot be made)."""
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(EdgeError) as info:
        check_outputs({"--json": tmp_path / "r.json"})
    assert str(info.value) == f"--json {tmp_path / 'r.json'}: folder {tmp_path} is not writable by this user; choose another path"


def test_a_second_discard_never_closes_a_descriptor_that_now_belongs_to_another_file(tmp_path: Path):
    staged = Staged(tmp_path / "a.bin")
    staged.discard()
    other = os.open(tmp_path, os.O_RDONLY)  # the lowest free number: the temp's old descriptor
    try:
        staged.discard()
        os.fstat(other)  # still open
    finally:
        os.close(other)


@pytest.mark.parametrize("call", ["fsync", "close"])
def test_a_failed_fsync_or_close_names_the_file_and_keeps_the_old_one(tmp_path: Path, monkeypatch, call: str):
    """fsync(2) and close(2) can report a delayed write error (NFS, a failing disk: EIO); nothing is committed and
    the error is one line."""
    import errno

    (tmp_path / "r.json").write_text("old")
    staged = Staged(tmp_path / "r.json")
    staged.write(b"{}")
    real = getattr(os, call)

    def failing(fd):
        real(fd)
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, call, failing)
    with pytest.raises(EdgeError) as info:
        staged.commit()
    monkeypatch.undo()
    assert str(info.value) == f"cannot write {tmp_path / 'r.json'}: Input/output error; the previous file, if any, is unchanged"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"] and (tmp_path / "r.json").read_text() == "old"


def test_a_discarded_temp_closes_its_descriptor_and_a_finished_one_finishes_once(tmp_path: Path):
    staged = Staged(tmp_path / "a.bin")
    fd = staged.fd
    staged.discard()
    with pytest.raises(OSError):  # EBADF: closed
        os.fstat(fd)
    assert not staged.tmp.exists()
    staged = Staged(tmp_path / "b.bin")
    staged.write(b"bytes")
    staged.finish()
    staged.finish()  # a second call must not touch the closed descriptor
    assert staged.commit().read_bytes() == b"bytes"


def test_a_write_error_names_the_file_and_the_cause(tmp_path: Path, monkeypatch):
    """The disk filling mid-write (ENOSPC from write(2), stood in here) is one line that says so."""
    import errno

    (tmp_path / "r.json").write_text("old")

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(EdgeError) as info:
        write_atomic(tmp_path / "r.json", "new")
    monkeypatch.undo()
    assert (
        str(info.value)
        == f"cannot write {tmp_path / 'r.json'}: No space left on device (the disk is full); the previous file, if any, is unchanged"
    )
    assert (tmp_path / "r.json").read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_a_name_whose_temp_would_not_fit_the_folder_is_refused_with_the_length_to_use(tmp_path: Path):
    """The temp beside NAME.json is .NAME.PID.XXXXXXXX.partial.json: 19 + len(PID) bytes more than the name."""
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    spare = 19 + len(str(os.getpid()))
    fits = tmp_path / ("a" * (limit - spare - 5) + ".json")
    check_outputs({"--json": fits})
    too_long = tmp_path / ("a" * (limit - spare - 4) + ".json")
    with pytest.raises(EdgeError) as info:
        check_outputs({"--json": too_long})
    assert str(info.value) == (
        f"--json {'a' * 40}...: a name of {limit - spare + 1} bytes is too long; the temp written beside it needs "
        f"{spare} more and the folder allows {limit}; use at most {limit - spare} bytes"
    )


@pytest.mark.parametrize("value, expected", [(float("nan"), None), (float("inf"), None), (-float("inf"), None), (1.5, 1.5)])
def test_strict_json_nulls_exactly_the_non_finite_floats(value, expected):
    assert strict_json({"a": [value, (value,)]}) == {"a": [expected, [expected]]}


def test_a_file_size_limit_is_named_as_such(tmp_path: Path, monkeypatch):
    import errno

    def too_big(fd, data):
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))

    monkeypatch.setattr(os, "write", too_big)
    with pytest.raises(EdgeError, match=r": File too large \(the file-size limit, ulimit -f\); the previous file"):
        write_atomic(tmp_path / "r.json", "new")


def test_a_temp_of_a_live_process_is_left_and_the_process_is_not_signalled(tmp_path: Path):
    """Liveness is asked with signal 0, which sends nothing: a live writer's temp stays and the writer runs on."""
    # Signals back at their defaults: nohup, or a shell's background job, leaves SIGHUP or SIGINT ignored in children.
    defaults = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)
    writer = subprocess.Popen(["sleep", "60"], preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in defaults])
    try:
        temp = tmp_path / f".r.{writer.pid}.abcd1234.partial.json"
        temp.write_text("half")
        remove_stale_temps(tmp_path / "r.json")
        assert temp.exists()
        with pytest.raises(subprocess.TimeoutExpired):  # still running: any real signal would have ended sleep
            writer.wait(timeout=1)
    finally:
        writer.kill()
        writer.wait()


def test_an_existing_image_of_an_input_folder_is_never_an_output_but_a_new_file_there_may_be(tmp_path: Path):
    images = tmp_path / "imgs"
    images.mkdir()
    (images / "a.png").write_bytes(b"png")
    with pytest.raises(EdgeError):
        check_outputs({"--json": images / "a.png"}, {"--images": images})
    check_outputs({"--json": images / "new.json"}, {"--images": images})


def test_an_input_folder_that_cannot_be_listed_holds_no_output(tmp_path: Path, monkeypatch):
    """A folder this user may not list (scandir's EACCES, stood in: root lists anything) refuses nothing here; reading
    the inputs from it then fails with its own message."""
    images = tmp_path / "imgs"
    images.mkdir()
    (images / "a.json").write_text("{}")

    def refused(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os, "scandir", refused)
    check_outputs({"--json": images / "a.json"}, {"--images": images})


def test_a_name_too_long_for_a_missing_folder_is_measured_against_255_bytes(tmp_path: Path):
    with pytest.raises(EdgeError, match=r"the folder allows 255; use at most"):
        check_outputs({"--json": tmp_path / "missing" / ("a" * 300 + ".json")})


def test_a_journal_past_its_1_mib_cap_is_refused_unread(tmp_path: Path):
    journal = tmp_path / ".e.engine.commit"
    journal.write_text(json.dumps([["x" * (1 << 20), "e.engine"]]))
    with pytest.raises(EdgeError, match="an interrupted write left a journal that cannot be read"):
        settle(tmp_path / "e.engine")


def test_write_together_lands_a_set_or_leaves_the_old_one_and_no_temp(tmp_path: Path):
    """Its second file cannot be staged (no such folder): the first's temp is removed and the old file stays."""
    first = tmp_path / "m.cache"
    first.write_bytes(b"old")
    with pytest.raises(EdgeError, match="does not exist"):
        write_together([(first, b"new"), (tmp_path / "gone" / "m.cache.json", "{}")])
    assert first.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["m.cache"]
    assert write_together([(first, b"new"), (tmp_path / "m.cache.json", "{}")]) == [first, tmp_path / "m.cache.json"]
    assert first.read_bytes() == b"new" and (tmp_path / "m.cache.json").read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.cache", "m.cache.json"]


def test_an_empty_output_or_input_is_skipped_like_none(tmp_path: Path, monkeypatch):
    """An unset flag arrives as "" from some configs: it is no output (not the current folder, which is a
    directory) and no input (not every output beside it)."""
    monkeypatch.chdir(tmp_path)
    check_outputs({"--json": "", "--out": tmp_path / "r.jsonl"}, {"--images": ""})


def test_a_temp_that_cannot_be_made_names_the_cause(tmp_path: Path, monkeypatch):
    import errno as errnos
    import tempfile

    def full(*_a, **_k):
        raise OSError(errnos.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "mkstemp", full)
    with pytest.raises(EdgeError) as caught:
        Staged(tmp_path / "m.engine")
    assert str(caught.value) == (
        f"cannot write {tmp_path / 'm.engine'}: No space left on device (the disk is full); the previous file, if any, "
        "is unchanged"
    )
