"""A Q/DQ model as TensorRT's implicit INT8 takes it: the model without Q/DQ, a scale per tensor, FP16 layers.

The DLA does not take Q/DQ networks before TensorRT 11 (JetPack 5 and 6), so a DLA build there needs the same
quantization said the implicit way: a calibration cache and layer precisions. This follows NVIDIA's QDQ Translator
(Deep-Learning-Accelerator-SW, tools/qdq-translator):

- each QuantizeLinear -> DequantizeLinear pair goes; its readers read the quantized tensor itself. An activation's
  per-tensor scale becomes its cache entry; a weight's pair needs none (TensorRT quantizes weights per output channel
  by max|w| / 127 itself; a pair whose scales differ from that is counted);
- ops that do not change values' range (MaxPool, Flatten, ReLU, Pad, Transpose, Reshape, Squeeze) pass a scale on
  to their output when it has none, and back to their input;
- a tensor left without a scale runs its readers in FP16, except a convolution's output read only by an Add of two
  inputs: it gets scale 1.0 so the DLA fuses the Add into the convolution instead of moving both to FP16 (the
  translator's ``--add_unary_ew_scales_for_dla``).

A Q/DQ model from ``edge calib --qdq`` carries its whole calibration cache (a scale for every tensor, the same
scales its pairs have) and its FP16 layers in the ONNX metadata: those are used as they are, so the DLA build gets
what ``edge calib`` measured, not a guess for the tensors between pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

import numpy as np

from edge.errors import EdgeError
from edge.graph.model import stored_constants
from edge.lazy import require

SCALES_KEY = "edge.int8_scales"  # metadata: JSON {tensor: scale}, the calibration cache edge calib wrote
FP16_KEY = "edge.fp16_layers"  # metadata: JSON [layer name], the layers edge calib kept in FP16
SAME_RANGE = ("MaxPool", "Flatten", "Relu", "Pad", "Transpose", "Reshape", "Squeeze")
WEIGHT_TOLERANCE = 1e-3  # the translator's: a weight pair's scales against max|w| / 127


@dataclass
class Translated:
    model: Any  # the ONNX model without Q/DQ
    scales: Dict[str, float]  # tensor -> scale (amax / 127): the calibration cache
    fp16_layers: List[str]  # TensorRT layer names of the nodes that read a tensor without a scale
    unary: List[str] = field(default_factory=list)  # convolution outputs given scale 1.0 for the DLA's Conv + Add
    weight_mismatches: List[str] = field(default_factory=list)  # weights whose pair's scales are not max|w| / 127
    pairs: int = 0  # Q/DQ pairs removed
    sources: List[str] = field(default_factory=list)  # the tensors the pairs quantized (activations and weights)
    source: str = "the Q/DQ pairs (NVIDIA QDQ Translator's rules)"  # or "edge calib's cache in the model"


def embed(model: Any, scales: Dict[str, float], fp16_layers: List[str]) -> None:
    """Write a calibration cache's scales and the FP16 layers into ``model``'s metadata (in place)."""
    import json

    props = {p.key: p.value for p in model.metadata_props}
    props[SCALES_KEY] = json.dumps(scales, sort_keys=True)
    props[FP16_KEY] = json.dumps(list(fp16_layers))
    del model.metadata_props[:]
    for key, value in props.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value


def _embedded(model: Any) -> Optional[Tuple[Dict[str, float], List[str]]]:
    """The scales and FP16 layers ``embed`` wrote, or None; a malformed entry is an error naming the key."""
    import json
    import math

    props = {p.key: p.value for p in model.metadata_props}
    if SCALES_KEY not in props:
        return None
    try:
        scales, layers = json.loads(props[SCALES_KEY]), json.loads(props.get(FP16_KEY, "[]"))
    except ValueError as exc:
        raise EdgeError(
            f"Q/DQ model: metadata {SCALES_KEY} or {FP16_KEY} is not JSON ({exc}); write the model again with edge calib --qdq"
        ) from None
    if not isinstance(scales, dict) or not all(
        isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        for k, v in scales.items()
    ):
        raise EdgeError(
            f"Q/DQ model: metadata {SCALES_KEY} must map tensor names to positive scales; write the model again with edge calib --qdq"
        )
    if not isinstance(layers, list) or not all(isinstance(n, str) for n in layers):
        raise EdgeError(
            f"Q/DQ model: metadata {FP16_KEY} must be a list of layer names; write the model again with edge calib --qdq"
        )
    return {k: float(v) for k, v in scales.items()}, layers


def has_qdq(model: Any) -> bool:
    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node)


def _layer(node: Any) -> str:
    return node.name or f"node_of_{node.output[0]}"


def translate(model: Any, dla_unary_scales: bool = True) -> Translated:
    """``model`` (an ONNX ModelProto with Q/DQ pairs) said as TensorRT's implicit INT8 takes it; ``model`` is left as
    it was."""
    onnx = require("onnx", "translating a Q/DQ model")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    consts = stored_constants(out)
    producer = {o: n for n in g.node for o in n.output}
    scales: Dict[str, float] = {}
    replace: Dict[str, str] = {}  # a DequantizeLinear output -> the tensor its pair quantizes
    mismatches: List[str] = []
    dropped: Set[int] = set()
    for node in g.node:
        if node.op_type != "DequantizeLinear":
            continue
        q = producer.get(node.input[0])
        if q is None or q.op_type != "QuantizeLinear":
            raise EdgeError(
                f"Q/DQ model: DequantizeLinear '{_layer(node)}' does not read a QuantizeLinear (pre-quantized weights "
                "are not supported); export the model with QuantizeLinear -> DequantizeLinear pairs"
            )
        source = q.input[0]
        scale = np.asarray(consts.get(q.input[1]), np.float64)
        if q.input[1] not in consts or node.input[1] not in consts or not np.array_equal(scale, consts[node.input[1]]):
            raise EdgeError(f"Q/DQ model: the pair '{_layer(q)}' -> '{_layer(node)}' has no constant scale, or two")
        for zp in (q.input[2:3], node.input[2:3]):
            if zp and zp[0] and (zp[0] not in consts or np.any(consts[zp[0]] != 0)):
                raise EdgeError(f"Q/DQ model: '{_layer(q)}' has a zero point other than 0; TensorRT takes symmetric INT8 only")
        if source in consts:  # a weight: TensorRT quantizes it itself
            weight = np.abs(np.asarray(consts[source], np.float64))
            axis = next((a.i for a in q.attribute if a.name == "axis"), 1) if scale.size > 1 else None
            if axis is None:
                derived = weight.max() / 127.0 if weight.size else 0.0
            else:
                derived = weight.max(axis=tuple(d for d in range(weight.ndim) if d != axis % weight.ndim)) / 127.0
            derived = np.ravel(derived)
            if derived.size != scale.size or not np.allclose(derived, scale.ravel(), atol=WEIGHT_TOLERANCE):
                mismatches.append(source)
        else:
            if scale.size != 1:
                raise EdgeError(
                    f"Q/DQ model: activation '{source}' has {scale.size} scales; TensorRT takes one per activation tensor"
                )
            scales[source] = float(scale.reshape(-1)[0])
        replace[node.output[0]] = source
        dropped.update((id(node), id(q)))
    outputs = {o.name for o in g.output}
    keep = [n for n in g.node if id(n) not in dropped]
    for node in keep:
        for k, name in enumerate(node.input):
            if name in replace:
                node.input[k] = replace[name]
    for o in g.output:  # a graph output written by a DequantizeLinear: its source takes the output's name
        if o.name in replace:
            _rename(keep, replace[o.name], o.name)
            if replace[o.name] in scales:
                scales[o.name] = scales.pop(replace[o.name])
    del g.node[:]
    g.node.extend(keep)
    used = {i for n in keep for i in n.input} | outputs
    kept_inits = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(kept_inits)
    embedded = _embedded(out)
    if embedded is not None:
        sources = sorted(set(replace.values()))
        return Translated(out, embedded[0], embedded[1], [], mismatches, len(replace), sources, "edge calib's cache in the model")
    _pass_on(keep, scales)
    unary: List[str] = []
    fp16: List[str] = []
    consumers: Dict[str, List[Any]] = {}
    for node in keep:
        for name in node.input:
            if name:
                consumers.setdefault(name, []).append(node)
    inits = {i.name for i in g.initializer}  # an old model may list its weights as graph inputs too
    tensors = [(None, i.name) for i in g.input if i.name not in inits]
    tensors += [(n, n.output[0]) for n in keep if n.output and n.op_type != "Constant"]  # constants are no activations
    for node, tensor in tensors:
        if tensor in scales:
            continue
        readers = consumers.get(tensor, [])
        if dla_unary_scales and _conv_into_add(node, readers, unary):
            scales[tensor] = 1.0
            unary.append(tensor)
            continue
        fp16 += [_layer(r) for r in readers if _layer(r) not in fp16]
    return Translated(out, scales, fp16, unary, mismatches, len(replace), sorted(set(replace.values())))


def _conv_into_add(node: Optional[Any], readers: List[Any], unary: List[str]) -> bool:
    """A convolution's output read only by an Add of two inputs whose other input is not itself such an output."""
    if node is None or node.op_type != "Conv" or len(readers) != 1:
        return False
    add = readers[0]
    return add.op_type == "Add" and len(add.input) == 2 and add.input[1] not in unary


def _rename(nodes: List[Any], old: str, new: str) -> None:
    for node in nodes:
        for seq in (node.input, node.output):
            for k, name in enumerate(seq):
                if name == old:
                    seq[k] = new


def _pass_on(nodes: List[Any], scales: Dict[str, float]) -> None:
    """Scales through ops that keep the range: forward to outputs without one, then backward to inputs."""
    for node in nodes:
        if node.op_type in SAME_RANGE and node.input and node.input[0] in scales and node.output[0] not in scales:
            scales[node.output[0]] = scales[node.input[0]]
    for node in reversed(nodes):
        if node.op_type in SAME_RANGE and node.output and node.output[0] in scales and node.input[0] not in scales:
            scales[node.input[0]] = scales[node.output[0]]
