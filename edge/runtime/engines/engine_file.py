"""Engine files edge did not build: a TensorRT plan with Ultralytics' metadata in front of it.

``yolo export format=engine`` writes a 4-byte little-endian length, that many bytes of JSON (names, imgsz, stride,
task, ...), then the plan TensorRT serialised. edge reads the header and hands TensorRT only the plan. edge's own
engines stay byte for byte what TensorRT wrote, with the manifest beside them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from edge.inputs import open_regular

MAX_HEADER = 1 << 20  # Ultralytics' header is a few kB (80 class names); a longer "length" is a plan's own bytes


def split(path: Path) -> Tuple[int, Optional[Dict[str, Any]]]:
    """(where the plan starts, the JSON header or None); a plain plan is (0, None)."""
    with open(open_regular(path), "rb") as f:  # a FIFO or device named like an engine is refused, never waited on
        head = f.read(4)
        if len(head) < 4:
            return 0, None
        n = int.from_bytes(head, "little")
        if not 2 <= n <= MAX_HEADER:
            return 0, None
        body = f.read(n)
    if len(body) < n or body[:1] != b"{":
        return 0, None
    try:
        header = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return 0, None
    return (4 + n, header) if isinstance(header, dict) else (0, None)


def read_plan(path: Path, offset: int) -> bytes:
    with open(open_regular(path), "rb") as f:
        f.seek(offset)
        return f.read()
