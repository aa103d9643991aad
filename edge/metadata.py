"""What a model file says about itself: the metadata Ultralytics writes into its ONNX exports (and into the JSON
header it puts in front of a TensorRT plan), so that a YOLO file runs without a config.

Ultralytics stores every value as a string; ``names`` is a Python dict literal (``{0: 'person', 1: 'bicycle'}``),
read with ``ast.literal_eval`` (literals only, never ``eval``), size-capped first.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from edge.config import short
from edge.errors import EdgeError

MAX_VALUE_CHARS = 1 << 20  # 1 MB: 80 class names take about 1 kB; a literal beyond this is refused, not parsed
MAX_CLASSES = 100_000
TRAINED_SIZE = 640  # the input size most detectors train at: the size hints suggest when a model does not say
TASKS = ("detect", "segment", "pose", "classify", "obb")


@dataclass(frozen=True)
class ModelMetadata:
    source: str  # "ultralytics", or "" when the file says nothing edge reads
    names: Tuple[str, ...] = ()
    imgsz: Optional[Tuple[int, int]] = None  # (height, width), as Ultralytics orders it
    stride: Optional[int] = None
    task: Optional[str] = None
    kpt_shape: Optional[Tuple[int, int]] = None
    end2end: Optional[bool] = None
    head: Optional[str] = None  # the head's class name in Ultralytics (RTDETRDecoder tells an RT-DETR)

    @property
    def ultralytics(self) -> bool:
        return self.source == "ultralytics"


NONE = ModelMetadata("")


def _literal(where: str, key: str, value: Any) -> Any:
    """A value as Ultralytics wrote it: a string holding a Python literal, or (in an engine's JSON header) the value."""
    if not isinstance(value, str):
        return value
    if len(value) > MAX_VALUE_CHARS:
        raise EdgeError(f"{where}: metadata '{key}' is {len(value)} characters, more than a model's metadata holds")
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value  # a plain string ('detect')


def _names(where: str, value: Any) -> Tuple[str, ...]:
    if isinstance(value, dict):
        # ONNX metadata has int keys; an engine's JSON header has the same dict with its keys as strings ("0")
        keys = {int(k) if isinstance(k, str) and k.isdigit() and len(k) < 7 else k: v for k, v in value.items()}
        if len(keys) > MAX_CLASSES or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in keys):
            raise EdgeError(f"{where}: metadata 'names' is not a mapping of class index to name; export the model again")
        if keys and max(keys) >= MAX_CLASSES:
            raise EdgeError(f"{where}: metadata 'names' has class index {max(keys)}; export the model again")
        return tuple(str(keys.get(i, i)) for i in range(max(keys) + 1)) if keys else ()
    if isinstance(value, (list, tuple)) and len(value) <= MAX_CLASSES:
        return tuple(str(v) for v in value)
    raise EdgeError(f"{where}: metadata 'names' is {short(value, 60)}; expected a dict of class names")


def _pair(value: Any) -> Optional[Tuple[int, int]]:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value):
        return (int(value[0]), int(value[1]))
    return None


def read(where: str, raw: Mapping[str, Any]) -> ModelMetadata:
    """Metadata from an ONNX file's metadata_props or an Ultralytics engine header; ``where`` names the file."""
    if not raw or "names" not in raw or not any(k in raw for k in ("imgsz", "stride", "task")):
        return NONE
    values: Dict[str, Any] = {
        k: _literal(where, k, raw[k]) for k in ("names", "imgsz", "stride", "task", "kpt_shape", "end2end", "head") if k in raw
    }
    imgsz = _pair(values.get("imgsz"))
    stride = values.get("stride")
    task = values.get("task")
    kpt = _pair(values.get("kpt_shape"))
    if imgsz is not None and max(imgsz) > 16384:
        raise EdgeError(f"{where}: metadata imgsz {list(imgsz)} is larger than any camera input; export the model again")
    return ModelMetadata(
        "ultralytics",
        _names(where, values["names"]),
        imgsz,
        stride if isinstance(stride, int) and not isinstance(stride, bool) and 0 < stride <= 256 else None,
        task if task in TASKS else None,
        kpt if kpt is not None and kpt[1] in (2, 3) else None,
        values.get("end2end") if isinstance(values.get("end2end"), bool) else None,
        head if isinstance(head := values.get("head"), str) and head.isidentifier() else None,
    )


def describe(meta: ModelMetadata) -> List[str]:
    """What was taken from the metadata, for the start-up line."""
    if not meta.ultralytics:
        return []
    parts = [f"{len(meta.names)} class names"]
    if meta.task:
        parts.append(f"task {meta.task}")
    if meta.imgsz:
        parts.append(f"imgsz {meta.imgsz[1]}x{meta.imgsz[0]}")
    return parts


def from_onnx(where: str, model: Any) -> ModelMetadata:
    """The metadata of an ONNX ModelProto (its metadata_props)."""
    return read(where, {p.key: p.value for p in getattr(model, "metadata_props", [])})


def shape_hint(dims: Any, meta: ModelMetadata = NONE) -> str:
    """A build shape to suggest for a dynamic image input: batch 1, 3 channels, and the size the model was exported at
    (Ultralytics' imgsz) or else 640, the size most detectors train at; fixed dimensions stay as they are."""
    height, width = meta.imgsz or (TRAINED_SIZE, TRAINED_SIZE)
    dims = list(dims) if dims else [None, 3, None, None]
    if len(dims) == 4:
        nhwc = dims[3] in (1, 3, 4) and dims[1] not in (1, 3, 4)
        fill = [1, height, width, 3] if nhwc else [1, 3, height, width]
    else:
        fill = [1] + [width] * (len(dims) - 1)
    return "x".join(str(d if isinstance(d, int) and d > 0 else f) for d, f in zip(dims, fill))
