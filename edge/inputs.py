"""Reading the inputs that should be small (configs, labels, manifests, caches, sidecars, JSON, images).

Each is opened without blocking (a FIFO named like a file would otherwise hold ``open()`` until a writer comes),
must be a regular file (``/dev/zero`` behind a link never ends), has its size checked before any byte is read, and
is read with a cap, since a file can grow between the check and the read. The one place that decides this, so
every reader refuses a special file by name and never reads more than its limit.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Optional, Union

from edge.errors import EdgeError

PathLike = Union[str, Path]

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def kind(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words ("a FIFO"); "a regular file" for one."""
    return next((name for test, name in _KINDS if test(mode)), "a regular file" if stat.S_ISREG(mode) else "not a file")


def special(path: PathLike) -> Optional[str]:
    """ "a FIFO", "a character device"…: what ``path`` is when it exists (links followed) and is not a regular file;
    None for a regular file and for a path that does not exist (the caller's "not found" is the right word there)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return None if stat.S_ISREG(mode) else kind(mode)


def missing(path: PathLike) -> str:
    """Why ``path`` is not a file to read, for a path that failed ``is_file()``: "file not found", or
    "a FIFO, not a regular file" when something else is there (the user then looks at the right thing)."""
    what = special(path)
    return f"{what}, not a regular file" if what else "file not found"


class Refused(OSError):
    """An input that is not a regular file, or larger than its cap. ``strerror`` says which, in words."""


def open_regular(path: PathLike) -> int:
    """A read-only descriptor of ``path`` after checking it is a regular file; ``Refused`` for anything else.
    O_NONBLOCK makes opening a FIFO return at once (it is then refused by its mode; on a regular file the flag has
    no effect); O_NOCTTY keeps a terminal device from becoming ours."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise Refused(0, f"not a regular file ({kind(mode)})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_capped(path: PathLike, cap: int) -> bytes:
    """All of a regular file of at most ``cap`` bytes; ``Refused`` (or the OSError of the open) otherwise."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(fd).st_size
        if size > cap:
            raise Refused(0, f"{size} bytes, more than the {cap} this file may hold")
        # read(n) allocates n bytes before reading: ask for what the file holds, and a byte more to see it end.
        data = f.read(size + 1)
        if len(data) > size:  # larger than it said (it grew, or procfs says 0): the rest, to a byte past the cap
            data += f.read(cap + 1 - len(data))
    if len(data) > cap:
        raise Refused(0, f"more than the {cap} bytes this file may hold (it grew while being read)")
    return data


def read_small(path: PathLike, cap: int, what: str, fix: str = "") -> bytes:
    """``read_capped`` with every refusal as one EdgeError line: ``{what} '{path}': {why}[; {fix}]``."""
    try:
        return read_capped(path, cap)
    except OSError as exc:
        why = "no such file" if isinstance(exc, FileNotFoundError) else (exc.strerror or str(exc))
        raise EdgeError(f"{what} '{path}': {why}" + (f"; {fix}" if fix else "")) from None
