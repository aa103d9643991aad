"""User-facing errors, and the guard every command runs under.

The guard prints an ``EdgeError`` as one line and exits with its ``exit_code`` (2 for bad input, 1 for a run that
started and could not go on). Anything else is a bug: one line naming it and "run with --log-level debug for
details", never a traceback unless asked for. Every line is redacted (no passwords) and kept short.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import re
import signal
import sys
import threading
import time
import traceback
from typing import Any, Callable, Dict, Optional

LEVELS = ("debug", "info", "warning", "error")


class EdgeError(Exception):
    """Bad input from the user: a file, key or value that is wrong, with the fix. Exit status 2."""

    exit_code = 2


class ConfigError(EdgeError):
    """A config file or CLI override that does not match the schema.

    ``key`` and ``detail`` are set when one key is at fault, so a value that came from a flag can be reported under
    the flag's name instead of the config file's.
    """

    def __init__(self, message: str, key: Optional[str] = None, detail: Optional[str] = None) -> None:
        super().__init__(message)
        self.key, self.detail = key, detail


class MissingDependency(EdgeError):
    """An optional module that this command needs is not installed."""


class RunFailed(EdgeError):
    """The run started but could not go on (a sink failed, a stream was lost). Exit status 1."""

    exit_code = 1


# C0 controls, DEL and C1 controls (U+009B is a one-character CSI on some terminals): what drives a terminal.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def printable(text: object) -> str:
    """``text`` with every control character written as its Python escape (ESC as \\x1b, a newline as \\n): the one
    escaping of names, paths, topics and headers from outside before they reach a terminal or a log."""
    s = str(text)
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], s) if _CONTROL.search(s) else s


LINE_LIMIT = 600  # characters of a one-line message before it is cut


def one_line(text: object, limit: int = LINE_LIMIT) -> str:
    """``text`` as one printable line of at most about ``limit`` characters (control characters escaped)."""
    s = printable(text)
    if len(s) > limit:
        s = f"{s[:limit]}… ({len(s) - limit} more characters)"
    return s


def emit(text: str) -> None:
    """``text`` on stdout, each line escaped with ``printable``. Called once a command's files are written: a stdout
    that cannot take it (a full disk, /dev/full) is then one RunFailed line that says so, not a disk error that reads
    as if the files were lost. A reader that went away (``| head``) stays BrokenPipeError, which the guard ends quietly."""
    try:
        print("\n".join(printable(line) for line in text.split("\n")), flush=True)
    except BrokenPipeError:
        raise
    except OSError as exc:
        _drop_stdout()  # what is still buffered would fail again at exit, with Python's complaint on stderr
        raise RunFailed(f"cannot print to stdout ({exc.strerror or exc}); every output file is written") from None


def _drop_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def drop_log_handler() -> None:
    """Remove the stderr handler ``setup_logging`` added (a CLI called twice in one process, or by a test)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_edge", False):
            root.removeHandler(h)


def setup_logging(prog: str, level: Optional[str] = None) -> None:
    """One stderr handler for the process: ``prog: LEVEL name: message``, redacted."""
    from edge.redact import RedactingFormatter

    drop_log_handler()
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter(f"{prog}: %(levelname)s %(name)s: %(message)s"))
    handler._edge = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel((level or "info").upper())


# Signals that end a command as Ctrl-C does: a stop (systemd, kill), a dropped SSH session or terminal, Ctrl+backslash.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class Terminated(BaseException):
    """A stop signal, raised in the main thread like Ctrl-C's KeyboardInterrupt: every temp file is discarded on the
    way out (the default action killed the process and left them for the next run to clean up)."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def words(self) -> str:
        return "terminated" if self.signum == signal.SIGTERM else f"stopped by {signal.Signals(self.signum).name}"


def stop_exception(signum: int) -> BaseException:
    """What a stop signal raises in the main thread: Ctrl-C's KeyboardInterrupt, else Terminated."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def _raise_on_stop_signals() -> Dict[int, Any]:
    """Install the handlers of STOP_SIGNALS; returns the ones they replaced (none off the main thread, where none
    can be set). edge run installs its own, which drain the pipeline first."""

    def handler(signum: int, frame: Any) -> None:
        raise stop_exception(signum)

    try:
        return {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    except ValueError:
        return {}


def _redelivering(previous: Callable[[Any], None]) -> Callable[[Any], None]:
    """A ``sys.unraisablehook`` that gives a stop back to the command: a signal's handler runs at the main thread's
    next bytecode, which may be inside a finalizer (a ``__del__``, or a generator the garbage collector closes), and
    Python drops what a finalizer raises ("Exception ignored in ..."), so the command went on to the end and exited
    0. The signal is sent again from another thread a moment later, once this hook has returned (sent at once, it
    landed in the hook itself, which drops it too); landing in another finalizer, it comes back here."""

    def again(signum: int) -> None:
        time.sleep(0.02)
        os.kill(os.getpid(), signum)

    def hook(unraisable: Any) -> None:
        exc = unraisable.exc_value
        if isinstance(exc, (Terminated, KeyboardInterrupt)):
            signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
            threading.Thread(target=again, args=(signum,), name="stop-again", daemon=True).start()
            return
        previous(unraisable)

    return hook


_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def guard(prog: str, fn: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a command's ``main`` and turn every way it can end into an exit status and at most one line."""
    from edge.redact import redact

    debug = getattr(args, "log_level", None) == "debug" or bool(os.environ.get("EDGE_DEBUG"))

    def say(message: str) -> None:
        try:
            print(f"{prog}: {one_line(redact(message))}", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass  # stderr is gone too

    previous = _raise_on_stop_signals()
    unraisable = sys.unraisablehook
    sys.unraisablehook = _redelivering(unraisable)
    try:
        return fn(args)
    except EdgeError as exc:
        say(f"error: {exc}")
        return exc.exit_code
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    except Terminated as exc:
        say(exc.words)
        return 128 + exc.signum
    except BrokenPipeError:
        _drop_stdout()  # the reader went away (`| head`): stop quietly as cat does, and keep Python from complaining at exit
        return 141
    except MemoryError:
        say("error: out of memory; the input is larger than this machine can hold (see --help for size limits)")
        return 1
    except Exception as exc:  # a bug: say so in one line; the traceback only when asked for
        if isinstance(exc, OSError) and exc.errno in _FULL:
            # Every file edge writes turns these into its own error; what is left is printing, to a full disk.
            say(f"error: cannot write the output ({exc.strerror}); free some space or raise the file-size limit")
            return 2
        if debug:
            sys.stderr.write(redact("".join(traceback.format_exception(type(exc), exc, exc.__traceback__))))
        say(
            f"error: unexpected {type(exc).__name__}: {exc} (a bug in edge; run with --log-level debug for details and report it)"
        )
        return 1
    finally:
        sys.unraisablehook = unraisable
        for sig, handler in previous.items():
            signal.signal(sig, handler)
