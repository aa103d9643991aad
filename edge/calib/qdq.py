"""Q/DQ ONNX for TensorRT's explicit quantization: QuantizeLinear -> DequantizeLinear in front of the compute layers.

Convolution, deconvolution, Gemm and MatMul get a Q/DQ pair on every input: activations per tensor with the
calibrated scale, constant weights per output channel with scale = max|w| / 127. Everything is symmetric INT8 with
zero-point 0 (TensorRT's parser rejects anything else) and the file uses opset >= 13, where Q/DQ has ``axis``. Nodes
the user keeps in FP16 get no Q/DQ; TensorRT then runs them in higher precision. The same file run in ONNX Runtime
is the INT8 simulation behind the accuracy report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

import numpy as np

from edge.errors import EdgeError
from edge.graph.model import Graph, attrs
from edge.lazy import require
from edge.outputs import write_atomic

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
    by_name: Dict[str, int] = {}
    for idx, node in enumerate(graph.model.graph.node):
        for key in (node.name, layer_name(node), *node.output):
            if key:
                by_name.setdefault(key, idx)
    found: Set[int] = set()
    for name in wanted:
        if name not in by_name:
            examples = ", ".join(layer_name(n) for n in list(graph.model.graph.node)[:3])
            raise EdgeError(
                f"--keep-fp16 {name}: no node has this name, layer name or output tensor (names look like: {examples}); "
                "the accuracy report lists the layers by these names"
            )
        found.add(by_name[name])
    nodes = graph.model.graph.node
    return found, [layer_name(nodes[i]) for i in sorted(found)]


def build(model: Any, graph: Graph, amax: Dict[str, float], keep_fp16: Set[int] = frozenset()) -> Tuple[Any, Set[int]]:
    """A copy of ``model`` (the original, with its own dynamic shapes) with Q/DQ inserted, and the indices of the
    nodes that got Q/DQ.

    ``graph`` is the prepared model (for constant values), ``amax`` the calibrated threshold per activation tensor,
    ``keep_fp16`` node indices to leave alone.
    """
    onnx = require("onnx", "writing a Q/DQ model")
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    out = onnx.ModelProto()
    out.CopyFrom(model)
    opset = next((o for o in out.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is not None and opset.version < MIN_OPSET:
        try:
            out = onnx.version_converter.convert_version(out, MIN_OPSET)
        except Exception as exc:  # the converter raises bare RuntimeErrors for ops it cannot lift
            raise EdgeError(f"--qdq: the model is opset {opset.version} and cannot be converted to {MIN_OPSET} ({exc})") from None

    g = out.graph
    made: Dict[Tuple[str, Optional[int]], str] = {}  # (tensor, axis) -> its dequantized name
    nodes: List[Any] = []
    quantized: Set[int] = set()

    def qdq(tensor: str, scale: np.ndarray, axis: Optional[int]) -> str:
        key = (tensor, axis)
        if key not in made:
            base = tensor if axis is None else f"{tensor}_axis{axis}"
            g.initializer.extend(
                [
                    numpy_helper.from_array(scale, f"{base}_scale"),
                    numpy_helper.from_array(np.zeros(scale.shape, np.int8), f"{base}_zero_point"),
                ]
            )
            extra = {} if axis is None else {"axis": axis}
            names = [f"{base}_scale", f"{base}_zero_point"]
            nodes.append(
                helper.make_node("QuantizeLinear", [tensor, *names], [f"{base}_quantized"], f"{base}_QuantizeLinear", **extra)
            )
            nodes.append(
                helper.make_node(
                    "DequantizeLinear",
                    [f"{base}_quantized", *names],
                    [f"{base}_dequantized"],
                    f"{base}_DequantizeLinear",
                    **extra,
                )
            )
            made[key] = f"{base}_dequantized"
        return made[key]

    for idx, node in enumerate(g.node):
        slots = QUANTIZED_INPUTS.get(node.op_type, ()) if idx not in keep_fp16 else ()
        for slot in slots:
            if slot >= len(node.input) or not node.input[slot]:
                continue
            name = node.input[slot]
            if name in graph.consts:
                weight = graph.consts[name]
                axis = _weight_axis(node, slot, weight)
                node.input[slot] = qdq(name, weight_scales(weight, axis), axis)
            elif name in amax:
                scale = np.array(max(amax[name] / 127.0, MIN_SCALE), np.float32)
                node.input[slot] = qdq(name, scale, None)
            else:
                continue
            quantized.add(idx)
        nodes.append(node)
    copied = [type(n)() for n in nodes]
    for dst, src in zip(copied, nodes):
        dst.CopyFrom(src)
    del g.node[:]
    g.node.extend(copied)
    return out, quantized


def save(model: Any, path: str | Path) -> None:
    """Check the model, then write it through the atomic-write path."""
    onnx = require("onnx", "writing a Q/DQ model")
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise EdgeError(f"--qdq: the Q/DQ model does not pass the ONNX checker ({str(exc).splitlines()[0]})") from None
    write_atomic(path, model.SerializeToString())
