"""Progress lines for the long build steps (calibration, the TensorRT build), on stderr, at a readable rate."""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, Optional

from edge.errors import printable


def say(message: str) -> None:
    print(f"edge-build: {printable(message)}", file=sys.stderr, flush=True)


class Throttle:
    """Passes a message on at most once per ``interval_s`` (the last one always gets through with ``force``)."""

    def __init__(self, interval_s: float = 1.0, out: Callable[[str], None] = say) -> None:
        self.interval_s = interval_s
        self.out = out
        self._last = float("-inf")

    def __call__(self, message: str, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last >= self.interval_s:
            self._last = now
            self.out(message)


class Heartbeat:
    """While a step without its own progress runs, say every ``interval_s`` that it is still running (the first time
    after ``first_s``, by default the same)."""

    def __init__(
        self, label: str, interval_s: float = 10.0, out: Callable[[str], None] = say, first_s: Optional[float] = None
    ) -> None:
        self.label = label
        self.interval_s = interval_s
        self.first_s = interval_s if first_s is None else first_s
        self.out = out
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._start = 0.0

    def __enter__(self) -> Heartbeat:
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="edge-build-heartbeat", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        wait = self.first_s
        while not self._stop.wait(wait):
            self.out(f"{self.label}… {time.monotonic() - self._start:.0f} s")
            wait = self.interval_s

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
