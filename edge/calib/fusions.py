"""Where Q/DQ goes beyond the weighted layers, so that TensorRT's explicit quantization fuses instead of reformatting.

TensorRT's Q/DQ placement recommendations (developer guide) beyond quantizing every input of a weighted layer, and
where each rule here comes from:

- **Residual Add** ("quantize the residual input in skip connections"): TensorRT fuses an element-wise sum that
  follows a convolution into it, and the fused layer writes INT8 only when the sum's other input is INT8. So the
  skip input gets Q/DQ and the convolution's branch does not. This holds where the convolution's epilogue is one the
  sum fuses into: bias, scale, BatchNorm, ReLU (the epilogues NVIDIA Model Optimizer's residual rule follows).
- **Add after another activation**: after SiLU, LeakyReLU, HardSwish... TensorRT runs the activation and the sum as
  one pointwise kernel apart from the convolution (a published YOLOv5 profile: ``Conv_12`` then
  ``PWN(PWN(PWN(Sigmoid_13), Mul_14), Add_15)``). Every input that comes from a convolution gets Q/DQ, so each
  convolution writes INT8 and the sum reads INT8 (what Model Optimizer does for such an Add).
- **Pooling**: AveragePool between a DQ and a Q runs as an INT8 pooling layer; MaxPool commutes with Q/DQ. Their
  input gets Q/DQ, so the convolution before them can write INT8.
- **Concat**: the tensors of a concatenation share one scale, so TensorRT can drop the concatenation (each input
  writes into its slice) instead of requantizing each input (Model Optimizer's concat elimination).

Which of an Add's branches is the convolution's follows Model Optimizer's rule: when both branches come from a
convolution, the one with the longer path back to where the branches split is the convolution branch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from edge.graph.model import Graph

CONV = ("Conv", "ConvTranspose")
# A convolution's epilogue that a following sum fuses into (with arithmetic on a constant: a bias, a scale)
SUM_FUSES_AFTER = ("BatchNormalization", "Relu")
# Activations TensorRT runs with a convolution but not with a sum after them (with gated ones: x * f(x))
ACTIVATIONS = ("LeakyRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Selu", "Softplus", "Mish")
ARITHMETIC = ("Add", "Sub", "Mul", "Div")
WEIGHTED = ("Conv", "ConvTranspose", "Gemm", "MatMul")  # every input of these takes Q/DQ (qdq.QUANTIZED_INPUTS)
POOLING = ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")
_DEPTH = 8  # an epilogue is a few nodes long; a longer chain is not one TensorRT fuses


@dataclass
class Plan:
    """The activation inputs that take Q/DQ beyond the weighted layers', and the tensors that share a scale."""

    inputs: Dict[int, Tuple[int, ...]] = field(default_factory=dict)  # node index -> input slots
    shared: Dict[str, str] = field(default_factory=dict)  # tensor -> its group's first tensor (Concat inputs)

    def groups(self) -> Dict[str, List[str]]:
        out: Dict[str, List[str]] = {}
        for tensor, root in self.shared.items():
            out.setdefault(root, []).append(tensor)
        return out


def _runtime_input(graph: Graph, node_idx: int) -> Optional[str]:
    """The one input of a node that is not a constant, or None when there are several or none."""
    names = [n for n in graph.nodes[node_idx].input if n and n not in graph.consts]
    return names[0] if len(names) == 1 else None


def conv_source(graph: Graph, tensor: str, sum_fuses: bool = False) -> Optional[int]:
    """The convolution whose epilogue makes ``tensor``, or None. The epilogue is bias, scale, BatchNorm, ReLU and,
    unless ``sum_fuses`` (only epilogues a following sum fuses into), the other activations: LeakyReLU, clips,
    sigmoid and gated ones such as SiLU x * sigmoid(x) or HardSwish x * clip(x + 3, 0, 6) / 6 written out."""
    folded = set(graph.folded)
    for _ in range(_DEPTH):
        idx = graph.producer.get(tensor)
        if idx is None or idx in folded:
            return None
        if graph.nodes[idx].op_type in CONV:
            return idx
        nxt = _pointwise_input(graph, idx, sum_fuses) or (None if sum_fuses else _gate_input(graph, idx))
        if nxt is None:
            return None
        tensor = nxt
    return None


def _pointwise_input(graph: Graph, idx: int, sum_fuses: bool = False) -> Optional[str]:
    """The runtime input of an epilogue op of one runtime input (an activation, or arithmetic with a constant)."""
    op = graph.nodes[idx].op_type
    if op in SUM_FUSES_AFTER or op in ARITHMETIC or (not sum_fuses and op in ACTIVATIONS):
        return _runtime_input(graph, idx)
    return None


def _gate_input(graph: Graph, mul_idx: int) -> Optional[str]:
    """x for a Mul of x and a pointwise function of x (SiLU, HardSwish written out), else None."""
    node = graph.nodes[mul_idx]
    if node.op_type != "Mul" or len(node.input) != 2:
        return None
    for a, b in (node.input, node.input[::-1]):
        for _ in range(4):
            p = graph.producer.get(b)
            b = _pointwise_input(graph, p) if p is not None else None
            if b is None:
                break
            if b == a:
                return a
    return None


def _ancestors(graph: Graph, tensor: str) -> Dict[int, int]:
    """Every node upstream of ``tensor`` (a node's output) with its shortest distance (its producer is 0)."""
    out: Dict[int, int] = {}
    frontier = [graph.producer[tensor]]
    depth = 0
    while frontier:
        nxt = []
        for idx in frontier:
            if idx in out:
                continue
            out[idx] = depth
            nxt += [graph.producer[n] for n in graph.nodes[idx].input if n in graph.producer]
        frontier, depth = nxt, depth + 1
    return out


def _split(graph: Graph, a: str, b: str) -> Tuple[Optional[int], int, int]:
    """Where two tensors' histories meet: the common ancestor nearest to both, and each one's distance to it."""
    up_a, up_b = _ancestors(graph, a), _ancestors(graph, b)
    common = [(up_a[i] + up_b[i], i) for i in up_a.keys() & up_b.keys()]
    if not common:
        return None, 0, 0
    _, lca = min(common)
    return lca, up_a[lca], up_b[lca]


def add_slots(graph: Graph, add_idx: int) -> Tuple[int, ...]:
    """The input slots of an Add that take Q/DQ: a residual Add's skip input; else the inputs a convolution makes
    through another activation; none for an Add of a constant or a network input, with no convolution before it,
    or whose branches both come from one convolution."""
    node = graph.nodes[add_idx]
    names = list(node.input)
    if len(names) != 2 or any(n in graph.consts or n not in graph.producer for n in names):
        return ()
    fused = [conv_source(graph, n, sum_fuses=True) for n in names]
    if fused[0] is not None or fused[1] is not None:
        lca, d0, d1 = _split(graph, *names)
        if fused[0] is not None and fused[1] is not None:
            if fused[0] == fused[1]:
                return ()
            return (1,) if d0 > d1 else (0,)  # the longer way back is the convolution branch; the other is the skip
        slot = 0 if fused[0] is not None else 1
        # A convolution that is itself where the branches split (x = conv(.); x + f(x)) is not a skip connection.
        return () if lca == fused[slot] else (1 - slot,)
    convs = [conv_source(graph, n) for n in names]
    if convs[0] == convs[1]:  # no convolution on either side, or one convolution on both
        return ()
    # An input a weighted layer also reads has its pair anyway: the sum reads it in INT8 at no extra cost.
    return tuple(k for k in (0, 1) if convs[k] is not None or _weighted_reader(graph, names[k]))


def _weighted_reader(graph: Graph, tensor: str) -> bool:
    return any(graph.nodes[i].op_type in WEIGHTED for i in graph.consumers[tensor])


def plan(graph: Graph) -> Plan:
    """The placement for ``graph`` (a prepared model): residual Adds, pooling inputs, Concat scale groups."""
    folded = set(graph.folded)
    out = Plan()
    parent: Dict[str, str] = {}

    def root(t: str) -> str:
        while parent[t] != t:
            t = parent[t]
        return t

    for idx, node in enumerate(graph.nodes):
        if idx in folded:
            continue
        if node.op_type == "Add":
            slots = add_slots(graph, idx)
            if slots:
                out.inputs[idx] = slots
        elif node.op_type in POOLING and node.input and node.input[0] not in graph.consts:
            out.inputs[idx] = (0,)
        elif node.op_type == "Concat":
            members = [n for n in (*node.input, *node.output) if n and n not in graph.consts]
            for m in members:
                parent.setdefault(m, m)
            roots = sorted({root(m) for m in members})  # a group is named by its smallest tensor name
            for r in roots[1:]:
                parent[r] = roots[0]
    out.shared = {t: root(t) for t in sorted(parent)}
    return out
