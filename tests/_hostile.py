"""Shared by the hostile-input tests (tests/test_hostile_*.py): run a CLI as a user would and judge how it ended.

The rules every case is held to come from issue 14 and the review it answers
(reviews/hostile-inputs-2026-12.md): exit 0 or 2 (1 only for a run that started and then failed), an error is one
line naming the file, key, flag or value, never a Python traceback, previous outputs intact byte for byte, inputs
never overwritten, no temp files left behind, no password anywhere.

Children run in their own session with an address-space cap (``MAX_AS``) so that a memory bomb that is not yet
refused fails the test instead of taking this shared machine's memory; the peak RSS of each child comes back
from ``wait4``.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import os
import re
import resource
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

import pytest

from .conftest import OPENCV_INHERITED as _INHERITED
from .conftest import OPENCV_QUIET as _OPENCV_QUIET
from .conftest import PROMPT_S, ROOT, require_or_skip  # noqa: F401 (PROMPT_S is re-exported)

BIN = Path(sys.executable).parent

# edge-run quiets FFmpeg and OpenCV before OpenCV first opens a stream; conftest sets the same for this process
# (forked calls inherit it) and real child processes (``Child``) get only what was inherited, to show edge-run's own.
GiB = 1 << 30
# ONNX Runtime and OpenCV reserve a few GB of address space for thread arenas; 6 GiB lets every honest run through
# and stops a decompression or constant-folding bomb long before this 2-core, ~23 GB machine feels it.
MAX_AS = 6 * GiB


def entry(name: str) -> List[str]:
    """``edge``, ``edge-run`` or ``edge-build`` as installed in this environment (else through ``python -m edge``)."""
    exe = BIN / name
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-m", "edge", *{"edge-run": ["run"], "edge-build": ["build"]}.get(name, [])]


@dataclass
class Outcome:
    argv: List[str]
    code: int
    out: str
    err: str
    seconds: float
    peak_rss_mb: float = 0.0
    timed_out: bool = False

    def __str__(self) -> str:  # what a failing assertion shows
        cmd = " ".join(self.argv)
        return (
            f"\n$ {cmd[:400]}\nexit {self.code} in {self.seconds:.1f} s, peak RSS {self.peak_rss_mb:.0f} MB"
            f"{' (TIMED OUT)' if self.timed_out else ''}\n--- stderr ---\n{self.err[-3000:]}\n--- stdout ---\n{self.out[-1500:]}"
        )

    __repr__ = __str__  # pytest shows an assertion's message with repr()


def limits(
    fsize: Optional[int] = None,
    address_space: Optional[int] = MAX_AS,
    umask: Optional[int] = None,
) -> Callable[[], None]:
    """A preexec_fn: RLIMIT_FSIZE (bytes), RLIMIT_AS and umask, set in the child only. SIGINT starts at its default
    too: a pytest started in the background by a non-interactive shell has it ignored, which every child would
    inherit (POSIX keeps an ignored signal ignored across exec, and Python then installs no KeyboardInterrupt)."""

    def apply() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        if address_space is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        if umask is not None:
            os.umask(umask)

    return apply


class Child:
    """A CLI started in its own session; ``finish()`` reaps it with wait4 (exit status and peak RSS)."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[Union[str, Path]] = None,
        preexec: Optional[Callable[[], None]] = None,
        stdin: Optional[bytes] = None,
        stdout: Optional[int] = None,
    ) -> None:
        self.argv = [str(a) for a in argv]
        full_env = {k: v for k, v in os.environ.items() if k not in _OPENCV_QUIET or _INHERITED.get(k) is not None}
        full_env.update({"PYTHONWARNINGS": "ignore", **(env or {})})
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdout is None else stdout,
            stderr=subprocess.PIPE,  # pipes, not files: RLIMIT_FSIZE in the child must not cut its own messages
            env=full_env,
            cwd=str(cwd) if cwd else None,
            preexec_fn=preexec or limits(),
            start_new_session=True,
        )
        self._chunks: Dict[str, List[bytes]] = {"out": [], "err": []}
        self._readers = [
            threading.Thread(target=self._drain, args=(stream, self._chunks[key]), daemon=True)
            for key, stream in (("out", self.proc.stdout), ("err", self.proc.stderr))
            if stream is not None
        ]
        for t in self._readers:
            t.start()
        if stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.write(stdin)
            self.proc.stdin.close()

    @staticmethod
    def _drain(stream: IO[bytes], into: List[bytes]) -> None:
        for chunk in iter(lambda: stream.read1(65536), b""):
            into.append(chunk)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, sig)

    def running(self) -> bool:
        if self.proc.returncode is not None:
            return False
        pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
        if pid == 0:
            return True
        self._reaped(status, usage)
        return False

    def _reaped(self, status: int, usage: resource.struct_rusage) -> None:
        self.proc.returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        self.seconds = time.monotonic() - self.started
        self.rss_mb = usage.ru_maxrss / 1024

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Poll ``predicate`` while the child runs; False when the child ended or time ran out first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            if not self.running():
                return predicate()
            time.sleep(0.02)
        return False

    def stderr_so_far(self) -> str:
        return b"".join(self._chunks["err"]).decode(errors="replace")

    def finish(self, timeout: float = 120) -> Outcome:
        deadline = time.monotonic() + timeout
        timed_out = False
        while self.running():
            if time.monotonic() > deadline:
                timed_out = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                _, status, usage = os.wait4(self.proc.pid, 0)
                self._reaped(status, usage)
                break
            time.sleep(0.01)
        # Whatever the child left running in its session (a grandchild holding the pipes) goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for t in self._readers:
            t.join(10)
        outs = [b"".join(self._chunks[key]).decode(errors="replace") for key in ("out", "err")]
        return Outcome(self.argv, self.proc.returncode, outs[0], outs[1], self.seconds, self.rss_mb, timed_out)


def run(argv: Sequence[str], timeout: float = 120, **kw: object) -> Outcome:
    return Child(argv, **kw).finish(timeout)  # type: ignore[arg-type]


# Spawns argv, waits, and writes its peak RSS (KiB) to the file in argv[1]; exits with its status.
_MEASURED = """
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
with open(sys.argv[1], "w") as report:
    report.write(str(usage.ru_maxrss))
sys.exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
"""


def measured(argv: Sequence[object], timeout: float = 120, **kw: object) -> Outcome:
    """``argv`` started by a small Python process that reports its peak RSS. wait4 on a direct child of pytest counts
    pytest's own pages (ru_maxrss keeps the peak of the address space a child had before exec), so two peaks
    compared that way compare pytest's growth between them (a full suite measured 208 MB and 238 MB for a command
    that peaks at 70). For tests that compare peaks; signals reach the small process, not ``argv``."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "rss"
        o = run([sys.executable, "-S", "-c", _MEASURED, str(report), *map(str, argv)], timeout=timeout, **kw)
        return replace(o, argv=[str(a) for a in argv], peak_rss_mb=int(report.read_text()) / 1024 if report.exists() else 0.0)


def edge(*args: object, timeout: float = 120, **kw: object) -> Outcome:
    """``edge ARGS`` in a child process."""
    return run([*entry("edge"), *map(str, args)], timeout=timeout, **kw)


def edge_run(*args: object, timeout: float = 120, **kw: object) -> Outcome:
    return run([*entry("edge-run"), *map(str, args)], timeout=timeout, **kw)


def edge_build(*args: object, timeout: float = 120, **kw: object) -> Outcome:
    return run([*entry("edge-build"), *map(str, args)], timeout=timeout, **kw)


def call(
    argv: Sequence[object],
    main: Optional[Callable[[Optional[List[str]]], int]] = None,
    timeout: float = 60,
    address_space: int = MAX_AS,
    cwd: Optional[Union[str, Path]] = None,
) -> Outcome:
    """``edge ARGV`` in a child forked from this process: no interpreter start or imports (a refusal costs
    milliseconds), yet a case the code does not refuse cannot hang, flood or exhaust the test process: the child
    has ``address_space`` bytes and ``timeout`` seconds (then SIGALRM ends it: ``timed_out``), and runs in ``cwd``.

    ``main`` is ``edge.cli.main`` by default, or ``edge.cli.run_main`` / ``build_main`` for the named entry points.
    """
    import warnings

    from edge import cli

    fn = main or cli.main
    args = [str(a) for a in argv]
    out_f, err_f = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    sys.stdout.flush()
    sys.stderr.flush()
    t0 = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads: the child only runs edge's main
        pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 198
        try:
            os.setsid()
            if cwd is not None:
                os.chdir(cwd)
            resource.setrlimit(resource.RLIMIT_AS, (address_space, resource.RLIM_INFINITY))
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.alarm(max(1, int(timeout)))
            os.dup2(out_f.fileno(), 1)
            os.dup2(err_f.fileno(), 2)
            sys.stdout = open(1, "w", closefd=False, buffering=1, encoding="utf-8", errors="backslashreplace")
            sys.stderr = open(2, "w", closefd=False, buffering=1, encoding="utf-8", errors="backslashreplace")
            if "cv2" in sys.modules:  # OpenCV's thread pool does not survive fork(); run its loops inline
                sys.modules["cv2"].setNumThreads(0)
            try:
                code = fn(args)
            except SystemExit as exc:  # argparse
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
            except BaseException as exc:  # noqa: BLE001 - anything escaping the guard is a traceback for a user
                import traceback

                sys.stderr.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
                code = 199
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) and 0 <= code < 256 else 197)
    _, status, usage = os.wait4(pid, 0)
    timed_out = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    texts = []
    for f in (out_f, err_f):
        f.seek(0)
        texts.append(f.read().decode(errors="replace"))
        f.close()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # threads are gone with the child; children it started are not
    if timed_out and not texts[0] and not texts[1]:
        # Silent until the alarm: a fork of this multi-threaded process can inherit a lock that another thread held
        # (a native thread pool, the allocator). Run the same command in a fresh interpreter: a real hang hangs there
        # too, a fork artefact does not.
        entry = {id(cli.main): "main", id(cli.run_main): "run_main", id(cli.build_main): "build_main"}[id(fn)]
        code_text = f"import sys; from edge import cli; sys.exit(cli.{entry}(sys.argv[1:]))"
        return Child([sys.executable, "-c", code_text, *args], cwd=cwd, preexec=limits(address_space=address_space)).finish(
            timeout
        )
    return Outcome(args, code, texts[0], texts[1], time.monotonic() - t0, usage.ru_maxrss / 1024, timed_out)


# -- judging an outcome ---------------------------------------------------------------------------------------------

_PY_EXC = re.compile(r"^\w*(Error|Exception|Warning)(: |$)", re.M)
_ARGPARSE_ERROR = re.compile(r"^\S+( \S+)*: error: ")


def assert_no_traceback(o: Outcome) -> None:
    text = o.out + o.err
    assert "Traceback (most recent call last)" not in text, f"a Python traceback{o}"
    assert "Exception ignored" not in o.err, f"Python complained at exit{o}"
    assert not _PY_EXC.search(o.err), f"a bare Python exception line on stderr{o}"
    assert "a bug in edge" not in o.err, f"an exception the code did not expect (the guard's last resort){o}"
    assert not o.timed_out, f"did not finish{o}"
    assert o.code >= 0, f"killed by signal {-o.code}{o}"


def error_lines(o: Outcome) -> List[str]:
    """stderr as lines, with argparse's usage block (printed before its one error line) left out."""
    lines = [line for line in o.err.splitlines() if line.strip()]
    if lines and _ARGPARSE_ERROR.match(lines[-1]) and lines[0].startswith("usage:"):
        return lines[-1:]
    return lines


_LOG_RECORD = re.compile(r"^[\w .-]+: (DEBUG|INFO|WARNING) ")


def assert_refused(
    o: Outcome, *names: str, code: int = 2, parser: Optional[argparse.ArgumentParser] = None, before_work: bool = True
) -> str:
    """Exit ``code`` with one stderr line that names each of ``names``; returns that line.

    ``before_work``: a refusal before any work is the only line on stderr. Otherwise (an input found bad once the work
    started, such as an image the capture thread reads) progress log records may come first; the error is the one
    other line, and the last.
    """
    assert_no_traceback(o)
    assert o.code == code, f"expected exit {code}{o}"
    lines = error_lines(o)
    if not before_work:
        lines = [line for line in lines if not _LOG_RECORD.match(line)]
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}{o}"
    line = lines[0]
    assert line == error_lines(o)[-1], f"the error is not the last line{o}"
    assert "error" in line.lower(), f"the line does not say it is an error{o}"
    assert len(line) <= 600, f"an error line of {len(line)} characters{o}"
    for name in names:
        assert name in line, f"the error does not name {name!r}{o}"
    if parser is not None:
        assert_flags_exist(line, parser)
    return line


def assert_clean(o: Outcome, codes: Iterable[int] = (0, 2), parser: Optional[argparse.ArgumentParser] = None) -> None:
    """What every hostile input must end as: an allowed exit status and, for an error, one line; no traceback."""
    assert_no_traceback(o)
    codes = tuple(codes)
    assert o.code in codes, f"exit {o.code}, expected one of {codes}{o}"
    if o.code != 0:
        lines = error_lines(o)
        errors = [line for line in lines if "error" in line.lower()]
        assert len(errors) == 1 and errors[-1] == lines[-1], f"expected one error line, last on stderr{o}"
        if o.code == 2:
            assert len(lines) == 1, f"a refusal is one line on stderr{o}"
        assert len(lines[-1]) <= 600, f"an error line of {len(lines[-1])} characters{o}"
        if parser is not None:
            assert_flags_exist(lines[-1], parser)


def assert_failed_run(o: Outcome, *names: str, code: int = 1) -> str:
    """A run that started and could not finish: exit ``code``, its last stderr line is the error naming ``names``."""
    assert_no_traceback(o)
    assert o.code == code, f"expected exit {code}{o}"
    lines = error_lines(o)
    assert lines, f"no error line{o}"
    last = lines[-1]
    assert "error" in last.lower(), f"the last line is not the error{o}"
    for name in names:
        assert name in last, f"the error does not name {name!r}{o}"
    return last


# Another program's options in a message are fine ("edge-build --calib-cache", "trtexec --x", "pip install -e").
_OTHER_PROGRAM = re.compile(
    r"(edge-run|edge-build|edge \w+|trtexec|tegrastats|pip\w*|systemctl|apt(-get)?|ssh|rsync|journalctl)\b[^;,()]*$"
)


def assert_flags_exist(line: str, parser: argparse.ArgumentParser) -> None:
    """Every --flag a message suggests is one this command has (issue 14, item 9)."""
    known = set(parser._option_string_actions)
    for sub in parser._actions:
        if isinstance(sub, argparse._SubParsersAction):
            for p in sub.choices.values():
                known |= set(p._option_string_actions)
    for m in re.finditer(r"(?<![\w-])(--[a-z][a-z0-9-]*)", line):
        if m.group(1) in known or _OTHER_PROGRAM.search(line[: m.start()]):
            continue
        raise AssertionError(f"the message suggests {m.group(1)}, which this command does not have: {line}")


def command_parser(name: str) -> argparse.ArgumentParser:
    """The parser a user reaches: ``edge-run`` / ``edge-build`` or ``edge NAME``."""
    from edge import cli

    if name in ("edge-run", "edge-build"):
        return cli.entry_parser(name[len("edge-") :], name)
    top = cli.parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


# -- files ---------------------------------------------------------------------------------------------------------

_TEMP = re.compile(r"^\..*(\.partial|\.tmp|\.commit)(\.[^.]*)?$|^\..*\.\d+\.tmp$")


def temps(*folders: Path) -> List[Path]:
    """Hidden temp files a writer leaves beside its target (``.NAME.PID.X.partial.EXT``, ``.NAME.PID.tmp``, journals)."""
    found = []
    for folder in folders:
        if folder.is_dir():
            found += [p for p in folder.rglob(".*") if _TEMP.match(p.name) or ".partial" in p.name]
    return sorted(found)


def snapshot(*paths: Path) -> Dict[Path, Optional[bytes]]:
    return {p: (p.read_bytes() if p.is_file() else None) for p in paths}


def assert_unchanged(before: Dict[Path, Optional[bytes]], o: Optional[Outcome] = None) -> None:
    for path, data in before.items():
        now = path.read_bytes() if path.is_file() else None
        assert now == data, f"{path} changed ({'gone' if now is None else len(now)} bytes, was {len(data or b'')}){o or ''}"


def strict_json_loads(text: str) -> object:
    """json.loads that refuses NaN and Infinity, as every JSON parser but Python's does."""
    import json

    def bad(token: str) -> None:
        raise ValueError(f"{token} is not JSON")

    return json.loads(text, parse_constant=bad)


# -- places with faults ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def tmpfs(where: Path, size: str = "2m", options: str = "") -> Iterator[Path]:
    """A tiny tmpfs mounted at ``where`` (root only); skips the test with the reason when mounting is refused."""
    where.mkdir(parents=True, exist_ok=True)
    opts = f"size={size}" + (f",{options}" if options else "")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip() or 'mount failed'}); needs root")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(folder: Path, leave: int) -> Path:
    """Fill ``folder``'s file system until about ``leave`` bytes are free."""
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    filler = folder / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


def without_capabilities() -> List[str]:
    """An argv prefix that runs a command as this user but without capabilities: root then obeys file modes."""
    require_or_skip(have("setpriv"), "setpriv is not installed (apt-get install -y util-linux)")
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"]


# -- servers that stall ------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def silent_tcp() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that accepts connections and never sends a byte (a camera that hangs)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held: List[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                held.append(conn)
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        srv.close()


@contextlib.contextmanager
def http_file(path: Path, stall_after: Optional[int] = None, close: bool = False) -> Iterator[int]:
    """An HTTP server on 127.0.0.1 serving ``path`` under any URL (credentials and query ignored).

    With ``stall_after`` it sends that many bytes of the file and then nothing more, holding the connection open:
    a network stream that stalls mid-way; with ``close`` too it drops the connection there instead (a camera gone).
    """
    data = path.read_bytes()
    stop = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Type", "video/x-msvideo")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                if stall_after is None:
                    self.wfile.write(data)
                else:
                    self.wfile.write(data[:stall_after])
                    self.wfile.flush()
                    if not close:
                        stop.wait()
            except OSError:
                pass

        def log_message(self, *args: object) -> None:
            pass

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    t.start()
    try:
        yield server.server_address[1]
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


# -- inputs ------------------------------------------------------------------------------------------------------------


def onnx_conv(
    path: Path,
    shape: Sequence[int] = (1, 3, 16, 16),
    input_name: str = "input",
    output_name: str = "output",
    hidden_name: str = "hidden",
) -> Path:
    """A small real ONNX model: Conv 3x3 (3 -> 4 channels) + Relu, float32, NCHW."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    n, c, h, w = shape
    weight = numpy_helper.from_array(rng.standard_normal((4, c, 3, 3)).astype(np.float32) * 0.2, "weight")
    bias = numpy_helper.from_array(np.zeros(4, np.float32), "bias")
    nodes = [
        helper.make_node("Conv", [input_name, "weight", "bias"], [hidden_name], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", [hidden_name], [output_name], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, [n, 4, h, w])],
        [weight, bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString())
    return path


def onnx_constant_bomb(path: Path, side: int = 30000) -> Path:
    """A few hundred bytes of ONNX whose constant folding would need 3*side*side floats (10.8 GB at 30000)."""
    from onnx import TensorProto, helper

    shape = helper.make_tensor("shape", TensorProto.INT64, [4], [1, 3, side, side])
    nodes = [
        helper.make_node(
            "ConstantOfShape", ["shape"], ["big"], name="big", value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])
        ),
        helper.make_node("ReduceSum", ["big"], ["sum"], name="sum", keepdims=0),
        helper.make_node("Add", ["x", "sum"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "bomb",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


def png_header_bomb(path: Path, side: int = 30000) -> Path:
    """A valid grey PNG of side x side pixels, all zero: a few MB on disk, side*side*3 bytes once decoded to BGR."""
    import struct

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    comp = zlib.compressobj(1)  # zeros: level 9 is 3 times slower for a file 1 MB instead of 4
    row = b"\0" * (side + 1)  # filter byte + one byte per grey pixel
    parts = []
    block = row * 64
    for _ in range(side // 64):
        parts.append(comp.compress(block))
    parts.append(comp.compress(row * (side % 64)))
    parts.append(comp.flush())
    ihdr = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", b"".join(parts)) + chunk(b"IEND", b""))
    return path


def demo_config(folder: Path, extra: str = "") -> Path:
    """configs/demo.yaml (the BlazeFace demo on Megamind.avi) copied into ``folder``, with ``extra`` YAML appended."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = folder / "base.yaml"
    cfg.write_text((ROOT / "configs" / "demo.yaml").read_text() + extra)
    return cfg


def B(cfg: Path, *extra: object, **kw: object) -> Outcome:
    """The review's ``B``: ``edge-run -c base.yaml -q --telemetry none`` and more flags, in a child process."""
    return edge_run("-c", cfg, "-q", "--telemetry", "none", *extra, **kw)


def images(folder: Path, count: int = 4, size: int = 32) -> Path:
    """A folder of small real PNG images (gradients with noise), for calibration and image sources."""
    import cv2
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    for i in range(count):
        img = (np.linspace(0, 255, size * size * 3).reshape(size, size, 3) + rng.integers(0, 40, (size, size, 3))) % 256
        cv2.imwrite(str(folder / f"img{i:02d}.png"), img.astype(np.uint8))
    return folder


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


__all__ = [
    "B",
    "GiB",
    "Outcome",
    "assert_clean",
    "assert_failed_run",
    "assert_no_traceback",
    "assert_refused",
    "assert_unchanged",
    "call",
    "command_parser",
    "demo_config",
    "edge",
    "edge_build",
    "edge_run",
    "fill",
    "have",
    "http_file",
    "images",
    "limits",
    "without_capabilities",
    "onnx_constant_bomb",
    "onnx_conv",
    "png_header_bomb",
    "require_or_skip",
    "run",
    "silent_tcp",
    "snapshot",
    "strict_json_loads",
    "temps",
    "tmpfs",
]
