"""Static shapes and build-time values for every tensor, the way TensorRT sees them at one build shape.

TensorRT builds a DLA engine at min = opt = max, so every ``Shape`` is a constant and every computation on shapes
(``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``, ``Size``, ``Range``, ``ConstantOfShape``, arithmetic on
shape tensors) folds away at build time. ONNX's own shape inference stops at the first reshape whose target is
computed, so this pass walks the graph once in order and, per node:

1. folds it when every input has a known value and the outputs are small (``cap_bytes``, 64 MiB by default):
   the output shapes are inferred first, from shape and value metadata, and nothing larger than the cap is ever
   materialised (a 224-byte ``ConstantOfShape [1,3,30000,30000]`` keeps its shape and becomes a note);
2. otherwise infers its output shapes with ONNX's per-operator inference, given the input shapes found so far and
   the small constant inputs (a reshape target, resize scales) as values.

An operator no inference knows (a custom domain) leaves its outputs unknown and is listed, never raised.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from edge.lazy import require

Dims = Tuple[Union[int, str], ...]

CAP_BYTES = 64 << 20  # the largest tensor folding may materialise
TOTAL_CAP_BYTES = 256 << 20  # and all of them together
_VALUE_HINT_ELEMENTS = 4096  # constant inputs up to this size are handed to per-node inference as values
# Random or stateful: TensorRT does not fold these, and their values are not those of the run.
_NO_FOLD = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"})
_CONTROL_FLOW = frozenset({"If", "Loop", "Scan", "SequenceMap"})


@dataclass
class Folded:
    """What the pass found: shapes, element types, values, the folded node indices and why some were not."""

    shapes: Dict[str, Dims] = field(default_factory=dict)
    dtypes: Dict[str, int] = field(default_factory=dict)
    values: Dict[str, np.ndarray] = field(default_factory=dict)
    folded: List[int] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)  # nodes not folded because of the byte cap
    unknown_ops: Dict[str, int] = field(default_factory=dict)  # op -> count of nodes whose shapes no inference knows


def static(dims: Optional[Dims]) -> bool:
    return dims is not None and all(isinstance(d, int) and d >= 0 for d in dims)


def nbytes(dims: Dims, dtype: int) -> int:
    """Bytes of a static tensor of ONNX element type ``dtype`` (unknown types count 8 per element, strings 64: a
    folded string is a Python object, and 8 M of them counted at 8 bytes took 2.2 GB under a 64 MiB cap)."""
    size = 1
    for d in dims:
        size *= int(d)
    return size * _itemsize(dtype)


def _itemsize(dtype: int) -> int:
    if dtype == 8:  # TensorProto.STRING
        return 64
    try:
        return int(np.dtype(require("onnx").helper.tensor_dtype_to_np_dtype(dtype)).itemsize) or 8
    except Exception:  # string, undefined or a type numpy lacks
        return 8


def _dims(value_info: Any) -> Optional[Dims]:
    t = value_info.type.tensor_type
    if not t.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim)


class _Pass:
    def __init__(self, model: Any, values: Dict[str, np.ndarray], dtypes: Dict[str, int], cap_bytes: int) -> None:
        self.onnx = require("onnx", "reading ONNX models")
        self.model = model
        self.cap = cap_bytes
        self.held = 0  # bytes of the values folded so far
        self.opset = [o for o in model.opset_import]
        self.out = Folded(values=dict(values), dtypes=dict(dtypes))
        self._global_inference()

    def _global_inference(self) -> None:
        """ONNX's whole-graph inference first: cheap, and right wherever it gives a static shape."""
        g = self.model.graph
        try:
            inferred = self.onnx.shape_inference.infer_shapes(self.model, data_prop=True).graph
        except Exception:  # a model ONNX rejects as a whole: the per-node pass still works node by node
            inferred = g
        for vi in list(inferred.input) + list(inferred.value_info) + list(inferred.output):
            d = _dims(vi)
            if d is not None:
                self.out.shapes[vi.name] = d
            if vi.type.tensor_type.elem_type:
                self.out.dtypes.setdefault(vi.name, vi.type.tensor_type.elem_type)
        for name, value in self.out.values.items():
            self.out.shapes[name] = tuple(int(d) for d in value.shape)

    def shape(self, name: str) -> Optional[Dims]:
        return self.out.shapes.get(name)

    def run(self) -> Folded:
        for idx, node in enumerate(self.model.graph.node):
            try:
                self._node(idx, node)
            except MemoryError:
                raise
            except Exception as exc:  # a malformed node: its outputs stay unknown, the rest of the graph goes on
                self.out.unknown_ops[node.op_type] = self.out.unknown_ops.get(node.op_type, 0) + 1
                self.out.notes.append(f"node '{node.name or node.op_type}' ({node.op_type}) could not be analysed: {exc}"[:300])
        return self.out

    def _node(self, idx: int, node: Any) -> None:
        if node.domain not in ("", "ai.onnx") or node.op_type in _CONTROL_FLOW:
            if not all(static(self.shape(o)) for o in node.output if o):
                self.out.unknown_ops[node.op_type] = self.out.unknown_ops.get(node.op_type, 0) + 1
            return
        if self._fold(idx, node):
            return
        self._infer(node)

    # -- folding ---------------------------------------------------------------------------------------------

    def _fold(self, idx: int, node: Any) -> bool:
        op = node.op_type
        if op in _NO_FOLD:
            return False
        if op == "Constant":
            return self._constant(idx, node)
        if op in ("Shape", "Size"):
            dims = self.shape(node.input[0]) if node.input else None
            if not static(dims):
                return False
            if op == "Size":
                value = np.array(int(np.prod(dims, dtype=np.int64)), dtype=np.int64)
            else:
                a = {x.name: x.i for x in node.attribute}
                start, end = a.get("start", 0), a.get("end", len(dims))
                value = np.array(dims[start:end] if "end" in a else dims[start:], dtype=np.int64)
            self._set(node.output[0], value)
            self.out.folded.append(idx)
            return True
        inputs = [n for n in node.input if n]
        if not inputs or not all(n in self.out.values for n in inputs):
            return False
        # Output sizes from the input values and shapes first, the cap checked before anything is computed. Shapes the
        # file declares are set aside for this: a ConstantOfShape of 10 GiB declared as [1] was evaluated.
        declared = {o: self.out.shapes.pop(o) for o in node.output if o in self.out.shapes}
        self._infer(node)
        sizes = []
        for o in node.output:
            dims = self.shape(o)
            if o and not static(dims):
                self.out.shapes.update({k: v for k, v in declared.items() if not static(self.shape(k))})
                return False  # an unknown output size could be anything: never evaluate blind
            sizes.append(nbytes(dims, self.out.dtypes.get(o, 1)) if o else 0)
        if sum(sizes) > self.cap:
            self._note_cap(node, sum(sizes))
            return False
        if self.held + sum(sizes) > TOTAL_CAP_BYTES:  # many folds under the cap each still add up
            self._note_cap(node, sum(sizes), total=True)
            return False
        results = self._evaluate(node)
        if results is None:
            return False
        self.held += sum(sizes)
        for name, value in zip(node.output, results):
            if name:
                self._set(name, np.asarray(value))
        self.out.folded.append(idx)
        return True

    def _constant(self, idx: int, node: Any) -> bool:
        attr = next(iter(node.attribute), None)
        if attr is None:
            return False
        helper, numpy_helper = self.onnx.helper, self.onnx.numpy_helper
        if attr.name == "value":
            t = attr.t
            dims = tuple(int(d) for d in t.dims)
            self.out.shapes[node.output[0]] = dims
            self.out.dtypes[node.output[0]] = t.data_type
            if nbytes(dims, t.data_type) > self.cap:
                self._note_cap(node, nbytes(dims, t.data_type))
                return False
            value = numpy_helper.to_array(t)
        elif attr.name in ("value_float", "value_int", "value_floats", "value_ints"):
            value = np.array(helper.get_attribute_value(attr), dtype=np.float32 if "float" in attr.name else np.int64)
        else:  # sparse tensors and strings: a layer TensorRT does not fold either
            return False
        self._set(node.output[0], value)
        self.out.folded.append(idx)
        return True

    def _evaluate(self, node: Any) -> Optional[List[np.ndarray]]:
        """One node with ONNX's reference evaluator; None where it cannot (the node then stays a layer)."""
        from onnx.reference import ReferenceEvaluator

        h = self.onnx.helper
        feeds = {n: self.out.values[n] for n in node.input if n}
        inputs = [h.make_tensor_value_info(n, h.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()]
        outputs = [h.make_empty_tensor_value_info(o) for o in node.output if o]
        one = h.make_model(h.make_graph([node], "fold", inputs, outputs), opset_imports=self.opset)
        try:
            return list(ReferenceEvaluator(one).run(None, feeds))
        except Exception:  # an op or a case the reference evaluator lacks
            return None

    def _set(self, name: str, value: np.ndarray) -> None:
        self.out.values[name] = value
        self.out.shapes[name] = tuple(int(d) for d in value.shape)
        try:
            self.out.dtypes[name] = self.onnx.helper.np_dtype_to_tensor_dtype(value.dtype)
        except Exception:  # object arrays (strings): keep what inference said
            pass

    def _note_cap(self, node: Any, size: int, total: bool = False) -> None:
        cap = f"cap {self.cap / 2**20:.0f} MiB" if not total else f"{TOTAL_CAP_BYTES / 2**20:.0f} MiB for all folded values"
        self.out.notes.append(
            f"'{node.name or node.output[0]}' ({node.op_type}) not folded: its output would take {size / 2**20:.0f} MiB "
            f"({cap}); its shape is still known"
        )

    # -- per-node inference ----------------------------------------------------------------------------------

    def _infer(self, node: Any) -> None:
        """Output shapes and types of one node from what is known of its inputs."""
        outs = [o for o in node.output if o]
        if outs and all(static(self.shape(o)) for o in outs):
            return
        h = self.onnx.helper
        inputs, inits = [], []
        for name in dict.fromkeys(n for n in node.input if n):
            value = self.out.values.get(name)
            if value is not None and value.size <= _VALUE_HINT_ELEMENTS:
                inits.append(self.onnx.numpy_helper.from_array(value, name))
                continue
            dims = self.shape(name)
            dtype = self.out.dtypes.get(name, 0)
            if dims is None:
                inputs.append(h.make_tensor_value_info(name, dtype, None))
            else:
                inputs.append(h.make_tensor_value_info(name, dtype, [d if isinstance(d, int) else None for d in dims]))
        one = h.make_model(
            h.make_graph([node], "infer", inputs, [h.make_empty_tensor_value_info(o) for o in outs], inits),
            opset_imports=self.opset,
        )
        try:
            inferred = self.onnx.shape_inference.infer_shapes(one, data_prop=True).graph
        except Exception:
            inferred = None
        found = {}
        if inferred is not None:
            found = {vi.name: vi for vi in list(inferred.output) + list(inferred.value_info)}
        known = False
        for o in outs:
            vi = found.get(o)
            if vi is None or not vi.type.HasField("tensor_type"):
                continue
            d = _dims(vi)
            if d is not None and (static(d) or o not in self.out.shapes):
                self.out.shapes[o] = d
                known = known or static(d)
            if vi.type.tensor_type.elem_type:
                self.out.dtypes[o] = vi.type.tensor_type.elem_type
        if outs and not known and not any(static(self.shape(o)) for o in outs):
            if inferred is None and all(static(self.shape(n)) for n in node.input if n):
                self.out.unknown_ops[node.op_type] = self.out.unknown_ops.get(node.op_type, 0) + 1


def fold(model: Any, values: Dict[str, np.ndarray], dtypes: Dict[str, int], cap_bytes: int = CAP_BYTES) -> Folded:
    """Shapes, types and build-time values of every tensor of ``model`` (inputs already pinned to static shapes)."""
    return _Pass(model, values, dtypes, cap_bytes).run()
