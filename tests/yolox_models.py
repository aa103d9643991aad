"""Head layouts that the pinned YOLOX detector (asset ``yolox-ddddocr``, ddddocr 1.6.1's ``common_det.onnx``, MIT)
does not have, made from its real weights by appending plain ONNX ops after its raw head.

The raw head is ``[1, N, 5 + C]``: x, y offsets in grid cells, log w, log h, objectness and class probabilities, on
the cells of strides 8, 16 and 32 (row-major per stride). Every variant first applies YOLOX's own decode to it
(``(xy + cell) * stride``, ``exp(wh) * stride``), in the graph, so each one carries the same boxes in input pixels:

- ``v5``: ``[1, N, 5 + C]`` cx, cy, w, h, objectness, class probabilities (YOLOX exported with its decoder, which is
  YOLOv5's layout);
- ``v8``: ``[1, 4 + C, N]`` cx, cy, w, h, then objectness x class (Ultralytics' layout, no objectness);
- ``v8t``: the same transposed, ``[1, N, 4 + C]``;
- ``deepstream``: DeepStream-Yolo's pre-NMS rows ``[1, N, 6]`` x1, y1, x2, y2, best score, its class as a float;
- ``end2end``: ``[1, K, 6]`` x1, y1, x2, y2, score, class after ONNX ``NonMaxSuppression`` (class-wise), best first,
  padded with zero rows to a fixed K so that the output shape is static;
- ``end2end_dynamic``: the same without the padding, ``[1, K, 6]`` with K the number kept (0 on an empty frame),
  as plain ONNX exports with NonMaxSuppression inside come out;
- ``efficientnms``: the four outputs of TensorRT's EfficientNMS_TRT plugin as YOLOv7's ``--end2end`` names them
  (num_dets int32 ``[1, 1]``, det_boxes ``[1, K, 4]``, det_scores ``[1, K]``, det_classes int32 ``[1, K]``), made
  with ONNX ``NonMaxSuppression``, gathers and zero padding. It stands in for the plugin: the plugin itself runs
  only inside a TensorRT engine, and no TensorRT engine can run on these CPU-only test machines.

The graphs keep the source model's opset (11), so the ops appended use opset 11's forms (Squeeze and Unsqueeze
with an ``axes`` attribute; no integer Min).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

VARIANTS = ("v5", "v8", "v8t", "deepstream", "end2end", "efficientnms", "end2end_dynamic")
STRIDES = (8, 16, 32)
RAW = "yolox_raw"  # the source model's head output, renamed so that variants may reuse its name


def yolox_grid(width: int, height: int, strides=STRIDES) -> Tuple[np.ndarray, np.ndarray]:
    """Cell origins ``[1, N, 2]`` (x, y) and strides ``[1, N, 1]`` in YOLOX's order: stride by stride, row-major."""
    cells, steps = [], []
    for s in strides:
        xs, ys = np.meshgrid(np.arange(width // s), np.arange(height // s))
        cells.append(np.stack([xs, ys], axis=2).reshape(-1, 2))
        steps.append(np.full((xs.size, 1), s))
    return np.concatenate(cells)[None].astype(np.float32), np.concatenate(steps)[None].astype(np.float32)


class _Graph:
    """Appends nodes and constants to a copy of the source model, with names under one prefix."""

    def __init__(self, source) -> None:
        import onnx

        self.model = onnx.ModelProto()
        self.model.CopyFrom(source)
        g = self.model.graph
        (out,) = g.output
        for node in g.node:  # the node that makes the head output now makes RAW
            node.output[:] = [RAW if o == out.name else o for o in node.output]
        g.ClearField("output")
        dims = [d.dim_value for d in source.graph.input[0].type.tensor_type.shape.dim]
        self.height, self.width = dims[2], dims[3]
        self.n, self.attrs = [d.dim_value for d in out.type.tensor_type.shape.dim][1:]
        self.classes = self.attrs - 5
        self._count = 0

    def const(self, value, dtype=np.int64) -> str:
        from onnx import numpy_helper

        self._count += 1
        name = f"yx_c{self._count}"
        self.model.graph.initializer.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(self, op_type: str, inputs: List[str], n_out: int = 1, **attrs):
        from onnx import helper

        self._count += 1
        outs = [f"yx_{op_type.lower()}{self._count}_{i}" for i in range(n_out)]
        self.model.graph.node.append(helper.make_node(op_type, inputs, outs, name=f"yx_{op_type}_{self._count}", **attrs))
        return outs[0] if n_out == 1 else outs

    def channels(self, tensor: str, start: int, stop: int) -> str:
        """``tensor[:, :, start:stop]``."""
        return self.op("Slice", [tensor, self.const([start]), self.const([stop]), self.const([2])])

    def output(self, tensor: str, name: str, elem, shape: List[int]) -> None:
        """Expose ``tensor`` as graph output ``name`` (an Identity gives it that name)."""
        from onnx import helper

        self.model.graph.node.append(helper.make_node("Identity", [tensor], [name], name=f"yx_out_{name}"))
        self.model.graph.output.append(helper.make_tensor_value_info(name, elem, shape))

    # -- the shared front: YOLOX's decode ------------------------------------------------------------------------

    def decoded(self) -> Tuple[str, str, str, str]:
        """(cxcy [1,N,2], wh [1,N,2], objectness [1,N,1], class probabilities [1,N,C]), boxes in input pixels."""
        cells, steps = yolox_grid(self.width, self.height)
        assert cells.shape[1] == self.n, f"{self.n} candidates is not one per cell of strides {STRIDES}"
        cell, step = self.const(cells, np.float32), self.const(steps, np.float32)
        cxcy = self.op("Mul", [self.op("Add", [self.channels(RAW, 0, 2), cell]), step])
        wh = self.op("Mul", [self.op("Exp", [self.channels(RAW, 2, 4)]), step])
        return cxcy, wh, self.channels(RAW, 4, 5), self.channels(RAW, 5, 5 + self.classes)

    def corners(self, cxcy: str, wh: str) -> str:
        """x1, y1, x2, y2 ``[1, N, 4]``."""
        half = self.op("Mul", [wh, self.const(0.5, np.float32)])
        return self.op("Concat", [self.op("Sub", [cxcy, half]), self.op("Add", [cxcy, half])], axis=2)

    def nms(self, k: int, iou: float, score: float) -> Tuple[str, str, str, str]:
        """ONNX NonMaxSuppression per class, then all kept boxes best first: (boxes [M,4], scores [M], classes
        int64 [M], M as int64 [1]), M <= K * C."""
        cxcy, wh, obj, cls = self.decoded()
        boxes = self.corners(cxcy, wh)
        scores = self.op("Transpose", [self.op("Mul", [obj, cls])], perm=[0, 2, 1])  # [1, C, N]
        sel = self.op(  # [M, 3]: batch, class, box
            "NonMaxSuppression",
            [boxes, scores, self.const([k]), self.const([iou], np.float32), self.const([score], np.float32)],
        )
        kept_scores = self.op("GatherND", [scores, sel])  # [M]
        m = self.op("Shape", [kept_scores])
        # NonMaxSuppression lists class by class; TopK over all of them gives one list, best first.
        _, order = self.op("TopK", [kept_scores, m], n_out=2, axis=0, largest=1, sorted=1)
        sel = self.op("Gather", [sel, order], axis=0)
        box_idx = self.op("Squeeze", [self.op("Slice", [sel, self.const([2]), self.const([3]), self.const([1])])], axes=[1])
        cls_idx = self.op("Squeeze", [self.op("Slice", [sel, self.const([1]), self.const([2]), self.const([1])])], axes=[1])
        kept_boxes = self.op("Gather", [self.op("Squeeze", [boxes], axes=[0]), box_idx], axis=0)
        return kept_boxes, self.op("Gather", [kept_scores, order], axis=0), cls_idx, m

    def padded(self, rows: str, k: int, width: int, dtype) -> str:
        """``rows`` [M, width] (or [M] with width 0) followed by zeros, cut to exactly K rows."""
        zeros = self.const(np.zeros((k, width) if width else (k,)), dtype)
        both = self.op("Concat", [rows, zeros], axis=0)
        return self.op("Slice", [both, self.const([0]), self.const([k]), self.const([0])])


def build_variant(source, kind: str, path: Path, k: int = 100, iou: float = 0.45, score: float = 0.1) -> Path:
    """Write variant ``kind`` (one of VARIANTS) of the loaded YOLOX model ``source`` to ``path``. ``k``, ``iou`` and
    ``score`` are the in-graph NMS settings of ``end2end`` and ``efficientnms`` (YOLOX demo's 0.45 and 0.1)."""
    import onnx
    from onnx import TensorProto

    g = _Graph(source)
    n, c = g.n, g.classes
    if kind in ("v5", "v8", "v8t", "deepstream"):
        cxcy, wh, obj, cls = g.decoded()
        if kind == "v5":
            g.output(g.op("Concat", [cxcy, wh, obj, cls], axis=2), "output", TensorProto.FLOAT, [1, n, 5 + c])
        elif kind in ("v8", "v8t"):
            rows = g.op("Concat", [cxcy, wh, g.op("Mul", [obj, cls])], axis=2)  # [1, N, 4 + C]
            if kind == "v8":
                g.output(g.op("Transpose", [rows], perm=[0, 2, 1]), "output0", TensorProto.FLOAT, [1, 4 + c, n])
            else:
                g.output(rows, "output0", TensorProto.FLOAT, [1, n, 4 + c])
        else:
            scores = g.op("Mul", [obj, cls])
            best = g.op("ReduceMax", [scores], axes=[2], keepdims=1)
            label = g.op("Cast", [g.op("ArgMax", [scores], axis=2, keepdims=1)], to=TensorProto.FLOAT)
            rows = g.op("Concat", [g.corners(cxcy, wh), best, label], axis=2)
            g.output(rows, "output", TensorProto.FLOAT, [1, n, 6])
    elif kind in ("end2end", "end2end_dynamic"):
        boxes, scores, classes, _ = g.nms(k, iou, score)
        rows = g.op(
            "Concat",
            [
                boxes,
                g.op("Unsqueeze", [scores], axes=[1]),
                g.op("Unsqueeze", [g.op("Cast", [classes], to=TensorProto.FLOAT)], axes=[1]),
            ],
            axis=1,
        )
        if kind == "end2end":
            rows = g.padded(rows, k, 6, np.float32)
        g.output(g.op("Unsqueeze", [rows], axes=[0]), "output0", TensorProto.FLOAT, [1, k if kind == "end2end" else "K", 6])
    elif kind == "efficientnms":
        boxes, scores, classes, m = g.nms(k, iou, score)
        # num_dets = min(M, K); opset 11's Min takes floats only
        count = g.op("Min", [g.op("Cast", [m], to=TensorProto.FLOAT), g.const([k], np.float32)])
        g.output(
            g.op("Unsqueeze", [g.op("Cast", [count], to=TensorProto.INT32)], axes=[0]), "num_dets", TensorProto.INT32, [1, 1]
        )
        g.output(g.op("Unsqueeze", [g.padded(boxes, k, 4, np.float32)], axes=[0]), "det_boxes", TensorProto.FLOAT, [1, k, 4])
        g.output(g.op("Unsqueeze", [g.padded(scores, k, 0, np.float32)], axes=[0]), "det_scores", TensorProto.FLOAT, [1, k])
        classes = g.op("Cast", [classes], to=TensorProto.INT32)
        g.output(g.op("Unsqueeze", [g.padded(classes, k, 0, np.int32)], axes=[0]), "det_classes", TensorProto.INT32, [1, k])
    else:
        raise ValueError(f"unknown variant {kind!r}; one of {', '.join(VARIANTS)}")
    onnx.checker.check_model(g.model)
    onnx.save(g.model, str(path))
    return path


def build_all(source_path: Path, folder: Path, kinds=VARIANTS) -> Dict[str, Path]:
    """Every variant of the model at ``source_path``, written into ``folder`` as ``yolox_<kind>.onnx``."""
    import onnx

    source = onnx.load(str(source_path))
    return {kind: build_variant(source, kind, folder / f"yolox_{kind}.onnx") for kind in kinds}
