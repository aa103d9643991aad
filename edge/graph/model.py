"""ONNX loading, static shapes and constant values: what every build-side analysis starts from.

``prepare()`` pins the dynamic inputs the user gave (``--shape``), runs ONNX shape inference and folds the
sub-graphs that only depend on constants (Paddle exports keep weights in ``Constant`` nodes, and static
``Shape -> Slice -> Concat`` chains feed reshapes). TensorRT's parser folds the same things, so later stages
can treat them as weights instead of layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from edge.config import short
from edge.errors import EdgeError
from edge.graph.fold import CAP_BYTES, fold
from edge.inputs import missing
from edge.lazy import require

Dims = Tuple[Union[int, str], ...]

# Ops whose outputs are just their input to TensorRT (the parser passes the tensor through).
PASSTHROUGH = frozenset({"Identity", "Dropout"})


def load_model(source: Union[str, Path, Any]) -> Any:
    """An ``onnx.ModelProto`` from a path (checked, with a clear error) or a ModelProto passed through."""
    onnx = require("onnx", "reading ONNX models")
    if isinstance(source, onnx.ModelProto):
        return source
    path = Path(source)
    if not path.exists():  # named as given: pathlib turns asset://x into asset:/x
        raise EdgeError(f"model file not found: {source}")
    if not path.is_file():
        raise EdgeError(f"model '{path}': {missing(path)}; pass the ONNX file")
    try:
        model = onnx.load(str(path), load_external_data=False)
        external = _external_bytes(model)
        if external:
            free = _available_memory()
            if free is not None and 3 * external > free:  # loaded, copied to numpy and folded: about 3x (measured)
                raise EdgeError(
                    f"{path}: its external weights take {external / 2**30:.1f} GiB, about {3 * external / 2**30:.0f} "
                    f"GiB once loaded, and this process may use {free / 2**30:.1f} GiB; run it on a larger machine"
                )
            onnx.external_data_helper.load_external_data_for_model(model, str(path.parent))
    except EdgeError:
        raise
    except Exception as exc:  # protobuf raises DecodeError, onnx raises others on external data
        raise EdgeError(f"{path} is not a readable ONNX model ({type(exc).__name__}: {exc})") from None
    if not model.graph.node:
        raise EdgeError(f"{path} is not an ONNX model (no graph nodes found)")
    damaged = _non_text(model.graph)
    if damaged:
        raise EdgeError(f"{path}: {damaged} is not UTF-8 text; the file is damaged (re-export or copy it again)")
    broken = unknown_opset(model) or cycle(model) or off_spec(model)
    if broken:
        raise EdgeError(f"{path}: {broken}; the file does not follow the ONNX spec (re-export it)")
    return model


def preflight(path: Path) -> None:
    """What edge-build checks before TensorRT's parser sees the file, which blocks for good on a FIFO given as
    external data, and builds graphs with an unknown opset. Weights are not loaded; skipped where onnx is not
    installed (a runtime-only machine), with the parser's own errors then."""
    try:
        onnx = require("onnx")
    except EdgeError:
        return
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise EdgeError(
            f"{path} is not a readable ONNX model ({type(exc).__name__}: {short(str(exc), 160)}); re-export it or check the download"
        ) from None
    for t in model.graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = next((e.value for e in t.external_data if e.key == "location"), "")
        target = path.parent / location
        if not location or not target.is_file():
            raise EdgeError(
                f"{path}: the weights of {short(t.name, 60)} should be in {short(location, 120)} beside it: "
                f"{missing(target)}; copy the model's data file with it"
            )
    broken = unknown_opset(model) or cycle(model)
    if broken:
        raise EdgeError(f"{path}: {broken}; the file does not follow the ONNX spec (re-export it)")


def unknown_opset(model: Any) -> Optional[str]:
    """The standard domain's opset when it is newer than the installed onnx defines (nothing can check such a
    graph, and TensorRT's parser builds it as if it were an older one), or None."""
    latest = require("onnx").defs.onnx_opset_version()
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    return f"opset {opset} is newer than the installed onnx defines (at most {latest})" if opset > latest else None


def cycle(model: Any) -> Optional[str]:
    """A node of the top-level graph that depends on its own output, through any path, or None (ONNX graphs are
    acyclic; the ones that are not make every later walk loop or stop early)."""
    nodes = model.graph.node
    producer = {out: i for i, n in enumerate(nodes) for out in n.output if out}
    needs = [{producer[x] for x in n.input if x in producer} for n in nodes]
    users: List[List[int]] = [[] for _ in nodes]
    for i, deps in enumerate(needs):
        for d in deps:
            users[d].append(i)
    waiting = [len(d) for d in needs]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    for i in ready:  # Kahn's order: the list grows while it is walked
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
    if len(ready) == len(nodes):
        return None
    # Every node still waiting waits on another one still waiting; walking those links must come round to a node twice.
    stuck, seen = next(i for i, w in enumerate(waiting) if w > 0), set()
    while stuck not in seen:
        seen.add(stuck)
        stuck = next(d for d in needs[stuck] if waiting[d] > 0)
    name = f" {short(nodes[stuck].name, 60)}" if nodes[stuck].name else ""
    return f"the graph has a cycle (node {stuck}{name} ({nodes[stuck].op_type}) depends on its own output)"


def _external_bytes(model: Any) -> int:
    """Bytes the initialisers kept in external files will take once loaded (their declared shapes, not the files'
    sizes: a sparse file of 4 GiB occupies no disk and loaded into 8 GB)."""
    onnx = require("onnx")
    total = 0
    for t in model.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            total += math.prod(t.dims) * max(1, onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize)
    return total


def _available_memory() -> Optional[int]:
    """The memory this process may still take, in bytes: MemAvailable (/proc/meminfo) or its address-space limit
    (ulimit -v, under which loading past it crashed inside protobuf with no message), whichever is lower."""
    limits = []
    try:
        with open("/proc/meminfo") as f:
            limits += [int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            limits.append(soft)
    except (ImportError, OSError, ValueError):
        pass
    return min(limits) if limits else None


def off_spec(model: Any) -> Optional[str]:
    """The first node of the standard domain that breaks its op's schema at the model's opset (how many inputs and
    outputs, an attribute of the wrong type, a Conv group below 1), or None. Every analysis indexes inputs and
    reads attributes by the spec; a hand-made or damaged node used to end as IndexError or ValueError in them."""
    defs = require("onnx").defs
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset <= 0:
        return None
    schemas: Dict[str, Any] = {}
    for i, node in enumerate(model.graph.node):
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type not in schemas:
            try:
                schemas[node.op_type] = defs.get_schema(node.op_type, opset, "")
            except Exception:  # onnx's SchemaError: an op this opset does not have is reported as unknown later
                schemas[node.op_type] = None
        schema = schemas[node.op_type]
        if schema is None:
            continue
        where = f"node {i} {short(node.name, 60)} ({node.op_type})" if node.name else f"node {i} ({node.op_type})"
        given = len(node.input)
        if not schema.min_input <= given <= schema.max_input:
            return f"{where} has {given} inputs, the spec {_range(schema.min_input, schema.max_input)}"
        if not schema.min_output <= len(node.output) <= schema.max_output:
            return f"{where} has {len(node.output)} outputs, the spec {_range(schema.min_output, schema.max_output)}"
        for a in node.attribute:
            spec = schema.attributes.get(a.name)
            if spec is not None and a.type != int(spec.type):
                return f"attribute {short(a.name, 40)} of {where} is {_ATTR_TYPES.get(a.type, a.type)}, the spec says {_ATTR_TYPES.get(int(spec.type), spec.type)}"
        if node.op_type in ("Conv", "ConvTranspose"):
            group = next((a.i for a in node.attribute if a.name == "group"), 1)
            if group < 1:
                return f"{where} has group {group}; it must be 1 or more"
    return None


_ATTR_TYPES = {
    1: "a float",
    2: "an integer",
    3: "a string",
    4: "a tensor",
    5: "a graph",
    6: "floats",
    7: "integers",
    8: "strings",
}


def _range(low: int, high: int) -> str:
    if low == high:
        return f"says {low}"
    return f"allows {low} or more" if high > 1 << 20 else f"allows {low} to {high}"


def _non_text(g: Any) -> Optional[str]:
    """Where the graph holds a name that protobuf could not decode as UTF-8 (it hands those over as bytes), or None."""
    for i, node in enumerate(g.node):
        for what, value in (("op type", node.op_type), ("name", node.name), ("domain", node.domain)):
            if isinstance(value, bytes):
                return f"the {what} of node {i} ({value[:40]!r})"
        for value in (*node.input, *node.output):
            if isinstance(value, bytes):
                return f"a tensor name of node {i} ({value[:40]!r})"
        for a in node.attribute:
            if isinstance(a.name, bytes):
                return f"an attribute name of node {i} ({a.name[:40]!r})"
    for part in (g.input, g.output, g.initializer, g.value_info):
        for item in part:
            if isinstance(item.name, bytes):
                return f"the tensor name {item.name[:40]!r}"
    return None


MAX_DIM = (1 << 31) - 1


def parse_shapes(texts: List[str], input_names: List[str]) -> Dict[str, Tuple[int, ...]]:
    """Every ``--shape``, each input at most once."""
    shapes: Dict[str, Tuple[int, ...]] = {}
    for text in texts:
        name, dims = parse_shape(text, input_names)
        if name in shapes:
            raise EdgeError(f"--shape {text}: input '{name}' is already given a shape; give each input one --shape")
        shapes[name] = dims
    return shapes


def parse_shape(text: str, input_names: List[str]) -> Tuple[str, Tuple[int, ...]]:
    """``NAME=1x3x640x640`` (or just ``1x3x640x640`` when the model has one input) -> (name, dims)."""
    name, sep, dims_text = text.rpartition("=")
    if not sep:
        if len(input_names) != 1:
            raise EdgeError(f"--shape {text}: the model has inputs {', '.join(input_names)}; write NAME=DIMS")
        name = input_names[0]
    parts = dims_text.lower().split("x")
    # ASCII digits only: int() would also take "1_0", "+1", " 1" and other scripts' digits
    if not all(p.isascii() and p.isdigit() for p in parts):
        raise EdgeError(f"--shape {text}: dimensions must look like 1x3x640x640")
    dims = tuple(int(d) for d in parts)
    if any(d <= 0 for d in dims):
        raise EdgeError(f"--shape {text}: every dimension must be a positive integer")
    if any(d > MAX_DIM for d in dims):
        raise EdgeError(f"--shape {text}: a dimension is over {MAX_DIM} (2^31 - 1)")
    if name not in input_names:
        raise EdgeError(f"--shape {text}: no input named '{name}'; inputs are: {', '.join(input_names)}")
    return name, dims


def attrs(node: Any) -> Dict[str, Any]:
    """A node's attributes as plain Python values (strings decoded)."""
    helper = require("onnx").helper
    out = {}
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        out[a.name] = value.decode(errors="replace") if isinstance(value, bytes) else value
    return out


def declared_dims(value_info: Any) -> Optional[Dims]:
    """An input or output's shape as the file declares it: numbers, names of symbolic dimensions, or None."""
    t = value_info.type.tensor_type
    if not t.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else _text(d.dim_param or "?") for d in t.shape.dim)


def _text(value: Any) -> str:
    """A name as text: protobuf hands over a non-UTF-8 one as bytes, which would then break formatting and JSON."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def stored_constants(model: Any) -> Dict[str, np.ndarray]:
    """The weights the file stores, by tensor name: its initializers and its Constant nodes' tensors (not what is
    computed from them)."""
    numpy_helper = require("onnx").numpy_helper
    values = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return values


def model_inputs(model: Any) -> List[Any]:
    """The real inputs (old exports also list initializers as graph inputs)."""
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def is_static(dims: Optional[Dims]) -> bool:
    return dims is not None and all(isinstance(d, int) and d > 0 for d in dims)


@dataclass
class Graph:
    """A shape-inferred model with its constants folded, and the lookups every analysis needs."""

    model: Any
    shapes: Dict[str, Dims]
    dtypes: Dict[str, int]
    consts: Dict[str, np.ndarray]
    input_shapes: Dict[str, Optional[Dims]]  # after --shape
    declared_inputs: Dict[str, Optional[Dims]]  # as the file declares them (None: no shape)
    folded: List[int] = field(default_factory=list)  # node indices computed at build time
    notes: List[str] = field(default_factory=list)  # what folding left alone because of the byte cap
    unknown_ops: Dict[str, int] = field(default_factory=dict)  # op -> nodes whose output shapes nothing infers
    producer: Dict[str, int] = field(default_factory=dict)
    consumers: Dict[str, List[int]] = field(default_factory=dict)

    @property
    def nodes(self) -> Sequence[Any]:
        return self.model.graph.node  # protobuf's own list: indexing it copies nothing

    @property
    def outputs(self) -> List[str]:
        return [o.name for o in self.model.graph.output]

    def shape(self, name: str) -> Optional[Dims]:
        if name in self.consts:
            return tuple(self.consts[name].shape)
        return self.shapes.get(name)

    def dynamic_inputs(self) -> Dict[str, Optional[Dims]]:
        """Inputs whose file declaration is not static: a DLA finding even when --shape pinned them."""
        return {n: d for n, d in self.declared_inputs.items() if not is_static(d)}


def pin_inputs(model: Any, shapes: Dict[str, Tuple[int, ...]]) -> Any:
    """A copy of ``model`` whose inputs carry the given static shapes; stale value_info is dropped."""
    onnx = require("onnx")
    pinned = onnx.ModelProto()
    pinned.CopyFrom(model)
    by_name = {i.name: i for i in model_inputs(pinned)}
    for name, dims in shapes.items():
        declared = declared_dims(by_name[name]) or ()
        if declared and len(declared) != len(dims):
            raise EdgeError(f"--shape {name}: the model declares {len(declared)} dimensions {_fmt(declared)}, got {len(dims)}")
        if name in fixed_elsewhere(model, {name: dims}):
            raise EdgeError(
                f"--shape {name}={_fmt(dims)}: the model fixes this input to {_fmt(declared)}; with --fix OUT.onnx, "
                "edge dla writes a copy at this size (for fully convolutional models: the copy is checked in ONNX Runtime)"
            )
        shape = by_name[name].type.tensor_type.shape
        shape.ClearField("dim")
        for want in dims:
            shape.dim.add().dim_value = want
    del pinned.graph.value_info[:]
    return pinned


def fixed_elsewhere(model: Any, shapes: Dict[str, Tuple[int, ...]]) -> List[str]:
    """The inputs of ``shapes`` whose file declares static dimensions other than the ones asked for."""
    declared = {i.name: declared_dims(i) or () for i in model_inputs(model)}
    return [
        name
        for name, dims in shapes.items()
        if any(isinstance(d, int) and d > 0 and d != want for d, want in zip(declared.get(name, ()), dims))
    ]


def release_inputs(model: Any, names: List[str]) -> Any:
    """A copy of ``model`` whose named inputs and every output have symbolic dimensions, as a model exported at one
    size and run at another needs (CenterFace's file is fixed at 10x3x32x32); shape inference re-derives the rest,
    and a graph that really depends on the old size fails the run that checks the rewrite."""
    onnx = require("onnx")
    if _external_bytes(model):
        raise EdgeError(f"--shape {names[0]}: the model keeps its weights in external files; re-export it at this size")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for value in [i for i in model_inputs(out) if i.name in names] + list(out.graph.output):
        for k, d in enumerate(value.type.tensor_type.shape.dim):
            d.Clear()
            d.dim_param = f"{value.name}_{k}"
    del out.graph.value_info[:]
    return out


def _fmt(dims: Dims) -> str:
    return "x".join(str(d) for d in dims)


def prepare(
    source: Union[str, Path, Any], shapes: Optional[Dict[str, Tuple[int, ...]]] = None, cap_bytes: int = CAP_BYTES
) -> Graph:
    """Load, pin ``shapes``, infer every tensor shape and fold what TensorRT computes at build time.

    Folding never materialises a tensor larger than ``cap_bytes``; such nodes keep their shapes and are listed in
    ``Graph.notes``. Operators no shape inference knows are counted in ``Graph.unknown_ops``.
    """
    require("onnx", "reading ONNX models")
    model = load_model(source)
    declared = {i.name: declared_dims(i) for i in model_inputs(model)}  # None: no shape at all, not a scalar
    model = pin_inputs(model, shapes or {})
    g = model.graph
    values: Dict[str, np.ndarray] = {}
    dtypes: Dict[str, int] = {}
    for init in g.initializer:
        values[init.name] = _initializer(init)
        dtypes[init.name] = init.data_type
    for vi in model_inputs(model):
        dtypes[vi.name] = vi.type.tensor_type.elem_type
    found = fold(model, values, dtypes, cap_bytes)
    graph = Graph(
        model,
        found.shapes,
        found.dtypes,
        found.values,
        {i.name: declared_dims(i) for i in model_inputs(model)},
        declared,
        folded=found.folded,
        notes=found.notes,
        unknown_ops=found.unknown_ops,
    )
    for idx, node in enumerate(g.node):
        for out in node.output:
            graph.producer[out] = idx
        for name in node.input:
            if name:
                graph.consumers.setdefault(name, []).append(idx)
    return graph


def _initializer(init: Any) -> np.ndarray:
    try:
        return require("onnx").numpy_helper.to_array(init)
    except Exception as exc:  # data that does not match its declared type or dims
        raise EdgeError(f"initializer '{short(init.name)}' is malformed ({type(exc).__name__}); re-export the model") from None
