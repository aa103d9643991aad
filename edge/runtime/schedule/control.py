"""What the runner drives in a schedule, the single pipeline and the pool alike."""

from __future__ import annotations

import threading
from typing import Optional


class Controls:
    """``stop()`` drains: no new frames, what is in flight goes through to the sinks. ``abort()`` leaves now (a stage
    failed, a second signal, a drain past its time). ``done`` is set once every thread has exited."""

    def __init__(self, stop_event: Optional[threading.Event] = None) -> None:
        self.stop_event = stop_event or threading.Event()
        self.abort_event = threading.Event()
        self.done = threading.Event()

    def stop(self) -> None:
        self.stop_event.set()

    def abort(self) -> None:
        self.stop_event.set()
        self.abort_event.set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        return self.done.wait(timeout)
