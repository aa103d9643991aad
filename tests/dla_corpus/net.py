"""A small ONNX graph writer for rebuilding published models: named nodes, random weights, exporter-style names.

Weights are random (placement depends on structure and shapes, not on values); every tensor keeps the shape the
published model has, so the predictor sees what TensorRT saw.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np
from onnx import TensorProto, helper, numpy_helper, shape_inference


class Net:
    def __init__(self, name: str, opset: int, seed: int = 0) -> None:
        self.name, self.opset = name, opset
        self.nodes: List = []
        self.inits: List = []
        self.inputs: List = []
        self.outputs: List = []
        self.rng = np.random.default_rng(seed)
        self.channels: Dict[str, int] = {}  # tensor -> channels, for builders that track C

    # -- graph pieces ---------------------------------------------------------------------------------------

    def input(self, name: str, dims: Sequence, channels: Optional[int] = None) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(dims)))
        if channels:
            self.channels[name] = channels
        return name

    def output(self, *names: str) -> None:
        self.outputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names]

    def const(self, name: str, value) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, name: str, *shape: int) -> str:
        return self.const(name, (self.rng.standard_normal(shape) * 0.05).astype(np.float32))

    def node(self, op: str, inputs: Sequence[str], name: str, out: Optional[str] = None, n_out: int = 1, **attrs) -> str:
        outs = [out or f"{name}_output_0"] + [f"{name}_output_{i}" for i in range(1, n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=name, **attrs))
        return outs[0]

    # -- layers ---------------------------------------------------------------------------------------------

    def conv(self, x: str, cout: int, k: int, name: str, s: int = 1, p=None, group: int = 1, bias: bool = True, cin=None) -> str:
        cin = cin or self.channels[x]
        w = self.weight(f"{name}.weight", cout, cin // group, k, k)
        ins = [x, w] + ([self.weight(f"{name}.bias", cout)] if bias else [])
        pads = [p] * 4 if isinstance(p, int) else list(p or [k // 2] * 4)
        y = self.node("Conv", ins, name, kernel_shape=[k, k], strides=[s, s], pads=pads, group=group)
        self.channels[y] = cout
        return y

    def act(self, op: str, x: str, name: str, **attrs) -> str:
        y = self.node(op, [x], name, **attrs)
        self.channels[y] = self.channels.get(x, 0)
        return y

    def clip(self, x: str, name: str, low: float, high: float) -> str:
        if self.opset >= 11:
            y = self.node(
                "Clip", [x, self.const(f"{name}_min", np.float32(low)), self.const(f"{name}_max", np.float32(high))], name
            )
        else:
            y = self.node("Clip", [x], name, min=low, max=high)
        self.channels[y] = self.channels[x]
        return y

    def add(self, a: str, b: str, name: str) -> str:
        y = self.node("Add", [a, b], name)
        self.channels[y] = self.channels[a]
        return y

    def maxpool(self, x: str, k: int, s: int, name: str, pads=(0, 0, 0, 0)) -> str:
        y = self.node("MaxPool", [x], name, kernel_shape=[k, k], strides=[s, s], pads=list(pads))
        self.channels[y] = self.channels[x]
        return y

    def pad(self, x: str, name: str, pads: Sequence[int]) -> str:
        """A zero Pad of H and W (begin h, begin w, end h, end w) as tf2onnx and torch export it."""
        full = [0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]]
        if self.opset >= 11:
            y = self.node("Pad", [x, self.const(f"{name}_pads", np.array(full, dtype=np.int64))], name, mode="constant")
        else:
            y = self.node("Pad", [x], name, mode="constant", pads=full)
        self.channels[y] = self.channels[x]
        return y

    def resize_nearest(self, x: str, name: str, scale: int) -> str:
        roi = self.const(f"{name}_roi", np.array([], dtype=np.float32))
        scales = self.const(f"{name}_scales", np.array([1, 1, scale, scale], dtype=np.float32))
        y = self.node(
            "Resize",
            [x, roi, scales],
            name,
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        )
        self.channels[y] = self.channels[x]
        return y

    def model(self):
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)], producer_name="edge-corpus")
        model.ir_version = min(model.ir_version, 8)
        done = shape_inference.infer_shapes(model).graph
        inferred = {vi.name: vi for vi in list(done.value_info) + list(done.output)}
        for out in model.graph.output:  # declare the outputs' shapes as an exporter does
            vi = inferred.get(out.name)
            if vi is not None and vi.type.tensor_type.HasField("shape"):
                out.CopyFrom(vi)
            else:
                out.type.tensor_type.shape.dim.add().dim_param = "batch_size"
                out.type.tensor_type.shape.dim.add().dim_value = 10
        return model


def same_pads(size: int, k: int, s: int) -> List[int]:
    """TensorFlow 'SAME' padding for one dimension: (begin, end)."""
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return [total // 2, total - total // 2]
