"""Partitioning into DLA subgraphs on hand-built graphs: islands, convexity, transitions and the 16-per-core cap."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _convex(group, succs) -> bool:
    """No path leaves the group and comes back into it (the definition of one loadable, checked by brute force)."""
    inside = set(group)
    stack = [s for u in group for s in succs[u] if s not in inside]
    seen = set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        for s in succs[v]:
            if s in inside:
                return False
            stack.append(s)
    return True


@settings(max_examples=300, deadline=None)
@given(st.integers(2, 9).flatmap(lambda n: st.tuples(
    st.just(n),
    st.lists(st.booleans(), min_size=n * n, max_size=n * n),  # edge u -> v where u < v
    st.lists(st.sampled_from(["DLA", "DLA", "GPU"]), min_size=n, max_size=n),
    st.lists(st.booleans(), min_size=n, max_size=n),  # a fully connected layer on the DLA: its output leaves it
)))  # fmt: skip
def test_every_subgraph_is_convex_counting_the_gpu_shuffle_after_a_fully_connected_layer(case):
    """A fully connected layer's output reaches its consumers through the builder's reshape_after, a GPU shuffle: a
    loadable holding the layer and any consumer would wait on the GPU midway, even when another DLA path joins them
    (the partition merged one such case until 2026-12-04: 0 -> FC 1 -> {2, 5}, 0 -> 3 -> 5, 2 -> 5)."""
    from edge.dla.predict import _Partition

    n, edges, device, fc = case
    units = list(range(n))
    preds = {v: [u for u in range(v) if edges[u * n + v]] for v in units}
    on_dla = {u for u in units if device[u] == "DLA"}
    exits = {u for u in on_dla if fc[u]}
    succs = {u: [] for u in units}
    for v, ps in preds.items():
        for u in ps:
            succs[u].append(("shuffle", u) if u in exits else v)
    for e in exits:
        succs[("shuffle", e)] = [v for v in units if e in preds[v]]
    groups = _Partition(units, preds, on_dla, exits).groups()
    assert sorted(u for g in groups for u in g) == sorted(on_dla)  # every DLA layer in exactly one group
    for group in groups:
        assert _convex(group, succs), (preds, exits, group)


def test_a_fully_connected_layer_and_its_consumer_are_never_one_loadable_even_through_another_path():
    from edge.dla.predict import _Partition

    preds = {0: [], 1: [0], 2: [1], 3: [0], 4: [2], 5: [1, 2, 3]}  # 4 runs on the GPU; 1 is a fully connected layer
    assert _Partition(list(preds), preds, {0, 1, 2, 3, 5}, {1}).groups() == [[0, 1, 3], [2, 5]]
