"""Activation statistics with ONNX Runtime, streamed over the images with bounded memory.

For every tensor TensorRT wants a scale for (the network inputs and every node output that is computed at run time,
named as in the ONNX file, which is what TensorRT's ONNX parser calls them) we keep the running absolute maximum and
a 2048-bin histogram of |x| over [0, range]. When a batch brings a larger |x|, the range grows by a power of two and
neighbouring bins are summed, so counts stay exact and nothing but the histogram is kept. The model runs with those
tensors exposed as outputs, a few images at a time: the batch size (and, for very large models, how many tensor
groups each batch is run for) follows from the tensor sizes and a memory budget.
"""

from __future__ import annotations

import functools
import math
import os
import queue
import threading
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import numpy as np

from edge.calib.datasets import ImageSet
from edge.errors import EdgeError
from edge.graph.model import Graph, declared_dims, model_inputs
from edge.lazy import require

BINS = 2048
CHUNK = 1 << 16  # values per bincount: 512 KiB of indices, within a core's L2 cache
# Counting is most of the statistics' time. A tensor with more than SAMPLE_ABOVE values per image in a run has every
# k-th value counted, k the first prime from SAMPLE_STRIDE on that divides none of its dimensions (a stride of 3 on an
# NHWC tensor with 3 channels counted only the first channel); its maximum is still taken over all values. The
# threshold is per image so that the batch the memory budget picks does not change what is counted. Sparser samples
# moved the scales: a threshold of half this, or a stride raised to count a fixed number of values per image, put the
# 95th percentile of BlazeFace's percentile scales 3 % and 18 % away from a full count, against 0.6 % with this rule.
SAMPLE_ABOVE = 1 << 16
SMALL = 8192  # values in a run below which tensors are counted together (add_small)
SAMPLE_STRIDE = 3
_FLOAT_TYPES = (1, 10, 11)  # ONNX TensorProto FLOAT, FLOAT16, DOUBLE
# Ops whose output holds exactly the values of their first input, rearranged: the same histogram and maximum.
_SAME_VALUES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Identity"})
# Weight inputs that TensorRT's parser takes as layer weights, not as tensors: (op, input indices).
_WEIGHT_SLOTS = {"Conv": (1, 2), "ConvTranspose": (1, 2), "BatchNormalization": (1, 2, 3, 4), "InstanceNormalization": (1, 2)}


def rebin(hist: np.ndarray, factor: int) -> np.ndarray:
    """The histogram after its range grew ``factor`` times (a power of two): every ``factor`` bins become one."""
    n = hist.size
    if factor >= n:
        out = np.zeros_like(hist)
        out[0] = hist.sum()
        return out
    out = np.zeros_like(hist)
    out[: n // factor] = hist.reshape(n // factor, factor).sum(axis=1)
    return out


@functools.lru_cache(maxsize=4096)
def sample_stride(shape: Tuple[int, ...]) -> int:
    """The first prime from SAMPLE_STRIDE on that divides no dimension of ``shape``: every period of the layout (a
    row, a channel, an image) is then a product of dimensions it does not divide, so the sample visits every row,
    column and channel equally often instead of aliasing onto a few of them."""
    stride = SAMPLE_STRIDE
    while any(d % stride == 0 for d in shape if d > 0) or any(stride % k == 0 for k in range(2, int(stride**0.5) + 1)):
        stride += 1
    return stride


def counting_stride(shape: Tuple[int, ...], images: int = 1) -> int:
    """1 (count every value) or the sample stride for a run of ``images`` images whose tensor has ``shape``."""
    return sample_stride(tuple(shape)) if math.prod(shape) > SAMPLE_ABOVE * max(images, 1) else 1


def scratch_buffers() -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Work space for ``TensorStats.add``: one chunk as float32, int32 and intp."""
    return np.empty(CHUNK, np.float32), np.empty(CHUNK, np.int32), np.empty(CHUNK, np.intp)


class TensorStats:
    """Running |x| maximum and histogram of one tensor."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.absmax = 0.0
        self.range = 0.0  # the histogram covers [0, range] in BINS equal bins
        self.hist = np.zeros(BINS, np.int64)

    def add(
        self, values: np.ndarray, scratch: Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]] = None, images: int = 1
    ) -> None:
        """Count a run's values (``images`` images). ``scratch`` (from ``scratch_buffers()``) is reused across calls."""
        flat = np.ascontiguousarray(values).reshape(-1)
        if flat.size == 0:
            return
        # max and min read the values without writing any: the only pass over the values that are not counted.
        hi, lo = float(flat.max()), float(flat.min())
        if not (math.isfinite(hi) and math.isfinite(lo)):
            raise EdgeError(
                f"tensor '{self.name}' holds inf or NaN for these images; check the preprocessing (input.scale, mean, std)"
            )
        m = max(hi, -lo)
        self.absmax = max(self.absmax, m)
        if m > self.range:
            self._grow(m)
        counted = flat[:: counting_stride(values.shape, images)]
        if self.range == 0.0:  # only zeros so far
            self.hist[0] += counted.size
            return
        fbuf, ibuf32, ibuf = scratch if scratch is not None else scratch_buffers()
        # One cache-sized chunk at a time: each counted value is read from memory once, later passes hit the cache.
        for start in range(0, counted.size, CHUNK):
            a = fbuf[: min(CHUNK, counted.size - start)]
            np.abs(counted[start : start + CHUNK], out=a, casting="same_kind")
            np.multiply(a, np.float32(BINS / self.range), out=a)
            # Truncation is the bin index; float32 -> int32 is vectorised, float32 -> int64 is not.
            n = a.size
            np.copyto(ibuf32[:n], a, casting="unsafe")
            idx = ibuf[:n]
            np.copyto(idx, ibuf32[:n])
            counts = np.bincount(idx, minlength=BINS + 1)
            self.hist += counts[:BINS]
            self.hist[-1] += counts[BINS]  # |x| == range can land one past the end after float rounding

    def copy(self, name: str) -> TensorStats:
        """The same statistics under another tensor's name."""
        twin = TensorStats(name)
        twin.absmax, twin.range, twin.hist = self.absmax, self.range, self.hist.copy()
        return twin

    def _grow(self, m: float) -> None:
        if self.range == 0.0:
            self.range = m
            return
        factor = 2 ** max(1, math.ceil(math.log2(m / self.range)))
        while self.range * factor < m:  # guard against log2 rounding down
            factor *= 2
        self.hist = rebin(self.hist, factor)
        self.range *= factor


def calibration_tensors(graph: Graph) -> Tuple[List[str], Dict[str, np.ndarray]]:
    """(activations measured on images, float constants that become tensors in TensorRT with their values).

    Activations are the float network inputs and the outputs of every node that is not folded at build time.
    Constants count when a run-time node reads them outside a weight slot (e.g. a MatMul weight or an Add bias):
    TensorRT's parser makes those constant layers, whose outputs need scales too.
    """
    folded = set(graph.folded)
    acts = [i.name for i in model_inputs(graph.model) if graph.dtypes.get(i.name, 1) in _FLOAT_TYPES]
    consts: Dict[str, np.ndarray] = {}
    for idx, node in enumerate(graph.model.graph.node):
        if idx in folded:
            continue
        acts += [o for o in node.output if o and graph.dtypes.get(o, 0) in (0, *_FLOAT_TYPES)]
        skip = _WEIGHT_SLOTS.get(node.op_type, ())
        for k, name in enumerate(node.input):
            value = graph.consts.get(name)
            if k not in skip and value is not None and value.dtype.kind == "f" and value.size > 1:
                consts[name] = value
    return acts, consts


def value_sources(graph: Graph, tensors: Iterable[str]) -> Dict[str, str]:
    """For each of ``tensors`` that a Reshape, Transpose, Squeeze... makes from another of them (through chains), the
    one that is measured instead: its values are the same, so counting both would only count them twice. Graph
    outputs are always measured (the check takes them from the pass)."""
    wanted = set(tensors)
    outputs = set(graph.outputs)
    nodes = graph.model.graph.node
    sources: Dict[str, str] = {}
    for name in wanted - outputs:
        src = name
        while True:
            idx = graph.producer.get(src)
            node = nodes[idx] if idx is not None else None
            if node is None or node.op_type not in _SAME_VALUES or not node.input or node.input[0] not in wanted:
                break
            src = node.input[0]
        if src != name:
            sources[name] = src
    return sources


def per_image_bytes(graph: Graph, tensors: Iterable[str]) -> Dict[str, int]:
    """Bytes of each tensor for one image (shapes pinned to batch 1); unknown shapes count as the largest known."""
    sizes: Dict[str, int] = {}
    for name in tensors:
        dims = graph.shape(name)
        known = dims is not None and all(isinstance(d, int) and d > 0 for d in dims)
        sizes[name] = 4 * math.prod(dims) if known else -1
    largest = max([s for s in sizes.values() if s > 0] or [4])
    return {n: (s if s > 0 else largest) for n, s in sizes.items()}


def session_bytes(model: Any) -> int:
    """What one more ONNX Runtime session of ``model`` costs: about four times its size (PP-OCRv5 rec, 16 MB: 63 MB
    per session after ``give_back_memory``, measured with /proc/self/status)."""
    return 4 * model.ByteSize()


def plan(sizes: Dict[Any, int], budget_bytes: int, max_batch: int, per_session: int = 0) -> Tuple[int, List[List[Any]]]:
    """(batch size, tensor groups) so one run's exposed outputs stay under the budget.

    Prefer one group and the largest batch that fits; only when a single image's tensors exceed the budget are they
    split into groups, each run separately (the model is then evaluated once per group). Each group is an ONNX
    Runtime session of its own, costing ``per_session`` bytes: a budget far below one image's tensors (``--memory-mb 1``
    made a hundred sessions and 5.8 GB) is raised to where more groups would cost more in sessions than they save.
    """
    total = sum(sizes.values())
    if total <= budget_bytes:
        return max(1, min(max_batch, budget_bytes // max(total, 1))), [list(sizes)]
    # g groups hold about g * per_session + 2 * total / g (two runs alive): least at total / g = sqrt(total * s / 2).
    budget_bytes = max(budget_bytes, int(math.sqrt(total * per_session / 2)))
    groups: List[List[Any]] = [[]]
    used = 0
    for name, size in sizes.items():
        if groups[-1] and used + size > budget_bytes:
            groups.append([])
            used = 0
        groups[-1].append(name)
        used += size
    return 1, groups


def session_options(threads: int = 0, simulated_int8: bool = False) -> Tuple[Any, List[str]]:
    """(ONNX Runtime session options, optimisers to disable) for calibration sessions."""
    ort = require("onnxruntime", "running the model for calibration")
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    # Spinning workers would take the core that counts the previous batch meanwhile.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if threads:
        opts.intra_op_num_threads = threads
    if not simulated_int8:
        return opts, []
    # Q/DQ pairs stay ops of their own (INT8 simulated in float, not ORT's integer kernels) while every other pass
    # still runs: at the basic level, which kept them too, depthwise convolutions took ORT's generic path and the
    # check ran 1.5-2.5x slower.
    opts.add_session_config_entry("session.disable_quant_qdq", "1")
    return opts, ["DoubleQDQPairsRemover"]  # not among the passes that setting turns off


class TensorTap:
    """ONNX Runtime sessions of a model that return chosen intermediate tensors, one session per tensor group."""

    def __init__(self, model: Any, groups: List[List[str]], threads: int = 0, simulated_int8: bool = False) -> None:
        onnx = require("onnx", "exposing intermediate tensors")
        ort = require("onnxruntime", "running the model for calibration")
        self.input_name = model_inputs(model)[0].name
        self.sessions = []
        for group in groups:
            m = onnx.ModelProto()
            m.CopyFrom(model)
            del m.graph.output[:]
            m.graph.output.extend(onnx.helper.make_empty_tensor_value_info(t) for t in group)
            opts, disabled = session_options(threads, simulated_int8)
            try:
                sess = ort.InferenceSession(
                    m.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"], disabled_optimizers=disabled
                )
            except Exception as exc:  # ORT's own exception types
                raise EdgeError(f"ONNX Runtime cannot load the model ({str(exc).splitlines()[0]})") from None
            self.sessions.append((sess, group))
            del m
        give_back_memory()  # the model's copies made for the sessions: as large as the model, several times over

    def run(self, batch: np.ndarray) -> Iterator[Dict[str, np.ndarray]]:
        """One dict of tensors per group, computed one group at a time (so only one group is in memory)."""
        for sess, group in self.sessions:
            yield dict(zip(group, sess.run(group, {self.input_name: batch})))


class Collector:
    """Statistics of many tensors. One thread: numpy's bincount holds the GIL, so threads would only take turns."""

    def __init__(self, names: Iterable[str]) -> None:
        self.stats: Dict[str, TensorStats] = {n: TensorStats(n) for n in names}
        self._scratch = scratch_buffers()

    def update(self, tensors: Dict[str, np.ndarray], images: int = 1) -> None:
        """Count a run's tensors (``images`` images), emptying ``tensors``: each is freed once counted, so the run
        being computed meanwhile can reuse its memory."""
        small: List[Tuple[TensorStats, np.ndarray]] = []
        while tensors:
            name, values = tensors.popitem()
            if values.dtype.kind != "f":  # an output whose type shape inference did not know, and is not float
                self.stats.pop(name, None)
                continue
            stats = self.stats[name]
            if 0 < values.size <= SMALL and values.dtype == np.float32 and stats.range > 0.0:
                small.append((stats, values))
            else:
                stats.add(values, self._scratch, images)
            del values
        if small:
            add_small(small)


def add_small(items: List[Tuple[TensorStats, np.ndarray]]) -> None:
    """``TensorStats.add`` for many small float32 tensors at once, with the same bins: one bincount over all of them,
    each tensor's indices offset into a block of its own. Per tensor the numpy calls of ``add`` cost about 10 µs
    whatever its size, which made the 150 tensors of under a few thousand values in a recogniser an eighth of the
    counting time.
    """
    flat = np.concatenate([v.reshape(-1) for _, v in items])
    sizes = np.array([v.size for _, v in items])
    starts = np.concatenate(([0], np.cumsum(sizes[:-1])))
    highs = np.maximum.reduceat(flat, starts)
    lows = np.minimum.reduceat(flat, starts)
    if not (np.isfinite(highs).all() and np.isfinite(lows).all()):
        bad = next(s for (s, _), h, lo in zip(items, highs, lows) if not (math.isfinite(h) and math.isfinite(lo)))
        raise EdgeError(
            f"tensor '{bad.name}' holds inf or NaN for these images; check the preprocessing (input.scale, mean, std)"
        )
    for (stats, _), hi, lo in zip(items, highs.tolist(), lows.tolist()):
        m = max(hi, -lo)
        stats.absmax = max(stats.absmax, m)
        if m > stats.range:
            stats._grow(m)
    # float32 products and truncation as in add(), so every value lands in the bin add() would give it
    scales = np.array([BINS / stats.range for stats, _ in items], np.float32)
    a = np.abs(flat, out=flat)
    np.multiply(a, np.repeat(scales, sizes), out=a)
    idx = a.astype(np.int32).astype(np.intp)
    idx += np.repeat(np.arange(len(items)) * (BINS + 1), sizes)
    counts = np.bincount(idx, minlength=len(items) * (BINS + 1)).reshape(len(items), BINS + 1)
    for k, (stats, _) in enumerate(items):
        stats.hist += counts[k, :BINS]
        stats.hist[-1] += counts[k, BINS]


def prefetch(items: Iterable[Any], alive: int = 2) -> Iterator[Any]:
    """Produce ``items`` in a background thread: ONNX Runtime and OpenCV release the GIL, so the next batch runs on
    the other cores while this thread counts the last one. At most ``alive`` items exist at once, the one the caller
    holds included: the producer takes a slot before it makes an item and the caller's next request frees one, so
    memory is budgeted per slot and never grows by a run queued behind the one being made."""
    q: queue.Queue = queue.Queue()
    slots = threading.Semaphore(alive)
    stop = threading.Event()
    done = object()

    def produce() -> None:
        source = iter(items)
        try:
            while True:
                while not slots.acquire(timeout=0.1):  # before the item is made: its memory needs the slot
                    if stop.is_set():
                        return
                if stop.is_set():
                    return
                item = next(source, done)
                q.put((item, None))
                if item is done:
                    return
                del item  # the queue and then the caller hold it; a slot's count must not include this frame
        except BaseException as exc:  # handed to the consumer, which raises it
            q.put((None, exc))

    worker = threading.Thread(target=produce, name="calib-infer", daemon=True)
    worker.start()
    held = False
    try:
        while True:
            if held:
                slots.release()  # the caller asked for the next item: it is done with the last one
            item, exc = q.get()
            if exc is not None:
                raise exc
            if item is done:
                return
            held = True
            yield item
            del item
    finally:
        stop.set()
        slots.release()  # a producer waiting for a slot sees the stop
        worker.join()


def give_back_memory() -> bool:
    """Hand freed heap pages back to the system where the C library can (glibc's ``malloc_trim``); False elsewhere.

    Loading a model and the statistics pass free tens to hundreds of MB in pieces (copies of the model, each run's
    tensors made in the worker thread's heap) that glibc keeps mapped, so without this each later stage starts from
    the earlier one's peak.
    """
    import ctypes

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):  # musl, macOS: no such call
        return False
    trim(0)
    return True


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def fixed_batch(graph: Graph) -> Optional[int]:
    """The batch size the model's input declares, when it is a number rather than a symbol; 1 when the input's
    batch is a symbol but an output's first axis is a fixed 1: there the batch is not the outputs' first axis
    (RapidAI's table lines end in class ids [1, batch, h, w]), so images cannot be told apart in a larger batch."""
    dims = next(iter(graph.declared_inputs.values()), ())
    if dims and isinstance(dims[0], int) and dims[0] > 0:
        return dims[0]
    declared = [declared_dims(o) or (None,) for o in graph.model.graph.output]  # the file's, not those --shape pins
    return 1 if dims and any(d[0] == 1 for d in declared) else None


def run_batch(graph: Graph, images: ImageSet, batch: int) -> Tuple[int, Optional[int]]:
    """(the batch to run, the model's fixed batch or None): a fixed batch wins, and needs that many images."""
    fixed = fixed_batch(graph)
    if fixed is None:
        return batch, None
    if fixed > images.count:
        raise EdgeError(f"the model's input has a fixed batch of {fixed} but only {images.count} images were given")
    return fixed, fixed


def collect(
    model: Any,
    graph: Graph,
    images: ImageSet,
    tensors: List[str],
    budget_bytes: int = 256 << 20,
    max_batch: int = 32,
    threads: int = 0,
    progress: Optional[Callable[[int, int], None]] = None,
    on_run: Optional[Callable[[Dict[str, np.ndarray], int], None]] = None,
    on_start: Optional[Callable[[], None]] = None,
) -> Dict[str, TensorStats]:
    """Stream the images through the model and return the statistics of ``tensors`` (those that are float).
    ``on_run(outputs, images)`` sees every run's outputs before they are counted (edge calib keeps the network
    outputs from it).

    Up to two runs' outputs are alive at once (one being counted, the next being computed or waiting), so each gets
    half of ``budget_bytes``.
    ``progress(images done, batch size)`` is called after every batch, ``on_start()`` once ONNX Runtime has taken the
    model (a model it refuses is then the only line a user sees).
    """
    copies = value_sources(graph, tensors)
    measured = [t for t in tensors if t not in copies]
    batch, groups = plan(per_image_bytes(graph, measured), budget_bytes // 2, max_batch, session_bytes(model))
    batch, fixed = run_batch(graph, images, batch)
    tap = TensorTap(model, groups, threads)
    if on_start is not None:
        on_start()
    collector = Collector(measured)

    def runs() -> Iterator[Tuple[int, bool, Dict[str, np.ndarray]]]:
        for inputs in images.batches(batch):
            if len(inputs) != batch and fixed is not None:
                return  # a fixed-batch model cannot take the short last batch
            for k, outputs in enumerate(tap.run(inputs)):
                yield len(inputs), k == len(groups) - 1, outputs

    done = 0
    for count, last_group, outputs in prefetch(runs()):
        if on_run is not None:
            on_run(outputs, count)
        collector.update(outputs, count)
        del outputs  # before the next request frees this run's slot
        if last_group:
            done += count
            if progress:
                progress(done, batch)
    tap.sessions.clear()  # the model's sessions go before the check makes its own
    give_back_memory()
    result: Dict[str, TensorStats] = {}
    for name in tensors:
        source = collector.stats.get(copies.get(name, name))
        if source is not None:
            result[name] = source if source.name == name else source.copy(name)
    return result
