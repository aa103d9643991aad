"""ONNX models whose outputs are given arrays, so that edge-run's whole path (ONNX Runtime, preprocessing, the decoder,
the sinks) runs on a head's raw outputs: recorded ones of a real model, or ones a test builds. The image input feeds
the outputs through 0 x its mean, so ONNX Runtime cannot fold the input away."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence

import numpy as np


def constant_model(
    path: Path,
    outputs: Mapping[str, np.ndarray],
    input_shape: Sequence[object] = (1, 3, 64, 64),
    metadata: Optional[Dict[str, str]] = None,
    input_name: str = "images",
) -> Path:
    import pytest

    onnx = pytest.importorskip("onnx", reason="these models are written with onnx (the host extra)")
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("ReduceMean", [input_name], ["mean"], keepdims=0),
        helper.make_node("Mul", ["mean", "zero"], ["nothing"]),
    ]
    inits = [numpy_helper.from_array(np.array(0.0, np.float32), "zero")]
    outs = []
    for k, (name, value) in enumerate(outputs.items()):
        value = np.asarray(value)
        inits.append(numpy_helper.from_array(value, f"value{k}"))
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
        nodes.append(helper.make_node("Cast", ["nothing"], [f"nothing{k}"], to=elem))
        nodes.append(helper.make_node("Add", [f"value{k}", f"nothing{k}"], [name]))
        outs.append(helper.make_tensor_value_info(name, elem, list(value.shape)))
    graph = helper.make_graph(
        nodes, "head", [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, list(input_shape))], outs, inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    for key, val in (metadata or {}).items():
        model.metadata_props.add(key=key, value=val)
    onnx.save(model, str(path))
    return path
