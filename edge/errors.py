"""User-facing errors.

The CLI prints the message of an ``EdgeError`` as one line and exits with its ``exit_code``;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable


class EdgeError(Exception):
    """Bad input from the user: a file, key or value that is wrong, with the fix. Exit status 2."""

    exit_code = 2


class ConfigError(EdgeError):
    """A config file or CLI override that does not match the schema."""


class MissingDependency(EdgeError):
    """An optional module that this command needs is not installed."""


class RunFailed(EdgeError):
    """The run started but could not go on (a sink failed, a stream was lost). Exit status 1."""

    exit_code = 1


def guard(prog: str, fn: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a command's ``main``: an EdgeError becomes one line on stderr and its exit status."""
    try:
        return fn(args)
    except EdgeError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
