"""Power and utilisation telemetry: one sampler thread, pluggable backends, energy per frame, a run report.

Device side: imports no build-side package (``edge.builder``, ``edge.calib``, ``edge.dla``), only the shared
top-level modules.

API for the pipeline (all times are ``time.monotonic()`` seconds, the frames' clock):

- ``open_sampler(backend="auto", interval_s=0.1, capacity=..., **opts) -> Sampler`` (``sampler.py``):
  ``auto`` tries jtop -> tegrastats -> sysfs -> nvml, then none; ``sampler.choice_reason`` says why.
  ``opts``: ``sysfs_root``, ``tegrastats_cmd``, ``jtop_factory``, ``nvml``, ``gpu_index``, ``replay_path``,
  ``replay_realtime``, ``replay_loop``.
- ``Sampler.start()/stop()`` (idempotent; also a context manager), ``latest()`` (never blocks),
  ``samples()``, ``meta()``, ``write(run_dir)`` -> telemetry.jsonl, telemetry.csv, telemetry_meta.json.
- ``energy_summary(samples, frame_intervals, idle_baseline_w=None) -> dict`` and ``mean_power_w(samples, t0, t1)``
  for the idle baseline (``energy.py``).
- ``format_status(sample) -> str`` (``status.py``), e.g. ``5.1 W GPU 43% DLA0 on``.
- ``Sample`` (``sample.py``), ``read_jsonl(path)`` (``files.py``), ``parse_file(path)`` for tegrastats logs.

Backends live in ``tegrastats.py``, ``sysfs.py``, ``jtop_backend.py``, ``nvml.py``, ``replay.py`` and
``backend.py`` (the null one). None of them imports jtop, pynvml or matplotlib before it is used.
"""

from __future__ import annotations

from edge.telemetry.energy import energy_summary, mean_power_w
from edge.telemetry.files import read_jsonl
from edge.telemetry.sample import Sample
from edge.telemetry.sampler import BACKENDS, Sampler, open_sampler
from edge.telemetry.status import format_status
from edge.telemetry.tegrastats import parse_file

__all__ = [
    "BACKENDS",
    "Sample",
    "Sampler",
    "energy_summary",
    "format_status",
    "mean_power_w",
    "open_sampler",
    "parse_file",
    "read_jsonl",
]
