"""Shape folding (edge.graph.fold) against ONNX Runtime: every tensor's folded shape and value must be what ONNX
Runtime computes when it runs the model at the same input shape."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from edge.graph.model import prepare  # noqa: E402


def i64(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def model(nodes, inits, x_dims, opset=17):
    outs = [o for n in nodes for o in n.output]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_dims)],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    try:
        done = onnx.shape_inference.infer_shapes(m).graph
    except onnx.shape_inference.InferenceError:  # a custom op: nothing to run in ONNX Runtime anyway
        return m
    inferred = {vi.name: vi.type.tensor_type.elem_type for vi in list(done.value_info) + list(done.output)}
    for out in m.graph.output:  # ONNX Runtime wants each output's element type
        out.type.tensor_type.elem_type = inferred.get(out.name) or TensorProto.FLOAT
    return m


def ort_tensors(m, x):
    """Every tensor of the model as ONNX Runtime computes it."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, {"x": x})))


def torch_flatten():
    """x.view(x.shape[0], -1) as torch exports it with a dynamic batch."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]),
        helper.make_node("Concat", ["b1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Relu", ["flat"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"), i64("axes", [0]), i64("minus1", [-1])]
    return model(nodes, inits, ["n", 8, 4, 4])


def group_norm_shapes():
    """GroupNorm: Reshape [0, G, -1], then back to Shape(x); and a Slice/Mul/Div/Min/Max chain on the shape."""
    nodes = [
        helper.make_node("Reshape", ["x", "grouped"], ["g"]),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Reshape", ["g", "s"], ["back"]),
        helper.make_node("Slice", ["s", "two", "four"], ["hw"]),
        helper.make_node("Mul", ["hw", "two_b"], ["hw2"]),
        helper.make_node("Div", ["hw2", "four_b"], ["half"]),
        helper.make_node("Max", ["half", "one"], ["half1"]),
        helper.make_node("Min", ["half1", "big"], ["sizes_hw"]),
        helper.make_node("Concat", ["s12", "sizes_hw"], ["sizes"], axis=0),
        helper.make_node("Slice", ["s", "zero1", "two"], ["s12"]),
        helper.make_node("Resize", ["back", "", "", "sizes"], ["small"], mode="nearest"),
    ]
    nodes = nodes[:8] + [nodes[9], nodes[8], nodes[10]]
    inits = [
        i64("grouped", [0, 2, -1]),
        i64("two", [2]),
        i64("four", [4]),
        i64("two_b", [2]),
        i64("four_b", [4]),
        i64("one", [1]),
        i64("big", [100]),
        i64("zero1", [0]),
    ]
    return model(nodes, inits, ["n", 8, 6, 10])


def fill_ops():
    """Range, ConstantOfShape, Expand, Tile, Where, Cast, Size and Equal on shape values."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "last"], ["w"], axis=0),
        helper.make_node("Range", ["zero", "w", "one"], ["r"]),
        helper.make_node("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
        helper.make_node("ConstantOfShape", ["s"], ["ones"], value=numpy_helper.from_array(np.array([1.0], np.float32))),
        helper.make_node("Add", ["x", "ones"], ["x1"]),
        helper.make_node("Expand", ["rf", "s"], ["e"]),
        helper.make_node("Mul", ["x1", "e"], ["y"]),
        helper.make_node("Tile", ["rf", "reps"], ["t"]),
        helper.make_node("Size", ["x"], ["n"]),
        helper.make_node("Equal", ["w", "n"], ["same"]),
        helper.make_node("Where", ["same", "n", "w"], ["pick"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(3, dtype=np.int64), "last"),
        numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array(1, dtype=np.int64), "one"),
        i64("reps", [3]),
    ]
    return model(nodes, inits, ["n", 2, 3, 5])


@pytest.mark.parametrize(
    "build, dims",
    [(torch_flatten, (32, 8, 4, 4)), (group_norm_shapes, (2, 8, 6, 10)), (fill_ops, (4, 2, 3, 5))],
    ids=["torch-flatten", "group-norm-and-shape-arithmetic", "range-fill-expand-tile-where"],
)
def test_folded_shapes_and_values_match_onnx_runtime(build, dims):
    m = build()
    x = np.random.default_rng(0).standard_normal(dims).astype(np.float32)
    want = ort_tensors(m, x)
    graph = prepare(m, {"x": dims})
    for name, value in want.items():
        assert graph.shape(name) == value.shape, name
        if name in graph.consts:
            np.testing.assert_array_equal(graph.consts[name], value, err_msg=name)
    shape_nodes = [
        i for i, n in enumerate(m.graph.node) if n.output[0] not in ("y", "flat", "g", "back", "small", "x1", "e", "t")
    ]
    assert set(shape_nodes) <= set(graph.folded)  # everything computed on shapes is a build-time constant


def test_an_unknown_custom_op_is_listed_and_shapes_after_it_are_unknown():
    nodes = [helper.make_node("Mystery", ["x"], ["m"], domain="com.example"), helper.make_node("Relu", ["m"], ["y"])]
    m = model(nodes, [], [1, 3, 8, 8])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    graph = prepare(m)
    assert graph.unknown_ops == {"Mystery": 1}
    assert graph.shape("y") in (None, ())
