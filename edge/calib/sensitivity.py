"""Per-layer sensitivity: the error each quantized layer causes when it alone is quantized.

One ONNX Runtime pass over the first images gives every layer's number at once: each quantized node gets a twin that
reads the same FP32 inputs through Q/DQ (``qdq.alone_model``), and the report compares the two outputs. A layer's
SQNR there is its own error, not the sum of the errors upstream of it; noise-to-signal ratios of layers add up
roughly along a network, so the lowest SQNRs are the layers worth keeping in FP16 first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Set

import numpy as np

from edge.calib import qdq
from edge.calib.datasets import ImageSet
from edge.calib.stats import TensorTap, fixed_batch, per_image_bytes, plan, session_bytes
from edge.graph.model import Graph


@dataclass
class LayerError:
    index: int  # node index in the graph
    layer: str  # TensorRT's layer name
    op: str
    tensor: str
    sqnr_db: float  # the layer's output with it alone in INT8, against FP32

    def to_dict(self) -> Dict[str, Any]:
        return {"layer": self.layer, "op": self.op, "output": self.tensor, "sqnr_db": self.sqnr_db}


def layer_sensitivity(
    fp32: Any,
    graph: Graph,
    amax: Dict[str, float],
    nodes: Set[int],
    images: ImageSet,
    threads: int = 0,
    budget_bytes: int = 128 << 20,
) -> List[LayerError]:
    """Every node of ``nodes`` with its alone-quantized SQNR over ``images``, worst first."""
    model, pairs = qdq.alone_model(fp32, graph, amax, nodes)
    if not pairs:
        return []
    per_image = per_image_bytes(graph, [pairs[i][0] for i in pairs])
    # each layer's output and its twin's
    batch, groups = plan({i: 2 * per_image[pairs[i][0]] for i in pairs}, budget_bytes, 16, session_bytes(model))
    batch = fixed_batch(graph) or batch
    tap = TensorTap(model, [[t for i in g for t in pairs[i]] for g in groups], threads, simulated_int8=True)
    sums = {i: np.zeros(2) for i in pairs}  # signal, noise
    for inputs in images.batches(batch):
        if len(inputs) != batch and fixed_batch(graph):
            break
        for outputs in tap.run(inputs):
            for i, (ref, twin) in pairs.items():
                if ref in outputs:
                    a = outputs[ref].astype(np.float64, copy=False)
                    sums[i] += (np.square(a).sum(), np.square(a - outputs[twin]).sum())
    rows = []
    nodes_list = graph.model.graph.node
    for i, (signal, noise) in sums.items():
        node = nodes_list[i]
        sqnr = math.inf if noise == 0 else (-math.inf if signal == 0 else 10 * math.log10(signal / noise))
        rows.append(LayerError(i, qdq.layer_name(node), node.op_type, pairs[i][0], sqnr))
    rows.sort(key=lambda r: r.sqnr_db)
    return rows


def render(rows: List[LayerError], images: int, kept: Set[int], count: int = 10) -> List[str]:
    width = max([len(r.layer) for r in rows[:count]] + [5])
    lines = [
        f"layers by their own INT8 error (SQNR of the output with that layer alone quantized, {images} images; "
        "--keep-fp16 LAYER keeps one in FP16):",
        f"  {'layer':{width}}  {'op':14} {'SQNR dB':>8}",
    ]
    for r in rows[:count]:
        lines.append(f"  {r.layer:{width}}  {r.op:14} {r.sqnr_db:8.1f}{'  (FP16)' if r.index in kept else ''}")
    return lines
