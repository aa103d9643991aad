"""Network outputs to results in frame coordinates: classification, BlazeFace SSD, YOLO v5/v8."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from edge.errors import ConfigError
from edge.runtime.backends import TensorInfo
from edge.runtime.preprocess import PreprocessSpec, Transform


@dataclass
class Detection:
    box: List[float]  # x1, y1, x2, y2 in frame pixels
    score: float
    class_id: int = 0
    label: str = ""
    keypoints: Optional[List[List[float]]] = None  # [[x, y], ...] in frame pixels

    def to_dict(self) -> dict:
        d = {
            "box": [round(v, 1) for v in self.box],
            "score": round(self.score, 4),
            "class_id": self.class_id,
            "label": self.label,
        }
        if self.keypoints is not None:
            d["keypoints"] = [[round(x, 1), round(y, 1)] for x, y in self.keypoints]
        return d


@dataclass
class Classification:
    class_id: int
    score: float
    label: str = ""

    def to_dict(self) -> dict:
        return {"class_id": self.class_id, "score": round(self.score, 4), "label": self.label}


@dataclass
class Result:
    detections: List[Detection] = field(default_factory=list)
    classes: List[Classification] = field(default_factory=list)

    def to_dict(self) -> dict:
        out: dict = {}
        if self.classes:
            out["classes"] = [c.to_dict() for c in self.classes]
        else:
            out["detections"] = [d.to_dict() for d in self.detections]
        return out


Postprocessor = Callable[[Dict[str, np.ndarray], Transform], Result]


def load_labels(cfg: Any) -> List[str]:
    labels = cfg.task.labels
    if labels is None:
        return []
    if isinstance(labels, list):
        return labels
    path = Path(cfg.resolve_path(labels))
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{cfg.name_of('task.labels')}: {path} is not UTF-8 text (byte {exc.start}); save it as UTF-8"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{cfg.name_of('task.labels')}: cannot read {path} ({exc.strerror or exc})") from None


def create_postprocessor(cfg: Any, outputs: List[TensorInfo], spec: PreprocessSpec) -> Postprocessor:
    task = cfg.task
    labels = load_labels(cfg)
    if task.type == "blazeface":
        from edge.runtime.postprocess.blazeface import BlazeFace

        return BlazeFace(task, outputs, spec, labels or ["face"])
    if task.type == "yolo":
        from edge.runtime.postprocess.yolo import Yolo

        return Yolo(task, outputs, labels)
    if task.type == "classify":
        from edge.runtime.postprocess.classify import Classify

        return Classify(task, outputs, labels)
    raise ConfigError(f"key 'task.type': unknown task {task.type!r}")  # pragma: no cover - the schema allows only the above
