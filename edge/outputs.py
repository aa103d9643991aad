"""Every file edge writes: the one atomic-write path, and the checks made on outputs before any work starts.

Writing: a temp file is created exclusively (O_EXCL, so no symlink or planted file is followed) in the target's own
folder, written, flushed, fsynced and closed with errors checked, then renamed over the target and the folder is
fsynced. On any failure the temp is removed and the old file stays as it was. Temp names carry the writer's pid
(``.NAME.PID.RANDOM.partial.EXT``, the extension last because OpenCV picks the container from it), so a process
killed with SIGKILL leaves a temp that the next writer of the same target removes once that pid is gone.

Files that must land together (an engine and its manifest) are committed through a journal: both temps are
complete and synced, then ``.NAME.commit`` names them, then they are renamed, then the journal goes. A process
killed anywhere leaves the old pair, or a journal that ``settle()`` rolls forward to the new pair.

Modes: outputs get what a plain ``open()`` would give under the process umask (0644 with the usual 022); files
that may hold credentials are written with ``private=True`` (0600, or a mode the caller passes).
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import stat
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from edge.errors import EdgeError
from edge.inputs import read_capped

PathLike = Union[str, "os.PathLike[str]"]


def _umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _temp_parts(path: Path) -> Tuple[str, str]:
    return f".{path.stem}.{os.getpid()}.", f".partial{path.suffix}"


_TEMP_RE = r"\.{stem}\.(\d+)\.[A-Za-z0-9_]+\.partial{suffix}"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (one of another user counts as running)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(path: PathLike) -> List[Path]:
    """Remove temps of ``path`` left by writers that no longer run (SIGKILL, power loss); only regular files we own."""
    target = Path(path)
    pattern = re.compile(_TEMP_RE.format(stem=re.escape(target.stem), suffix=re.escape(target.suffix)))
    removed = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if not m or pid_alive(int(m.group(1))):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            continue
    return removed


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the rename itself is still atomic
    finally:
        os.close(fd)


def _write_error(path: Path, exc: OSError) -> EdgeError:
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        reason += " (the disk is full)"
    elif exc.errno == errno.EFBIG:
        reason += " (the file-size limit, ulimit -f)"
    return EdgeError(f"cannot write {path}: {reason}; the previous file, if any, is unchanged")


@contextmanager
def uninterrupted() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM while a commit runs and act on them once it is done: an interrupt between a journal
    and its renames left the journal and the temps for the next run (found by delivering SIGTERM at each rename).
    A commit is a few renames and fsyncs, so the wait is short. Off the main thread signals cannot be held, and the
    main thread receives them anyway."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: List[Tuple[int, Any]] = []
    saved = {sig: signal.signal(sig, lambda signum, frame: pending.append((signum, frame))) for sig in _HELD}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        if pending:
            signum, frame = pending[0]
            handler = saved[signum]
            if callable(handler):
                handler(signum, frame)  # raises KeyboardInterrupt, edge's Terminated, or edge run's drain
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), signum)


_HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class Staged:
    """A temp file beside ``path`` that becomes ``path`` on ``commit()``; ``discard()`` removes it.

    ``fd`` is the open descriptor and ``tmp`` its name (OpenCV's writer opens files by name). Used directly by
    writers that stream (results JSONL, video); ``atomic_open`` and ``write_atomic`` wrap it for the others.
    """

    def __init__(self, path: PathLike, private: bool = False, mode: Optional[int] = None) -> None:
        self.path = Path(path)
        folder = self.path.parent
        if not folder.is_dir():
            raise EdgeError(f"{self.path}: folder {folder} does not exist; create it or choose another path")
        remove_stale_temps(self.path)
        prefix, suffix = _temp_parts(self.path)
        try:
            self.fd, name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=folder)  # O_EXCL, mode 0600
        except OSError as exc:
            raise _write_error(self.path, exc) from None
        self.tmp = Path(name)
        self.mode = mode if mode is not None else (0o600 if private else _umask_mode())
        self.closed = False

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError as exc:
            raise _write_error(self.path, exc) from None

    def finish(self) -> None:
        """fsync and close, checking both; after this the temp holds the complete file."""
        if self.closed:
            return
        self.closed = True
        try:
            os.fchmod(self.fd, self.mode)
            os.fsync(self.fd)
        except OSError as exc:
            os.close(self.fd)
            raise _write_error(self.path, exc) from None
        try:
            os.close(self.fd)
        except OSError as exc:
            raise _write_error(self.path, exc) from None

    def commit(self) -> Path:
        with uninterrupted():
            try:
                self.finish()
                os.replace(self.tmp, self.path)
            except BaseException:
                self.discard()
                raise
            _fsync_dir(self.path.parent)
        return self.path

    def discard(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                os.close(self.fd)
            except OSError:
                pass
        try:
            os.unlink(self.tmp)
        except FileNotFoundError:
            pass

    def keep_as(self, other: PathLike) -> Path:
        """Keep what was written under another name (a failed stream's complete part)."""
        self.finish()
        os.replace(self.tmp, other)
        return Path(other)


@contextmanager
def atomic_open(path: PathLike, text: bool = False, private: bool = False, encoding: str = "utf-8") -> Iterator[IO[Any]]:
    """``with atomic_open(p, text=True) as f: f.write(...)``: ``p`` is replaced only if the block succeeds."""
    staged = Staged(path, private=private)
    try:
        raw = os.fdopen(os.dup(staged.fd), "w" if text else "wb", **({"encoding": encoding} if text else {}))
        try:
            yield raw
            raw.flush()
        finally:
            raw.close()
        staged.commit()
    except OSError as exc:
        staged.discard()
        raise _write_error(staged.path, exc) from None
    except BaseException:
        staged.discard()
        raise


def write_atomic(path: PathLike, data: Union[str, bytes], private: bool = False, mode: Optional[int] = None) -> Path:
    """Replace ``path`` with ``data`` atomically (str is written as UTF-8)."""
    staged = Staged(path, private=private, mode=mode)
    try:
        staged.write(data.encode("utf-8") if isinstance(data, str) else data)
        return staged.commit()
    except BaseException:
        staged.discard()
        raise


def write_json(path: PathLike, data: Any, private: bool = False) -> Path:
    """Strict JSON (NaN and infinity become null: they are not JSON), indented, atomically."""
    return write_atomic(path, json.dumps(strict_json(data), indent=2, ensure_ascii=False) + "\n", private=private)


def strict_json(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None, so ``json.dumps`` writes valid JSON."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, Mapping):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


# -- files that land together ------------------------------------------------------------------------------------


def _journal(first: Path) -> Path:
    return first.with_name(f".{first.name}.commit")


def settle(first: PathLike) -> bool:
    """Finish a pair commit that a killed process left half done (a journal beside ``first``); True if it did.

    Called before a pair is read or written again. The journal exists only after every temp was complete and
    synced, so rolling forward is always right.
    """
    journal = _journal(Path(first))
    try:
        entries = json.loads(read_capped(journal, 1 << 20))
    except FileNotFoundError:
        return False
    except (OSError, ValueError) as exc:
        raise EdgeError(f"{journal}: an interrupted write left a journal that cannot be read ({exc}); delete it") from None
    try:
        for tmp, final in entries:
            tmp_path, final_path = journal.parent / tmp, journal.parent / final
            if tmp_path.exists():
                os.replace(tmp_path, final_path)
        os.unlink(journal)
    except (OSError, TypeError, ValueError) as exc:
        raise EdgeError(
            f"{journal}: an interrupted write of {first} must be finished but cannot be ({exc}); run the same command "
            "again as a user who can write that folder"
        ) from None
    _fsync_dir(journal.parent)
    return True


class Held:
    """A lock taken by ``hold``; ``close()`` (or the object's end) removes the lock file and releases it."""

    def __init__(self, fd: int, lock: Path) -> None:
        self.fd, self.lock = fd, lock

    def close(self) -> None:
        if self.fd < 0:
            return
        try:
            if _same_file(self.lock, self.fd):
                os.unlink(self.lock)  # still locked: whoever opened it meanwhile finds it unlinked and starts over
        except OSError:
            pass
        os.close(self.fd)
        self.fd = -1

    __del__ = close

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _same_file(path: Path, fd: int) -> bool:
    a, b = os.stat(path, follow_symlinks=False), os.fstat(fd)
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def hold(path: Path, flag: str) -> Held:
    """An exclusive lock on the output set named by ``path`` (a cache and its sidecar, an engine and its manifest)
    until the returned object is closed or dropped (keep it in a local: it goes when the function that took it
    ends): a second edge writing the same set is refused at its start, naming the first one's pid, instead of the
    two commits mixing their files.

    The lock is the file ``.NAME.lock`` beside ``path``, removed on release while still locked; a process that
    opened it just before finds, once it holds the lock, that the name is no longer its file, and tries again."""
    import fcntl

    lock = path.with_name(f".{path.name}.lock")
    for _ in range(5):
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
        except OSError as exc:
            raise EdgeError(
                f"{flag} {path}: cannot take its lock {lock.name} ({exc.strerror or exc}); check the folder"
            ) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise EdgeError(f"{flag} {path}: its lock {lock.name} is not a regular file; remove it")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                other = os.pread(fd, 16, 0).decode("ascii", "replace").strip()
                raise EdgeError(
                    f"{flag} {path}: another edge (pid {other if other.isdigit() else '?'}) is writing it now; wait "
                    "for it to finish, or choose another path"
                ) from None
            if not _same_file(lock, fd):  # released and removed by its holder after we opened it
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except FileNotFoundError:  # removed between the open and the check: the same, try again
            os.close(fd)
            continue
        except BaseException:
            os.close(fd)
            raise
        return Held(fd, lock)
    raise EdgeError(f"{flag} {path}: its lock {lock.name} keeps changing; another edge is writing it, try again")


def commit_together(staged: Sequence[Staged]) -> List[Path]:
    """Rename several finished temps into place so that a kill leaves all old files or (after ``settle``) all new."""
    if not staged:
        return []
    first = staged[0].path
    folder = first.parent
    if any(s.path.parent != folder for s in staged):
        raise ValueError("files committed together must share a folder")
    with uninterrupted():
        try:
            for s in staged:
                s.finish()
            write_atomic(_journal(first), json.dumps([[s.tmp.name, s.path.name] for s in staged]))
        except BaseException:
            for s in staged:
                s.discard()
            raise
        settle(first)
    return [s.path for s in staged]


def write_together(files: Sequence[Tuple[PathLike, Union[str, bytes]]]) -> List[Path]:
    """Write each (path, content) to its temp, then ``commit_together``: a failed write or a kill leaves the old set."""
    staged: List[Staged] = []
    try:
        for path, content in files:
            staged.append(Staged(path))
            staged[-1].write(content.encode() if isinstance(content, str) else content)
    except BaseException:
        for s in staged:
            s.discard()
        raise
    return commit_together(staged)


# -- checks made before the work -----------------------------------------------------------------------------------


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)  # the same inode: hard links, symlinks, any spelling
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _one_of(path: Path, folder: Path) -> bool:
    """Whether an existing ``path`` is one of the files of an input folder (an image of --images), in any spelling or
    as a hard link; a new file in that folder is not one of its inputs."""
    try:
        st = path.stat()
    except OSError:
        return False
    try:
        return any(
            e.is_file() and (lambda s: (s.st_dev, s.st_ino) == (st.st_dev, st.st_ino))(e.stat()) for e in os.scandir(folder)
        )
    except OSError:
        return False


def _check_name_length(flag: str, path: Path) -> None:
    """The longest name a writer makes beside ``path`` (its temp, or the journal of a set) must fit the folder's name
    limit, or the run would fail only when it writes, after the work."""
    try:
        limit = os.pathconf(path.parent, "PC_NAME_MAX") if path.parent.is_dir() else 255
    except (OSError, ValueError):
        limit = 255
    if not path.name:
        return  # '.': a directory, which the caller refuses next
    prefix, suffix = _temp_parts(path)
    longest = max(len(os.fsencode(prefix + "x" * 8 + suffix)), len(os.fsencode(_journal(path).name)))
    if longest > limit:
        spare = longest - len(os.fsencode(path.name))
        raise EdgeError(
            f"{flag} {path.name[:40]}...: a name of {len(os.fsencode(path.name))} bytes is too long; the temp written "
            f"beside it needs {spare} more and the folder allows {limit}; use at most {limit - spare} bytes"
        )


def check_outputs(outputs: Mapping[str, Optional[PathLike]], inputs: Optional[Mapping[str, Optional[PathLike]]] = None) -> None:
    """Refuse, before any work, outputs that cannot be written or that are one of the inputs.

    ``outputs`` and ``inputs`` map the flag or key a user gave (``--json``, ``model.path``) to its path; None is
    skipped. Each refusal is one line naming the flag and the fix (EdgeError, exit 2).
    """
    seen: Dict[str, Path] = {}
    given_inputs = {k: Path(v) for k, v in (inputs or {}).items() if v is not None and str(v) != ""}
    for flag, value in outputs.items():
        if value is None or str(value) == "":
            continue
        path = Path(value)
        folder = path.parent
        if str(value).endswith(("/", os.sep)):
            raise EdgeError(f"{flag} {value}: ends in '/', a folder; give a file name (for example {path / 'out'})")
        _check_name_length(flag, path)  # first: a name too long makes even stat() fail
        if path.is_symlink():  # the rename that makes the file atomic would replace the link, not write through it
            raise EdgeError(f"{flag} {path}: is a symbolic link; give the path it points to, or another name")
        if path.is_dir():
            raise EdgeError(f"{flag} {path}: is a directory; give a file name (for example {path / 'out'})")
        if not folder.is_dir():
            raise EdgeError(f"{flag} {path}: folder {folder} does not exist; create it or choose another path")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise EdgeError(f"{flag} {path}: folder {folder} is not writable by this user; choose another path")
        if path.exists() and not path.is_file():
            raise EdgeError(f"{flag} {path}: exists and is not a regular file; choose another path")
        for in_flag, in_path in given_inputs.items():
            if _same(path, in_path) or (in_path.is_dir() and _one_of(path, in_path)):
                raise EdgeError(f"{flag} {path}: is the same file as the input {in_flag} {in_path}; write to a new file")
        for other_flag, other in seen.items():
            if _same(path, other):
                raise EdgeError(f"{flag} {path}: is the same file as {other_flag}; give each output its own file")
        seen[flag] = path
