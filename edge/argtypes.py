"""argparse value types shared by every command: a bad value is refused at parse time, naming the flag.

Every float flag refuses NaN and infinity (``float("nan")`` parses, and then never compares true with anything,
so ``--duration nan`` used to run forever).
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any, Callable

# More threads than this is a typo or an attack (each costs a stack); ONNX Runtime gains nothing past the cores.
MAX_THREADS = 256


def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text[:40]!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text[:40]!r}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text[:40]!r}") from None


def _at_least(parse: Callable[[str], Any], bound: float, strict: bool, what: str) -> Callable[[str], Any]:
    def check(text: str) -> Any:
        value = parse(text)
        if value < bound or (strict and value == bound):
            raise argparse.ArgumentTypeError(f"expected {what} {'>' if strict else '>='} {bound:g}, got {text[:40]!r}")
        return value

    return check


positive_float = _at_least(finite_float, 0, True, "a number")
non_negative_float = _at_least(finite_float, 0, False, "a number")
positive_int = _at_least(_int, 0, True, "an integer")
non_negative_int = _at_least(_int, 0, False, "an integer")


def threads(text: str) -> int:
    value = non_negative_int(text)
    if value > MAX_THREADS:
        raise argparse.ArgumentTypeError(f"{value} threads is more than the {MAX_THREADS} allowed; 0 picks a sane default")
    return value


def port(text: str) -> int:
    value = _int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port 1..65535, got {text[:40]!r}")
    return value


def output_file(text: str) -> str:
    """A file to write: not empty (an empty value used to mean "not given") and not a folder spelled with a
    trailing slash (which pathlib drops, so a file named after the folder was written)."""
    if not text:
        raise argparse.ArgumentTypeError("expected a file name, got an empty value")
    if text.endswith(("/", os.sep)):
        raise argparse.ArgumentTypeError(f"{text[:60]!r} ends in '/', a folder; give a file name in it")
    return text


class Names(list):
    """The names of a comma-separated flag. An error that quotes the flag's value shows its repr, the text as typed
    (gpu,dla); str stays a list's, so that text is not mistaken for part of the error's own words
    (edge.config.flag_errors)."""

    def __repr__(self) -> str:
        return ",".join(self) or "''"

    def __str__(self) -> str:
        return list.__repr__(self)


def name_list(text: str) -> Names:
    """``gpu,dla0`` -> ``["gpu", "dla0"]`` (--engines of edge-build and edge-run); the names themselves are checked
    with the config key they set."""
    return Names(name.strip() for name in text.split(","))
