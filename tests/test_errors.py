"""The guard every command runs under, in-process: each way a command can end becomes one exit status and at most one
line, and the stop-signal plumbing (the handlers it installs, the unraisable hook that sends a stop lost in a
finalizer again) is put back as it was. The same guard in child processes, with real signals: test_hostile_signals."""

from __future__ import annotations

import argparse
import errno
import signal
import threading
import time
from types import SimpleNamespace

import pytest

from edge import errors
from edge.errors import EdgeError, RunFailed, Terminated, guard

# Signal handlers can be set on the main thread only (mutmut runs the tests on another: the guard then installs none)
needs_main = pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals: main thread")


def _raise(exc: BaseException):
    def fn(args: argparse.Namespace) -> int:
        raise exc

    return fn


@pytest.mark.parametrize(
    "exc, code, line",
    [
        (EdgeError("model m.onnx: file not found"), 2, "edge: error: model m.onnx: file not found"),
        (RunFailed("sink 'video': disk full"), 1, "edge: error: sink 'video': disk full"),
        (KeyboardInterrupt(), 130, "edge: interrupted"),
        (Terminated(signal.SIGTERM), 143, "edge: terminated"),
        (Terminated(signal.SIGHUP), 129, "edge: stopped by SIGHUP"),
        (MemoryError(), 1, "edge: error: out of memory; the input is larger than this machine can hold"),
        (OSError(errno.ENOSPC, "No space left on device"), 2, "edge: error: cannot write the output (No space left"),
        (ValueError("bad\x1b[31m"), 1, "edge: error: unexpected ValueError: bad\\x1b[31m (a bug in edge; run with"),
    ],
)
def test_each_ending_is_one_line_and_its_exit_status(capsys, exc, code, line):
    before = {sig: signal.getsignal(sig) for sig in errors.STOP_SIGNALS}
    hook = errors.sys.unraisablehook
    assert guard("edge", _raise(exc), argparse.Namespace()) == code
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1, err
    assert {sig: signal.getsignal(sig) for sig in errors.STOP_SIGNALS} == before  # put back
    assert errors.sys.unraisablehook is hook


def test_a_broken_pipe_ends_quietly_as_cat_does(capsys, monkeypatch):
    monkeypatch.setattr(errors, "_drop_stdout", lambda: None)  # would point this process's stdout at /dev/null
    assert guard("edge", _raise(BrokenPipeError()), argparse.Namespace()) == 141
    assert capsys.readouterr().err == ""


def test_during_the_command_its_args_reach_it_and_the_unraisable_hook_is_edges(monkeypatch):
    """Edge's hook hands anything but a stop to the hook that was there before, which is put back after."""
    passed_on = []
    monkeypatch.setattr(errors.sys, "unraisablehook", passed_on.append)
    args = argparse.Namespace(log_level="info")
    odd = _unraisable(ValueError("in __del__"))

    def fn(given: argparse.Namespace) -> int:
        assert given is args
        assert errors.sys.unraisablehook != passed_on.append
        errors.sys.unraisablehook(odd)
        return 0

    assert guard("edge", fn, args) == 0
    assert passed_on == [odd] and errors.sys.unraisablehook == passed_on.append


@needs_main
def test_during_the_command_a_stop_signal_raises_terminated():
    def fn(args: argparse.Namespace) -> int:
        signal.raise_signal(signal.SIGHUP)
        time.sleep(1)  # the handler runs before this ends
        return 0

    assert guard("edge", fn, argparse.Namespace()) == 128 + signal.SIGHUP


def _unraisable(exc: BaseException) -> SimpleNamespace:
    return SimpleNamespace(exc_value=exc, exc_type=type(exc), exc_traceback=None, err_msg=None, object=None)


@needs_main
@pytest.mark.parametrize("exc, sig", [(Terminated(signal.SIGUSR1), signal.SIGUSR1), (KeyboardInterrupt(), signal.SIGINT)])
def test_a_stop_lost_in_a_finalizer_is_sent_again_once_the_hook_has_returned(exc, sig):
    """Python drops what a finalizer raises; edge's hook sends the signal again from another thread, a moment later
    (sent at once, it landed in the hook itself). SIGUSR1 stands in for SIGTERM here: the hook sends whichever
    signal the Terminated carries, and SIGTERM would end this test run."""
    got, passed_on = [], []
    old = signal.signal(sig, lambda signum, frame: got.append((signum, time.monotonic())))
    try:
        hook = errors._redelivering(passed_on.append)
        t0 = time.monotonic()
        hook(_unraisable(exc))
        assert got == []  # not in the hook itself
        deadline = t0 + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        signal.signal(sig, old)
    assert [s for s, _ in got] == [sig] and passed_on == []
    assert 0.015 <= got[0][1] - t0 < 0.8  # "a moment later": 20 ms


def test_anything_else_a_finalizer_raises_goes_to_the_previous_hook():
    passed_on = []
    hook = errors._redelivering(passed_on.append)
    unraisable = _unraisable(ValueError("in __del__"))
    hook(unraisable)
    assert passed_on == [unraisable]


@pytest.mark.parametrize("how", ["flag", "env", "neither"])
def test_a_bug_shows_its_traceback_only_when_asked_and_redacted(capsys, monkeypatch, how):
    """--log-level debug or EDGE_DEBUG=1: the traceback first, with credentials hidden as in every line; else none."""
    monkeypatch.delenv("EDGE_DEBUG", raising=False)
    if how == "env":
        monkeypatch.setenv("EDGE_DEBUG", "1")
    args = argparse.Namespace(log_level="debug" if how == "flag" else "info")
    assert guard("edge", _raise(ValueError("rtsp://admin:hunter2@cam/stream")), args) == 1
    err = capsys.readouterr().err
    assert ("Traceback (most recent call last)" in err) == (how != "neither")
    if how != "neither":  # Python's own traceback, the exception's line last
        trace = err.splitlines()[:-1]
        assert trace[0] == "Traceback (most recent call last):" and trace[-1] == "ValueError: rtsp://admin:***@cam/stream"
    assert "hunter2" not in err and err.endswith("(a bug in edge; run with --log-level debug for details and report it)\n")


def test_one_line_cuts_past_the_limit_only():
    assert errors.one_line("x" * 10, limit=10) == "x" * 10
    assert errors.one_line("x" * 11, limit=10) == "x" * 10 + "… (1 more characters)"
    assert errors.one_line("a\nb", limit=10) == "a\\nb"


def test_the_log_handler_is_added_once_and_removed():
    import logging

    root = logging.getLogger()
    level = root.level
    errors.setup_logging("edge", "warning")
    errors.setup_logging("edge", "info")  # a CLI called twice in one process
    ours = [h for h in root.handlers if getattr(h, "_edge", False)]
    assert len(ours) == 1 and root.level == logging.INFO
    errors.drop_log_handler()
    root.setLevel(level)
    assert not any(getattr(h, "_edge", False) for h in root.handlers)
