"""Classification: top-k over the first output, with labels."""

from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from edge.runtime.engines.preprocess import Transform
from edge.runtime.postprocess import Classification, Result
from edge.runtime.postprocess.activations import softmax
from edge.runtime.postprocess.boxes import as_float


class Classify:
    def __init__(self, task: Any, output: str, labels: List[str]) -> None:
        self.name = output
        self.task, self.labels = task, labels

    def __call__(self, out: Dict[str, np.ndarray], tf: Transform) -> Result:
        scores = as_float(self.name, out[self.name]).reshape(-1)
        mode = self.task.softmax
        # "auto": outputs that are not already a distribution are logits.
        if mode == "yes" or (mode == "auto" and (scores.min() < 0 or abs(float(scores.sum()) - 1.0) > 1e-3)):
            scores = softmax(scores)
        k = min(self.task.top_k, scores.size)
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return Result(
            classes=[Classification(int(i), float(scores[i]), self.labels[i] if i < len(self.labels) else str(i)) for i in top]
        )
