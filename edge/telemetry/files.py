"""Telemetry files beside a run's results: ``telemetry.jsonl`` (lossless), ``telemetry.csv`` (one column per
flattened field) and ``telemetry_meta.json`` (backend, why it was chosen, period, counters).

Every file is written to a temporary name in the same folder and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any, Dict, Iterable, List

from edge.errors import EdgeError, one_line
from edge.outputs import strict_json, write_atomic, write_json
from edge.telemetry.sample import Sample

JSONL_NAME = "telemetry.jsonl"
CSV_NAME = "telemetry.csv"
META_NAME = "telemetry_meta.json"
MAX_JSONL_BYTES = 256 << 20  # about three days of 1 Hz samples
MAX_SAMPLE_LINE = 1 << 16  # a sample with every rail and core is a few kB


def write_jsonl(samples: Iterable[Sample], path: str | Path) -> Path:
    return write_atomic(path, "".join(json.dumps(strict_json(s.to_dict())) + "\n" for s in samples))


def write_csv(samples: Iterable[Sample], path: str | Path) -> Path:
    rows = [s.flat() for s in samples]
    header: Dict[str, None] = {}  # the union of keys, in order of first appearance (rails and cores can vary)
    for row in rows:
        header.update(dict.fromkeys(row))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(header), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return write_atomic(path, buf.getvalue())


def write_meta(meta: Dict[str, Any], path: str | Path) -> Path:
    return write_json(path, json.loads(json.dumps(meta, default=str)))


def read_jsonl(path: str | Path) -> List[Sample]:
    """Samples from a telemetry JSONL file written by ``write_jsonl`` (at most MAX_JSONL_BYTES, lines of at most
    MAX_SAMPLE_LINE characters: a recording, not a whole disk)."""
    from edge.inputs import Refused, open_regular

    p = Path(path)
    samples = []
    try:
        fd = open_regular(p)
        with open(fd, encoding="utf-8") as f:
            size = os.fstat(fd).st_size
            if size > MAX_JSONL_BYTES:
                raise Refused(0, f"{size} bytes, more than the {MAX_JSONL_BYTES} a recording may hold")
            for number, line in enumerate(iter(lambda: f.readline(MAX_SAMPLE_LINE + 1), ""), 1):
                if len(line) > MAX_SAMPLE_LINE:
                    raise EdgeError(f"{p}:{number}: a line of over {MAX_SAMPLE_LINE} characters is not a telemetry sample")
                if not line.strip():
                    continue
                try:
                    samples.append(Sample.from_dict(json.loads(line, parse_constant=_not_json)))
                except (ValueError, TypeError, RecursionError) as exc:
                    raise EdgeError(
                        f"{p}:{number}: not a telemetry sample ({one_line(exc, 200)}); pass a file written by edge"
                    ) from None
    except FileNotFoundError:
        raise EdgeError(f"telemetry file '{p}' does not exist; check the path") from None
    except UnicodeDecodeError:
        raise EdgeError(f"telemetry file '{p}' is not UTF-8 text; pass a telemetry.jsonl written by edge") from None
    except OSError as exc:
        raise EdgeError(f"cannot read telemetry file '{p}': {exc.strerror or exc}") from None
    return samples


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
