"""The sampler thread and backend selection.

    sampler = open_sampler("auto", interval_s=0.1)    # picks jtop -> tegrastats -> sysfs -> nvml -> none
    print(sampler.backend_name, sampler.choice_reason)
    sampler.start()
    ...                                               # camera loop: sampler.latest() never blocks
    sampler.stop()
    sampler.write(run_dir)                            # telemetry.jsonl, telemetry.csv, telemetry_meta.json

The thread reads the backend on absolute monotonic deadlines (no drift), keeps samples in a bounded ring
buffer, counts overruns (a read that took longer than the period) and backend errors, and never dies of one.
A slow backend only delays the sampler thread; ``latest()`` and ``samples()`` return at once.
"""

from __future__ import annotations

import collections
import threading
import time
from pathlib import Path
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from edge.errors import EdgeError, MissingDependency
from edge.telemetry.backend import Backend, NullBackend, TelemetryUnavailable
from edge.telemetry.files import CSV_NAME, JSONL_NAME, META_NAME, write_csv, write_jsonl, write_meta
from edge.telemetry.jtop_backend import JtopBackend
from edge.telemetry.nvml import NvmlBackend
from edge.telemetry.replay import ReplayBackend
from edge.telemetry.sample import Sample
from edge.telemetry.sysfs import SysfsBackend
from edge.telemetry.tegrastats import TegrastatsBackend

AUTO_ORDER = ("jtop", "tegrastats", "sysfs", "nvml")  # then "none", which always works
BACKENDS = AUTO_ORDER + ("none", "replay")
DEFAULT_CAPACITY = 36_000  # one hour at 10 Hz


class Sampler:
    def __init__(
        self,
        backend: Backend,
        interval_s: float = 0.1,
        capacity: int = DEFAULT_CAPACITY,
        choice_reason: str = "",
        skipped: Tuple[str, ...] = (),
    ):
        if interval_s <= 0:
            raise EdgeError(f"telemetry interval_s={interval_s} must be > 0 (for example 0.1 for 10 Hz)")
        self.backend = backend
        self.interval_s = interval_s
        self.choice_reason = choice_reason
        self.skipped = skipped  # backends auto tried first and could not open
        self.overruns = 0
        self.errors = 0
        self.last_error: Optional[str] = None
        self._buf: Deque[Sample] = collections.deque(maxlen=capacity)
        self._appended = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    @property
    def backend_name(self) -> str:
        return self.backend.name

    def start(self) -> Sampler:
        """Start the daemon thread (the backend is already open). Calling it again does nothing."""
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._run, name="edge-telemetry", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        deadline = time.monotonic()
        while not self._stop.is_set():
            try:
                sample = self.backend.read()
            except Exception as exc:  # a backend fault costs one tick, never the thread
                self.errors += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
            else:
                if sample is not None:
                    self._buf.append(sample)
                    self._appended += 1
            deadline += self.interval_s
            delay = deadline - time.monotonic()
            if delay < 0:
                self.overruns += 1
                deadline = time.monotonic()  # skip the missed ticks instead of reading in a burst
            self._stop.wait(max(0.0, delay))

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread and close the backend. Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if not self._closed:
            self._closed = True
            self.backend.close()

    def latest(self) -> Optional[Sample]:
        """The newest sample, or None; never blocks (for the status line)."""
        try:
            return self._buf[-1]
        except IndexError:
            return None

    def samples(self) -> List[Sample]:
        # deque.copy() runs in C without releasing the GIL, so it is safe while the thread appends
        # (iterating the live deque could raise "deque mutated during iteration").
        return list(self._buf.copy())

    def meta(self) -> Dict[str, Any]:
        return {
            "backend": self.backend_name,
            "choice_reason": self.choice_reason,
            "interval_s": self.interval_s,
            "samples": self._appended,
            "dropped_from_buffer": self._appended - len(self._buf),
            "overruns": self.overruns,
            "errors": self.errors,
            "last_error": self.last_error,
            "backend_meta": self.backend.meta(),
        }

    def write(self, run_dir: str | Path, extra_meta: Optional[Dict[str, Any]] = None) -> Dict[str, Path]:
        """Write telemetry.jsonl, telemetry.csv and telemetry_meta.json into ``run_dir``.

        ``extra_meta`` is merged into the meta file, e.g. ``{"idle_baseline_w": 4.2}`` so the report uses it.
        """
        run_dir = Path(run_dir)
        samples = self.samples()
        return {
            "jsonl": write_jsonl(samples, run_dir / JSONL_NAME),
            "csv": write_csv(samples, run_dir / CSV_NAME),
            "meta": write_meta({**self.meta(), **(extra_meta or {})}, run_dir / META_NAME),
        }

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def make_backend(name: str, interval_s: float = 0.1, **opts: Any) -> Backend:
    """Build a backend by name. ``opts``: ``sysfs_root``, ``l4t_file``, ``tegrastats_cmd``, ``jtop_factory``, ``nvml``,
    ``gpu_index``, ``replay_path``, ``replay_realtime``, ``replay_loop``."""
    builders: Dict[str, Callable[[], Backend]] = {
        "jtop": lambda: JtopBackend(
            interval_s, factory=opts.get("jtop_factory"), l4t_file=opts.get("l4t_file", "/etc/nv_tegra_release")
        ),
        "tegrastats": lambda: TegrastatsBackend(interval_s, cmd=opts.get("tegrastats_cmd", ("tegrastats",))),
        "sysfs": lambda: SysfsBackend(opts.get("sysfs_root", "/sys")),
        "nvml": lambda: NvmlBackend(opts.get("gpu_index", 0), nvml=opts.get("nvml")),
        "none": NullBackend,
        "replay": lambda: _replay(opts),
    }
    if name not in builders:
        raise EdgeError(f"unknown telemetry backend '{name}'; use one of: auto, {', '.join(BACKENDS)}")
    return builders[name]()


def _replay(opts: Dict[str, Any]) -> Backend:
    path = opts.get("replay_path")
    if not path:
        raise EdgeError("telemetry backend 'replay' needs a recording: set replay_path to a telemetry.jsonl or tegrastats log")
    return ReplayBackend(path, realtime=opts.get("replay_realtime", False), loop=opts.get("replay_loop", False))


def _try_open(backend: Backend) -> Optional[str]:
    """Open ``backend``; None on success, else the reason it cannot run here (including its module missing)."""
    try:
        backend.open()
    except (TelemetryUnavailable, MissingDependency) as exc:
        return str(exc)
    return None


def probe_backends(interval_s: float = 0.1, **opts: Any) -> Dict[str, Optional[str]]:
    """For each backend ``auto`` would try: None when it opens here, else why not. Each one is closed again."""
    result: Dict[str, Optional[str]] = {}
    for name in AUTO_ORDER:
        backend = make_backend(name, interval_s, **opts)
        result[name] = _try_open(backend)
        if result[name] is None:
            backend.close()
    return result


def open_sampler(backend: str = "auto", interval_s: float = 0.1, capacity: int = DEFAULT_CAPACITY, **opts: Any) -> Sampler:
    """Open a backend and wrap it in a (not yet started) Sampler.

    ``auto`` tries AUTO_ORDER and keeps the first that opens, falling back to ``none``; ``sampler.choice_reason``
    says what was picked and why each earlier one was skipped. A named backend that cannot run raises
    TelemetryUnavailable (an EdgeError, one line with the fix).
    """
    if backend != "auto":
        chosen = make_backend(backend, interval_s, **opts)
        chosen.open()
        return Sampler(chosen, interval_s, capacity, choice_reason=f"{backend}: asked for")
    skipped: List[str] = []
    reasons: List[str] = []
    for name in AUTO_ORDER:
        candidate = make_backend(name, interval_s, **opts)
        why_not = _try_open(candidate)
        if why_not is None:
            return Sampler(candidate, interval_s, capacity, "; ".join([f"auto picked {name}"] + reasons), tuple(skipped))
        skipped.append(name)
        reasons.append(f"{name} skipped ({why_not})")
    return Sampler(NullBackend(), interval_s, capacity, "; ".join(["auto picked none"] + reasons), tuple(skipped))
