"""What every telemetry backend provides, and the null backend.

A backend is opened once, read by the sampler thread at its period, and closed. ``open()`` raises
``TelemetryUnavailable`` with a one-line reason (what is missing and how to fix it); ``auto`` selection records
that reason and moves on. ``read()`` returns the newest reading not returned before, or None when nothing new
arrived since the last call; it may be slow (it runs on the sampler thread, never on the camera loop).
"""

from __future__ import annotations

import time
from typing import Any, Dict, Optional

from edge.errors import EdgeError
from edge.telemetry.sample import Sample


class TelemetryUnavailable(EdgeError):
    """A telemetry backend cannot run here; the message says why and what to do."""


class Backend:
    name = "base"

    def open(self) -> None:
        """Acquire the source; raise TelemetryUnavailable with the reason when it cannot work here."""

    def read(self) -> Optional[Sample]:
        raise NotImplementedError

    def close(self) -> None:
        """Release the source; safe to call twice."""

    def meta(self) -> Dict[str, Any]:
        """Facts for the run metadata (versions, real period, which rails make the total)."""
        return {}


class NullBackend(Backend):
    """Timestamps only: keeps the sampler, files and report working where nothing can be measured."""

    name = "none"

    def read(self) -> Optional[Sample]:
        return Sample(t_mono=time.monotonic(), t_wall=time.time(), backend=self.name)
