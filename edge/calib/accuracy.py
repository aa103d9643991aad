"""The INT8 accuracy report: FP32 against the Q/DQ model in ONNX Runtime, on a labelled set and layer by layer.

Top-1 of both on the whole set says what INT8 costs; the cosine similarity of every layer's output (FP32 against
INT8-simulated, over the first images) says where it is lost. A layer's own loss is how much lower its similarity is
than the lowest of its inputs': quantization error adds up along the network, so the raw similarity of the last
layers is always low, while the drop points at the layers worth keeping in FP16.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Set

import numpy as np

from edge.calib.datasets import ImageSet
from edge.calib.qdq import layer_name
from edge.calib.stats import TensorTap, per_image_bytes, plan
from edge.errors import EdgeError
from edge.graph.model import Graph


@dataclass
class LayerError:
    layer: str  # TensorRT's layer name
    op: str
    tensor: str
    cosine: float  # FP32 vs INT8 output, over the compared images
    drop: float  # how much of that this layer lost itself (lowest input similarity - output similarity)


@dataclass
class Accuracy:
    images: int
    fp32_top1: float
    int8_top1: float
    layers: List[LayerError]  # worst first

    @property
    def drop(self) -> float:
        return self.fp32_top1 - self.int8_top1


def _session(model: Any, threads: int, optimize: bool) -> Any:
    return TensorTap(model, [[o.name for o in model.graph.output]], threads, optimize).sessions[0][0]


def top1(model: Any, images: ImageSet, threads: int = 0, optimize: bool = True, batch: int = 32) -> float:
    """Share of ``images`` whose predicted class matches its label."""
    if images.labels is None or images.predict is None:
        raise EdgeError(f"--eval {images.name}: this image set has no labels; use a labelled dataset such as mnist_5k[:1000]")
    sess = _session(model, threads, optimize)
    name = sess.get_inputs()[0].name
    hits = done = 0
    for inputs in images.batches(batch):
        predicted = images.predict(sess.run(None, {name: inputs})[0])
        hits += int((predicted == images.labels[done : done + len(inputs)]).sum())
        done += len(inputs)
    return hits / max(done, 1)


def layer_similarity(
    fp32: Any, qdq: Any, images: ImageSet, graph: Graph, tensors: List[str], threads: int = 0, budget_bytes: int = 128 << 20
) -> Dict[str, float]:
    """Cosine similarity of each tensor, FP32 against INT8-simulated, over all of ``images``."""
    batch, groups = plan(per_image_bytes(graph, tensors), budget_bytes // 2, 16)
    taps = TensorTap(fp32, groups, threads), TensorTap(qdq, groups, threads, optimize=False)
    sums = {t: np.zeros(3) for t in tensors}  # dot, |a|^2, |b|^2
    for inputs in images.batches(batch):
        for a_out, b_out in zip(taps[0].run(inputs), taps[1].run(inputs)):
            for name, a in a_out.items():
                a = a.astype(np.float64, copy=False).ravel()
                b = b_out[name].astype(np.float64, copy=False).ravel()
                sums[name] += (a @ b, a @ a, b @ b)
    return {t: float(s[0] / np.sqrt(s[1] * s[2])) if s[1] > 0 and s[2] > 0 else float(s[1] == s[2]) for t, s in sums.items()}


def worst_layers(graph: Graph, cosine: Dict[str, float], quantized: Set[int], count: int = 10) -> List[LayerError]:
    """The ``count`` quantized layers (those --keep-fp16 can change) that lose the most similarity themselves."""
    rows = []
    for idx, node in enumerate(graph.model.graph.node):
        out = node.output[0] if node.output else ""
        if idx not in quantized or out not in cosine:
            continue
        before = [cosine[i] for i in node.input if i in cosine]
        rows.append(LayerError(layer_name(node), node.op_type, out, cosine[out], (min(before) if before else 1.0) - cosine[out]))
    rows.sort(key=lambda r: r.drop, reverse=True)
    return rows[:count]


def evaluate(
    fp32: Any,
    qdq: Any,
    quantized: Set[int],
    graph: Graph,
    images: ImageSet,
    tensors: List[str],
    layer_images: int = 32,
    threads: int = 0,
) -> Accuracy:
    """Top-1 of FP32 and INT8-simulated on ``images``; layer errors on its first ``layer_images``."""
    fp32_top1 = top1(fp32, images, threads)
    int8_top1 = top1(qdq, images, threads, optimize=False)
    cosine = layer_similarity(fp32, qdq, images.head(layer_images), graph, tensors, threads)
    return Accuracy(images.count, fp32_top1, int8_top1, worst_layers(graph, cosine, quantized))


def render(acc: Accuracy) -> List[str]:
    width = max([len(r.layer) for r in acc.layers] + [5])
    lines = [
        f"top-1 on {acc.images} images: FP32 {acc.fp32_top1:.2%}, INT8 (Q/DQ in ONNX Runtime) {acc.int8_top1:.2%}, "
        f"drop {acc.drop * 100:.2f} points",
        "quantized layers losing the most (cosine of the output, FP32 vs INT8; 'lost': below its inputs'); "
        "--keep-fp16 LAYER leaves one in FP16:",
        f"  {'layer':{width}}  {'op':18} {'cosine':>8} {'lost':>8}",
    ]
    lines += [f"  {r.layer:{width}}  {r.op:18} {r.cosine:8.4f} {r.drop:8.4f}" for r in acc.layers]
    return lines
