"""Reading an ONNX file (edge/graph/model.py): cycles, nodes off their op's schema, external weights, --shape, pinned
inputs and the weights a file stores. Expected values are the ONNX spec's (operator schemas, opset domains) or
counted by hand on the graphs built here."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge.errors import EdgeError
from edge.graph import model as gm


def vi(name, shape=(1, 3, 8, 8)):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape) if shape is not None else None)


def make(nodes, inits=(), opset=13, domain="", inputs=("x",), outputs=("y",)):
    g = helper.make_graph(nodes, "g", [vi(i) for i in inputs], [vi(o, None) for o in outputs], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid(domain, opset)])


def test_a_cycle_is_named_by_a_node_on_it_not_one_that_only_waits_on_it():
    # node 0 is ready at once; node 1 reads the cycle's output but is not on it; nodes 2 and 3 feed each other
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Relu", ["c2"], ["y"]),
        helper.make_node("Add", ["a", "c2"], ["c1"]),
        helper.make_node("Relu", ["c1"], ["c2"], name="back"),
    ]
    assert gm.cycle(make(nodes)) == "the graph has a cycle (node 3 'back' (Relu) depends on its own output)"
    acyclic = [nodes[0], helper.make_node("Relu", ["a"], ["y"])]
    assert gm.cycle(make(acyclic)) is None


@pytest.mark.parametrize("domain", ["", "ai.onnx"])  # the spec's two names of the standard domain
def test_a_node_off_its_schema_is_named_with_what_the_spec_says(domain):
    # Relu-13 takes exactly one input; a custom-domain node before it is skipped, not the end of the check
    nodes = [
        helper.make_node("Frob", ["x"], ["f"], domain="com.vendor"),
        helper.make_node("Relu", ["f", "x"], ["y"], name="two_in"),
    ]
    model = make(nodes, domain=domain)
    model.opset_import.append(helper.make_opsetid("com.vendor", 1))
    assert gm.off_spec(model) == "node 1 'two_in' (Relu) has 2 inputs, the spec says 1"
    unnamed = make([helper.make_node("Relu", ["x", "x"], ["y"])], domain=domain)
    assert gm.off_spec(unnamed) == "node 0 (Relu) has 2 inputs, the spec says 1"
    # an op the standard domain does not have is left to the later "unknown op" report, not the end of the check
    unknown_first = make([helper.make_node("NoSuchOp", ["x"], ["f"]), helper.make_node("Relu", ["f", "x"], ["y"])])
    assert gm.off_spec(unknown_first) == "node 1 (Relu) has 2 inputs, the spec says 1"


@pytest.mark.parametrize("op", ["Conv", "ConvTranspose"])
def test_a_convolution_of_group_0_is_refused(op):
    w = numpy_helper.from_array(np.ones((3, 3, 1, 1), np.float32), "w")
    model = make([helper.make_node(op, ["x", "w"], ["y"], group=0)], [w])
    assert gm.off_spec(model) == f"node 0 ({op}) has group 0; it must be 1 or more"


def test_an_attribute_of_the_wrong_type_is_named():
    node = helper.make_node("Softmax", ["x"], ["y"])
    node.attribute.append(helper.make_attribute("axis", 1.5))  # Softmax-13's axis is an integer
    assert gm.off_spec(make([node])) == "attribute 'axis' of node 0 (Softmax) is a float, the spec says an integer"


def test_shape_flags_name_the_input_or_take_the_only_one():
    assert gm.parse_shape("1x3x8x8", ["images"]) == ("images", (1, 3, 8, 8))
    assert gm.parse_shape("b=2X3", ["a", "b"]) == ("b", (2, 3))
    with pytest.raises(EdgeError) as e:
        gm.parse_shape("1x3x8x8", ["a", "b"])
    assert str(e.value) == "--shape 1x3x8x8: the model has inputs a, b; write NAME=DIMS"


def test_a_shape_other_than_the_files_static_one_is_refused_naming_both():
    model = make([helper.make_node("Relu", ["x"], ["y"])])  # x is [1, 3, 8, 8] in the file
    with pytest.raises(EdgeError) as e:
        gm.pin_inputs(model, {"x": (2, 3, 8, 8)})
    assert str(e.value) == (
        "--shape x=2x3x8x8: the model fixes this input to 1x3x8x8; with --fix OUT.onnx, edge dla writes a copy at this "
        "size (for fully convolutional models: the copy is checked in ONNX Runtime)"
    )
    pinned = gm.pin_inputs(model, {"x": (1, 3, 8, 8)})
    assert [d.dim_value for d in pinned.graph.input[0].type.tensor_type.shape.dim] == [1, 3, 8, 8]


def test_stored_constants_are_initializers_and_constant_nodes_only():
    w = numpy_helper.from_array(np.full((2,), 7, np.float32), "w")
    nodes = [
        helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.array([3.0], np.float32))),
        # ConstantOfShape has a 'value' attribute too, but its output is computed: not stored
        helper.make_node("ConstantOfShape", ["s"], ["z"], value=numpy_helper.from_array(np.array([5.0], np.float32))),
    ]
    s = numpy_helper.from_array(np.array([2], np.int64), "s")
    got = gm.stored_constants(make(nodes, [w, s]))
    assert sorted(got) == ["k", "s", "w"] and got["k"].tolist() == [3.0] and got["w"].tolist() == [7.0, 7.0]


def _external(folder, count):
    folder.mkdir()
    w = numpy_helper.from_array(np.arange(count, dtype=np.float32).reshape(count, 1, 1, 1)[:, :, :, :], "w")
    model = make([helper.make_node("Conv", ["x", "w"], ["y"])], [w], inputs=("x",))
    model.graph.input[0].CopyFrom(vi("x", (1, 1, 8, 8)))
    onnx.save_model(model, str(folder / "m.onnx"), save_as_external_data=True, location="w.bin", size_threshold=0)
    return folder / "m.onnx"


def test_external_weights_load_from_beside_the_model_wherever_the_process_runs(tmp_path, monkeypatch):
    path = _external(tmp_path / "model", 4)
    monkeypatch.chdir(tmp_path)  # not the model's folder
    monkeypatch.setattr(gm, "_available_memory", lambda: 3 * 16)  # exactly three times the 16 bytes: still enough
    model = gm.load_model(path)
    assert numpy_helper.to_array(model.graph.initializer[0]).ravel().tolist() == [0.0, 1.0, 2.0, 3.0]


def test_external_weights_past_the_memory_left_are_refused_with_the_sizes(tmp_path, monkeypatch):
    path = _external(tmp_path / "model", 4)
    monkeypatch.setattr(gm, "_available_memory", lambda: 3 * 16 - 1)
    with pytest.raises(EdgeError) as e:
        gm.load_model(path)
    assert str(e.value).startswith(f"{path}: its external weights take 0.0 GiB, about 0 GiB once loaded")
    big = 3 << 30  # 3 GiB declared: the numbers in the message are its own
    monkeypatch.setattr(gm, "_external_bytes", lambda model: big)
    monkeypatch.setattr(gm, "_available_memory", lambda: 2 << 30)
    with pytest.raises(EdgeError) as e:
        gm.load_model(path)
    assert str(e.value) == (
        f"{path}: its external weights take 3.0 GiB, about 9 GiB once loaded, and this process may use 2.0 GiB; run it "
        "on a larger machine"
    )


def test_an_opset_newer_than_onnx_defines_is_named_whatever_the_domains_order():
    latest = onnx.defs.onnx_opset_version()
    model = make([helper.make_node("Relu", ["x"], ["y"])], opset=latest + 1, domain="ai.onnx")
    model.opset_import.insert(0, helper.make_opsetid("com.vendor", 1))  # a custom domain listed first
    assert gm.unknown_opset(model) == f"opset {latest + 1} is newer than the installed onnx defines (at most {latest})"
    assert gm.unknown_opset(make([helper.make_node("Relu", ["x"], ["y"])], opset=latest)) is None
    custom_only = make([helper.make_node("Frob", ["x"], ["y"], domain="com.vendor")], domain="com.vendor")
    assert gm.unknown_opset(custom_only) is None  # no standard opset imported: nothing to be newer


def test_reading_a_model_without_onnx_installed_says_what_for(tmp_path, monkeypatch):
    import sys

    from edge.errors import MissingDependency

    path = tmp_path / "m.onnx"
    onnx.save(make([helper.make_node("Relu", ["x"], ["y"])]), str(path))
    monkeypatch.setitem(sys.modules, "onnx", None)
    for read in (gm.load_model, lambda p: gm.prepare(p)):
        with pytest.raises(MissingDependency, match="'onnx' is needed for reading ONNX models"):
            read(path)


def test_a_declared_0_is_no_static_size():
    # edge dla reads an exporter's 0 as an unknown size, and asks for --shape (as for a symbol)
    assert not gm.is_static((0, 3, 8, 8)) and gm.is_static((1, 3, 8, 8)) and not gm.is_static((1, "h", 8, 8))
