"""Q/DQ ONNX for TensorRT's explicit quantization: QuantizeLinear -> DequantizeLinear in front of the compute layers.

Convolution, deconvolution, Gemm and MatMul get a Q/DQ pair on every input: activations per tensor with the
calibrated scale, constant weights per output channel with scale = max|w| / 127. Beyond them, the placement that
TensorRT fuses (``edge.calib.fusions``): the skip input of a residual Add, pooling inputs, one scale across a
Concat. Everything is symmetric INT8 with zero-point 0 (TensorRT's parser rejects anything else) and the file uses
opset >= 13, where Q/DQ has ``axis``. Nodes the user keeps in FP16 get no Q/DQ; TensorRT then runs them in higher
precision. The same file run in ONNX Runtime is the INT8 simulation behind the accuracy report.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

import numpy as np

from edge.calib import fusions
from edge.errors import EdgeError
from edge.graph.model import Graph, attrs
from edge.lazy import require

MIN_OPSET = 13
MIN_SCALE = 1e-8  # an all-zero tensor or channel still needs a positive scale


def layer_name(node: Any) -> str:
    """The name TensorRT's ONNX parser gives the layer: the node name, or ``node_of_<first output>`` without one."""
    return node.name or f"node_of_{node.output[0]}"


def _weight_axis(node: Any, slot: int, weight: np.ndarray) -> Optional[int]:
    """The output-channel axis of a constant weight input, or None for a per-tensor scale."""
    op = node.op_type
    if op == "Conv" and slot == 1:
        return 0
    if op == "ConvTranspose" and slot == 1 and attrs(node).get("group", 1) == 1:
        return 1
    if op == "Gemm" and slot == 1:
        return 0 if attrs(node).get("transB", 0) else 1
    if op == "MatMul" and slot == 1 and weight.ndim == 2:
        return 1
    return None


# op -> the inputs that take Q/DQ (biases stay float: TensorRT quantizes them itself from the other scales)
QUANTIZED_INPUTS = {"Conv": (0, 1), "ConvTranspose": (0, 1), "Gemm": (0, 1), "MatMul": (0, 1)}


def weight_scales(weight: np.ndarray, axis: Optional[int]) -> np.ndarray:
    """Symmetric INT8 scales of a weight: per channel along ``axis`` (or one for the tensor), max|w| / 127."""
    w = np.abs(np.asarray(weight, np.float32))
    if axis is None:
        amax = np.array(w.max() if w.size else 0.0, np.float32)
    else:
        amax = w.max(axis=tuple(d for d in range(w.ndim) if d != axis)) if w.ndim > 1 else w
    return np.maximum(amax / 127.0, MIN_SCALE).astype(np.float32)


def match_nodes(graph: Graph, wanted: Iterable[str]) -> Tuple[Set[int], List[str]]:
    """Node indices for ``--keep-fp16`` names (node name, TensorRT layer name or an output tensor), and their layer
    names; an unknown name is an error that shows what names look like."""
    nodes = graph.model.graph.node
    by_name: Dict[str, int] = {}
    for idx, node in enumerate(nodes):
        for key in (node.name, layer_name(node), *node.output):
            if key:
                by_name.setdefault(key, idx)
    # What the ranking lists: the layers that take Q/DQ (a Constant node is weights, not a layer TensorRT runs).
    layers = [n for n in nodes if n.op_type in QUANTIZED_INPUTS] or [n for n in nodes if n.op_type != "Constant"]
    examples = ", ".join(layer_name(n) for n in layers[:3])
    found: Set[int] = set()
    for name in wanted:
        if name not in by_name:
            raise EdgeError(
                f"--keep-fp16 {name}: no node has this name, layer name or output tensor (names look like: {examples}); "
                "the accuracy report lists the layers by these names"
            )
        if nodes[by_name[name]].op_type == "Constant":
            raise EdgeError(f"--keep-fp16 {name}: is a Constant node (weights), not a layer; name a layer such as {examples}")
        found.add(by_name[name])
    return found, [layer_name(nodes[i]) for i in sorted(found)]


def _copy_with_opset(model: Any, flag: str) -> Any:
    """A copy of ``model`` at opset >= 13 (per-channel Q/DQ needs ``axis``)."""
    onnx = require("onnx", "writing a Q/DQ model")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    opset = next((o for o in out.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is not None and opset.version < MIN_OPSET:
        try:
            out = onnx.version_converter.convert_version(out, MIN_OPSET)
        except Exception as exc:  # the converter raises bare RuntimeErrors for ops it cannot lift
            raise EdgeError(
                f"{flag}: the model is opset {opset.version} and cannot be converted to {MIN_OPSET} ({exc})"
            ) from None
    return out


class _Inserter:
    """Makes Q/DQ pairs in a graph, once per (tensor, axis), and rewires node inputs to them."""

    def __init__(self, g: Any, graph: Graph, amax: Dict[str, float], fused: bool = True) -> None:
        self.g, self.graph, self.amax = g, graph, amax
        self.plan = fusions.plan(graph) if fused else fusions.Plan()
        self.groups = self.plan.groups()
        self.made: Dict[Tuple[str, Optional[int]], str] = {}  # (tensor, axis) -> its dequantized name
        self.nodes: List[Any] = []  # the new graph's nodes, in order

    def threshold(self, name: str) -> Optional[float]:
        """The calibrated threshold of an activation; a Concat's tensors share their group's largest."""
        root = self.plan.shared.get(name)
        if root is None:
            return self.amax.get(name)
        found = [self.amax[t] for t in self.groups[root] if t in self.amax]
        return max(found) if found else None

    def _pair(self, tensor: str, scale: np.ndarray, axis: Optional[int]) -> str:
        key = (tensor, axis)
        if key not in self.made:
            helper, numpy_helper = require("onnx").helper, require("onnx").numpy_helper
            base = tensor if axis is None else f"{tensor}_axis{axis}"
            self.g.initializer.extend(
                [
                    numpy_helper.from_array(scale, f"{base}_scale"),
                    numpy_helper.from_array(np.zeros(scale.shape, np.int8), f"{base}_zero_point"),
                ]
            )
            extra = {} if axis is None else {"axis": axis}
            names = [f"{base}_scale", f"{base}_zero_point"]
            self.nodes.append(
                helper.make_node("QuantizeLinear", [tensor, *names], [f"{base}_quantized"], f"{base}_QuantizeLinear", **extra)
            )
            self.nodes.append(
                helper.make_node(
                    "DequantizeLinear",
                    [f"{base}_quantized", *names],
                    [f"{base}_dequantized"],
                    f"{base}_DequantizeLinear",
                    **extra,
                )
            )
            self.made[key] = f"{base}_dequantized"
        return self.made[key]

    def quantize_inputs(self, node: Any, idx: Optional[int]) -> bool:
        """Put Q/DQ in front of ``node``'s compute inputs (in place): a weighted layer's, and those the fusion plan
        names for node ``idx`` of the prepared graph. True when at least one got a pair."""
        done = False
        for slot in QUANTIZED_INPUTS.get(node.op_type, ()) + self.plan.inputs.get(idx, ()):  # type: ignore[arg-type]
            if slot >= len(node.input) or not node.input[slot]:
                continue
            name = node.input[slot]
            threshold = self.threshold(name)
            if name in self.graph.consts:
                weight = self.graph.consts[name]
                axis = _weight_axis(node, slot, weight)
                node.input[slot] = self._pair(name, weight_scales(weight, axis), axis)
            elif threshold is not None:
                scale = np.array(max(threshold / 127.0, MIN_SCALE), np.float32)
                node.input[slot] = self._pair(name, scale, None)
            else:
                continue
            done = True
        return done

    def finish(self) -> None:
        copied = [type(n)() for n in self.nodes]
        for dst, src in zip(copied, self.nodes):
            dst.CopyFrom(src)
        del self.g.node[:]
        self.g.node.extend(copied)


def _index(graph: Graph, node: Any) -> Optional[int]:
    """The node's index in ``graph`` (nodes are matched by their first output: opset conversion may renumber them)."""
    return graph.producer.get(node.output[0]) if node.output else None


def build(
    model: Any, graph: Graph, amax: Dict[str, float], keep_fp16: Set[int] = frozenset(), fused: bool = True
) -> Tuple[Any, Set[int]]:
    """A copy of ``model`` (the original, with its own dynamic shapes) with Q/DQ inserted, and the indices of the
    nodes that got Q/DQ.

    ``graph`` is the prepared model (for constant values), ``amax`` the calibrated threshold per activation tensor,
    ``keep_fp16`` node indices (of ``graph``) to leave alone. ``fused=False`` leaves out the placement for
    TensorRT's fusions (``edge.calib.fusions``): Q/DQ in front of the weighted layers only, for comparisons.
    """
    out = _copy_with_opset(model, "--qdq")
    ins = _Inserter(out.graph, graph, amax, fused)
    quantized: Set[int] = set()
    for node in out.graph.node:
        idx = _index(graph, node)
        if idx not in keep_fp16 and ins.quantize_inputs(node, idx) and idx is not None:
            quantized.add(idx)
        ins.nodes.append(node)
    ins.finish()
    return out, quantized


ALONE = "__int8_alone"  # suffix of the outputs of a layer's quantized twin


def alone_model(model: Any, graph: Graph, amax: Dict[str, float], nodes: Set[int]) -> Tuple[Any, Dict[int, Tuple[str, str]]]:
    """The FP32 model plus, for each of ``nodes``, a twin that reads the same FP32 inputs through Q/DQ: one run gives
    every layer's output with it alone quantized. Returns the model and {node index: (FP32 output, twin's output)}."""
    out = _copy_with_opset(model, "--layer-images")
    ins = _Inserter(out.graph, graph, amax)
    pairs: Dict[int, Tuple[str, str]] = {}
    for node in out.graph.node:
        ins.nodes.append(node)
        idx = _index(graph, node)
        if idx not in nodes:
            continue
        twin = type(node)()
        twin.CopyFrom(node)
        twin.name = f"{node.name or node.output[0]}{ALONE}"
        del twin.output[:]
        twin.output.extend(f"{o}{ALONE}" if o else "" for o in node.output)
        if ins.quantize_inputs(twin, idx):
            ins.nodes.append(twin)
            pairs[idx] = (node.output[0], twin.output[0])
    ins.finish()
    return out, pairs


def serialize(model: Any, flag: str = "--qdq", what: str = "Q/DQ model") -> bytes:
    """The model's bytes, once it passes the ONNX checker."""
    onnx = require("onnx", f"writing a {what}")
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise EdgeError(f"{flag}: the {what} does not pass the ONNX checker ({str(exc).splitlines()[0]})") from None
    return model.SerializeToString()
