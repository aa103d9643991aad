"""Activation equalization: move the spread between a tensor's channels into the convolutions' per-channel weights.

TensorRT quantizes an activation with one scale for the whole tensor. When one channel reaches 200 and another 0.7
(BlazeFace's last blocks), the small channel gets a handful of INT8 steps and the detections change. Dividing
channel c by s[c] where the tensor is made and multiplying it back where it is read leaves the FP32 network's
outputs as they were (up to rounding), but lets one per-tensor scale fit every channel.

Which channels can be rescaled follows from the graph. A channel of one tensor is tied to the same channel of the
tensors an operator makes from it without mixing channels and without caring about a positive factor (ReLU, the
pools, a residual Add, a Concat or Split along the channels, a zero-padded Pad, Resize): every tied channel takes the
same factor. The factor is paid by the convolutions at the ends: the one that makes a channel divides that output channel's
weights and bias, the one that reads it multiplies that input channel's weights. Any other operator (a graph output,
HardSwish, Clip, a Reshape...) pins the channels it touches to 1. A convolution's own output channel is what
TensorRT's per-channel weight scales cover, so dividing there costs nothing, and a depthwise convolution reading a
rescaled channel takes the factor on its own output channel, also free: such channels are made to span alike. A dense
convolution reading it takes the spread into its input channels, which one weight scale per output channel does not
absorb: there the factor balances the activation's range against the weights' (``factors``).

This is the cross-layer scaling of Nagel et al., "Data-Free Quantization Through Weight Equalization and Bias
Correction" (ICCV 2019), driven by measured activation ranges as in SmoothQuant (Xiao et al., ICML 2023).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

import numpy as np

from edge.graph.model import Graph, attrs

# Operators whose output channel c depends only on input channel c, and scales with it by any positive factor.
PER_CHANNEL = frozenset(
    {
        "Relu",
        "LeakyRelu",
        "PRelu",
        "MaxPool",
        "AveragePool",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "Identity",
        "Dropout",
    }
)
ADDS = frozenset({"Add", "Sub", "Sum"})
FUSED = frozenset({"Relu", "LeakyRelu", "PRelu"})  # TensorRT runs them inside the layer before
LIMIT = 256.0  # no factor beyond 256 either way: weights grow at most that much (FP16 layers must still hold them)

Element = Tuple[str, int]  # (tensor, channel)
# YOLOv8x, RetinaFace or a ResNet-152 tie under 200 000 channels; a shape a file only declares can say anything.
MAX_CHANNELS = 1 << 21


class TooLarge(Exception):
    """The graph ties more channels than equalization takes on."""


@dataclass
class Plan:
    """The graph's tied channels: ``root(element)`` names each group; pinned groups keep factor 1."""

    channels: Dict[str, int]  # tensor -> channel count, for every tensor with elements
    parent: Dict[Element, Element] = field(default_factory=dict)
    pinned: Set[str] = field(default_factory=set)  # tensors whose every channel keeps factor 1 (and so its group)
    convs: List[int] = field(default_factory=list)  # node indices that pay the factors
    size: int = 0  # channels of every tensor with elements
    fused: Set[str] = field(default_factory=set)  # tensors read only by an activation fused into their producer

    def root(self, e: Element) -> Element:
        p = self.parent
        while p.setdefault(e, e) != e:
            p[e] = p[p[e]]
            e = p[e]
        return e

    def tie(self, a: Element, b: Element) -> None:
        ra, rb = self.root(a), self.root(b)
        if ra != rb:
            self.parent[ra] = rb

    def free_roots(self) -> Set[Element]:
        blocked = {self.root((t, k)) for t in self.pinned if t in self.channels for k in range(self.channels[t])}
        return {self.root(e) for e in list(self.parent)} - blocked

    def tensors(self) -> List[str]:
        """The tensors with a channel in a free group whose ranges matter: not a convolution's output that only a ReLU
        reads (TensorRT fuses the two, so only the ReLU's output is quantized; its negative side would count)."""
        free = self.free_roots()
        return [t for t, c in self.channels.items() if t not in self.fused and any(self.root((t, k)) in free for k in range(c))]


@dataclass
class Equalized:
    groups: int  # groups of tied channels given a factor other than 1
    tensors: int  # tensors with a rescaled channel
    convs: int  # convolutions whose weights changed
    spread_before: float  # the largest max/min channel range of a measured tensor, before and after
    spread_after: float
    weights: Dict[str, Tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)  # name: (as given, rescaled)

    def undo(self, model: Any, graph: Graph) -> None:
        """Put the weights back as the file had them (``redo`` rescales them again)."""
        _write(model, graph, {name: pair[0] for name, pair in self.weights.items()})

    def redo(self, model: Any, graph: Graph) -> None:
        _write(model, graph, {name: pair[1] for name, pair in self.weights.items()})

    def to_dict(self) -> Dict[str, Any]:
        return {
            "groups": self.groups,
            "tensors": self.tensors,
            "convs": self.convs,
            "spread": [self.spread_before, self.spread_after],
        }


def _channels(graph: Graph, name: str) -> Optional[int]:
    dims = graph.shape(name)
    if name in graph.consts or not dims or len(dims) < 3 or not isinstance(dims[1], int) or dims[1] <= 0:
        return None
    return dims[1]


def _zero(graph: Graph, name: str) -> bool:
    value = graph.consts.get(name)
    return value is not None and value.size > 0 and not np.any(value)


def plan(graph: Graph) -> Plan:
    """Tie the channels the graph ties, mark the convolutions that pay the factors, pin everything else."""
    nodes = graph.nodes
    inits = {i.name for i in graph.model.graph.initializer}
    uses: Dict[str, int] = {}
    for node in nodes:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    folded = set(graph.folded)
    p = Plan({})

    def elements(name: str) -> Optional[int]:
        c = _channels(graph, name)
        if c is not None and name not in p.channels:
            p.size += c
            if p.size > MAX_CHANNELS:  # a file may declare any shape: the work stays bounded by what real models need
                raise TooLarge(f"more than {MAX_CHANNELS} channels to tie")
            p.channels[name] = c
            for k in range(c):
                p.root((name, k))
        return c

    def pin(names: Iterable[str]) -> None:
        p.pinned.update(names)

    for idx, node in enumerate(nodes):
        if idx in folded:
            continue
        op, a = node.op_type, attrs(node)
        outs = [o for o in node.output if o]
        ins = [i for i in node.input if i]
        if op == "Conv" and _conv_pays(node, graph, inits, uses):
            elements(ins[0])
            elements(outs[0])
            p.convs.append(idx)
            continue
        if op in PER_CHANNEL and len(outs) == 1 and _same_channels(graph, ins[:1] + outs, elements):
            _tie_all(p, ins[0], outs[0])
            pin(ins[1:])  # PRelu's slope: a constant, not rescaled
            continue
        if (
            op in ADDS
            and len(ins) >= 2
            and not any(i in graph.consts for i in ins)
            and _same_channels(graph, ins + outs, elements)
        ):
            for name in ins:
                _tie_all(p, name, outs[0])
            continue
        if op == "Pad" and _zero_pad(node, graph, a) and _same_channels(graph, ins[:1] + outs, elements):
            _tie_all(p, ins[0], outs[0])
            continue
        if op in ("Resize", "Upsample") and _same_channels(graph, ins[:1] + outs, elements):
            _tie_all(p, ins[0], outs[0])
            continue
        if op in ("Concat", "Split") and _channel_axis(graph, a.get("axis", 0), outs[0] if op == "Concat" else ins[0]):
            whole, parts = (outs[0], ins) if op == "Concat" else (ins[0], outs)
            if _join(p, graph, whole, parts, elements):
                continue
        pin(ins + outs)
    for name in p.channels:
        readers = graph.consumers.get(name, [])
        if readers and name not in graph.outputs and all(nodes[i].op_type in FUSED for i in readers):
            p.fused.add(name)
    pin(graph.outputs)
    pin(i.name for i in graph.model.graph.input)
    return p


def _conv_pays(node: Any, graph: Graph, inits: Set[str], uses: Dict[str, int]) -> bool:
    """A Conv whose weight (and bias) are its own initializers: they can take the factors."""
    if len(node.input) < 2 or node.input[1] not in inits or uses.get(node.input[1]) != 1:
        return False
    if len(node.input) > 2 and node.input[2] and (node.input[2] not in inits or uses.get(node.input[2]) != 1):
        return False
    w = graph.consts.get(node.input[1])
    c_in, c_out = _channels(graph, node.input[0]), _channels(graph, node.output[0])
    group = attrs(node).get("group", 1)
    return (
        w is not None
        and w.dtype.kind == "f"
        and c_in is not None
        and c_out == w.shape[0]
        and w.shape[1] * group == c_in
        and w.shape[0] % group == 0
    )


def _same_channels(graph: Graph, names: List[str], elements: Callable[[str], Optional[int]]) -> bool:
    counts = {elements(n) for n in names}
    return len(counts) == 1 and None not in counts


def _tie_all(p: Plan, a: str, b: str) -> None:
    for k in range(p.channels[b]):
        p.tie((a, k), (b, k))


def _zero_pad(node: Any, graph: Graph, a: Dict[str, Any]) -> bool:
    if a.get("mode", "constant") != "constant":
        return False
    pads = a.get("pads")
    if pads is None:
        value = graph.consts.get(node.input[1]) if len(node.input) > 1 else None
        pads = None if value is None else [int(v) for v in value.ravel()]
    if len(node.input) > 2 and node.input[2] and not _zero(graph, node.input[2]):
        return False
    if len(node.input) > 3 and node.input[3]:
        return False  # opset 18's axes: not worth reading
    if a.get("value", 0.0) != 0.0 or not pads:
        return False
    half = len(pads) // 2
    return all(pads[k] == 0 and pads[k + half] == 0 for k in (0, 1))  # batch and channels untouched


def _channel_axis(graph: Graph, axis: int, name: str) -> bool:
    dims = graph.shape(name)
    return dims is not None and len(dims) >= 3 and axis in (1, 1 - len(dims))


def _join(p: Plan, graph: Graph, whole: str, parts: List[str], elements: Callable[[str], Optional[int]]) -> bool:
    """Tie a Concat's (or Split's) parts to their channel ranges of the whole; all-zero constant parts tie nothing."""
    total = elements(whole)
    sizes = [elements(n) if n not in graph.consts else (graph.shape(n) or (0, 0))[1] for n in parts]
    if total is None or any(not isinstance(s, int) for s in sizes) or sum(sizes) != total:
        return False
    if any(n in graph.consts and not _zero(graph, n) for n in parts):
        return False
    offset = 0
    for name, size in zip(parts, sizes):
        if name not in graph.consts:
            for k in range(size):
                p.tie((name, k), (whole, offset + k))
        offset += size
    return True


def dense_weights(p: Plan, graph: Graph) -> Dict[Element, float]:
    """For each group read by a dense convolution (not depthwise): the largest |weight| on its input channel there.
    A depthwise one multiplies its own output channel's weights, which its per-channel scale absorbs: no cost."""
    out: Dict[Element, float] = {}
    free = p.free_roots()
    for idx in p.convs:
        node = graph.nodes[idx]
        w = graph.consts[node.input[1]]
        if w.shape[1] == 1:
            continue
        group = attrs(node).get("group", 1)
        per = np.abs(w).reshape(group, w.shape[0] // group, w.shape[1], -1).max(axis=(1, 3)).reshape(-1)
        for j, value in enumerate(per):
            root = p.root((node.input[0], j))
            if root in free:
                out[root] = max(out.get(root, 0.0), float(value))
    return out


def factors(
    p: Plan, ranges: Dict[str, np.ndarray], strength: float, dense: Optional[Dict[Element, float]] = None
) -> Dict[Element, float]:
    """Each free group's factor from the largest range any of its channels reached (a) and, for a group a dense
    convolution reads, the largest |weight| on that channel there (w): a ** S / w ** (1 - S), which at S = 0.5 leaves
    activation and weight the same range (SmoothQuant's migration, Xiao et al. 2023); (a / median a) ** S for the
    others, whose factors cost nothing. Within [1/LIMIT, LIMIT]."""
    dense = dense or {}
    free = p.free_roots()
    best: Dict[Element, float] = {}
    for name, r in ranges.items():
        for k, value in enumerate(r):
            root = p.root((name, k))
            if root in free:
                # NaN anywhere stays NaN (max would drop it): such a group keeps factor 1
                best[root] = float(value) if not np.isfinite(value) else max(best.get(root, 0.0), float(value))
    live = {root: v for root, v in best.items() if v > 0.0 and np.isfinite(v)}  # a dead channel keeps factor 1
    cheap = [v for root, v in live.items() if dense.get(root, 0.0) <= 0.0]
    median = float(np.median(cheap)) if cheap else 1.0
    out = {}
    for root, a in live.items():
        w = dense.get(root, 0.0)
        f = a**strength / w ** (1.0 - strength) if w > 0.0 else (a / median) ** strength
        out[root] = float(np.clip(f, 1 / LIMIT, LIMIT))
    return out


def apply(p: Plan, graph: Graph, model: Any, found: Dict[Element, float]) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
    """Write the factors into the paying convolutions' weights and biases in ``model`` and ``graph``; each changed
    initializer's values before and after."""
    changed: Dict[str, Tuple[np.ndarray, np.ndarray]] = {}
    for idx in p.convs:
        node = graph.nodes[idx]
        w = graph.consts[node.input[1]]
        group = attrs(node).get("group", 1)
        s_in = _factor(p, found, node.input[0], w.shape[1] * group)
        s_out = _factor(p, found, node.output[0], w.shape[0])
        if np.all(s_in == 1.0) and np.all(s_out == 1.0):
            continue
        # output channel o of group g reads input channels g*I .. (g+1)*I - 1
        per_out = s_in.reshape(group, w.shape[1]).repeat(w.shape[0] // group, axis=0)
        shape = (w.shape[0], w.shape[1]) + (1,) * (w.ndim - 2)
        scaled = {node.input[1]: w * (per_out / s_out[:, None]).reshape(shape)}
        if len(node.input) > 2 and node.input[2]:
            scaled[node.input[2]] = graph.consts[node.input[2]] / s_out
        for name, value in scaled.items():
            changed[name] = (graph.consts[name], value.astype(graph.consts[name].dtype))
    _write(model, graph, {name: pair[1] for name, pair in changed.items()})
    return changed


def _write(model: Any, graph: Graph, values: Dict[str, np.ndarray]) -> None:
    numpy_helper = __import__("onnx").numpy_helper
    stores = [{i.name: i for i in m.graph.initializer} for m in (model, graph.model)]
    for name, value in values.items():
        graph.consts[name] = value
        for store in stores:
            if name in store:
                store[name].CopyFrom(numpy_helper.from_array(value, name))


def spread(ranges: Dict[str, np.ndarray], p: Plan, found: Dict[Element, float]) -> Tuple[float, float]:
    """The largest ratio of a measured tensor's widest channel to its narrowest live one, before and after."""

    def widest(values: np.ndarray) -> float:
        live = values[values > 0]
        return float(live.max() / live.min()) if live.size else 1.0

    before = max([widest(r) for r in ranges.values()] or [1.0])
    after = max([widest(r / _factor(p, found, name, len(r))) for name, r in ranges.items()] or [1.0])
    return before, after


def _factor(p: Plan, found: Dict[Element, float], name: str, count: int) -> np.ndarray:
    return np.array([found.get(p.root((name, k)), 1.0) for k in range(count)], np.float64)


def measure(
    model: Any,
    graph: Graph,
    images: Any,
    tensors: List[str],
    budget_bytes: int,
    threads: int = 0,
    on_start: Optional[Callable[[], None]] = None,
) -> Dict[str, np.ndarray]:
    """The largest |value| each channel of ``tensors`` reaches over ``images`` (one pass of the FP32 model);
    ``on_start()`` once ONNX Runtime has taken the model, as ``stats.collect`` does."""
    from edge.calib import stats

    batch, groups = stats.plan(stats.per_image_bytes(graph, tensors), budget_bytes // 2, 32, stats.session_bytes(model))
    batch, fixed = stats.run_batch(graph, images, batch)
    tap = stats.TensorTap(model, groups, threads)
    if on_start is not None:
        on_start()
    ranges = {t: np.zeros(graph.shape(t)[1], np.float64) for t in tensors}
    for inputs in images.batches(batch):
        if fixed is not None and len(inputs) != fixed:
            break  # a fixed-batch model cannot take the short last batch
        for outputs in tap.run(inputs):
            for name, values in outputs.items():
                axes = (0, *range(2, values.ndim))
                np.maximum(ranges[name], np.abs(values).max(axis=axes), out=ranges[name])
    tap.sessions.clear()
    stats.give_back_memory()
    return ranges


def equalize(
    model: Any,
    graph: Graph,
    images: Any,
    strength: float,
    budget_bytes: int,
    threads: int = 0,
    on_start: Optional[Callable[[], None]] = None,
    say: Callable[[str], None] = lambda text: None,
) -> Optional[Equalized]:
    """Rescale ``model``'s (and ``graph``'s) convolutions so each free group of tied channels spans alike; None when
    the graph has nothing to rescale (``on_start`` is then not called)."""
    try:
        p = plan(graph)
    except TooLarge as exc:
        say(f"equalize: skipped, {exc} (calibrating without it)")
        return None
    tensors = p.tensors()
    if not tensors:
        return None
    ranges = measure(model, graph, images, tensors, budget_bytes, threads, on_start)
    found = {root: f for root, f in factors(p, ranges, strength, dense_weights(p, graph)).items() if f != 1.0}
    if not found:
        return None
    before, after = spread(ranges, p, found)
    weights = apply(p, graph, model, found)
    convs = sum(1 for idx in p.convs if graph.nodes[idx].input[1] in weights)
    touched = sum(1 for name, r in ranges.items() if np.any(_factor(p, found, name, len(r)) != 1.0))
    return Equalized(len(found), touched, convs, before, after, weights)
