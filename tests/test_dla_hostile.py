"""`edge dla` against hostile and odd inputs: mutated ONNX bytes, random shapes, every ONNX operator of opsets
11-20, a tiny model that declares a 10 GiB constant, Upsample-7/8, and outputs onto the input in any spelling.

Every run must end with exit 0 (a report) or 2 (one line naming the problem), never a traceback.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from onnx import TensorProto, defs, helper, numpy_helper  # noqa: E402

from edge import cli  # noqa: E402
from edge.dla.predict import predict  # noqa: E402
from edge.graph.model import prepare  # noqa: E402


def small_model(opset: int = 13) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node("Reshape", ["r", "s"], ["y"], name="reshape"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def run(capsys, *argv: str):
    status = cli.main(["dla", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def assert_one_line_or_report(status: int, out: str, err: str) -> None:
    assert status in (0, 2), (status, err)
    assert "Traceback" not in out + err
    if status == 2:
        assert len(err.strip().splitlines()) == 1, err


# --- mutated bytes and shapes ----------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_model_bytes_give_a_report_or_one_line(tmp_path, capsys, data):
    raw = bytearray(small_model().SerializeToString())
    for _ in range(data.draw(st.integers(1, 6))):
        kind = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        at = data.draw(st.integers(0, max(len(raw) - 1, 0)))
        if kind == "flip" and raw:
            raw[at] ^= data.draw(st.integers(1, 255))
        elif kind == "insert":
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete" and raw:
            del raw[at]
        elif kind == "truncate":
            raw = raw[:at]
    path = tmp_path / "m.onnx"
    path.write_bytes(bytes(raw))
    shape = data.draw(st.sampled_from(["x=1x3x16x16", "1x3x16x16", "x=2x3x8x8", "x=0x3x1x1", "x=1x3", "y=1"]))
    assert_one_line_or_report(*run(capsys, str(path), "--target", "orin", "--shape", shape))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dims=st.lists(st.integers(-3, 70000), min_size=0, max_size=6), target=st.sampled_from(["orin", "xavier"]))
def test_any_shape_flag_gives_a_report_or_one_line(tmp_path, capsys, dims, target):
    path = tmp_path / "m.onnx"
    if not path.exists():
        onnx.save(small_model(), str(path))
    text = "x=" + "x".join(str(d) for d in dims)
    status, out, err = run(capsys, str(path), "--target", target, "--shape", text)
    assert_one_line_or_report(status, out, err)
    if status == 2:
        assert "--shape" in err


# --- every operator of opsets 11-20 ----------------------------------------------------------------------------


def _schemas():
    found = {}
    for schema in defs.get_all_schemas_with_history():
        if schema.domain == "" and schema.since_version <= 20 and not schema.deprecated:
            found[schema.name] = schema
    return sorted(found.values(), key=lambda s: s.name)


@pytest.mark.parametrize("opset", [11, 20])
def test_every_operator_is_handled_or_reported_unknown(opset):
    """One node of each operator, fed 4-D float tensors (meaningless for many): a verdict, never an exception."""
    missing = []
    for schema in _schemas():
        if schema.since_version > opset:
            continue
        n_in = max(len([i for i in schema.inputs if i.option != defs.OpSchema.FormalParameterOption.Optional]), 1)
        inputs = [f"i{k}" for k in range(n_in)]
        node = helper.make_node(schema.name, inputs, ["out"], name=f"{schema.name}_0")
        graph = helper.make_graph(
            [node],
            schema.name,
            [helper.make_tensor_value_info(i, TensorProto.FLOAT, [1, 3, 8, 8]) for i in inputs],
            [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        report = predict(model, "orin", "10.3")
        verdict = next((v for v in report.nodes if v.op == schema.name), None)
        if verdict is None:  # folded (e.g. a Constant-like op with no runtime input): handled
            continue
        if verdict.layer in ("UNKNOWN", "UNSUPPORTED") and verdict.rule not in ("op.unknown", "parser.missing"):
            missing.append(schema.name)
    assert missing == []


# --- resources -------------------------------------------------------------------------------------------------


def constant_of_shape_bomb(path) -> int:
    shape = numpy_helper.from_array(np.array([1, 3, 30000, 30000], dtype=np.int64), "s")
    one = numpy_helper.from_array(np.array([1.0], dtype=np.float32))
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["c"], value=one), helper.make_node("Add", ["x", "c"], ["y"])]
    g = helper.make_graph(
        nodes,
        "bomb",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 30000, 30000])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [shape],
    )
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    path.write_bytes(data)
    return len(data)


def test_a_224_byte_model_declaring_10_gib_is_not_materialised(tmp_path):
    """Run in a child process under a 1.5 GiB address-space limit: folding must never allocate the constant."""
    path = tmp_path / "bomb.onnx"
    assert constant_of_shape_bomb(path) < 300

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29))

    proc = subprocess.run(
        [sys.executable, "-m", "edge", "dla", str(path), "--target", "orin", "--json", str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "not folded" in proc.stdout and "cap 64 MiB" in proc.stdout
    assert "dimension 30000" in proc.stdout


def test_folding_cap_is_a_parameter_and_keeps_shapes():
    x = numpy_helper.from_array(np.array([1, 3, 64, 64], dtype=np.int64), "s")
    one = numpy_helper.from_array(np.array([0.5], dtype=np.float32))
    g = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["s"], ["c"], value=one)],
        "g",
        [],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, None)],
        [x],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    assert prepare(model).consts["c"].shape == (1, 3, 64, 64)  # 48 KiB: folded
    capped = prepare(model, cap_bytes=1024)
    assert "c" not in capped.consts and capped.shape("c") == (1, 3, 64, 64)
    assert capped.notes and "cap" in capped.notes[0]


# --- Upsample 7/8 ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [7, 8])
def test_upsample_with_scales_attribute(opset):
    node = helper.make_node("Upsample", ["x"], ["y"], name="up", scales=[1.0, 1.0, 2.0, 2.0], mode="nearest")
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 3
    v = predict(model, "orin", "8.5").nodes[0]
    assert (v.layer, v.device, v.rule) == ("RESIZE", "DLA", None)
    wide = helper.make_node("Upsample", ["x"], ["y"], name="up", scales=[1.0, 1.0, 64.0, 64.0], mode="nearest")
    model.graph.node[0].CopyFrom(wide)
    assert predict(model, "orin", "8.5").nodes[0].rule == "resize.range"


# --- outputs ---------------------------------------------------------------------------------------------------


@pytest.fixture
def model_file(tmp_path):
    d = tmp_path / "models"
    d.mkdir()
    path = d / "m.onnx"
    onnx.save(small_model(), str(path))
    return path


@pytest.mark.parametrize("flag", ["--json", "--fix"])
@pytest.mark.parametrize("spelling", ["same", "dotdot", "dot", "symlinked-folder", "hard-link"])
def test_outputs_never_land_on_the_input(model_file, capsys, tmp_path, flag, spelling):
    before = model_file.read_bytes()
    folder = model_file.parent
    if spelling == "same":
        target = str(model_file)
    elif spelling == "dotdot":
        target = str(folder / ".." / folder.name / model_file.name)
    elif spelling == "dot":
        target = str(folder / "." / model_file.name)
    elif spelling == "symlinked-folder":
        (tmp_path / "alias").symlink_to(folder, target_is_directory=True)
        target = str(tmp_path / "alias" / model_file.name)
    else:
        os.link(model_file, tmp_path / "linked.onnx")
        target = str(tmp_path / "linked.onnx")
    status, out, err = run(capsys, str(model_file), "--target", "orin", "--shape", "x=1x3x16x16", flag, target)
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert flag in err and out == ""  # refused before any work: no report printed
    assert model_file.read_bytes() == before


@pytest.mark.parametrize("flag", ["--json", "--fix"])
def test_outputs_into_a_missing_folder_are_refused_before_the_work(model_file, capsys, tmp_path, monkeypatch, flag):
    import edge.dla.predict as predict_module

    def no_work(*a, **k):
        raise AssertionError("predict ran before the output check")

    monkeypatch.setattr(predict_module, "predict", no_work)
    status, out, err = run(capsys, str(model_file), "--target", "orin", flag, str(tmp_path / "nowhere" / "out"))
    assert status == 2 and flag in err and "nowhere" in err and out == ""


def _with_bad_utf8(raw: bytes, text: bytes) -> bytes:
    """``raw`` with the first byte of ``text`` made a UTF-8 lead byte that no continuation byte follows."""
    out = bytearray(raw)
    out[out.index(text)] ^= 0x80  # b'R' (0x52) becomes 0xD2
    return bytes(out)


@pytest.mark.parametrize("tool", ["dla", "calib"])
def test_a_name_protobuf_cannot_decode_is_one_line_naming_the_node(tmp_path, capsys, tool):
    """Found by the mutation test above: protobuf hands an op type that is not UTF-8 over as bytes, and the report's
    formatting raised TypeError. The loader now refuses such a file before any tool looks at it."""
    path = tmp_path / "m.onnx"
    path.write_bytes(_with_bad_utf8(small_model().SerializeToString(), b"Relu"))
    extra = (
        ["--target", "orin", "--shape", "x=1x3x16x16"]
        if tool == "dla"
        else ["--dataset", "mnist_5k[:2]", "--cache", str(tmp_path / "c")]
    )
    argv = [tool, str(path), *extra]
    status = cli.main(argv)
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert str(path) in err and "the op type of node 1 (b'\\xd2elu') is not UTF-8 text" in err


def test_an_attribute_string_that_is_not_utf8_is_read_with_replacement_characters():
    from edge.graph.model import attrs

    node = helper.make_node("Conv", ["x", "w"], ["c"], auto_pad=b"SAME\xff")
    assert attrs(node)["auto_pad"] == "SAME\ufffd"


# --- an attack on the CLI (2026-12-01): malformed nodes, folding bombs, --fix on models it cannot check -----------


def _vi(name, dims, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, dims)


def _save(path, nodes, inputs, outputs, inits=(), opset=17):
    model = helper.make_model(
        helper.make_graph(nodes, "g", inputs, outputs, list(inits)), opset_imports=[helper.make_opsetid("", opset)]
    )
    model.ir_version = 10
    path.write_bytes(model.SerializeToString())
    return path


_X, _Y = _vi("x", [1, 3, 8, 8]), _vi("y", None)
_W = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
_ONE = helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])


def _c(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


# (id, nodes, inputs, outputs, initialisers, extra flags, what the one line names or None for a report)
MALFORMED = [
    (
        "cast-without-input",
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Cast", [], ["z"], to=1)],
        [_X],
        [_Y],
        [],
        [],
        "0 inputs",
    ),
    (
        "identity-without-output",
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Identity", ["y"], [])],
        [_X],
        [_Y],
        [],
        [],
        "0 outputs",
    ),
    (
        "gemm-alpha-string",
        [helper.make_node("Gemm", ["a", "wf"], ["y"], alpha="abc")],
        [_vi("a", [1, 16])],
        [_Y],
        [_c("wf", np.ones((16, 8), np.float32))],
        [],
        "alpha",
    ),
    (
        "conv-group-0-int8",
        [helper.make_node("Conv", ["x", "w"], ["y"], group=0)],
        [_X],
        [_vi("y", [1, 4, 6, 6])],
        [_W],
        ["--precision", "int8"],
        "group 0",
    ),
    (
        "conv-group-string",
        [helper.make_node("Conv", ["x", "w"], ["y"], group="abc")],
        [_X],
        [_Y],
        [_W],
        ["--precision", "int8"],
        "group",
    ),
    (
        "pad-into-conv-short-pads",
        [helper.make_node("Pad", ["x", "p"], ["xp"]), helper.make_node("Conv", ["xp", "w"], ["y"], pads=[1, 1])],
        [_X],
        [_Y],
        [_c("p", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)), _W],
        [],
        None,
    ),
    (
        "pad-with-2d-pads",
        [helper.make_node("Pad", ["x", "p"], ["xp"]), helper.make_node("Conv", ["xp", "w"], ["y"])],
        [_X],
        [_Y],
        [_c("p", np.zeros((8, 0), np.int64)), _W],
        [],
        None,
    ),
    (
        "fix-plugin-op",
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("EfficientNMS_TRT", ["r"], ["y"], domain="trt.plugins")],
        [_X],
        [_Y],
        [],
        ["--fix", "{out}"],
        "ONNX Runtime cannot run",
    ),
    (
        "fix-undeclared-domain",
        [helper.make_node("Frob", ["x"], ["y"], domain="com.evil")],
        [_X],
        [_Y],
        [],
        ["--fix", "{out}"],
        "shape inference",
    ),
    (
        "fix-scalar-conv-weight",
        [helper.make_node("Conv", ["x", "ws"], ["y"])],
        [_X],
        [_Y],
        [_c("ws", np.array(1.0, np.float32))],
        ["--fix", "{out}"],
        "--fix",
    ),
    (
        "fix-pool-of-runtime-reshape",
        [helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["y"])],
        [_X, _vi("s", [4], TensorProto.INT64)],
        [_Y],
        [],
        ["--fix", "{out}"],
        "--fix",
    ),
    (
        "fix-cycle",
        [
            helper.make_node("Relu", ["b"], ["a"]),
            helper.make_node("Relu", ["a"], ["b"]),
            helper.make_node("Add", ["x", "a"], ["y"]),
        ],
        [_X],
        [_Y],
        [],
        ["--fix", "{out}"],
        "the graph has a cycle (node 0 (Relu) depends on its own output)",  # refused at load, before any analysis
    ),
]


@pytest.mark.parametrize("case, nodes, inputs, outputs, inits, extra, named", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_node_is_one_line_or_a_report_never_unexpected(
    tmp_path, capsys, case, nodes, inputs, outputs, inits, extra, named
):
    """Each of these ended as "unexpected IndexError/ValueError/TypeError/Fail ... (a bug in edge)", exit 1."""
    path = _save(tmp_path / "m.onnx", nodes, inputs, outputs, inits)
    if case == "fix-plugin-op":  # declared, as a real TensorRT-plugin export does
        model = onnx.load(str(path))
        model.opset_import.append(helper.make_opsetid("trt.plugins", 1))
        path.write_bytes(model.SerializeToString())
    flags = [str(tmp_path / "fixed.onnx") if a == "{out}" else a for a in extra]
    status, out, err = run(capsys, str(path), "--target", "orin", *flags)
    assert_one_line_or_report(status, out, err)
    assert "unexpected" not in err and "a bug in edge" not in err, err
    if named is None:
        assert status == 0, err
    else:
        assert status == 2 and named in err, err
        assert not (tmp_path / "fixed.onnx").exists()


def test_a_non_utf8_dim_name_reaches_the_json_as_text(tmp_path, capsys):
    path = _save(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [1, 3, "QQQQ", 8])], [_Y])
    path.write_bytes(path.read_bytes().replace(b"QQQQ", b"\xff\xfe\xc3\x28"))
    status, out, err = run(capsys, str(path), "--target", "orin", "--json", str(tmp_path / "r.json"))
    assert status == 2 and "unexpected" not in err and "--shape" in err  # the dynamic input is named, as text
    status, out, err = run(capsys, str(path), "--target", "orin", "--shape", "x=1x3x8x8", "--json", str(tmp_path / "r.json"))
    assert status == 0, err
    import json

    json.loads((tmp_path / "r.json").read_text())


def _limited_child(argv):
    """`edge ARGV` in a child capped at 2 GiB of address space."""
    limit = 2 << 30
    proc = subprocess.run(
        [sys.executable, "-m", "edge", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
    )
    return proc


def test_folding_bombs_that_dodge_the_per_tensor_cap_stay_bounded(tmp_path):
    """A 10 GiB ConstantOfShape whose output the file declares as [1] (it was folded: 30 s, 10.6 GB), and 120
    ConstantOfShape of 60 MiB each, under the 64 MiB cap one by one (7.4 GB). Both now run in a 2 GiB child."""
    lie = _save(
        tmp_path / "lie.onnx",
        [helper.make_node("ConstantOfShape", ["s"], ["y"], value=_ONE)],
        [],
        [_vi("y", [1])],
        [_c("s", np.array([1, 3, 30000, 30000], np.int64))],
    )
    many = _save(
        tmp_path / "many.onnx",
        [helper.make_node("ConstantOfShape", ["s"], [f"c{i}"], value=_ONE) for i in range(120)]
        + [helper.make_node("Relu", ["x"], ["y"])],
        [_X],
        [_Y],
        [_c("s", np.array([15 << 20], np.int64))],
    )
    for path in (lie, many):
        proc = _limited_child(["dla", str(path), "--target", "orin"])
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "not folded" in proc.stdout + proc.stderr


@pytest.mark.parametrize("text", ["x=1x3x99999999999999999999x8", "x=1_0x3x8x8", "x=+1x3x8x8", "x= 1x3x8x8", "x=１x3x8x8"])
def test_shape_flags_python_would_parse_loosely_are_refused(tmp_path, capsys, text):
    path = _save(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["N", 3, "H", "W"])], [_Y])
    status, out, err = run(capsys, str(path), "--target", "orin", "--shape", text)
    assert status == 2 and "--shape" in err and "unexpected" not in err, err


def test_one_input_shaped_twice_is_refused(tmp_path, capsys):
    path = _save(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["N", 3, "H", "W"])], [_Y])
    status, out, err = run(capsys, str(path), "--target", "orin", "--shape", "x=1x3x8x8", "--shape", "x=1x3x16x16")
    assert status == 2 and "already" in err, err


def test_flops_of_a_huge_declared_input_do_not_overflow(tmp_path, capsys):
    path = _save(tmp_path / "m.onnx", [helper.make_node("Conv", ["x", "w"], ["y"])], [_vi("x", [1, 3, 2**40, 2**40])], [_Y], [_W])
    report = predict(str(path), "orin")
    # 2 * 4 * 3*3*3 multiply-adds per output value, 4 x (2^40 - 2)^2 values: the exact count, in Python integers
    assert report.flops == 2 * 27 * 4 * (2**40 - 2) ** 2, report.flops


def test_a_chain_of_20000_nodes_is_bounded(tmp_path):
    """An attack on edge dla: a 458 KB chain of 20,000 Relu took 76 s (each merge of the partition rebuilt the whole
    group, and every node lookup copied the node list). Now a few seconds; the bound here is the child's timeout."""
    n = 20_000
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"t{i - 1}"], [f"t{i}" if i < n - 1 else "y"]) for i in range(n)]
    path = _save(tmp_path / "chain.onnx", nodes, [_X], [_Y])
    proc = subprocess.run(
        [sys.executable, "-m", "edge", "dla", str(path), "--target", "orin"], capture_output=True, text=True, timeout=40
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"nodes on DLA: {n}/{n}" in proc.stdout and "DLA subgraphs: 1 " in proc.stdout, proc.stdout[-600:]


@pytest.mark.parametrize("case", ["constant", "shape"])
def test_fix_refuses_to_run_a_model_whose_tensors_cannot_fit(tmp_path, case):
    """An attack on edge dla: --fix checks its rewrite by running the model, and ran a 10 GiB constant (11.1 GB, three
    stderr lines) and a --shape of 100000 pixels a side (out of memory). Now one line before running, in a 2 GiB child."""
    if case == "constant":
        path = _save(
            tmp_path / "m.onnx",
            [helper.make_node("ConstantOfShape", ["s"], ["y"], value=_ONE)],
            [],
            [_Y],
            [_c("s", np.array([1, 3, 30000, 30000], np.int64))],
        )
        flags = []
    else:
        path = _save(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["N", 3, "H", "W"])], [_Y])
        flags = ["--shape", "x=1x3x100000x100000"]
    proc = _limited_child(["dla", str(path), "--target", "orin", *flags, "--fix", str(tmp_path / "f.onnx")])
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "GiB" in lines[0] and "--fix" in lines[0], proc.stderr
    assert not (tmp_path / "f.onnx").exists()


def test_external_weights_larger_than_the_process_may_hold_are_one_line(tmp_path):
    """An attack on edge dla: a 115-byte model naming a 4 GiB sparse file (no disk blocks) as its weights took 8.4 GB,
    or under `ulimit -v` crashed inside protobuf with no message (rc 139). Their declared size is now compared with
    what the process may take (here a 2 GiB address-space limit) before anything is loaded."""
    tensor = onnx.TensorProto(name="big", data_type=TensorProto.FLOAT, dims=[2**30], data_location=TensorProto.EXTERNAL)
    tensor.external_data.add(key="location", value="weights.bin")
    path = _save(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"])], [_X], [_Y], [tensor])
    with open(tmp_path / "weights.bin", "wb") as f:
        f.truncate(4 << 30)
    proc = _limited_child(["dla", str(path), "--target", "orin"])
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "external weights take 4.0 GiB" in lines[0], proc.stderr


def test_escape_sequences_in_node_names_reach_the_terminal_as_text(tmp_path, capsys):
    """An attack on edge dla: a node named with ESC[2J (clear screen) and ESC[31m went to stdout raw."""
    path = _save(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"], name="evil\x1b[2J\x1b[31mred\r")], [_X], [_Y])
    status, out, err = run(capsys, str(path), "--target", "orin")
    assert status == 0 and "\x1b" not in out and "\r" not in out
    assert "evil\\x1b[2J\\x1b[31mred\\r" in out


def test_an_attribute_name_that_is_not_utf8_is_one_line(tmp_path, capsys):
    """An attack on edge dla: such a name reached --fix's make_node as bytes (TypeError, "a bug in edge")."""
    path = _save(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"], QQQQ=1)], [_X], [_Y])
    path.write_bytes(path.read_bytes().replace(b"QQQQ", b"\xff\xfe\xc3\x28"))
    status, out, err = run(capsys, str(path), "--target", "orin", "--fix", str(tmp_path / "f.onnx"))
    assert status == 2 and "attribute name of node 0" in err and "unexpected" not in err, err


def test_fix_stops_a_check_run_that_does_not_end(tmp_path, capsys, monkeypatch):
    """An attack on edge dla: --fix's check ran a Loop of 10^12 trips (still running after 120 s). ONNX Runtime's
    terminate flag now stops each run after VERIFY_SECONDS (1 s here): one line, nothing written."""
    from edge.dla import fix

    monkeypatch.setattr(fix, "VERIFY_SECONDS", 1.0)
    body = helper.make_graph(
        [helper.make_node("Identity", ["ci"], ["co"]), helper.make_node("Relu", ["vin"], ["vout"])],
        "body",
        [_vi("i", [], TensorProto.INT64), _vi("ci", [], TensorProto.BOOL), _vi("vin", [1, 3, 8, 8])],
        [_vi("co", [], TensorProto.BOOL), _vi("vout", [1, 3, 8, 8])],
    )
    path = _save(
        tmp_path / "loop.onnx",
        [helper.make_node("Loop", ["M", "cond", "x"], ["y"], body=body)],
        [_X],
        [_Y],
        [_c("M", np.array(10**12, np.int64)), _c("cond", np.array(True))],
    )
    status, out, err = run(capsys, str(path), "--target", "orin", "--fix", str(tmp_path / "f.onnx"))
    assert status == 2 and "ran the model for 1 s and was stopped" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "f.onnx").exists()


def _fixed_fc(path) -> None:
    """x [1, 3, 8, 8] -> Flatten -> MatMul by a [192, 4] weight: a graph that only runs at the size it was made for."""
    w = numpy_helper.from_array(np.ones((192, 4), np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("Flatten", ["x"], ["f"]), helper.make_node("MatMul", ["f", "w"], ["y"])],
        "fc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [w],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))


def test_a_new_size_for_a_fixed_input_needs_fix_and_a_model_that_runs_at_it(tmp_path):
    path = tmp_path / "fc.onnx"
    _fixed_fc(path)

    def dla(*extra: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "edge", "dla", str(path), "--target", "orin", "--shape", "x=1x3x16x16", *extra]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    plain = dla()
    assert plain.returncode == 2 and plain.stderr.count("\n") == 1
    assert "the model fixes this input to 1x3x8x8; with --fix OUT.onnx, edge dla writes a copy at this size" in plain.stderr
    fixed = dla("--fix", str(tmp_path / "fc16.onnx"))
    # the MatMul's 192 inputs are 768 at 16x16: ONNX Runtime refuses, nothing is written, one line says why
    assert fixed.returncode == 2 and not (tmp_path / "fc16.onnx").exists()
    assert fixed.stderr.count("\n") == 1 and "MatMul dimension mismatch" in fixed.stderr
    assert "without that check nothing is written" in fixed.stderr
