"""edge/inputs.py (bounded reads of regular files), the output-set lock (edge.outputs.hold) and edge/stoppable.py
(vendor calls a signal can stop), on real special files: FIFOs, /dev/zero, procfs, folders, real signals."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edge.errors import EdgeError
from edge.inputs import Refused, kind, missing, open_regular, read_capped, read_small, special
from tests.conftest import PROMPT_S


@given(size=st.integers(0, 64), cap=st.integers(0, 64))
def test_a_regular_file_is_read_whole_up_to_its_cap_and_refused_past_it(tmp_path_factory, size: int, cap: int) -> None:
    path = tmp_path_factory.mktemp("cap") / "f"
    path.write_bytes(bytes(range(size)))
    if size <= cap:
        assert read_capped(path, cap) == bytes(range(size))
    else:
        with pytest.raises(Refused) as info:
            read_capped(path, cap)
        assert info.value.strerror == f"{size} bytes, more than the {cap} this file may hold"


def test_a_file_larger_than_its_size_says_is_cut_at_the_cap() -> None:
    # procfs files report st_size 0 and hold more: the case of a file that grows between the check and the read
    assert os.stat("/proc/self/status").st_size == 0
    with pytest.raises(Refused, match="more than the 10 bytes this file may hold"):
        read_capped("/proc/self/status", 10)
    assert read_capped("/proc/self/status", 1 << 20).startswith(b"Name:")


def test_a_fifo_is_refused_at_once_without_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "a.png"
    os.mkfifo(fifo)
    fds = len(os.listdir("/proc/self/fd"))
    t0 = time.monotonic()
    for _ in range(3):
        with pytest.raises(Refused) as info:
            open_regular(fifo)
    assert time.monotonic() - t0 < PROMPT_S  # opening a FIFO without a writer would block for good
    assert info.value.strerror == "not a regular file (a FIFO)"
    assert len(os.listdir("/proc/self/fd")) == fds, "a refused file's descriptor was left open"


@pytest.mark.parametrize(
    "target, words",
    [("/dev/zero", "a character device"), ("/dev/null", "a character device"), (".", "a folder")],
)
def test_special_files_are_refused_by_what_they_are(tmp_path: Path, target: str, words: str) -> None:
    link = tmp_path / "link"
    link.symlink_to(tmp_path if target == "." else target)
    with pytest.raises(Refused, match=rf"^\[Errno 0\] not a regular file \({words}\)$"):
        read_capped(link, 1 << 20)
    assert special(link) == words
    assert missing(link) == f"{words}, not a regular file"


def test_a_socket_is_named_a_socket(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        assert special(path) == "a socket"
        with pytest.raises(OSError):  # a socket cannot even be opened as a file
            read_capped(path, 10)


def test_kind_names_every_file_type() -> None:
    assert kind(stat.S_IFREG) == "a regular file"
    assert kind(stat.S_IFDIR) == "a folder"
    assert kind(stat.S_IFIFO) == "a FIFO"
    assert kind(stat.S_IFCHR) == "a character device"
    assert kind(stat.S_IFBLK) == "a block device"
    assert kind(stat.S_IFSOCK) == "a socket"
    assert kind(0) == "not a file"


def test_regular_and_missing_files_are_not_special(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert special(tmp_path / "f") is None
    assert special(tmp_path / "none") is None
    assert missing(tmp_path / "none") == "file not found"
    assert special("bad\0name") is None


def test_read_small_is_one_line_naming_the_file_and_the_fix(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_bytes(b"x" * 11)
    with pytest.raises(EdgeError) as info:
        read_small(big, 10, "manifest", "rebuild it")
    assert str(info.value) == f"manifest '{big}': 11 bytes, more than the 10 this file may hold; rebuild it"
    with pytest.raises(EdgeError) as info:
        read_small(tmp_path / "none", 10, "manifest")
    assert str(info.value) == f"manifest '{tmp_path / 'none'}': no such file"
    assert read_small(big, 11, "manifest") == b"x" * 11


# -- the lock on an output set --------------------------------------------------------------------------------------


def test_a_held_output_set_refuses_a_second_writer_and_is_freed_on_close(tmp_path: Path) -> None:
    from edge.outputs import hold

    target = tmp_path / "x.cache"
    first = hold(target, "--cache")
    lock = tmp_path / ".x.cache.lock"
    assert lock.read_text() == f"{os.getpid()}\n"
    with pytest.raises(EdgeError) as info:
        hold(target, "--cache")
    assert str(info.value) == (
        f"--cache {target}: another edge (pid {os.getpid()}) is writing it now; wait for it to finish, or choose another path"
    )
    first.close()
    assert not lock.exists()
    first.close()  # twice is harmless
    second = hold(target, "--cache")
    assert lock.exists()
    del second  # dropping it releases it too
    assert not lock.exists()


def test_a_lock_left_by_a_killed_run_is_taken_over(tmp_path: Path) -> None:
    from edge.outputs import hold

    (tmp_path / ".x.engine.lock").write_text("99999999\n")  # no process holds it
    held = hold(tmp_path / "x.engine", "model.engine")
    assert (tmp_path / ".x.engine.lock").read_text() == f"{os.getpid()}\n"
    held.close()


def test_a_lock_released_between_open_and_flock_is_taken_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fcntl

    from edge import outputs

    target = tmp_path / "x.cache"
    base = len(os.listdir("/proc/self/fd"))
    first = outputs.hold(target, "--cache")
    real_flock, calls = fcntl.flock, []

    def flock(fd: int, op: int) -> None:
        calls.append(fd)
        if len(calls) == 1:
            first.close()  # the holder finishes after this process opened the old file: it is unlinked now
        real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    second = outputs.hold(target, "--cache")
    assert len(calls) == 2, "the unlinked file was not given up for a new one"
    lock = tmp_path / ".x.cache.lock"
    assert lock.exists() and os.stat(lock).st_ino == os.fstat(second.fd).st_ino
    assert len(os.listdir("/proc/self/fd")) == base + 1, "the descriptor of the unlinked lock was left open"
    second.close()


def test_a_lock_that_is_not_a_file_is_refused(tmp_path: Path) -> None:
    from edge.outputs import hold

    (tmp_path / ".x.cache.lock").mkdir()
    with pytest.raises(EdgeError, match=r"cannot take its lock \.x\.cache\.lock \(Is a directory\)"):
        hold(tmp_path / "x.cache", "--cache")
    os.rmdir(tmp_path / ".x.cache.lock")
    os.mkfifo(tmp_path / ".x.cache.lock")
    with pytest.raises(EdgeError, match="its lock .x.cache.lock is not a regular file; remove it"):
        hold(tmp_path / "x.cache", "--cache")


# -- vendor calls a signal can stop -----------------------------------------------------------------------------------


def test_a_call_returns_its_value_and_raises_its_own_exception() -> None:
    from edge import stoppable

    assert stoppable.call(lambda a, b: a + b, 2, 3) == 5
    with pytest.raises(KeyError, match="'k'"):
        stoppable.call({}.__getitem__, "k")
    assert not stoppable.abandoned()


def test_off_the_main_thread_a_call_runs_in_place() -> None:
    from edge import stoppable

    seen = []
    t = threading.Thread(target=lambda: seen.append(stoppable.call(threading.current_thread)))
    t.start()
    t.join()
    assert seen == [t]


_CHILD = textwrap.dedent(
    """
    import atexit, gc, signal, sys, threading, time, weakref
    from edge import stoppable
    def stop(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    atexit.register(print, "atexit ran")  # a normal exit runs it; the end of an abandoned call (os._exit) does not
    cancel = threading.Event()
    def cancellable():
        cancel.wait(60)
    class Network:  # what the vendor call uses without holding it
        pass
    network = Network()
    alive = weakref.ref(network)
    kind = sys.argv[1]
    print("ready", flush=True)
    try:
        if kind == "cancel":
            stoppable.call(cancellable, cancel=cancel, keep=(network,))
        else:
            stoppable.call(time.sleep, 60, keep=(network,))
    except KeyboardInterrupt:
        pass
    del network  # and the exception with the call's frames is gone too, out of the except block
    gc.collect()
    # not flushed here: a pipe is block-buffered, and finish() must flush it before os._exit
    print("abandoned" if stoppable.abandoned() else "returned", "kept" if alive() else "freed")
    sys.exit(stoppable.finish(143))
    """
)


@pytest.mark.parametrize("kind, said", [("cancel", "returned freed\natexit ran"), ("sleep", "abandoned kept")])
def test_a_signal_ends_the_wait_and_the_call_is_cancelled_or_abandoned(kind: str, said: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # a pipe is then block-buffered
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, kind], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline() == "ready\n"
    time.sleep(0.3)
    t0 = time.monotonic()
    proc.terminate()
    out, _ = proc.communicate(timeout=20)
    took = time.monotonic() - t0
    assert proc.returncode == 143 and out == f"{said}\n", (proc.returncode, out)
    assert took < PROMPT_S, f"{took:.2f} s to end a 60 s wait"
    if kind == "sleep":
        assert took >= 0.9, f"{took:.2f} s: the grace of GRACE_S (1 s) was not given"


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_no_attempt_at_a_lock_leaves_a_descriptor_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from edge import outputs

    target = tmp_path / "x.cache"
    first = outputs.hold(target, "--cache")
    before = _fds()
    for _ in range(3):
        with pytest.raises(EdgeError, match="is writing it now"):
            outputs.hold(target, "--cache")
    assert _fds() == before
    first.close()
    first.close()
    os.fstat(0)  # a second close touched no other descriptor (stdin is still open)
    assert _fds() == before - 1

    real, calls = outputs._same_file, []

    def vanished_once(path: Path, fd: int) -> bool:
        calls.append(fd)
        if len(calls) == 1:
            raise FileNotFoundError(2, "No such file or directory")  # removed between the open and the check
        return real(path, fd)

    monkeypatch.setattr(outputs, "_same_file", vanished_once)
    held = outputs.hold(target, "--cache")
    assert len(calls) == 2 and _fds() == before
    held.close()

    replaced = []

    def replaced_once(path: Path, fd: int) -> bool:
        replaced.append(fd)
        return len(replaced) > 1 and real(path, fd)  # the first lock opened was released and removed meanwhile

    monkeypatch.setattr(outputs, "_same_file", replaced_once)
    held = outputs.hold(target, "--cache")  # the next attempt takes the new lock
    assert len(replaced) == 2 and _fds() == before
    held.close()

    monkeypatch.setattr(outputs, "_same_file", lambda path, fd: False)  # another writer keeps replacing it
    with pytest.raises(EdgeError, match=r"its lock \.x\.cache\.lock keeps changing; another edge is writing it"):
        outputs.hold(target, "--cache")
    assert _fds() == before - 1
