"""Partitioning into DLA subgraphs on hand-built graphs: islands, convexity, transitions and the 16-per-core cap."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from edge.dla.predict import predict  # noqa: E402


def model(nodes, inits=()):
    graph = helper.make_graph(
        nodes,
        "p",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones((4, 4, 1, 1), np.float32), name) for name in inits],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def node(op, inputs, out, name=None):
    return helper.make_node(op, inputs, [out], name=name or out)


def test_all_dla_chain_is_one_subgraph_without_transitions():
    r = predict(model([node("Conv", ["x", "w"], "a"), node("Relu", ["a"], "y")], ["w"]))
    assert (len(r.subgraphs), r.transitions, r.gpu_islands) == (1, 0, 0)
    assert r.dla_flops_share == 1.0


def test_gpu_island_in_the_middle_makes_two_subgraphs():
    nodes = [node("Conv", ["x", "w"], "a"), node("Exp", ["a"], "b"), node("Conv", ["b", "w"], "c"), node("Relu", ["c"], "y")]
    r = predict(model(nodes, ["w"]))
    assert [(n.name, n.device, n.subgraph) for n in r.nodes] == [
        ("a", "DLA", 1),
        ("b", "GPU", None),
        ("c", "DLA", 2),
        ("y", "DLA", 2),
    ]
    assert (len(r.subgraphs), r.transitions, r.gpu_islands) == (2, 2, 1)


def test_a_path_out_through_gpu_and_back_splits_even_connected_layers():
    # a -> Exp (GPU) -> Add(a, exp): a and the Add are connected, but one loadable cannot wait on the GPU midway.
    nodes = [node("Conv", ["x", "w"], "a"), node("Exp", ["a"], "b"), node("Add", ["a", "b"], "y")]
    r = predict(model(nodes, ["w"]))
    assert [n.subgraph for n in r.nodes] == [1, None, 2]
    assert r.gpu_islands == 1


def test_a_gpu_branch_from_the_input_does_not_split_the_dla_region():
    nodes = [node("Exp", ["x"], "g"), node("Conv", ["x", "w"], "a"), node("Relu", ["a"], "b"), node("Add", ["b", "g"], "y")]
    r = predict(model(nodes, ["w"]))
    assert [n.subgraph for n in r.nodes] == [None, 1, 1, 1]
    assert (len(r.subgraphs), r.transitions, r.gpu_islands) == (1, 1, 0)


@pytest.mark.parametrize("islands, expected", [(15, 16), (16, 16)])
def test_subgraphs_past_16_per_core_go_to_gpu(islands, expected):
    nodes, x = [], "x"
    for i in range(islands + 1):
        nodes.append(node("Relu", [x], f"r{i}"))
        x = f"r{i}"
        if i < islands:
            nodes.append(node("Exp", [x], f"e{i}"))
            x = f"e{i}"
    nodes[-1].output[0] = "y"
    r = predict(model(nodes))
    assert r.candidate_subgraphs == islands + 1
    assert len(r.subgraphs) == expected
    capped = [n for n in r.nodes if n.rule == "sub.cap"]
    assert len(capped) == islands + 1 - expected
    assert any("per DLA core" in f for f in r.findings) == (islands + 1 > 16)
