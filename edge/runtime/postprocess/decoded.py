"""Heads whose graph already decoded the boxes (corners x1, y1, x2, y2 in input pixels):

- ``yolo_end2end``: one ``[1, K, 6]`` output of x1, y1, x2, y2, score, class, already one box per object (YOLOv10,
  Ultralytics' end2end heads, YOLO26): no NMS, only the score threshold and the cap; YOLO26's -seg adds mask
  coefficients to each row (``[1, K, 6 + 32]`` and prototypes), its -pose keypoints (``[1, K, 6 + 51]``);
- ``nms_plugin``: TensorRT's NMS plugins inside the engine, four outputs: a count, boxes, scores and classes
  (EfficientNMS_TRT: num_detections, detection_boxes, detection_scores, detection_classes; YOLOv7's ``--end2end``:
  num_dets, det_boxes, det_scores, det_classes; BatchedNMS: num_detections, nmsed_boxes, nmsed_scores,
  nmsed_classes with classes as floats): the first ``count`` rows are the detections;
- ``torchvision_nms``: a torchvision detector exported whole (its transform and NMS in the graph): boxes ``[N, 4]``,
  scores ``[N]`` and labels ``[N]`` with no batch axis, best first, boxes in the input's pixels;
- ``deepstream_yolo``: DeepStream-Yolo's exports, *before* NMS: ``[B, N, 6]`` (x1, y1, x2, y2, score, class) or the
  older three outputs boxes ``[B, N, 4]``, scores ``[B, N, 1]``, classes ``[B, N, 1]``: NMS runs here.
"""

from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from edge.errors import RunFailed
from edge.runtime.engines.preprocess import Transform
from edge.runtime.postprocess import Result
from edge.runtime.postprocess.boxes import as_float, candidates, suppress
from edge.runtime.postprocess.detect import detections
from edge.runtime.postprocess.masks import ProtoMasks


def class_ids(name: str, values: np.ndarray, classes: int) -> np.ndarray:
    """Class ids from an output that may hold them as floats (BatchedNMS, DeepStream-Yolo); a value that is not a
    whole number in range means the output was read wrong, and is refused."""
    ids = np.rint(values).astype(np.int64)
    wrong = (np.abs(values - ids) > 1e-3) | (ids < 0) | ((ids >= classes) if classes else False)
    if wrong.any():
        raise RunFailed(
            f"output '{name}' gives class {float(values[np.argmax(wrong)]):g}, not a class id "
            f"0..{classes - 1 if classes else 'C-1'}: this is not the "
            "layout task.type says; check task.type and task.labels"
        )
    return ids


def _scaled(boxes: np.ndarray, width: int, height: int) -> np.ndarray:
    """Boxes in input pixels: an NMS plugin fed normalised boxes returns them normalised (every corner within 0..1)."""
    if len(boxes) and boxes.min() >= -1e-3 and boxes.max() <= 1.0 + 1e-3:
        return boxes * np.array([width, height, width, height], np.float32)
    return boxes


class Decoded:
    """Boxes the graph decoded: with NMS already done (``yolo_end2end``, ``nms_plugin``) or not (``deepstream_yolo``)."""

    def __init__(self, task: Any, head: Any, labels: List[str], width: int, height: int) -> None:
        self.task, self.head, self.labels, self.size = task, head, labels, (width, height)
        self.kind, self.names = head.kind, head.outputs

    def rows(self, out: Dict[str, np.ndarray]) -> tuple:
        """(boxes (N, 4), scores (N,), classes (N,), what follows them per row or None) of the first image."""
        n = self.names
        if "rows" in n:  # one [B, N, 6 (+ mask coefficients or keypoints)] output
            rows = as_float(n["rows"], out[n["rows"]][0])
            # mask coefficients or keypoints after the six, read only where the head has them
            return rows[:, :4], rows[:, 4], class_ids(n["rows"], rows[:, 5], self.head.classes), rows[:, 6:]
        first = (lambda a: a) if self.kind == "torchvision_nms" else (lambda a: a[0])  # no batch axis there
        boxes = as_float(n["boxes"], first(out[n["boxes"]])).reshape(-1, 4)
        scores = as_float(n["scores"], first(out[n["scores"]])).reshape(-1)
        classes = class_ids(n["classes"], as_float(n["classes"], first(out[n["classes"]])).reshape(-1), self.head.classes)
        if not len(boxes) == len(scores) == len(classes):
            raise RunFailed(
                f"outputs '{n['boxes']}', '{n['scores']}' and '{n['classes']}' hold {len(boxes)}, {len(scores)} and "
                f"{len(classes)} detections: not one row each; check task.type"
            )
        if "count" in n:
            count = int(np.asarray(out[n["count"]]).reshape(-1)[0])
            if not 0 <= count <= len(boxes):
                raise RunFailed(
                    f"output '{n['count']}' says {count} detections but '{n['boxes']}' holds {len(boxes)}; not an NMS "
                    "plugin's outputs: check task.type"
                )
            boxes, scores, classes = boxes[:count], scores[:count], classes[:count]
        return boxes, scores, classes, None

    def __call__(self, out: Dict[str, np.ndarray], tf: Transform) -> Result:
        boxes, scores, classes, extra = self.rows(out)
        if self.kind == "nms_plugin":
            boxes = _scaled(boxes, *self.size)
        idx = candidates(scores, self.task.score_threshold)
        if self.kind == "deepstream_yolo":  # NMS still to do
            keep = idx[suppress(boxes[idx], scores[idx], classes[idx], self.task)]
        else:  # one box per object already: best first, capped
            keep = idx[: self.task.max_detections]
        boxes, scores, classes = boxes[keep], scores[keep], classes[keep]
        backwards = np.flatnonzero((boxes[:, 2] < boxes[:, 0]) | (boxes[:, 3] < boxes[:, 1]))
        if len(backwards):  # corners come ordered from every such head: these are not x1, y1, x2, y2
            b = boxes[backwards[0]]
            raise RunFailed(
                f"output '{next(iter(self.names.values()))}' gives a box whose far corner is before its near one "
                f"({', '.join(f'{v:g}' for v in b.tolist())}): not x1, y1, x2, y2 corners (an RT-DETR's normalised "
                "cx, cy, w, h? task.type detr)"
            )
        kps = masks = None
        if extra is not None and self.head.keypoints:
            count, dims = self.head.keypoints
            kps = extra[keep, : count * dims].reshape(len(keep), count, dims)
        if extra is not None and self.head.mask_dims:
            proto = self.names["protos"]
            masks = ProtoMasks(as_float(proto, out[proto][0]), extra[keep, : self.head.mask_dims], *self.size)
        return detections(boxes, scores, classes, tf, self.labels, kps, masks)
