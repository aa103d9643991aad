"""FP32 against an INT8-simulated model (Q/DQ in ONNX Runtime): label-free fidelity on the agreement images, top-1 and
top-5 on a labelled set. The FP32 side runs once; its outputs are kept while they fit the memory budget, so each
candidate INT8 model of the budget search costs one INT8 pass, or part of one: a top-1 budget is decided as soon as
the images left cannot make it meet the budget, and the images INT8 got wrong before go first, so a miss shows
early."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from edge.calib.datasets import ImageSet
from edge.calib.decisions import TaskDecisions
from edge.calib.detection_eval import DetectionSet, evaluate, predict
from edge.calib.fidelity import FidelityMeter, KeptRows, OutputFidelity, Reference, lowest
from edge.calib.stats import TensorTap, fixed_batch
from edge.errors import EdgeError
from edge.graph.model import Graph

BATCH = 8  # images per check run: at 16 the INT8 session's activations were the run's peak, and no faster


@dataclass
class TopK:
    images: int
    top1: float
    top5: float
    hits: Optional[np.ndarray] = field(default=None, repr=False)  # per image in scoring order: top-1 right
    scored: Optional[int] = None  # images scored, when fewer than ``images``: a bound that misses a budget (top_k)

    @property
    def complete(self) -> bool:
        return self.scored is None

    @property
    def score(self) -> float:
        return self.top1

    metric = "top-1"


@dataclass
class Measurement:
    fidelity: List[OutputFidelity] = field(default_factory=list)
    labelled: Optional[TopK] = None

    @property
    def agreement(self) -> float:
        return lowest(self.fidelity)[0]


def session(model: Any, threads: int, int8: bool) -> Any:
    """An ONNX Runtime session returning the graph outputs; INT8 keeps Q/DQ as separate ops (simulated INT8)."""
    return TensorTap(model, [[o.name for o in model.graph.output]], threads, simulated_int8=int8).sessions[0][0]


def _batches(images: ImageSet, batch: int, fixed: Optional[int]) -> Iterator[np.ndarray]:
    for inputs in images.batches(fixed or batch):
        if fixed is not None and len(inputs) != fixed:
            return  # a fixed-batch model cannot take the short last batch
        yield inputs


def top_k(sess: Any, images: ImageSet, batch: int, fixed: Optional[int], meets: Optional[Callable[[TopK], bool]] = None) -> TopK:
    """Top-1 and top-5 of a session on a labelled set (scores from the set's reader of the first output).

    With ``meets`` (a budget's test, true for a higher score whenever it is for a lower one), the pass stops once
    the images left cannot make it meet the test: even with every one of them right, the score misses. It then
    returns that highest possible score, with ``scored`` the images it took: enough to say the budget is missed, not
    a score to report. A pass that meets the test runs to the end (it needs nearly every image to be sure anyway)."""
    if images.labels is None or images.scores is None:
        raise EdgeError(
            f"--eval {images.name}: this image set has no labels; use a labelled folder or a set such as mnist_5k[:1000]"
        )
    name = sess.get_inputs()[0].name
    total = images.count - images.count % fixed if fixed else images.count  # a fixed batch drops the short last one
    top1 = top5 = done = 0
    hits: List[np.ndarray] = []

    def missed() -> Optional[TopK]:  # the highest score the images left allow, when even that misses
        left = total - done
        high = TopK(total, (top1 + left) / total, (top5 + left) / total, scored=done)
        return None if meets(high) else high

    if meets is not None and total and (bound := missed()):
        return bound
    for inputs in _batches(images, batch, fixed):
        scores = images.scores(sess.run(None, {name: inputs})[0])
        labels = images.labels[done : done + len(inputs)]
        k = min(5, scores.shape[1])
        best = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        hits.append(scores.argmax(axis=1) == labels)
        top1 += int(hits[-1].sum())
        top5 += int((best == labels[:, None]).any(axis=1).sum())
        done += len(inputs)
        if meets is not None and done < total and (bound := missed()):
            return bound
    return TopK(done, top1 / max(done, 1), top5 / max(done, 1), np.concatenate(hits) if hits else np.zeros(0, bool))


class Checker:
    """Measures candidate INT8 models against the FP32 model on the same images."""

    def __init__(
        self,
        fp32: Any,
        graph: Graph,
        layout: str,
        images: ImageSet,
        labelled: Optional[ImageSet] = None,
        threads: int = 0,
        budget_bytes: int = 256 << 20,
        reference: Optional[Reference] = None,
        task: Optional[TaskDecisions] = None,
    ) -> None:
        """``reference``: the FP32 outputs on ``images``, when the statistics pass kept them; ``task``: the detector
        whose decisions the agreement measures."""
        self.graph, self.layout, self.images, self.labelled, self.task = graph, layout, images, labelled, task
        self.threads, self.budget_bytes = threads, budget_bytes
        self.outputs = [o.name for o in fp32.graph.output]
        self.fixed = fixed_batch(graph)
        self._fp32_model = fp32
        self._fp32_session: Any = None
        self._kept = reference
        self.fp32_labelled = self.score(self.fp32, labelled) if labelled is not None else None
        self._order: Optional[ImageSet] = None  # the labelled set with the images INT8 got wrong first

    def score(self, sess: Any, labelled: Any) -> Any:
        """Top-1/top-5 of a classifier, or mAP of a detector on a labelled detection set."""
        if isinstance(labelled, DetectionSet):
            return evaluate(labelled, predict(sess, labelled, self.task.spec, self.task.decoder, self.fixed))
        return top_k(sess, labelled, BATCH, self.fixed)

    def wrong_first(self, before: TopK) -> None:
        """Later checks with a test score first the images ``before`` (a complete top-1 pass) got wrong: a candidate
        that misses a budget usually gets them wrong too, so its miss is certain after a fraction of the set."""
        wrong = np.flatnonzero(~before.hits)
        order = np.concatenate([wrong, np.flatnonzero(before.hits), np.arange(len(before.hits), self.labelled.count)])
        self._order = self.labelled.reordered(order)

    @property
    def fp32(self) -> Any:
        """The FP32 session, made when first needed: with the statistics pass's outputs at hand it never is."""
        if self._fp32_session is None:
            self._fp32_session = session(self._fp32_model, self.threads, int8=False)
        return self._fp32_session

    def _reference(self) -> Iterator[Tuple[np.ndarray, Dict[str, np.ndarray], Optional[Dict[str, KeptRows]]]]:
        """(inputs, FP32 outputs, what else is kept of them or None) batch by batch: from the kept reference (the
        statistics pass's, or the first FP32 pass of this check's own when it fits in ``budget_bytes``), else from
        FP32 run again."""
        kept = self._kept
        filling = None if kept is not None else Reference(self._meter(), self.images.count, self.budget_bytes)
        done = 0
        for inputs in _batches(self.images, BATCH, self.fixed):
            if kept is not None:
                yield (inputs, *kept.batch(done, done + len(inputs)))
            else:
                out = dict(zip(self.outputs, self.fp32.run(self.outputs, {self.fp32.get_inputs()[0].name: inputs})))
                filling.add(out, len(inputs))
                yield inputs, out, None
            done += len(inputs)
        if filling is not None and filling.complete():
            self._kept = filling

    def _meter(self) -> FidelityMeter:
        return FidelityMeter(self.graph, self.outputs, self.layout, self.task)

    def measure(
        self, int8: Any, labelled: bool = True, meets: Optional[Callable[[Measurement], bool]] = None, agreement: bool = True
    ) -> Measurement:
        """Fidelity on the check images (unless not ``agreement``: the fidelity list is then empty) and, with
        ``labelled``, top-1/top-5 on the labelled set.

        ``meets`` (a budget's test): a classifier's top-1 pass stops as soon as the images left cannot make it meet
        the test (see ``top_k``); a detector's mAP is no count of images, so its pass runs to the end."""
        sess = session(int8, self.threads, int8=True)
        name = sess.get_inputs()[0].name
        result = Measurement()
        if agreement:
            meter = self._meter()
            for inputs, ref, kept in self._reference():
                meter.update(ref, dict(zip(self.outputs, sess.run(self.outputs, {name: inputs}))), kept)
            result.fidelity = meter.summary()
        if labelled and self.labelled is not None:
            if meets is not None and not isinstance(self.labelled, DetectionSet):
                result.labelled = top_k(
                    sess,
                    self._order if self._order is not None else self.labelled,
                    BATCH,
                    self.fixed,
                    lambda t: meets(Measurement(result.fidelity, t)),
                )
            else:
                result.labelled = self.score(sess, self.labelled)
        return result
