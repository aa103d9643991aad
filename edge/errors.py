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
import signal
import sys
import traceback
from typing import Any, Callable, Optional

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


def one_line(text: object, limit: int = 600) -> str:
    """``text`` as one printable line of at most about ``limit`` characters (control characters escaped)."""
    s = str(text)
    if any(ord(c) < 32 or ord(c) == 127 for c in s):
        s = "".join(c if 32 <= ord(c) != 127 else repr(c)[1:-1] for c in s)
    if len(s) > limit:
        s = f"{s[:limit]}… ({len(s) - limit} more characters)"
    return s


def setup_logging(prog: str, level: Optional[str] = None) -> None:
    """One stderr handler for the process: ``prog: LEVEL name: message``, redacted."""
    from edge.redact import RedactingFormatter

    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_edge", False):
            root.removeHandler(h)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter(f"{prog}: %(levelname)s %(name)s: %(message)s"))
    handler._edge = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel((level or "info").upper())


class Terminated(BaseException):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt: every temp file is discarded on the way
    out (the default action killed the process and left them for the next run to clean up)."""


def _raise_on_sigterm() -> Optional[Any]:
    """Install the SIGTERM handler; returns the one it replaced (None off the main thread, where none can be set).
    edge run installs its own, which drains the pipeline first."""

    def handler(signum: int, frame: Any) -> None:
        raise Terminated()

    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:
        return None


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

    previous = _raise_on_sigterm()
    try:
        return fn(args)
    except EdgeError as exc:
        say(f"error: {exc}")
        return exc.exit_code
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    except Terminated:
        say("terminated")
        return 143
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly as cat does, and keep Python from complaining at exit.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
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
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
