"""``edge dla --fix``: rewrites that keep the maths and move work onto the DLA.

Every rewrite replaces a pattern the DLA rejects with operators it accepts and that compute the same function
(up to float rounding): a static input shape for a dynamic one, HardSwish/HardSigmoid as Mul+Add+Clip,
division by a constant as multiplication by its reciprocal, GlobalAveragePool as a cascade of small average
pools over equal blocks, a too-wide convolution as two convolutions and a channel concat, a reshape that keeps
its input's shape (tf2onnx writes them around squeeze-and-excite blocks) taken out. Each step is
reported with the prediction before and after it, and the result is checked with ONNX Runtime.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from edge.dla.predict import Report, predict
from edge.dla.rules import Limits, limits_for
from edge.errors import EdgeError
from edge.graph.fold import nbytes
from edge.graph.model import attrs, is_static, load_model, model_inputs, pin_inputs, prepare
from edge.lazy import require

RTOL, ATOL = 1e-3, 1e-4  # float rounding differs (x/6 vs x*(1/6), summation order); anything more is a bug


@dataclass
class FixStep:
    name: str
    sites: int
    before: Dict[str, Any]
    after: Dict[str, Any]


@dataclass
class FixResult:
    model: Any  # the rewritten onnx.ModelProto
    steps: List[FixStep]  # applied: before = the written model without this rewrite, after = the written model
    max_abs_diff: Dict[str, float] = field(default_factory=dict)  # per output, fixed vs original in ONNX Runtime
    report: Optional[Report] = None  # the prediction for the fixed model
    skipped: List[FixStep] = field(default_factory=list)  # found sites, did not help: before = without, after = with

    def to_dict(self) -> Dict[str, Any]:
        return {
            "steps": [s.__dict__ for s in self.steps],
            "skipped": [s.__dict__ for s in self.skipped],
            "max_abs_diff": self.max_abs_diff,
            "tolerance": {"rtol": RTOL, "atol": ATOL},
        }


class _Editor:
    """Node replacement on a ModelProto with fresh, collision-free tensor names."""

    def __init__(self, model: Any) -> None:
        self.onnx = require("onnx")
        self.model = model
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        self._names = {n for node in model.graph.node for n in list(node.input) + list(node.output)}
        self._names |= {i.name for i in model.graph.initializer} | {n.name for n in model.graph.node}

    def name(self, base: str) -> str:
        i, cand = 0, f"{base}_dla"
        while cand in self._names:
            i += 1
            cand = f"{base}_dla{i}"
        self._names.add(cand)
        return cand

    def const(self, base: str, value: Any) -> str:
        name = self.name(base)
        self.model.graph.initializer.append(self.onnx.numpy_helper.from_array(np.asarray(value, dtype=np.float32), name))
        return name

    def node(self, op: str, inputs: List[str], base: str, output: Optional[str] = None, **kw: Any) -> Any:
        out = output or self.name(base)
        return self.onnx.helper.make_node(op, inputs, [out], name=self.name(base + "_" + op.lower()), **kw)

    def clip01(self, x: str, base: str, output: str) -> Any:
        if self.opset >= 11:
            return self.node("Clip", [x, self.const(base + "_lo", 0.0), self.const(base + "_hi", 1.0)], base, output)
        return self.node("Clip", [x], base, output, min=0.0, max=1.0)

    def replace(self, rewrite: Callable[[Any], Optional[List[Any]]]) -> int:
        """Replace each node for which ``rewrite`` returns new nodes; keeps topological order."""
        nodes, count = [], 0
        for node in list(self.model.graph.node):
            new = rewrite(node)
            if new is None:
                nodes.append(node)
            else:
                nodes.extend(new)
                count += 1
        del self.model.graph.node[:]
        self.model.graph.node.extend(nodes)
        return count


def _hard_sigmoid_nodes(ed: _Editor, x: str, alpha: float, beta: float, base: str, output: str) -> List[Any]:
    scaled = ed.node("Mul", [x, ed.const(base + "_alpha", alpha)], base)
    shifted = ed.node("Add", [scaled.output[0], ed.const(base + "_beta", beta)], base)
    return [scaled, shifted, ed.clip01(shifted.output[0], base, output)]


def _fix_hardswish(ed: _Editor, g: Any, lim: Limits) -> int:
    def rewrite(node: Any) -> Optional[List[Any]]:
        if node.op_type != "HardSwish" or "HardSwish" in lim.activations:
            return None
        base = node.name or node.output[0]
        gate = _hard_sigmoid_nodes(ed, node.input[0], 1.0 / 6.0, 0.5, base, ed.name(base + "_gate"))
        return [*gate, ed.node("Mul", [node.input[0], gate[-1].output[0]], base, node.output[0])]

    return ed.replace(rewrite)


def _fix_hardsigmoid(ed: _Editor, g: Any, lim: Limits) -> int:
    def rewrite(node: Any) -> Optional[List[Any]]:
        if node.op_type != "HardSigmoid" or "HardSigmoid" in lim.activations:
            return None
        a = attrs(node)
        return _hard_sigmoid_nodes(
            ed, node.input[0], a.get("alpha", 0.2), a.get("beta", 0.5), node.name or node.output[0], node.output[0]
        )

    return ed.replace(rewrite)


def _fix_div_const(ed: _Editor, g: Any, lim: Limits) -> int:
    def rewrite(node: Any) -> Optional[List[Any]]:
        if node.op_type != "Div" or "Div" in lim.eltwise:
            return None
        divisor = g.consts.get(node.input[1])
        if divisor is None or node.input[0] in g.consts or divisor.dtype.kind != "f" or not np.all(divisor != 0):
            return None
        recip = ed.const((node.name or node.output[0]) + "_recip", 1.0 / divisor)
        return [ed.node("Mul", [node.input[0], recip], node.name or node.output[0], node.output[0])]

    return ed.replace(rewrite)


def _pool_factors(n: int, window: int) -> Optional[List[int]]:
    """Split ``n`` into factors <= window (largest first), or None when a prime factor is too big."""
    out = []
    while n > 1:
        f = next((f for f in range(min(window, n), 1, -1) if n % f == 0), None)
        if f is None:
            return None
        out.append(f)
        n //= f
    return out


def _fix_global_avgpool(ed: _Editor, g: Any, lim: Limits) -> int:
    window = lim.pool_window[1]

    def rewrite(node: Any) -> Optional[List[Any]]:
        dims = g.shape(node.input[0]) or () if node.op_type == "GlobalAveragePool" else ()
        if len(dims) != 4 or not all(isinstance(d, int) for d in dims[2:]):
            return None
        fh, fw = _pool_factors(dims[2], window), _pool_factors(dims[3], window)
        if fh is None or fw is None:
            return None
        steps = max(len(fh), len(fw), 1)
        fh, fw = fh + [1] * (steps - len(fh)), fw + [1] * (steps - len(fw))
        # Averages of equal, non-overlapping blocks average to the global mean.
        out, x, base = [], node.input[0], node.name or node.output[0]
        for i, (kh, kw) in enumerate(zip(fh, fw)):
            last = i == steps - 1
            pool = ed.node(
                "AveragePool",
                [x],
                base,
                node.output[0] if last else None,
                kernel_shape=[kh, kw],
                strides=[kh, kw],
                count_include_pad=1,
            )
            out.append(pool)
            x = pool.output[0]
        return out

    return ed.replace(rewrite)


def _fix_avgpool_inclusive(ed: _Editor, g: Any, lim: Limits) -> int:
    """Xavier wants inclusive padding; with no padding at all both modes are the same average."""
    if lim.pool_exclusive_pad:
        return 0
    count = 0
    for node in ed.model.graph.node:
        a = attrs(node)
        if node.op_type == "AveragePool" and not a.get("count_include_pad", 0) and not any(a.get("pads", [])):
            if a.get("auto_pad", "NOTSET") in ("NOTSET", "VALID"):
                for attr in [x for x in node.attribute if x.name == "count_include_pad"]:
                    node.attribute.remove(attr)
                node.attribute.append(ed.onnx.helper.make_attribute("count_include_pad", 1))
                count += 1
    return count


def _fix_wide_conv(ed: _Editor, g: Any, lim: Limits) -> int:
    def rewrite(node: Any) -> Optional[List[Any]]:
        w = g.consts.get(node.input[1]) if node.op_type == "Conv" else None
        if w is None or w.ndim < 3 or w.shape[0] <= lim.max_maps or attrs(node).get("group", 1) != 1:
            return None
        base, kw = node.name or node.output[0], {a.name: ed.onnx.helper.get_attribute_value(a) for a in node.attribute}
        bias = g.consts.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        parts = []
        for start in range(0, w.shape[0], lim.max_maps):
            stop = min(start + lim.max_maps, w.shape[0])
            inputs = [node.input[0], ed.const(base + "_w", w[start:stop])]
            if bias is not None:
                inputs.append(ed.const(base + "_b", bias[start:stop]))
            parts.append(ed.node("Conv", inputs, base, **kw))
        return [*parts, ed.node("Concat", [p.output[0] for p in parts], base, node.output[0], axis=1)]

    return ed.replace(rewrite)


_RESHAPES = ("Reshape", "Squeeze", "Unsqueeze", "Flatten")


def _fix_identity_reshape(ed: _Editor, g: Any, lim: Limits) -> int:
    """A reshape whose static output shape is its input's moves no data, yet TensorRT's DLA takes no shuffle: each
    one split a DLA subgraph in two. Its readers read its input instead; one the graph outputs stays (its name)."""
    outputs = set(g.outputs)
    alias: Dict[str, str] = {}
    for node in ed.model.graph.node:
        if node.op_type in _RESHAPES and node.output[0] not in outputs:
            dims = g.shape(node.input[0])
            if is_static(dims) and g.shape(node.output[0]) == dims:
                alias[node.output[0]] = node.input[0]
    if not alias:
        return 0

    def source(name: str) -> str:
        while name in alias:  # a chain of them
            name = alias[name]
        return name

    kept = [node for node in ed.model.graph.node if node.output[0] not in alias or node.op_type not in _RESHAPES]
    for node in kept:
        for i, name in enumerate(node.input):
            node.input[i] = source(name)
    del ed.model.graph.node[:]
    ed.model.graph.node.extend(kept)
    return len(alias)


REWRITES: List[Tuple[str, Callable[[_Editor, Any, Limits], int]]] = [
    ("identity-reshape-removed", _fix_identity_reshape),
    ("hardswish-as-mul-add-clip", _fix_hardswish),
    ("hardsigmoid-as-mul-add-clip", _fix_hardsigmoid),
    ("div-by-constant-as-mul", _fix_div_const),
    ("global-avgpool-as-avgpool-cascade", _fix_global_avgpool),
    ("avgpool-inclusive-padding", _fix_avgpool_inclusive),
    ("split-wide-conv", _fix_wide_conv),
]


def _counts(report: Report) -> Dict[str, Any]:
    return {
        "gpu_nodes": report.gpu_nodes,
        "subgraphs": report.candidate_subgraphs,
        "transitions": report.transitions,
        "gpu_islands": report.gpu_islands,
        "dla_flops_share": round(report.dla_flops_share, 4),
        "dynamic_inputs": len(report.dynamic_inputs),
    }


FLOPS_GAIN = 0.01  # a share of the model's compute below which a change in dla_flops_share is not a gain


def _helps(with_: Dict[str, Any], without: Dict[str, Any]) -> bool:
    """A rewrite helps when it moves compute onto the DLA (at least FLOPS_GAIN of the model's), or, moving
    none, makes some count better and none worse (fewer GPU nodes, subgraphs, transitions, GPU islands)."""
    gain = with_["dla_flops_share"] - without["dla_flops_share"]
    if abs(gain) >= FLOPS_GAIN:
        return gain > 0
    fewer = ("gpu_nodes", "subgraphs", "transitions", "gpu_islands")
    return with_ != without and all(with_[k] <= without[k] for k in fewer)


def fix(
    model: Union[str, Path, Any],
    target: str = "orin",
    trt: Optional[str] = None,
    shapes: Optional[Dict[str, Tuple[int, ...]]] = None,
    precision: str = "fp16",
    verify: bool = True,
) -> FixResult:
    """Apply the safe rewrites that help this target (``_helps``; the others are skipped and listed), then check
    the outputs in ONNX Runtime."""
    onnx = require("onnx", "rewriting ONNX models")
    original = load_model(model)
    lim = limits_for(target, trt)
    before = predict(original, target, trt, shapes, precision)
    steps: List[FixStep] = []

    pinned = pin_inputs(original, shapes or {})
    _pin_outputs(pinned)
    chains: Dict[Tuple[str, ...], Tuple[Report, Dict[str, int]]] = {}  # predictions only: a model can be large

    def build(names: Tuple[str, ...]) -> Tuple[Any, Dict[str, int]]:
        """The pinned model with these rewrites applied in REWRITES order, and each one's sites."""
        work, sites = onnx.ModelProto(), {}
        work.CopyFrom(pinned)
        for name, rewrite in REWRITES:
            if name in names:
                sites[name] = rewrite(_Editor(work), prepare(work), lim)
        return work, sites

    def counts(names: Tuple[str, ...]) -> Dict[str, Any]:
        if names not in chains:
            work, sites = build(names)
            chains[names] = (predict(work, target, trt, None, precision), sites)
        return _counts(chains[names][0])

    if before.dynamic_inputs:
        steps.append(FixStep("static-input-shape", len(before.dynamic_inputs), _counts(before), counts(())))
    everything = tuple(name for name, _ in REWRITES)
    counts(everything)
    found = chains[everything][1]
    kept = tuple(name for name in everything if found[name])
    # A rewrite can pay off only with a later one (HardSigmoid as Mul+Add+Clip adds GPU nodes until the
    # division after it becomes a Mul), so all are applied first; then each, last first, is taken out again
    # unless the model is better with it (a lone Mul moved onto the DLA between GPU layers moves no compute and
    # costs two transitions: skipped).
    skipped: List[FixStep] = []
    for name in reversed(kept):
        without = tuple(n for n in kept if n != name)
        if not _helps(counts(kept), counts(without)):
            skipped.insert(0, FixStep(name, found[name], counts(without), counts(kept)))
            kept = without
    current, sites = build(kept)
    counts(kept)
    now = chains[kept][0]
    for name in kept:
        steps.append(FixStep(name, sites[name], counts(tuple(n for n in kept if n != name)), counts(kept)))
    try:
        onnx.checker.check_model(current)
    except Exception as exc:  # onnx's ValidationError and the C++ checker's others
        try:
            onnx.checker.check_model(original)
        except Exception as given:
            raise EdgeError(
                f"--fix: the model itself does not pass the ONNX checker ({_first_line(given)}); fix or re-export it"
            ) from None
        raise EdgeError(f"--fix produced an invalid model ({_first_line(exc)}); please report this with the model") from None
    result = FixResult(current, steps, report=now, skipped=skipped)
    if verify:
        _check_verifiable(prepare(current))
        result.max_abs_diff = verify_same_outputs(original, current, {n: tuple(d) for n, d in now.inputs.items()})
    return result


VERIFY_CAP_BYTES = 8 << 30  # all tensors of the model at once: far above ONNX Runtime's real peak
VERIFY_SECONDS = 60.0  # for each of the two runs of the check


def _check_verifiable(g: Any) -> None:
    """The rewrite is checked by running the model: refuse before that when its tensors could not fit (a model
    declaring a 10 GiB constant, or a --shape of 100000 pixels a side, ran out of memory in ONNX Runtime)."""
    total = sum(nbytes(d, g.dtypes.get(n, 1)) for n, d in g.shapes.items() if is_static(d))
    if total > VERIFY_CAP_BYTES:
        raise EdgeError(
            f"--fix: checking the rewrite runs the model, and its tensors at these shapes add up to {total / 2**30:.0f} "
            f"GiB (at most {VERIFY_CAP_BYTES >> 30} GiB); pass a smaller --shape"
        )


def _pin_outputs(model: Any) -> None:
    """Give the graph outputs the static shapes inference finds once the inputs are pinned."""
    onnx = require("onnx")
    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    for out in bare.graph.output:  # a declared 0 (an unknown size to some exporters) would stay: inference decides
        if _zeros(out):
            out.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(bare, data_prop=True, strict_mode=False)
    except Exception as exc:  # InferenceError on ops of domains the model does not declare
        raise EdgeError(f"--fix: ONNX shape inference cannot read the model ({_first_line(exc)})") from None
    shapes = {o.name: o.type.tensor_type.shape for o in inferred.graph.output}
    for out in model.graph.output:
        if out.name in shapes and all(d.HasField("dim_value") for d in shapes[out.name].dim):
            out.type.tensor_type.shape.CopyFrom(shapes[out.name])


def verify_same_outputs(original: Any, fixed: Any, shapes: Dict[str, Tuple[int, ...]], seed: int = 0) -> Dict[str, float]:
    """Run both models on the same random input; raise unless every output matches within RTOL/ATOL."""
    ort = require("onnxruntime", "checking --fix outputs")
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in model_inputs(original):
        if inp.type.tensor_type.elem_type != 1:
            raise EdgeError(f"--fix can only verify float32 inputs; input '{inp.name}' is not")
        feeds[inp.name] = rng.standard_normal(shapes[inp.name]).astype(np.float32)
    options = ort.SessionOptions()
    options.log_severity_level = 4  # fatal only: a failing run is reported in our one line, not ORT's own too
    want = _run(ort, _zero_dims_unknown(original), feeds, options)
    got = _run(ort, fixed, feeds, options)
    diffs = {}
    for name, ref in want.items():
        diffs[name] = float(np.max(np.abs(got[name] - ref))) if ref.size else 0.0
        if not np.allclose(got[name], ref, rtol=RTOL, atol=ATOL):
            raise EdgeError(
                f"--fix changed output '{name}' by up to {diffs[name]:.3g} (tolerance rtol={RTOL}, atol={ATOL}); not writing it"
            )
    return diffs


def _zeros(port: Any) -> List[Any]:
    """The dimensions of an input or output declared as 0."""
    return [d for d in port.type.tensor_type.shape.dim if d.HasField("dim_value") and d.dim_value == 0]


def _zero_dims_unknown(model: Any) -> Any:
    """``model`` with its inputs' and outputs' dimensions of 0 made symbols: some exporters write 0 for an unknown
    size and edge dla reads it so, while ONNX Runtime would take it for an empty axis and refuse every input."""
    onnx = require("onnx")
    if not any(_zeros(p) for p in [*model_inputs(model), *model.graph.output]):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for port in [*model_inputs(copy), *copy.graph.output]:
        for k, d in enumerate(_zeros(port)):
            d.dim_param = f"{port.name}_zero{k}"
    return copy


def _run(ort: Any, model: Any, feeds: Dict[str, np.ndarray], options: Any) -> Dict[str, np.ndarray]:
    run_options = ort.RunOptions()
    run_options.log_severity_level = 4
    # A Loop with a huge trip count would run for ever: ORT stops a run whose terminate flag is set from another thread.
    timer = threading.Timer(VERIFY_SECONDS, lambda: setattr(run_options, "terminate", True))
    timer.daemon = True
    try:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        timer.start()
        return dict(zip(names, session.run(names, feeds, run_options)))
    except Exception as exc:  # ORT's own types: a plugin op it does not have, a graph it cannot run
        if run_options.terminate:
            raise EdgeError(
                f"--fix: checking the rewrite ran the model for {VERIFY_SECONDS:.0f} s and was stopped (a Loop with a "
                "huge trip count?); without that check nothing is written"
            ) from None
        raise EdgeError(
            f"--fix: ONNX Runtime cannot run the model to check the rewrite ({_first_line(exc)}); "
            "without that check nothing is written"
        ) from None
    finally:
        timer.cancel()


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
