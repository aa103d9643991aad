"""Plays back a recording as if it were live: a telemetry JSONL written by edge, or a tegrastats log.

Each ``read()`` returns the next recorded sample restamped with the current clock (the recorded time is kept in
``extras['t_recorded']``). With ``realtime=True`` a sample is only released once its recorded gap has passed;
otherwise one comes per sampler tick. After the last one ``read()`` returns None, or starts again with ``loop``.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from edge.errors import EdgeError
from edge.telemetry.backend import Backend
from edge.telemetry.files import MAX_JSONL_BYTES, read_jsonl
from edge.telemetry.sample import Sample
from edge.telemetry.tegrastats import parse_file


class ReplayBackend(Backend):
    name = "replay"

    def __init__(self, path: str | Path, realtime: bool = False, loop: bool = False, interval_s: float = 1.0) -> None:
        self.path = Path(path)
        self.realtime = realtime
        self.loop = loop
        self.interval_s = interval_s  # the line period assumed for tegrastats logs (they carry no monotonic time)
        self._samples: List[Sample] = []
        self._next = 0
        self._start: Optional[float] = None

    def open(self) -> None:
        try:
            size = self.path.stat().st_size
        except OSError:
            size = 0  # the readers below name a missing or unreadable file
        if size > MAX_JSONL_BYTES:  # both kinds are held in memory whole while they play
            raise EdgeError(f"replay file '{self.path}': {size} bytes, more than the {MAX_JSONL_BYTES} a recording may hold")
        if self.path.suffix == ".jsonl":
            self._samples = read_jsonl(self.path)
        else:
            self._samples = parse_file(self.path, self.interval_s)
        self._next = 0
        self._start = None

    def read(self) -> Optional[Sample]:
        if self._next >= len(self._samples):
            if not self.loop or not self._samples:
                return None
            self._next, self._start = 0, None
        now = time.monotonic()
        recorded = self._samples[self._next]
        if self._start is None:
            self._start = now - (recorded.t_mono - self._samples[0].t_mono)
        if self.realtime and now - self._start < recorded.t_mono - self._samples[0].t_mono:
            return None
        self._next += 1
        extras = dict(recorded.extras, t_recorded=recorded.t_mono)
        origin = recorded.backend if recorded.backend.startswith("replay:") else f"replay:{recorded.backend}"
        return dataclasses.replace(recorded, t_mono=now, t_wall=time.time(), backend=origin, extras=extras)

    def meta(self) -> Dict[str, Any]:
        return {"path": str(self.path), "recorded_samples": len(self._samples), "realtime": self.realtime}
