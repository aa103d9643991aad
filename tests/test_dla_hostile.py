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
