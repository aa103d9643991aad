"""FP32 against an INT8-simulated model (Q/DQ in ONNX Runtime): label-free fidelity on the agreement images, top-1 and
top-5 on a labelled set. The FP32 side runs once; its outputs are kept while they fit the memory budget, so each
candidate INT8 model of the budget search costs one INT8 pass, or part of one: a top-1 budget is decided as soon as
the images left cannot make it meet the budget, and the images INT8 got wrong before go first, so a miss shows
early."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, List, Optional, Tuple, TypeVar

import numpy as np

from edge.calib.datasets import ImageSet
from edge.calib.decisions import TaskDecisions
from edge.calib.detection_eval import DetectionSet, evaluate, predict
from edge.calib.fidelity import FidelityMeter, KeptRows, OutputFidelity, Reference, lowest
from edge.calib.stats import TensorTap, cores, fixed_batch
from edge.errors import EdgeError
from edge.graph.model import Graph

BATCH = 8  # images per check run: at 16 the INT8 session's activations were the run's peak, and no faster
Item = TypeVar("Item", bound=Tuple[Any, ...])


def split(threads: int) -> Tuple[int, int]:
    """(runs at once, intra-op threads each) for ``threads`` cores (0: all). Batch-level parallelism beats ONNX
    Runtime's own on these small batches: on 2 cores, PP-OCRv5 rec's INT8 check did 236 images/s as two
    single-thread runs at a time and 156 as one two-thread run (three at a time: no more)."""
    total = threads or cores()
    callers = 2 if total >= 2 else 1
    return callers, total // callers


def ahead(sess: Any, items: Iterable[Item], callers: int) -> Iterator[Tuple[Item, List[np.ndarray]]]:
    """Each item (its first element an input batch) with the session's outputs on it, in the items' order, with up
    to ``callers`` runs of the one session going at once (ONNX Runtime takes concurrent runs). A caller that stops
    early leaves at most ``callers - 1`` runs to finish; a stop signal still reaches the main thread, which waits
    on the runs, not in them."""
    name = sess.get_inputs()[0].name
    if callers < 2:
        for item in items:
            yield item, sess.run(None, {name: item[0]})
        return
    from concurrent.futures import Future, ThreadPoolExecutor

    pool = ThreadPoolExecutor(callers, thread_name_prefix="edge-check")
    pending: Deque[Tuple[Item, Future[List[np.ndarray]]]] = deque()
    try:
        for item in items:
            pending.append((item, pool.submit(sess.run, None, {name: item[0]})))
            if len(pending) == callers:
                first, run = pending.popleft()
                yield first, run.result()
        while pending:
            first, run = pending.popleft()
            yield first, run.result()
    finally:
        for _, run in pending:
            run.cancel()
        pool.shutdown(wait=True)


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


def top_k(
    sess: Any,
    images: ImageSet,
    batch: int,
    fixed: Optional[int],
    meets: Optional[Callable[[TopK], bool]] = None,
    callers: int = 1,
) -> TopK:
    """Top-1 and top-5 of a session on a labelled set (scores from the set's reader of the first output).

    With ``meets`` (a budget's test, true for a higher score whenever it is for a lower one), the pass stops once
    the images left cannot make it meet the test: even with every one of them right, the score misses. It then
    returns that highest possible score, with ``scored`` the images it took: enough to say the budget is missed, not
    a score to report. A pass that meets the test runs to the end (it needs nearly every image to be sure anyway).
    ``callers``: batches run at once (``ahead``)."""
    if images.labels is None or images.scores is None:
        raise EdgeError(
            f"--eval {images.name}: this image set has no labels; use a labelled folder or a set such as mnist_5k[:1000]"
        )
    total = images.count - images.count % fixed if fixed else images.count  # a fixed batch drops the short last one
    top1 = top5 = done = 0
    hits: List[np.ndarray] = []

    def missed() -> Optional[TopK]:  # the highest score the images left allow, when even that misses
        left = total - done
        high = TopK(total, (top1 + left) / total, (top5 + left) / total, scored=done)
        return None if meets(high) else high

    if meets is not None and total and (bound := missed()):
        return bound
    for (inputs,), outputs in ahead(sess, ((b,) for b in _batches(images, batch, fixed)), callers):
        scores = images.scores(outputs[0])
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
        self.callers, self.threads = split(threads)  # sessions get `threads` each, `callers` runs go at once
        self.budget_bytes = budget_bytes
        self.outputs = [o.name for o in fp32.graph.output]
        self.fixed = fixed_batch(graph)
        self._fp32_model = fp32
        self._fp32_session: Any = None
        self._kept = reference
        self.fp32_labelled = self.score(self.fp32, labelled) if labelled is not None else None
        self._order: Optional[ImageSet] = None  # the labelled set with the images INT8 got wrong first
        self._perm: np.ndarray  # its order: the labelled set's index of each image scored
        self._wrong: List[np.ndarray] = []  # per image of the labelled set: wrong in FP32, at k = 0, in each later pass

    def score(self, sess: Any, labelled: Any) -> Any:
        """Top-1/top-5 of a classifier, or mAP of a detector on a labelled detection set."""
        if isinstance(labelled, DetectionSet):
            return evaluate(labelled, predict(sess, labelled, self.task.spec, self.task.decoder, self.fixed, self.callers))
        return top_k(sess, labelled, BATCH, self.fixed, callers=self.callers)

    def wrong_first(self, before: TopK) -> None:
        """Later checks with a test score first the images ``before`` (a complete top-1 pass) got wrong, then those
        FP32 got wrong (hard ones): a candidate that misses a budget usually gets them wrong too, so its miss is
        certain after a fraction of the set. Each later complete pass puts the images it got wrong ahead of all
        those: in a search it is the candidate nearest the ones still to check (the fewest FP16 layers that met the
        budget so far). On PP-OCRv5 rec's digits the seven misses of a search then took 1808 images, not 2888."""
        self._perm = np.arange(self.labelled.count)
        self._wrong = [self._in_set_order(self.fp32_labelled.hits), self._in_set_order(before.hits)]
        self._reorder()

    def _in_set_order(self, hits: np.ndarray) -> np.ndarray:
        wrong = np.zeros(self.labelled.count, bool)  # a fixed batch leaves the short last one unscored: not wrong
        wrong[self._perm[: len(hits)]] = ~hits
        return wrong

    def _reorder(self) -> None:
        # a stable sort: wrong in the latest pass, then the passes before it, k = 0, FP32 (hard images), the set's order
        self._perm = np.lexsort([np.arange(self.labelled.count), *(~w for w in self._wrong)])
        self._order = self.labelled.reordered(self._perm)

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
        done = 0
        if kept is not None:
            for inputs in _batches(self.images, BATCH, self.fixed):
                yield (inputs, *kept.batch(done, done + len(inputs)))
                done += len(inputs)
            return
        filling = Reference(self._meter(), self.images.count, self.budget_bytes)
        batches = ((b,) for b in _batches(self.images, BATCH, self.fixed))
        for (inputs,), values in ahead(self.fp32, batches, self.callers):
            out = dict(zip(self.outputs, values))
            filling.add(out, len(inputs))
            yield inputs, out, None
        if filling.complete():
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
        result = Measurement()
        if agreement:
            meter = self._meter()
            for (_, ref, kept), values in ahead(sess, self._reference(), self.callers):
                meter.update(ref, dict(zip(self.outputs, values)), kept)
            result.fidelity = meter.summary()
        if labelled and self.labelled is not None:
            if meets is not None and not isinstance(self.labelled, DetectionSet):
                result.labelled = top_k(
                    sess,
                    self._order if self._order is not None else self.labelled,
                    BATCH,
                    self.fixed,
                    lambda t: meets(Measurement(result.fidelity, t)),
                    self.callers,
                )
                if self._order is not None and result.labelled.complete:
                    self._wrong.append(self._in_set_order(result.labelled.hits))
                    self._reorder()
            else:
                result.labelled = self.score(sess, self.labelled)
        return result
