"""The sidecar beside a calibration cache: the layers that stay in FP16, for `edge-build` to apply.

``rec.cache`` gets ``rec.cache.json``, written together with it (both or neither):

    {"edge_fp16_layers": 1, "layers": ["Conv.0", "MatMul.8"], "model": "rec.onnx", "model_sha256": "...",
     "method": "mse", "budget": {"min_agreement": 0.99}, "before": {...}, "after": {...}}

``layers`` are TensorRT layer names (what its ONNX parser calls the nodes). `edge-build --calib-cache rec.cache` reads
the sidecar when it is there and runs those layers in FP16 with precision constraints obeyed; on the DLA they stay on
the DLA, which runs FP16 and INT8 side by side. An empty list is written too, so an old list never outlives its cache.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from edge.config import short
from edge.errors import EdgeError
from edge.outputs import strict_json

VERSION = 1
KEY = "edge_fp16_layers"
MAX_BYTES = 16 << 20  # a list of layer names; anything larger is not a sidecar
MAX_NAME = 4096


@dataclass
class Sidecar:
    layers: List[str] = field(default_factory=list)
    info: Dict[str, Any] = field(default_factory=dict)  # model, sha256, method, budget, before/after: for people

    def to_json(self) -> str:
        # An SQNR with no error at all is infinite: strict JSON writes it as null.
        return json.dumps(strict_json({KEY: VERSION, "layers": self.layers, **self.info}), indent=1) + "\n"


def sidecar_path(cache: str | Path) -> Path:
    p = Path(cache)
    return p.with_name(p.name + ".json")


def parse(data: bytes, origin: str) -> Sidecar:
    """A sidecar from its bytes; anything else is one EdgeError naming ``origin`` and what is wrong."""
    fix = "write it again with `edge calib` (or delete it to build without FP16 layers)"
    if len(data) > MAX_BYTES:
        raise EdgeError(f"{origin}: {len(data)} bytes is not an FP16-layer sidecar (at most {MAX_BYTES}); {fix}")
    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=lambda c: None)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise EdgeError(f"{origin}: not JSON ({short(str(exc), 80)}); {fix}") from None
    if not isinstance(doc, dict) or KEY not in doc:
        raise EdgeError(f"{origin}: not an FP16-layer sidecar (no '{KEY}' key); {fix}")
    if doc[KEY] != VERSION:
        raise EdgeError(f"{origin}: sidecar version {short(doc[KEY])}, this edge reads version {VERSION}; {fix}")
    layers = doc.get("layers")
    if not isinstance(layers, list) or not all(isinstance(n, str) and 0 < len(n) <= MAX_NAME for n in layers):
        raise EdgeError(f"{origin}: key 'layers' must be a list of layer names, got {short(layers)}; {fix}")
    info = {k: v for k, v in doc.items() if k not in (KEY, "layers")}
    return Sidecar(list(dict.fromkeys(layers)), info)


def read_sidecar(cache: str | Path) -> Optional[Sidecar]:
    """The sidecar of ``cache``, or None when it has none."""
    from edge.inputs import read_small

    path = sidecar_path(cache)
    if not path.exists():
        return None
    data = read_small(path, MAX_BYTES, "FP16-layer sidecar", "remove it or write it again with `edge calib`")
    return parse(data, f"FP16-layer sidecar {path}")
