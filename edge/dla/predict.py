"""Offline DLA placement prediction: which ONNX nodes TensorRT will run on the DLA, from the graph alone.

Each ONNX node is mapped to the TensorRT layers the ONNX parser of the chosen release makes of it
(``lowering.lower``), checked against the limits table for the target (``rules.TABLES``), then the DLA-eligible
layers are grouped the way TensorRT builds loadables: connected DLA layers merge into one subgraph unless that
would route a path out through the GPU and back in. Subgraphs past the per-core cap go to GPU, as TensorRT does.
This is a prediction, held against published build logs in tests/dla_corpus: confirm it with
``config.can_run_on_DLA`` and the build log on the device.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, Union

import numpy as np

from edge.dla.lowering import lower
from edge.dla.rules import RULES, Limits, limits_for
from edge.errors import EdgeError
from edge.graph.model import PASSTHROUGH, Graph, attrs, is_static, load_model, prepare
from edge.graph.qdq_translate import has_qdq, translate
from edge.metadata import from_onnx, shape_hint

DLA, GPU = "DLA", "GPU"
Broken = Optional[Tuple[str, str]]  # (rule id, the value that broke it) or None when the layer fits

_FLOAT_TYPES = {1, 10}  # TensorProto FLOAT, FLOAT16: TensorRT runs either as FP16/INT8 on DLA
_FP32 = 1
_CAST_TYPES = {3, 9}  # INT8 and BOOL: the comparison -> Cast pair is the one DLA path for them
_ACTIVATIONS = {"Relu", "Sigmoid", "Tanh", "Clip", "LeakyRelu", "HardSigmoid", "HardSwish", "Elu", "Selu", "Softplus"}
_ACTIVATIONS |= {"Softsign", "ThresholdedRelu", "Gelu", "Mish", "Celu"}
_ELTWISE = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Pow", "Mean"}
_COMPARE = {"Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"}
_UNARY = {"Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Sin", "Cos", "Tan", "Floor", "Ceil", "Round", "Erf", "Not", "Sign"}
_MULTI_INPUT = _ELTWISE | _COMPARE | {"Concat", "MatMul", "Gemm", "PRelu"}
# Runtime parameters of these ops also make their output shape unknown; the parameter is the better reason.
_PARAMS_SET_SHAPE = {"Slice", "Split", "Resize", "Upsample", "ReduceMax"}
# An element-wise op with a constant per-channel operand: the builder makes it a SCALE layer.
_SCALE_OPS = {"Mul", "Add", "Sub"}
_SHUFFLE = {"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "DepthToSpace", "SpaceToDepth"}
_NOTES = 20  # folding notes shown in a report; the rest are counted
_QUANT = {
    "QuantizeLinear",
    "DequantizeLinear",
    "QLinearConv",
    "QLinearMatMul",
    "ConvInteger",
    "MatMulInteger",
    "DynamicQuantizeLinear",
}
_REDUCE = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSumExp"}
_REDUCE |= {"ReduceSumSquare", "ReduceLogSum", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}
_NO_DLA = {
    "Gather": "GATHER",
    "GatherElements": "GATHER",
    "GatherND": "GATHER",
    "ScatterND": "SCATTER",
    "ScatterElements": "SCATTER",
    "Where": "SELECT",
    "NonZero": "NON_ZERO",
    "TopK": "TOPK",
    "LSTM": "RNN",
    "GRU": "RNN",
    "RNN": "RNN",
    "InstanceNormalization": "NORMALIZATION",
    "GroupNormalization": "NORMALIZATION",
    "LayerNormalization": "NORMALIZATION",
    "Expand": "SLICE",
    "Tile": "SLICE",
    "Range": "FILL",
    "ConstantOfShape": "FILL",
    "Shape": "SHAPE",
    "Size": "SHAPE",
    "NonMaxSuppression": "NMS",
    "Einsum": "EINSUM",
    "CumSum": "SCAN",
    "ArgMax": "TOPK",
    "ArgMin": "TOPK",
    "Loop": "LOOP",
    "If": "CONDITION",
    "OneHot": "ONE_HOT",
    "GridSample": "GRID_SAMPLE",
    "RoiAlign": "PLUGIN",
}


@dataclass
class NodeVerdict:
    name: str
    op: str
    layer: str  # the TensorRT layer kind the parser creates
    device: str  # DLA | GPU
    rule: Optional[str] = None  # the rule that sent it to GPU
    value: Optional[str] = None  # the value that broke the rule
    flops: int = 0
    fused_into: Optional[str] = None  # the conv this BatchNorm/activation fuses into in the engine
    subgraph: Optional[int] = None
    notes: List[str] = field(default_factory=list)
    trt_layers: List[str] = field(default_factory=list)  # "TYPE: name" as the build log prints them
    unconfirmed: List[str] = field(default_factory=list)  # rules this verdict rests on that no source settles

    @property
    def reason(self) -> str:
        if self.rule is None:
            return "; ".join(self.notes)
        mark = " unconfirmed" if RULES[self.rule].unconfirmed else ""
        return f"{self.value} [{self.rule}{mark}]"


@dataclass
class Subgraph:
    index: int
    nodes: List[str]
    flops: int
    weight_bytes: int  # at FP16
    local_bytes: int  # intermediate tensors inside the loadable, at FP16


@dataclass
class Report:
    model: str
    target: str
    trt: str
    jetpack: str
    precision: str
    inputs: Dict[str, List[int]]
    dynamic_inputs: Dict[str, Optional[List[Union[int, str]]]]  # None: declared without a shape
    nodes: List[NodeVerdict]
    subgraphs: List[Subgraph]
    transitions: int  # tensors crossing DLA<->GPU (one reformat each)
    gpu_islands: int  # GPU regions fed by DLA and feeding DLA again
    folded: int  # ONNX nodes TensorRT computes at build time (constants, static shapes)
    max_subgraphs: int
    candidate_subgraphs: int  # before the per-core cap sends the surplus to GPU
    findings: List[str] = field(default_factory=list)

    @property
    def dla_nodes(self) -> int:
        return sum(n.device == DLA for n in self.nodes)

    @property
    def gpu_nodes(self) -> int:
        return len(self.nodes) - self.dla_nodes

    @property
    def flops(self) -> int:
        return sum(n.flops for n in self.nodes)

    @property
    def dla_flops(self) -> int:
        return sum(n.flops for n in self.nodes if n.device == DLA)

    @property
    def dla_node_share(self) -> float:
        return self.dla_nodes / len(self.nodes) if self.nodes else 0.0

    @property
    def dla_flops_share(self) -> float:
        return self.dla_flops / self.flops if self.flops else 0.0

    def unconfirmed_rules(self) -> List[str]:
        """Rules this prediction rests on that no source settles (see rules.RULES[...].sources)."""
        used = {n.rule for n in self.nodes if n.rule and RULES[n.rule].unconfirmed}
        used |= {r for n in self.nodes for r in n.unconfirmed}
        return sorted(used)

    def gpu_by_rule(self) -> Dict[str, int]:
        counts: Dict[str, int] = {}
        for n in self.nodes:
            if n.rule:
                counts[n.rule] = counts.get(n.rule, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: -kv[1]))

    def summary(self) -> Dict[str, Any]:
        return {
            "nodes": len(self.nodes),
            "dla_nodes": self.dla_nodes,
            "gpu_nodes": self.gpu_nodes,
            "folded_nodes": self.folded,
            "dla_node_share": round(self.dla_node_share, 4),
            "flops": self.flops,
            "dla_flops": self.dla_flops,
            "dla_flops_share": round(self.dla_flops_share, 4),
            "subgraphs": len(self.subgraphs),
            "candidate_subgraphs": self.candidate_subgraphs,
            "max_subgraphs_per_core": self.max_subgraphs,
            "transitions": self.transitions,
            "gpu_islands": self.gpu_islands,
            "gpu_by_rule": self.gpu_by_rule(),
        }

    def to_dict(self) -> Dict[str, Any]:
        used = {n.rule for n in self.nodes if n.rule} | set(self.unconfirmed_rules())
        return {
            "model": self.model,
            "target": self.target,
            "trt": self.trt,
            "jetpack": self.jetpack,
            "precision": self.precision,
            "inputs": self.inputs,
            "dynamic_inputs": self.dynamic_inputs,
            "summary": self.summary(),
            "findings": self.findings,
            "unconfirmed_rules": self.unconfirmed_rules(),
            "subgraphs": [asdict(s) for s in self.subgraphs],
            "nodes": [{**asdict(n), "reason": n.reason} for n in self.nodes],
            "legend": "reason = the value that broke the rule [rule id]; see 'rules' for each rule's limit and sources",
            "rules": {r: asdict(RULES[r]) for r in sorted(used)},
            "prediction_only": "confirm with config.can_run_on_DLA(layer) and the 'Layers Running on DLA' build log",
        }


# ---------------------------------------------------------------------------------------------------------------
# Per-layer checks. Each returns None when the layer fits the DLA, else (rule id, the value that broke it).


class _Ctx:
    def __init__(self, graph: Graph, limits: Limits, precision: str) -> None:
        self.g, self.lim, self.precision = graph, limits, precision

    def const(self, name: str) -> Optional[np.ndarray]:
        return self.g.consts.get(name) if name else None

    def data_inputs(self, node: Any) -> List[str]:
        """The runtime tensors a layer computes on; other inputs (slice starts, resize scales) are parameters."""
        names = node.input if node.op_type in _MULTI_INPUT else node.input[:1]
        return [n for n in names if n and n not in self.g.consts]


def _in_range(values: List[int], bounds: Tuple[int, int]) -> bool:
    return all(bounds[0] <= v <= bounds[1] for v in values)


def _x(values: List[int]) -> str:
    return "x".join(str(v) for v in values) if len(values) else "(scalar)"


def _conv_pads(node: Any, a: Dict[str, Any], kernel: List[int], g: Graph) -> List[int]:
    """Begin and end pads per spatial dim, resolving auto_pad SAME_* the way ONNX defines it."""
    n = len(kernel)
    auto = a.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        ins, strides, dil = g.shape(node.input[0]) or (), a.get("strides", [1] * n), a.get("dilations", [1] * n)
        pads = [0] * (2 * n)
        for i in range(n):
            size = int(ins[2 + i]) if len(ins) == n + 2 and isinstance(ins[2 + i], int) else 1
            total = max((-(-size // strides[i]) - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - size, 0)
            small, big = total // 2, total - total // 2
            pads[i], pads[i + n] = (small, big) if auto == "SAME_UPPER" else (big, small)
        return pads
    return list(a.get("pads", [0] * (2 * n)))


def _check_conv(ctx: _Ctx, node: Any) -> Broken:
    lim, a = ctx.lim, attrs(node)
    w = ctx.const(node.input[1])
    if w is None:
        return "conv.weights", "weights come from a runtime tensor"
    kernel = list(w.shape[2:])
    strides, dil = list(a.get("strides", [1] * len(kernel))), list(a.get("dilations", [1] * len(kernel)))
    pads = _conv_pads(node, a, kernel, ctx.g)
    if not _in_range(kernel, lim.conv_kernel):
        return "conv.kernel", f"kernel {_x(kernel)}"
    if not _in_range(strides, lim.conv_stride):
        return "conv.stride", f"stride {_x(strides)}"
    if not _in_range(dil, lim.conv_dilation):
        return "conv.dilation", f"dilation {_x(dil)}"
    n = len(kernel)
    if not _in_range(pads, lim.conv_pad) or any(p >= kernel[i % n] for i, p in enumerate(pads)):
        return "conv.pad", f"pads {_x(pads)} with kernel {_x(kernel)}"
    return None


def _int8_group_note(ctx: _Ctx, node: Any) -> Optional[str]:
    w, group = ctx.const(node.input[1]), int(attrs(node).get("group", 1))
    if ctx.precision != "int8" or group == 1 or w is None:
        return None
    cin, cout = w.shape[1], w.shape[0] // group
    if cin % 4 or cout % 4:
        return f"INT8 grouped conv with {cin}/{cout} channels per group runs FP16 (conv.int8_group)"
    return None


def _deconv_dims_ok(values: List[int], lim: Limits) -> bool:
    if _in_range(values, lim.deconv_range):
        return True
    # One wide dimension (64/96/128) is allowed when the other is 1.
    return len(values) == 2 and sorted(values)[0] == 1 and max(values) in lim.deconv_wide


def _check_deconv(ctx: _Ctx, node: Any) -> Broken:
    a = attrs(node)
    w = ctx.const(node.input[1])
    if w is None:
        return "conv.weights", "weights come from a runtime tensor"
    kernel = list(w.shape[2:])
    strides = list(a.get("strides", [1] * len(kernel)))
    if not _deconv_dims_ok(kernel, ctx.lim):
        return "deconv.kernel", f"kernel {_x(kernel)}"
    if not _deconv_dims_ok(strides, ctx.lim):
        return "deconv.stride", f"stride {_x(strides)}"
    lo, hi = ctx.lim.deconv_square_gap
    for what, dims in (("kernel", kernel), ("stride", strides)):
        if len(dims) == 2 and dims[0] == dims[1] and lo <= dims[0] <= hi:
            return "deconv.square", f"square {what} {_x(dims)}"
    pads = list(a.get("pads", [])) + list(a.get("output_padding", []))
    if any(pads) or a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return "deconv.pad", f"padding {_x(pads) if pads else a['auto_pad']}"
    if int(a.get("group", 1)) != 1:
        return "deconv.groups", f"{a['group']} groups"
    if any(d != 1 for d in a.get("dilations", [])):
        return "deconv.dilation", f"dilation {_x(a['dilations'])}"
    return None


def _check_pool(ctx: _Ctx, node: Any) -> Broken:
    lim, a = ctx.lim, attrs(node)
    if node.op_type not in ("MaxPool", "AveragePool") or len(node.output) > 1 or any(d != 1 for d in a.get("dilations", [])):
        return "pool.kind", node.op_type if node.op_type != "MaxPool" else "MaxPool with indices or dilation"
    kernel = list(a["kernel_shape"])
    strides = list(a.get("strides", [1] * len(kernel)))
    pads = _conv_pads(node, a, kernel, ctx.g)
    if not _in_range(kernel, lim.pool_window):
        return "pool.window", f"window {_x(kernel)}"
    if not _in_range(strides, lim.pool_stride):
        return "pool.stride", f"stride {_x(strides)}"
    if not _in_range(pads, lim.pool_pad):
        return "pool.pad", f"pads {_x(pads)}"
    if node.op_type == "AveragePool" and not lim.pool_exclusive_pad and not a.get("count_include_pad", 0):
        return "pool.exclusive", "count_include_pad=0 (exclusive padding)"
    return None


def _check_reduce(ctx: _Ctx, node: Any) -> Broken:
    if node.op_type == "GlobalAveragePool":
        return "pool.global", "GlobalAveragePool (a REDUCE layer)"
    if node.op_type not in ("ReduceMax", "GlobalMaxPool") or not ctx.lim.reduce_max:
        return "reduce.op", f"{node.op_type} on TensorRT {ctx.lim.trt}"
    rank = len(ctx.g.shape(node.input[0]) or ())
    axes = attrs(node).get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        const = ctx.const(node.input[1])
        if const is None:  # TensorRT's parser: "Axis input must be an initializer!"
            return "reduce.axes", "axes computed at run time"
        axes = const.tolist()
    if not rank:  # an input of unknown shape: gen.static says so
        return None
    if node.op_type == "ReduceMax" and (axes is None or any(ax % rank == 0 for ax in axes)):
        return "reduce.axes", "reduces the batch axis" if axes else "reduces every axis"
    return None


def _check_activation(ctx: _Ctx, node: Any) -> Broken:
    if node.op_type not in ctx.lim.activations:
        return "act.kind", node.op_type
    if node.op_type == "Clip":
        return _check_clip(ctx, node)
    return None


def _check_clip(ctx: _Ctx, node: Any) -> Broken:
    """DLA runs Clip only as a clipped ReLU: lower bound 0, upper bound in [1, 127]."""
    if any(n and n not in ctx.g.consts for n in node.input[1:]):
        return "act.clip", "Clip bounds come from runtime tensors"
    a = attrs(node)
    bounds = []
    for k, (key, default) in enumerate((("min", -np.inf), ("max", np.inf)), start=1):
        name = node.input[k] if len(node.input) > k else ""
        value = ctx.const(name) if name else a.get(key, default)
        bounds.append(float(np.asarray(value).ravel()[0]) if np.asarray(value).size else default)
    low, high = bounds
    if low != 0 or not 1 <= high <= ctx.lim.clip_max:
        return "act.clip", f"Clip [{low:g}, {high:g}]"
    return None


def _check_scale(ctx: _Ctx, node: Any) -> Broken:
    """A SCALE layer (BatchNormalization, or x * c / x + c with c per channel) that no convolution absorbs."""
    g = ctx.g
    if node.op_type != "BatchNormalization":
        consts = [n for n in node.input if n in g.consts]
        if len(consts) != 1 or len(node.input) != 2:
            return None
        c = g.consts[consts[0]]
        if c.size <= 1 or c.ndim < 3 or sorted(c.shape)[-1] != c.size:  # scalars and full tensors stay ELEMENTWISE
            return None
    data = next((n for n in node.input if n not in g.consts), "")
    host = g.nodes[g.producer[data]] if data in g.producer else None
    if host is not None and host.op_type in ("Conv", "ConvTranspose") and len(g.consumers.get(data, [])) == 1:
        return None  # the builder folds it into the convolution's weights
    return "scale.standalone", f"{node.op_type} by a per-channel constant, not after a convolution"


def _check_prelu(ctx: _Ctx, node: Any) -> Broken:
    return None if node.input[1] in ctx.g.consts else ("prelu.slope", "slope is a runtime tensor")


def _broadcast_ok(dims: Tuple[int, ...], out: Tuple[int, ...]) -> bool:
    d = (1,) * (len(out) - len(dims)) + tuple(dims)
    if d == tuple(out) or all(v == 1 for v in d):
        return True
    return len(out) == 4 and d[1] == out[1] and d[2] == d[3] == 1 and d[0] in (1, out[0])


def _check_eltwise(ctx: _Ctx, node: Any) -> Broken:
    if node.op_type not in ctx.lim.eltwise:
        return "elt.op", f"{node.op_type} on TensorRT {ctx.lim.trt}"
    out = ctx.g.shape(node.output[0]) or ()
    for name in node.input:
        dims = ctx.g.shape(name) or ()
        if not _broadcast_ok(tuple(dims), tuple(out)):
            return "elt.broadcast", f"operand {_x(list(dims))} broadcast to {_x(list(out))}"
    return None


def _check_compare(ctx: _Ctx, node: Any) -> Broken:
    users = [ctx.g.nodes[i].op_type for i in ctx.g.consumers.get(node.output[0], [])]
    if ctx.precision != "int8" or not users or any(u != "Cast" for u in users):
        return "cmp.int8", f"{node.op_type} in {ctx.precision}" + ("" if users == ["Cast"] else " not followed by a Cast")
    return None


def _check_unary(ctx: _Ctx, node: Any) -> Broken:
    return None if node.op_type == "Abs" else ("unary.op", node.op_type)


def _check_lrn(ctx: _Ctx, node: Any) -> Broken:
    size = int(attrs(node)["size"])
    return None if size in ctx.lim.lrn_windows else ("lrn.window", f"window {size}")


def _check_softmax(ctx: _Ctx, node: Any) -> Broken:
    if not ctx.lim.softmax:
        return "softmax.gen", f"SoftMax on {ctx.lim.generation}"
    dims = ctx.g.shape(node.input[0]) or ()
    axis = int(attrs(node).get("axis", -1)) % len(dims)
    if axis < len(dims) - 3:
        return "softmax.axis", f"axis {axis} (batch)"
    others = [d for i, d in enumerate(dims[-3:], len(dims) - 3) if i != axis]
    cap = ctx.lim.softmax_accurate_max if all(d == 1 for d in others) else ctx.lim.softmax_max
    if dims[axis] > cap:
        return "softmax.size", f"axis size {dims[axis]} > {cap}"
    return None


def _check_concat(ctx: _Ctx, node: Any) -> Broken:
    rank = len(ctx.g.shape(node.output[0]) or ())
    axis = int(attrs(node)["axis"]) % rank
    if axis != rank - 3:
        return "concat.axis", f"axis {axis}"
    if len([n for n in node.input if n]) < 2:
        return "concat.inputs", f"{len(node.input)} input"
    return None


def _check_resize(ctx: _Ctx, node: Any) -> Broken:
    a, opset = attrs(node), _opset(ctx.g)
    if node.op_type == "Resize" and len(node.input) > 3 and node.input[3]:
        return "resize.scales", "output size given by 'sizes'"
    if node.op_type == "Upsample" and "scales" in a:  # Upsample-7/8: scales are an attribute, one input
        scales = np.asarray(a["scales"], dtype=np.float64)
    else:
        index = 2 if node.op_type == "Resize" and opset >= 11 else 1
        scales = ctx.const(node.input[index]) if len(node.input) > index else None
    if scales is None:
        return "resize.scales", "scales computed at run time"
    scales = [float(s) for s in scales.ravel()]
    if len(scales) != 4 or scales[0] != 1 or scales[1] != 1:
        return "resize.scales", f"scales {scales}"
    mode = a.get("mode", "nearest")
    transform = a.get(
        "coordinate_transformation_mode", "half_pixel" if opset >= 11 and node.op_type == "Resize" else "asymmetric"
    )
    nearest = a.get("nearest_mode", "round_prefer_floor" if opset >= 11 and node.op_type == "Resize" else "floor")
    if mode == "nearest":
        ok = (transform, nearest) in {
            ("asymmetric", "floor"),
            ("half_pixel", "round_prefer_floor"),
            ("half_pixel", "round_prefer_ceil"),
        }
        limit = ctx.lim.resize_nearest_max
    else:
        ok = mode == "linear" and transform in ("half_pixel", "pytorch_half_pixel")
        limit = ctx.lim.resize_linear_max
    if not ok:
        return "resize.mode", f"{mode} {transform}" + (f" {nearest}" if mode == "nearest" else "")
    hw = scales[2:]
    if any(s != int(s) or not 1 <= s <= limit for s in hw):
        return "resize.range", f"H,W scales {hw[0]:g}x{hw[1]:g} for {mode}"
    return None


def _opset(g: Graph) -> int:
    return next((o.version for o in g.model.opset_import if o.domain in ("", "ai.onnx")), 1)


def _check_slice(ctx: _Ctx, node: Any) -> Broken:
    dims = ctx.g.shape(node.input[0]) or ()
    rank = len(dims)
    if _opset(ctx.g) < 10:
        a = attrs(node)
        starts, ends, axes, steps = a["starts"], a["ends"], a.get("axes"), None
    else:
        parts = [ctx.const(n) if i < len(node.input) else None for i, n in enumerate(list(node.input) + ["", ""])][1:5]
        if any(p is None for p, n in zip(parts, node.input[1:]) if n):
            return "slice.const", "start/end/axes/steps come from runtime tensors"
        starts, ends, axes, steps = (None if p is None else p.tolist() for p in parts)
    axes = list(range(len(starts))) if axes is None else axes
    if steps is not None and any(s != 1 for s in steps):
        return "slice.step", f"steps {steps}"
    for ax, start, end in zip(axes, starts, ends):
        # a batch of unknown size (symbolic or -1) that is cut to a fixed length counts as sliced too
        whole = isinstance(dims[0], int) and dims[0] > 0 and end >= dims[0]
        if ax % rank == 0 and (start != 0 or not whole):
            return "slice.axis0", "slices the batch axis"
    return None


def _check_split(ctx: _Ctx, node: Any) -> Broken:
    rank = len(ctx.g.shape(node.input[0]) or ())
    if int(attrs(node).get("axis", 0)) % rank == 0:
        return "slice.axis0", "splits the batch axis"
    if len(node.input) > 1 and node.input[1] and node.input[1] not in ctx.g.consts:
        return "slice.const", "split sizes come from a runtime tensor"
    return None


def _check_matmul(ctx: _Ctx, node: Any) -> Broken:
    if len(node.input) < 2 or node.input[1] not in ctx.g.consts:
        return "matmul.weights", "both operands are runtime tensors"
    weights = ctx.g.consts[node.input[1]]
    if weights.ndim != 2:
        return "matmul.fc", f"{weights.ndim}-D weights (a fully connected layer takes 2-D weights)"
    if not _fully_connected(ctx.g, node):
        return "matmul.fc", f"{len(ctx.g.shape(node.input[0]) or ())}-D input (the builder converts 2-D inputs only)"
    return None  # the feature counts are the input's and output's last dimensions: the general size cap holds them


def _fully_connected(g: Graph, node: Any) -> bool:
    """Gemm/MatMul that TensorRT's builder turns into a fully connected layer: 2-D input, constant 2-D weights."""
    if node.op_type not in ("Gemm", "MatMul") or len(node.input) < 2:
        return False
    w, x = g.consts.get(node.input[1]), g.shape(node.input[0])
    if w is None or w.ndim != 2 or node.input[0] in g.consts or x is None or len(x) != 2:
        return False
    a = attrs(node) if node.op_type == "Gemm" else {}
    return not a.get("transA", 0) and float(a.get("alpha", 1.0)) == 1.0 and float(a.get("beta", 1.0)) == 1.0


def _fits(ctx: _Ctx, node: Any) -> Broken:
    return None


def _always(rule: str) -> Callable[[_Ctx, Any], Broken]:
    """A layer that never runs on the DLA: its own rule is the reason, before any tensor check."""

    def check(ctx: _Ctx, node: Any) -> Broken:
        return rule, node.op_type

    check.always = True  # type: ignore[attr-defined]
    return check


def _check_of(op: str) -> Callable[[_Ctx, Any], Broken]:
    """The DLA check for the TensorRT layer an ONNX op becomes (``lowering.lower`` names the layer)."""
    table: Dict[str, Callable[[_Ctx, Any], Broken]] = {
        "Conv": _check_conv,
        "ConvTranspose": _check_deconv,
        "MaxPool": _check_pool,
        "AveragePool": _check_pool,
        "LpPool": _check_pool,
        "BatchNormalization": _check_scale,
        "PRelu": _check_prelu,
        "LRN": _check_lrn,
        "Softmax": _check_softmax,
        "Concat": _check_concat,
        "Resize": _check_resize,
        "Upsample": _check_resize,
        "Slice": _check_slice,
        "Split": _check_split,
        "Pad": _always("pad.fill"),
        "MatMul": _check_matmul,
        "Gemm": _check_matmul,
        "Cast": _always("op.unknown"),
    }
    if op in table:
        return table[op]
    if op in _ACTIVATIONS:
        return _check_activation
    if op in _ELTWISE:
        return _check_eltwise
    if op in _COMPARE:
        return _check_compare
    if op in _UNARY:
        return _check_unary
    if op in _REDUCE:
        return _check_reduce
    if op in _SHUFFLE:
        return _always("shuffle")
    if op in _QUANT:
        return _always("gen.qdq")
    if op in _NO_DLA:
        return _always("op.unsupported")
    return _always("op.unknown")


def _check_general(ctx: _Ctx, node: Any, rank4: bool = True) -> Broken:
    """The restrictions every DLA layer shares: static 4-D floating-point tensors within the size caps."""
    g, lim = ctx.g, ctx.lim
    for name in ctx.data_inputs(node) + [o for o in node.output if o]:
        dims = g.shape(name)
        if not is_static(dims):
            return "gen.static", f"tensor '{name}' has shape {'unknown' if dims is None else _x(list(dims))}"
        dtype = g.dtypes.get(name, 0)
        if dtype not in _FLOAT_TYPES and not (dtype in _CAST_TYPES and node.op_type in _COMPARE | {"Cast"}):
            return "gen.dtype", f"tensor '{name}' is {_dtype_name(dtype)}"
        if lim.strongly_typed and dtype == _FP32:
            return "gen.typed", f"tensor '{name}' is float32"
        if rank4 and len(dims) != 4:
            return "gen.rank4", f"{len(dims)}-D tensor {_x(list(dims))}"
        if any(d > lim.max_dim for d in dims[1:]):
            return "gen.dim", f"dimension {max(dims[1:])} in {_x(list(dims))}"
        if dims[0] > lim.max_batch:
            return "gen.batch", f"batch {dims[0]}"
    return None


def _dtype_name(dtype: int) -> str:
    from onnx import TensorProto

    return TensorProto.DataType.Name(dtype).lower() if dtype else "of unknown type"


def _numel(dims: Any) -> int:
    # a scalar () has one element, an unknown shape (None) none counted; Python ints: no int64 overflow
    return math.prod(d for d in dims if isinstance(d, int)) if dims is not None else 0


def _flops(g: Graph, node: Any) -> int:
    """Multiply-adds count twice; everything else is one operation per output element."""
    out = _numel(g.shape(node.output[0]))
    op = node.op_type
    w = g.consts.get(node.input[1]) if len(node.input) > 1 else None
    if op == "Conv" and w is not None:
        return 2 * out * int(np.prod(w.shape[1:]))
    if op == "ConvTranspose" and w is not None:
        return 2 * _numel(g.shape(node.input[0])) * int(np.prod(w.shape[1:]))
    if op in ("MatMul", "Gemm"):
        k = (
            (g.shape(node.input[0]) or (1,))[-1]
            if op == "MatMul" or not attrs(node).get("transA", 0)
            else g.shape(node.input[0])[0]
        )
        return 2 * out * int(k)
    if op in ("MaxPool", "AveragePool"):
        return out * int(np.prod(attrs(node)["kernel_shape"]))
    if op in _REDUCE:
        return _numel(g.shape(node.input[0]))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Partitioning.


class _Partition:
    """Merge DLA layers into loadables: connected, and convex (no DLA -> GPU -> DLA path inside one)."""

    def __init__(self, units: List[int], preds: Dict[int, List[int]], on_dla: Set[int], exits: Set[int] = frozenset()) -> None:
        self.order: Dict[Any, float] = {u: i for i, u in enumerate(units)}
        self.succs: Dict[Any, List[Any]] = {u: [] for u in units}
        for v, ps in preds.items():
            for p in ps:
                self.succs[p].append(v)
        for e in exits:  # the builder's reshape_after, a GPU shuffle, sits between an exit and all its consumers
            shuffle = ("reshape_after", e)
            self.order[shuffle] = self.order[e] + 0.5
            self.succs[shuffle], self.succs[e] = self.succs[e], [shuffle]
        self.parent = {u: u for u in on_dla}
        # Per group: its members, its latest position and the nodes outside it that it feeds. Kept up to date on
        # each merge, so a merge costs what the two groups border on, not their size (a 20k-node chain took 76 s).
        self.members: Dict[int, Set[int]] = {u: {u} for u in on_dla}
        self.last = {u: self.order[u] for u in on_dla}
        self.frontier: Dict[int, Set[Any]] = {u: set(self.succs[u]) for u in on_dla}
        for v in units:
            if v in on_dla:
                for p in preds[v]:
                    if p in on_dla:
                        self._merge(p, v)

    def find(self, u: int) -> int:
        while self.parent[u] != u:
            self.parent[u] = self.parent[self.parent[u]]
            u = self.parent[u]
        return u

    def _merge(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        ma, mb = self.members[ra], self.members[rb]

        def inside(v: int) -> bool:
            return v in ma or v in mb

        start = [s for s in self.frontier[ra] | self.frontier[rb] if not inside(s)]
        last = max(self.last[ra], self.last[rb])
        if self._path_leaves_and_returns(start, inside, last):
            return
        if len(ma) < len(mb):  # the smaller group joins the larger
            ra, rb, ma, mb = rb, ra, mb, ma
        self.parent[rb] = ra
        ma |= self.members.pop(rb)
        self.frontier[ra] = {s for s in self.frontier[ra] | self.frontier.pop(rb) if s not in ma}
        self.last[ra] = last
        del self.last[rb]

    def _path_leaves_and_returns(self, start: List[Any], inside: Callable[[Any], bool], last: float) -> bool:
        stack = list(start)
        seen: Set[int] = set()
        while stack:
            v = stack.pop()
            if v in seen or self.order[v] > last:  # later nodes cannot lead back into the set
                continue
            seen.add(v)
            for s in self.succs[v]:
                if inside(s):
                    return True
                stack.append(s)
        return False

    def groups(self) -> List[List[int]]:
        found = [sorted(m, key=self.order.__getitem__) for m in self.members.values()]
        return sorted(found, key=lambda m: self.order[m[0]])


def predict(
    model: Union[str, Path, Any],
    target: str = "orin",
    trt: Optional[str] = None,
    shapes: Optional[Dict[str, Tuple[int, ...]]] = None,
    precision: str = "fp16",
) -> Report:
    """Predict the DLA placement of an ONNX model (a path or a ModelProto) for one target and TensorRT."""
    if precision not in ("fp16", "int8"):
        raise EdgeError(f"precision must be fp16 or int8 for DLA, not '{precision}'")
    limits = limits_for(target, trt)
    label = str(model) if isinstance(model, (str, Path)) else None
    model = load_model(model)
    qdq_note = None
    if has_qdq(model):  # the DLA takes no Q/DQ before TensorRT 11: predict what edge-build builds, the translation
        try:
            translated = translate(model)
        except EdgeError as exc:  # edge-build refuses such a model; a prediction still says where its layers go
            qdq_note = f"Q/DQ model not translated, its Q/DQ layers predicted as they are: {exc}"
        else:
            model, precision = translated.model, "int8"
            qdq_note = (
                f"Q/DQ model: predicted without its {translated.pairs} Q/DQ pairs, as edge-build builds it for the DLA "
                f"on TensorRT 8.5-10.x (their scales become the calibration cache: {len(translated.scales)} tensors "
                f"from {translated.source}; {len(translated.fp16_layers)} layer(s) in FP16)"
            )
    graph = prepare(model, shapes)
    unpinned = {n: d for n, d in graph.input_shapes.items() if not is_static(d)}
    if unpinned:
        meta = from_onnx(label or "the model", graph.model)
        raise EdgeError(
            "dynamic input "
            + ", ".join(f"'{n}' {list(d) if d else '(no shape)'}" for n, d in unpinned.items())
            + ": the DLA needs static shapes (one optimization profile with min = opt = max); pass the build shape, e.g. "
            + " ".join(f"--shape {n}={shape_hint(d, meta)}" for n, d in unpinned.items())
        )
    report = _predict(graph, limits, precision, label or graph.model.graph.name)
    if qdq_note:
        report.findings.insert(0, qdq_note)
    return report


def _predict(graph: Graph, lim: Limits, precision: str, label: str) -> Report:
    ctx = _Ctx(graph, lim, precision)
    nodes = graph.nodes
    folded = set(graph.folded)
    alias: Dict[str, str] = {}  # a pass-through output -> the tensor it forwards
    merged: Dict[int, int] = {}  # a reshape the builder merges into a fully connected layer -> that layer
    verdicts: Dict[int, NodeVerdict] = {}
    fc = {i for i, n in enumerate(nodes) if i not in folded and _fully_connected(graph, n)}
    exits: Set[int] = set()  # DLA layers whose output leaves through the builder's reshape_after (a GPU shuffle)
    for idx, node in enumerate(nodes):
        if idx in folded:
            continue
        if node.op_type in PASSTHROUGH and node.input:
            alias[node.output[0]] = alias.get(node.input[0], node.input[0])
            continue
        target = _merges_into_fc(graph, node, fc)
        if target is None:
            target = _pad_into_conv(graph, node)
        if target is not None:
            alias[node.output[0]] = alias.get(node.input[0], node.input[0])
            merged[idx] = target
            continue
        verdicts[idx] = _verdict(ctx, idx, node, idx in fc)
        _annotate(ctx, idx, node, verdicts[idx], alias)
    _pair_compare_casts(graph, verdicts)
    for idx in fc:
        if verdicts[idx].device == DLA:
            exits.add(_fc_bias(graph, idx, verdicts) or idx)

    units = list(verdicts)
    producer = {out: idx for idx in units for out in nodes[idx].output}
    preds = {u: sorted({producer[t] for t in (alias.get(i, i) for i in nodes[u].input if i) if t in producer}) for u in units}
    groups = _Partition(units, preds, {u for u in units if verdicts[u].device == DLA}, exits).groups()

    findings: List[str] = []
    candidates = len(groups)
    if len(groups) > lim.max_subgraphs:
        moved = sum(len(grp) for grp in groups[lim.max_subgraphs :])
        findings.append(
            f"{len(groups)} DLA subgraphs > {lim.max_subgraphs} per DLA core: TensorRT moves subgraphs "
            f"{lim.max_subgraphs + 1}..{len(groups)} ({moved} nodes) to GPU (sub.cap)"
        )
        for number, grp in enumerate(groups[lim.max_subgraphs :], lim.max_subgraphs + 1):
            for u in grp:
                verdicts[u].device, verdicts[u].rule, verdicts[u].value = GPU, "sub.cap", f"would be DLA subgraph {number}"
        groups = groups[: lim.max_subgraphs]

    subgraphs = [_subgraph(graph, i + 1, grp, verdicts, nodes, lim, findings) for i, grp in enumerate(groups)]
    transitions, islands = _boundaries(units, preds, verdicts, nodes, graph, alias, exits)
    for idx, target in merged.items():
        host = verdicts[target]
        node = nodes[idx]
        pad = node.op_type == "Pad"
        v = NodeVerdict(_node_name(node, idx), node.op_type, "SLICE(FILL)" if pad else "SHUFFLE", host.device)
        v.subgraph, v.fused_into = host.subgraph, host.name
        v.trt_layers = [
            f"PADDING: {v.name} (becomes the padding of {host.name})"
            if pad
            else f"SHUFFLE: {v.name} (merged with reshape_before_{host.name}: no layer left)"
        ]
        if pad:
            v.unconfirmed.append("pad.conv")
        verdicts[idx] = v
    findings[:0] = _input_findings(graph)
    findings += graph.notes[:_NOTES]  # each says what was not folded and why
    if len(graph.notes) > _NOTES:
        findings.append(f"{len(graph.notes) - _NOTES} more nodes not folded or not analysed")
    if graph.unknown_ops:
        findings.append(
            "no shape inference for "
            + ", ".join(f"{op} x{n}" for op, n in sorted(graph.unknown_ops.items()))
            + ": tensors after them have unknown shapes (gen.static)"
        )
    if islands:
        findings.append(f"{islands} GPU island(s) sit between DLA layers; each costs a DLA subgraph and two reformats")
    if precision == "int8":
        findings.append(
            "INT8 on DLA needs a scale for every tensor of each DLA region (a calibration cache); tensors without one run FP16"
        )
    if lim.strongly_typed:
        findings.append("TensorRT 11 DLA builds are strongly typed: export the ONNX in FP16/INT8 (e.g. ModelOpt AutoCast) first")
    return Report(
        model=label,
        target=lim.generation,
        trt=lim.trt,
        jetpack=lim.jetpack,
        precision=precision,
        inputs={n: [int(d) for d in dims] for n, dims in graph.input_shapes.items()},
        dynamic_inputs={n: None if d is None else list(d) for n, d in graph.dynamic_inputs().items()},
        nodes=[verdicts[u] for u in sorted(verdicts)],
        subgraphs=subgraphs,
        transitions=transitions,
        gpu_islands=islands,
        folded=len(folded),
        max_subgraphs=lim.max_subgraphs,
        candidate_subgraphs=candidates,
        findings=findings,
    )


def _node_name(node: Any, idx: int) -> str:
    """The node's name in the report: its ONNX name, or OP_INDEX for an unnamed node."""
    return node.name or f"{node.op_type}_{idx}"


def _verdict(ctx: _Ctx, idx: int, node: Any, fully_connected: bool) -> NodeVerdict:
    """One node: its TensorRT layers on this release, and the first DLA rule it breaks."""
    name = _node_name(node, idx)
    bias = len(node.input) > 2 and bool(node.input[2])
    low = lower(node.op_type, name, ctx.lim.trt, node.domain, fully_connected, bias)
    try:
        if not low.importer:
            broken: Broken = ("parser.missing", f"{node.op_type} on TensorRT {ctx.lim.trt}")
        else:
            broken = _first_broken(ctx, node, fully_connected)
    except Exception as exc:  # attributes or inputs that do not fit the operator: the parser would reject it too
        broken = ("op.malformed", f"{node.op_type}: {type(exc).__name__}")
    if fully_connected and broken:  # a refused FC stays the parser's matrix multiply on the GPU
        low = lower(node.op_type, name, ctx.lim.trt, node.domain, bias=bias)
    v = NodeVerdict(name, node.op_type, low.kind, GPU if broken else DLA, flops=_safe_flops(ctx.g, node))
    v.trt_layers = [f"{kind}: {layer}" for kind, layer in low.layers]
    if fully_connected and not broken:
        v.trt_layers[-1] += " (GPU)"  # the builder's output reshape runs on the GPU in every published log
    if low.note:
        v.notes.append(low.note)
    if broken:
        v.rule, v.value = broken
    elif node.op_type == "LeakyRelu":
        v.unconfirmed.append("act.leaky")
    elif fully_connected:
        v.unconfirmed.append("matmul.fc")
    return v


def _first_broken(ctx: _Ctx, node: Any, fully_connected: bool) -> Broken:
    check = _check_of(node.op_type)
    if getattr(check, "always", False):
        return check(ctx, node)
    if fully_connected or _fc_bias_of(ctx.g, node) is not None:
        return _check_general(ctx, node, rank4=False) or check(ctx, node)
    broken = _check_general(ctx, node)
    if broken is None or (broken[0] == "gen.static" and node.op_type in _PARAMS_SET_SHAPE):
        broken = check(ctx, node) or broken
    if broken is None and node.op_type in _SCALE_OPS:
        broken = _check_scale(ctx, node)
    return broken


def _safe_flops(g: Graph, node: Any) -> int:
    try:
        return _flops(g, node)
    except Exception:  # malformed attributes: the node is reported, its work is not counted
        return 0


def _merges_into_fc(g: Graph, node: Any, fc: Set[int]) -> Optional[int]:
    """A flatten of [N, C, 1, 1] to [N, C] feeding only a fully connected layer: the builder's reshape_before undoes it."""
    if node.op_type not in ("Flatten", "Reshape", "Squeeze") or not node.output:
        return None
    users = g.consumers.get(node.output[0], [])
    if len(users) != 1 or users[0] not in fc or node.output[0] in g.outputs:
        return None
    src, out = g.shape(node.input[0]) or (), g.shape(node.output[0]) or ()
    if len(out) == 2 and len(src) >= 2 and tuple(src[:2]) == tuple(out) and all(d == 1 for d in src[2:]):
        return users[0]
    return None


def _pad_into_conv(g: Graph, node: Any) -> Optional[int]:
    """A constant zero Pad of H and W whose only consumer is a Conv or a pooling: it becomes that layer's padding."""
    if node.op_type != "Pad" or not node.output or node.output[0] in g.outputs:
        return None
    users = g.consumers.get(node.output[0], [])
    if len(users) != 1 or g.nodes[users[0]].op_type not in ("Conv", "MaxPool", "AveragePool"):
        return None
    a = attrs(node)
    pads = a.get("pads")
    if pads is None and len(node.input) > 1:
        value = g.consts.get(node.input[1])
        pads = None if value is None or value.ndim != 1 else value.tolist()
    fill = g.consts.get(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros(1)
    if pads is None or fill is None or a.get("mode", "constant") != "constant" or np.any(fill != 0) or a.get("value", 0):
        return None
    rank = len(pads) // 2
    if rank != 4 or any(pads[i] or pads[i + rank] for i in (0, 1)) or min(pads) < 0:
        return None
    host = g.nodes[users[0]]
    own = list(attrs(host).get("pads", [0, 0, 0, 0]))
    if len(own) != 4:  # not a 2-D layer's padding: left as it is
        return None
    total = [own[0] + pads[2], own[1] + pads[3], own[2] + pads[6], own[3] + pads[7]]
    if host.op_type == "Conv":
        w = g.consts.get(host.input[1]) if len(host.input) > 1 else None
        kernel = list(w.shape[2:]) if w is not None and w.ndim == 4 else None
        limit = 31
    else:
        kernel, limit = list(attrs(host).get("kernel_shape", [])), 7
    if not kernel or len(kernel) != 2 or any(p > limit or p >= kernel[i % 2] for i, p in enumerate(total)):
        return None
    return users[0]


def _fc_bias_of(g: Graph, node: Any) -> Optional[int]:
    """The fully connected MatMul a constant bias Add follows (TensorRT runs the add inside the FC's loadable)."""
    if node.op_type != "Add" or len(node.input) != 2:
        return None
    for data, bias in (node.input, node.input[::-1]):
        if bias in g.consts and data in g.producer:
            host = g.nodes[g.producer[data]]
            if host.op_type == "MatMul" and len(g.consumers.get(data, [])) == 1 and _fully_connected(g, host):
                return g.producer[data]
    return None


def _fc_bias(g: Graph, fc_idx: int, verdicts: Dict[int, NodeVerdict]) -> Optional[int]:
    out = g.nodes[fc_idx].output[0]
    for user in g.consumers.get(out, []):
        if user in verdicts and _fc_bias_of(g, g.nodes[user]) == fc_idx and verdicts[user].device == DLA:
            verdicts[user].fused_into = verdicts[fc_idx].name
            return user
    return None


def _annotate(ctx: _Ctx, idx: int, node: Any, v: NodeVerdict, alias: Dict[str, str]) -> None:
    """Notes that do not change the device: fusions into a conv, FP16 fallbacks, uncertain layers."""
    g = ctx.g
    src = alias.get(node.input[0], node.input[0]) if node.input else ""
    host = g.nodes[g.producer[src]] if src in g.producer else None
    if host is not None and len(g.consumers.get(src, [])) == 1 and src not in g.outputs:
        fusable = v.layer.startswith("ACTIVATION") or v.layer == "SCALE"  # BatchNormalization lowers to a SCALE
        if host.op_type in ("Conv", "ConvTranspose") and fusable:
            v.fused_into = _node_name(host, g.producer[src])  # an unnamed conv is named in the report as OP_INDEX
            if node.op_type == "BatchNormalization":
                v.flops = 0  # folded into the conv weights by the builder
    if node.op_type == "Conv" and v.device == DLA:
        note = _int8_group_note(ctx, node)
        if note:
            v.notes.append(note)


def _pair_compare_casts(graph: Graph, verdicts: Dict[int, NodeVerdict]) -> None:
    """A Cast right after a DLA comparison runs with it on the DLA (the only DLA Cast)."""
    for idx, v in verdicts.items():
        node = graph.nodes[idx]
        if node.op_type == "Cast" and node.input[0] in graph.producer:
            src = verdicts.get(graph.producer[node.input[0]])
            if src is not None and src.op in _COMPARE and src.device == DLA:
                v.device, v.rule, v.value = DLA, None, None


def _subgraph(
    graph: Graph,
    index: int,
    grp: List[int],
    verdicts: Dict[int, NodeVerdict],
    nodes: List[Any],
    lim: Limits,
    findings: List[str],
) -> Subgraph:
    members = set(grp)
    weights = local = 0
    for u in grp:
        verdicts[u].subgraph = index
        weights += sum(graph.consts[i].size * 2 for i in nodes[u].input if i in graph.consts)
        for out in nodes[u].output:
            users = graph.consumers.get(out, [])
            if out not in graph.outputs and users and all(c in members for c in users):
                local += _numel(graph.shape(out)) * 2
    sub = Subgraph(index, [verdicts[u].name for u in grp], sum(verdicts[u].flops for u in grp), weights, local)
    if weights >= lim.max_weight_bytes:
        findings.append(f"DLA subgraph {index}: weights {weights / 2**20:.0f} MiB at FP16 >= 512 MiB (sub.weights)")
    if local >= lim.max_local_bytes:
        findings.append(f"DLA subgraph {index}: intermediate tensors {local / 2**30:.2f} GiB at FP16 >= 1 GiB (sub.local)")
    return sub


def _boundaries(
    units: List[int],
    preds: Dict[int, List[int]],
    verdicts: Dict[int, NodeVerdict],
    nodes: List[Any],
    graph: Graph,
    alias: Dict[str, str],
    exits: Set[int],
) -> Tuple[int, int]:
    """DLA<->GPU crossings (one per tensor and receiving side) and GPU islands between DLA layers. A fully connected
    layer's output (an exit) crosses to its GPU reshape_after, and from there back to each DLA consumer."""
    crossings: Set[Tuple[str, Any]] = set()
    for v in units:
        for name in nodes[v].input:
            t = alias.get(name, name)
            if t not in graph.producer or graph.producer[t] not in verdicts:
                continue
            u = graph.producer[t]
            src, dst = verdicts[u], verdicts[v]
            if src.device == DLA and (dst.device == GPU or u in exits):
                crossings.add((t, GPU))
                if dst.device == DLA:
                    crossings.add((t, dst.subgraph))
            elif src.device == GPU and dst.device == DLA:
                crossings.add((t, dst.subgraph))
    # GPU islands: connected GPU regions with a DLA producer and a DLA consumer. A DLA exit's reshape_after is a GPU
    # node of its own between the exit and its consumers.
    shuffles = {e: ("reshape_after", e) for e in exits if verdicts[e].device == DLA}
    linked = {v: [shuffles.get(p, p) for p in preds[v]] for v in units}
    linked.update({r: [e] for e, r in shuffles.items()})
    on_dla = {u for u in units if verdicts[u].device == DLA}
    parent: Dict[Any, Any] = {u: u for u in linked if u not in on_dla}

    def find(u: Any) -> Any:
        while parent[u] != u:
            u = parent[u]
        return u

    for v in parent:
        for p in linked[v]:
            if p in parent:
                parent[find(p)] = find(v)
    fed, feeds = set(), set()
    for v, ps in linked.items():
        for p in ps:
            if p in on_dla and v in parent:
                fed.add(find(v))
            if v in on_dla and p in parent:
                feeds.add(find(p))
    return len(crossings), len(fed & feeds)


def _input_findings(graph: Graph) -> List[str]:
    out = []
    for name, dims in graph.dynamic_inputs().items():
        fixed = _x(graph.input_shapes[name])
        declared = "declared without a shape" if dims is None else f"dynamic in the file [{', '.join(str(d) for d in dims)}]"
        out.append(
            f"input '{name}' is {declared}; DLA needs static shapes: build with min = opt = max = {fixed} (the engine "
            f"then takes only that shape) or let --fix write {fixed} into the ONNX"
        )
    return out
