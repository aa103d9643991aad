"""DETR-style end-to-end detectors (RT-DETR, D-FINE, DETR): a fixed set of queries, each one box (centre, width,
height, normalised to the input) and class scores; no NMS, since training made the queries one per object.

Layouts, by the outputs:
- ``rows``: one output [1, Q, 6]: cx, cy, w, h, score, class (Ultralytics 8.4's RT-DETR export, top-k already taken);
- ``scores``: one output [1, Q, 4 + C]: the box, then every class's score (older Ultralytics RT-DETR exports);
- ``pair``: boxes [1, Q, 4] and class logits [1, Q, C] (RT-DETR and D-FINE without their post-processing; DETR, whose
  last logit is "no object", with ``task.detr_scores: softmax``).

With sigmoid scores (RT-DETR, D-FINE) every (query, class) pair above the threshold is a candidate, as their own
post-processing ranks the flattened scores; with softmax (DETR) and in the single-output layouts a query reports its
best class. The best ``max_detections`` candidates are reported.
"""

from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from edge.errors import RunFailed
from edge.runtime.engines.preprocess import Transform
from edge.runtime.postprocess import Result
from edge.runtime.postprocess.activations import sigmoid, softmax
from edge.runtime.postprocess.boxes import as_float, candidates, xywh_to_xyxy
from edge.runtime.postprocess.decoded import class_ids
from edge.runtime.postprocess.detect import detections

NORMALISED_SLACK = 0.01  # FP16 engines round a sigmoid's 1.0 a little past it


class Detr:
    def __init__(self, task: Any, head: Any, labels: List[str], width: int, height: int) -> None:
        self.task, self.head, self.labels = task, head, labels
        self.layout = head.layout
        self.size = np.array([width, height, width, height], np.float32)

    def _normalised(self, name: str, boxes: np.ndarray) -> None:
        """A DETR's boxes leave its head through a sigmoid: values outside 0..1 mean these are not its boxes."""
        if len(boxes) and (boxes.min() < -NORMALISED_SLACK or boxes.max() > 1 + NORMALISED_SLACK):
            raise RunFailed(
                f"output '{name}' gives box values from {boxes.min():g} to {boxes.max():g}, not normalised to the input "
                "as a DETR's are (an end-to-end YOLO head in pixels? task.type yolo_end2end)"
            )

    def __call__(self, out: Dict[str, np.ndarray], tf: Transform) -> Result:
        names = self.head.outputs
        if self.layout == "pair":
            boxes = as_float(names["boxes"], out[names["boxes"]][0])
            self._normalised(names["boxes"], boxes)
            logits = as_float(names["logits"], out[names["logits"]][0])
            if getattr(self.task, "detr_scores", "sigmoid") == "softmax":
                probs = softmax(logits)[:, :-1]  # the last class is DETR's "no object"
                classes_all = probs.argmax(axis=1)
                scores = probs[np.arange(len(probs)), classes_all]
            else:  # focal-loss heads rank every (query, class) pair: a query may report two classes
                flat = sigmoid(logits).ravel()
                pairs = candidates(flat, self.task.score_threshold)[: self.task.max_detections]
                queries, classes = np.divmod(pairs, logits.shape[1])
                xyxy = xywh_to_xyxy(boxes[queries]) * self.size
                return detections(xyxy, flat[pairs], classes, tf, self.labels)
        else:
            rows = as_float(names["rows"], out[names["rows"]][0])
            boxes = rows[:, :4]
            self._normalised(names["rows"], boxes)
            if self.layout == "rows":
                scores = rows[:, 4]
                classes_all = class_ids(names["rows"], rows[:, 5], self.head.classes)
            else:
                classes_all = rows[:, 4:].argmax(axis=1)
                scores = rows[np.arange(len(rows)), 4 + classes_all]
        idx = candidates(scores, self.task.score_threshold)[: self.task.max_detections]
        xyxy = xywh_to_xyxy(boxes[idx]) * self.size
        return detections(xyxy, scores[idx], classes_all[idx], tf, self.labels)
