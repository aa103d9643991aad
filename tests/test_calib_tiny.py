"""`edge calib` end to end on a small convolutional classifier made here (16x16 input, 3 classes), so the flags,
readers and budgets can be attacked many times in seconds: checks made before the statistics pass, the budget
search writing its FP16 list into the Q/DQ model and the sidecar, the exit status when a budget cannot be met, the
next-step command through the real edge-build parser, and Hypothesis on the number flags and the --eval folders.
The model's weights are random: only FP32 against INT8 of the same model is measured, never its accuracy."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge import cli

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
cv2 = pytest.importorskip("cv2")

SIZE = ["--set", "input.size=[16, 16]"]


def tiny_model(path: Path, seed: int = 0, spread: float = 1.0) -> Path:
    """``spread``: conv1's output channels scaled from 1/spread to spread (geometrically), so relu1's ranges differ."""
    h, nh = onnx.helper, onnx.numpy_helper
    rng = np.random.default_rng(seed)
    rows = np.geomspace(1 / spread, spread, 8)[:, None, None, None]
    inits = [
        nh.from_array((rng.normal(0, 0.5, (8, 3, 3, 3)) * rows).astype(np.float32), "w1"),
        nh.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b1"),
        nh.from_array(rng.normal(0, 0.5, (8, 8, 3, 3)).astype(np.float32), "w2"),
        nh.from_array(rng.normal(0, 0.5, (8, 3)).astype(np.float32), "w3"),
    ]
    nodes = [
        h.make_node("Conv", ["x", "w1", "b1"], ["c1"], "conv1", pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c1"], ["r1"], "relu1"),
        h.make_node("Conv", ["r1", "w2"], ["c2"], "conv2", pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c2"], ["r2"], "relu2"),
        h.make_node("GlobalAveragePool", ["r2"], ["g"], "pool"),
        h.make_node("Flatten", ["g"], ["f"], "flatten"),
        h.make_node("MatMul", ["f", "w3"], ["logits"], "fc"),
        h.make_node("Softmax", ["logits"], ["prob"], "softmax", axis=1),
    ]
    graph = h.make_graph(
        nodes,
        "tiny",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3, 16, 16])],
        [  # a class output and a map (a segmenter's [N, C, H, W]: one decision per pixel)
            h.make_tensor_value_info("prob", onnx.TensorProto.FLOAT, ["N", 3]),
            h.make_tensor_value_info("c2", onnx.TensorProto.FLOAT, ["N", 8, 16, 16]),
        ],
        inits,
    )
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 13)]), str(path))
    return path


def write_images(folder: Path, count: int, seed: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for k in range(count):
        img = cv2.GaussianBlur(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8), (3, 3), 0)
        cv2.imwrite(str(folder / f"{k:03d}.png"), img)
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    tiny_model(d / "tiny.onnx")
    write_images(d / "calib", 12, 1)
    for k, name in enumerate(("cat", "dog", "owl")):
        write_images(d / "eval" / name, 4, 10 + k)
    return d


def run(capsys, *argv: str):
    try:
        status = cli.main(["calib", *argv])
    except SystemExit as exc:  # argparse refuses a bad value (NaN, a non-number) before main runs
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


def base(tiny: Path, out: Path):
    return [str(tiny / "tiny.onnx"), "--images", str(tiny / "calib"), *SIZE, "--cache", str(out / "t.cache")]


def test_a_run_writes_the_cache_and_its_sidecar_and_a_next_step_that_edge_build_accepts(tiny, tmp_path, capsys, monkeypatch):
    status, out, err = run(capsys, *base(tiny, tmp_path), "--eval", str(tiny / "eval"))
    assert status == 0, err
    assert (tmp_path / "t.cache").read_text().startswith("TRT-100300-EntropyCalibration2\n")
    side = json.loads((tmp_path / "t.cache.json").read_text())
    assert side["edge_fp16_layers"] == 1 and side["layers"] == [] and side["method"] == "percentile 99.9"
    assert "agreement" in out and re.search(r"top-1 on 12 labelled images from .*eval: FP32", out)
    # The printed command goes through edge-build's own parser and config checks.
    lines = out.splitlines()
    command = lines[lines.index(next(x for x in lines if x.startswith("next, on the Jetson"))) + 1].strip()
    argv = shlex.split(command)
    assert argv[0] == "edge-build" and "--int8" in argv and "--calib-cache" in argv and "--shape" in argv
    args = cli.entry_parser("build", "edge-build").parse_args(argv[1:])
    assert args.int8 and args.calib_cache == str(tmp_path / "t.cache") and args.shape == ["x=1x3x16x16"]
    # Run it: the config checks pass (model, cache, shape); then the installed TensorRT decides. TensorRT-RTX (the
    # one here) has no INT8 calibrators and says so; a Jetson's TensorRT builds the engine.
    from edge.builder import trt as trt_api
    from edge.errors import guard

    monkeypatch.chdir(tmp_path)
    status = guard("edge-build", args._main, args)
    _, err = capsys.readouterr()
    if trt_api.load().__name__ == "tensorrt_rtx":
        assert status == 2 and "--int8: this TensorRT (tensorrt_rtx" in err and "strongly typed" in err
    else:
        assert status == 0, err


def test_the_equalized_model_travels_with_its_cache_and_edge_build_refuses_the_original(tiny, tmp_path, capsys, monkeypatch):
    import hashlib

    status, out, err = run(capsys, *base(tiny, tmp_path), "--equalize", "1")
    assert status == 0, err
    eq = tmp_path / "t.equalized.onnx"
    side = json.loads((tmp_path / "t.cache.json").read_text())
    # relu1's eight channels (conv1 makes them, conv2 reads them) are rescaled; c2 is an output and stays
    assert side["equalized"]["from"] == "tiny.onnx" and side["equalized"]["strength"] == 1.0
    assert side["equalized"]["convs"] == 2 and side["equalized"]["groups"] == 8
    assert side["equalized"]["from_sha256"] == hashlib.sha256((tiny / "tiny.onnx").read_bytes()).hexdigest()
    assert side["model"] == eq.name and side["model_sha256"] == hashlib.sha256(eq.read_bytes()).hexdigest()
    # the FP32 network computes what it did (ONNX Runtime on both files), while relu1's channels now span alike
    from edge.calib.datasets import find_images, image_folder
    from edge.config import load_config
    from edge.runtime.engines import TensorInfo
    from edge.runtime.engines.model import preprocess_spec

    spec = preprocess_spec(
        load_config(None, SIZE[1:], {"model.path": str(tiny / "tiny.onnx")}),
        TensorInfo("x", ("N", 3, 16, 16), np.dtype(np.float32)),
        None,
    )
    x = next(image_folder(tiny / "calib", spec, files=find_images(tiny / "calib")).batches(100))
    outs = []
    for path in (tiny / "tiny.onnx", eq):
        m = onnx.load(str(path))
        m.graph.output.append(onnx.helper.make_empty_tensor_value_info("r1"))
        outs.append(ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x}))
    for a, b in zip(outs[0][:2], outs[1][:2]):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5 * np.abs(a).max())
    ranges = [np.abs(o[2]).max(axis=(0, 2, 3)) for o in outs]
    # conv2 (dense) reads relu1: at --equalize 1 its factor is its range (a ** 1 / w ** 0), so on the calibration
    # images each channel now reaches 1
    assert ranges[0].max() / ranges[0].min() > 1.5
    np.testing.assert_allclose(ranges[1], 1.0, rtol=1e-4)
    lines = out.splitlines()
    command = lines[lines.index(next(x for x in lines if x.startswith("next, on the Jetson"))) + 1].strip()
    assert shlex.split(command)[1] == str(eq) and f"equalized model: {eq}" in out
    # edge-build with the original model and this cache: one line naming both files, before TensorRT is loaded
    from edge.errors import guard

    monkeypatch.chdir(tmp_path)
    argv = [str(tiny / "tiny.onnx"), "--int8", "--calib-cache", str(tmp_path / "t.cache"), "--shape", "x=1x3x16x16"]
    args = cli.entry_parser("build", "edge-build").parse_args(argv)
    status = guard("edge-build", args._main, args)
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1, err
    assert "its scales are for 't.equalized.onnx'" in err[0] and "not for tiny.onnx" in err[0] and "--equalize 0" in err[0]
    # --equalize 0: the model as it is, no equalized file, the sidecar names the original
    eq.unlink()
    status, out, err = run(capsys, *base(tiny, tmp_path), "--equalize", "0")
    assert status == 0, err
    side = json.loads((tmp_path / "t.cache.json").read_text())
    assert "equalized" not in side and side["model"] == "tiny.onnx" and not eq.exists() and "equalized model:" not in out


@pytest.mark.parametrize("value", ["-0.1", "1.5", "nan", "inf", "x"])
def test_equalize_out_of_range_is_one_line_before_any_work(tiny, tmp_path, capsys, value):
    status, out, err = run(capsys, *base(tiny, tmp_path), "--equalize", value)
    assert status == 2 and not (tmp_path / "t.cache").exists()
    assert "--equalize" in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2, err


@pytest.mark.parametrize("spread", [1.0, 300.0])
def test_auto_keeps_the_equalization_only_when_the_check_agrees_better(tiny, tmp_path, capsys, spread):
    """The default (--equalize auto) calibrates both ways and keeps the one whose INT8 agrees more with FP32 (a tie
    keeps the model as given); with relu1's channels 90000x apart the equalized one agrees more."""
    model = tiny_model(tmp_path / "m.onnx", spread=spread)
    argv = [str(model), "--images", str(tiny / "calib"), *SIZE, "--cache", str(tmp_path / "t.cache")]
    status, out, err = run(capsys, *argv)
    assert status == 0, err
    side = json.loads((tmp_path / "t.cache.json").read_text())
    tried = side["equalize_check"]
    kept = tried["equalized"] > tried["as given"]
    assert ("equalized" in side) == kept == (tmp_path / "t.equalized.onnx").exists()
    assert side["before"]["agreement"] == max(tried.values())  # the check reported is the kept model's
    assert f"equalize: INT8 agreement {tried['equalized']:.4f} equalized, {tried['as given']:.4f} as given" in err
    if spread > 1.0:
        assert kept and side["equalized"]["auto"] and side["model"] == "t.equalized.onnx"
    else:
        assert side["model"] == "m.onnx" and "equalized model:" not in out
    # an explicit strength is taken as it is, with no second calibration
    status, out, err = run(capsys, *argv, "--equalize", "0.5")
    assert (
        status == 0
        and "equalize: INT8" not in err
        and "equalize_check" not in json.loads((tmp_path / "t.cache.json").read_text())
    )


def test_an_equalized_path_without_equalizing_is_refused(tiny, tmp_path, capsys):
    status, _, err = run(capsys, *base(tiny, tmp_path), "--equalize", "0", "--equalized", str(tmp_path / "e.onnx"))
    assert status == 2 and "--equalized" in err and "--equalize 0" in err and not (tmp_path / "t.cache").exists()


def test_the_equalized_model_may_not_be_the_input(tiny, tmp_path, capsys):
    status, _, err = run(capsys, *base(tiny, tmp_path), "--equalized", str(tiny / "tiny.onnx"))
    assert status == 2 and "--equalized" in err and "MODEL" in err, err
    assert onnx.load(str(tiny / "tiny.onnx")).graph.node[0].op_type == "Conv"


def test_budget_search_keeps_the_fewest_layers_and_the_list_travels(tiny, tmp_path, capsys):
    qdq = tmp_path / "t.qdq.onnx"
    # The map's 3072 per-pixel decisions all agree only when both convolutions stay in FP16.
    status, out, err = run(capsys, *base(tiny, tmp_path), "--method", "entropy", "--min-agreement", "1.0", "--qdq", str(qdq))
    assert status == 0, err
    side = json.loads((tmp_path / "t.cache.json").read_text())
    assert side["before"]["agreement"] < 1.0 and side["after"]["agreement"] == 1.0 and side["budget"] == {"min_agreement": 1.0}
    assert {"conv1", "conv2"} <= set(side["layers"]) and f"kept in FP16 ({len(side['layers'])})" in out
    # the list is printed once (the budget's line counts it), and the next step may still suggest the DLA
    assert f"kept in FP16 for the budget: {len(side['layers'])} layer(s), listed below" in out
    assert "conv1" not in next(line for line in out.splitlines() if line.startswith("kept in FP16 for the budget"))
    assert "add --dla 0 to build for the DLA" in out and "no layer is left in INT8" not in out
    assert [o["output"] for o in side["after"]["outputs"]] == ["prob", "c2"] and side["after"]["outputs"][1][
        "positions"
    ] == 12 * 256
    model = onnx.load(str(qdq))
    for node in model.graph.node:
        if node.name in side["layers"]:  # no Q/DQ in front of a kept layer
            assert not any(i.endswith("_dequantized") for i in node.input)
    assert next(n for n in model.graph.node if n.name == "fc").input[0].endswith("_dequantized")


def test_a_cache_for_model_optimizer_holds_the_same_activation_scales_and_no_constant(tiny, tmp_path, capsys):
    # Model Optimizer 0.47 put the MatMul weight's single cache scale on that weight's per-channel pair, and ONNX
    # Runtime refused the model it wrote (docs/edge-calib.md); TensorRT's own calibrator writes the entry.
    from edge.calib.cache import read_cache

    for target in ("tensorrt", "modelopt"):
        (tmp_path / target).mkdir()
        status, out, err = run(capsys, *base(tiny, tmp_path / target), "--cache-for", target)
        assert status == 0, err
    full, slim = (read_cache(tmp_path / t / "t.cache").scales for t in ("tensorrt", "modelopt"))
    weights = {i.name for i in onnx.load(str(tiny / "tiny.onnx")).graph.initializer}
    assert "w3" in full  # the MatMul's weight: a constant layer in TensorRT, with its range max|w3| / 127
    w3 = onnx.numpy_helper.to_array(next(i for i in onnx.load(str(tiny / "tiny.onnx")).graph.initializer if i.name == "w3"))
    assert full["w3"] == pytest.approx(float(np.abs(w3).max()) / 127, rel=1e-6)
    assert not weights & set(slim) and slim == {n: v for n, v in full.items() if n not in weights}
    assert {"x", "c1", "r1", "c2", "r2", "g", "f", "logits"} <= set(slim)
    assert "stored weights left out, for Model Optimizer" in out


def test_a_cache_for_model_optimizer_keeps_a_weight_that_a_reshape_computes(tmp_path, capsys):
    # A MatMul whose weight is Reshape(stored weight), as paddle2onnx exports write them: Model Optimizer 0.47 stopped
    # ("not found in graph initializers") when the reshape's line was left out as well.
    h, nh = onnx.helper, onnx.numpy_helper
    flat = nh.from_array(np.linspace(-1, 1, 9, dtype=np.float32), "w_flat")
    shape = nh.from_array(np.array([3, 3], np.int64), "shape33")
    nodes = [
        h.make_node("GlobalAveragePool", ["x"], ["g"]),
        h.make_node("Flatten", ["g"], ["f"]),
        h.make_node("Constant", [], ["w_const"], value=nh.from_array(np.full((3, 3), 0.5, np.float32))),
        h.make_node("Reshape", ["w_flat", "shape33"], ["w33"]),
        h.make_node("MatMul", ["f", "w33"], ["m1"]),
        h.make_node("MatMul", ["m1", "w_const"], ["y"]),
    ]
    graph = h.make_graph(
        nodes,
        "reshaped",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3, 16, 16])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 3])],
        [flat, shape],
    )
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 13)]), str(tmp_path / "r.onnx"))
    write_images(tmp_path / "calib", 4, 3)
    from edge.calib.cache import read_cache

    common = [str(tmp_path / "r.onnx"), "--images", str(tmp_path / "calib"), *SIZE]
    status, out, err = run(capsys, *common, "--cache", str(tmp_path / "full.cache"))
    assert status == 0, err
    status, out, err = run(capsys, *common, "--cache", str(tmp_path / "mo.cache"), "--cache-for", "modelopt")
    assert status == 0, err
    full, slim = read_cache(tmp_path / "full.cache").scales, read_cache(tmp_path / "mo.cache").scales
    assert {"w33", "w_const"} <= set(full) and full["w_const"] == pytest.approx(0.5 / 127, rel=1e-6)
    assert set(full) - set(slim) == {"w_const"}  # the Constant node's tensor goes; the reshape's stays
    assert slim["w33"] == pytest.approx(1 / 127, rel=1e-6)  # max |linspace(-1, 1)| / 127


def test_a_model_without_weights_gets_the_same_cache_for_either_reader(tmp_path, capsys):
    h = onnx.helper
    nodes = [h.make_node("GlobalAveragePool", ["x"], ["g"]), h.make_node("Flatten", ["g"], ["y"])]
    graph = h.make_graph(
        nodes,
        "no_weights",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3, 16, 16])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 3])],
    )
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 13)]), str(tmp_path / "w0.onnx"))
    write_images(tmp_path / "calib", 3, 4)
    from edge.calib.cache import read_cache

    for target in ("tensorrt", "modelopt"):
        args = [str(tmp_path / "w0.onnx"), "--images", str(tmp_path / "calib"), *SIZE, "--cache-for", target]
        status, out, err = run(capsys, *args, "--cache", str(tmp_path / f"{target}.cache"))
        assert status == 0, err
    full, slim = (read_cache(tmp_path / f"{t}.cache").scales for t in ("tensorrt", "modelopt"))
    assert slim == full and set(full) >= {"x", "g"}


def test_a_header_the_dla_cannot_read_is_not_followed_by_a_dla_hint(tiny, tmp_path, capsys):
    status, out, err = run(capsys, *base(tiny, tmp_path), "--cache-algorithm", "MinMaxCalibration")
    assert status == 0, err
    assert "note: the DLA reads only EntropyCalibration2 caches" in out and "--dla 0" not in out
    assert "(for the DLA, calibrate again with the default header)" in out


def test_every_layer_kept_in_fp16_is_an_exact_copy_and_the_sidecar_stays_strict_json(tiny, tmp_path, capsys):
    status, out, err = run(capsys, *base(tiny, tmp_path), "--keep-fp16", "conv1", "conv2", "pool", "fc", "--min-agreement", "1.0")
    assert status == 0, err
    side = json.loads((tmp_path / "t.cache.json").read_text())  # json.loads refuses nothing; the text must be JSON
    assert "Infinity" not in (tmp_path / "t.cache.json").read_text()
    # No Q/DQ left: what differs is float rounding between ONNX Runtime's optimisation levels (or nothing: null).
    assert side["layers"] == ["conv1", "conv2", "pool", "fc"] and side["after"]["agreement"] == 1.0
    assert "note: no layer is left in INT8; an --int8 build of this runs FP16 throughout" in out
    assert all(o["sqnr_db"] is None or o["sqnr_db"] > 100 for o in side["after"]["outputs"])
    from edge.calib.sidecar import Sidecar

    assert json.loads(Sidecar([], {"sqnr_db": float("inf"), "x": [float("nan")]}).to_json())["sqnr_db"] is None


def test_a_budget_that_cannot_be_met_says_by_how_much_exits_1_and_writes_nothing(tiny, tmp_path, capsys, monkeypatch):
    from edge.calib import check

    real = check.Checker.measure

    def worse(self, int8, *args, **kwargs):  # every INT8 candidate disagrees somewhere: no FP16 list helps
        m = real(self, int8, *args, **kwargs)
        for f in m.fidelity:
            f.agree = max(0, f.positions - 1)
        return m

    monkeypatch.setattr(check.Checker, "measure", worse)
    status, out, err = run(capsys, *base(tiny, tmp_path), "--min-agreement", "1.0")
    assert status == 1
    assert len(err.strip().splitlines()[-1:]) == 1 and "cannot be met" in err and "short by" in err
    assert not (tmp_path / "t.cache").exists() and not (tmp_path / "t.cache.json").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--percentile", "nan"], "argument --percentile: expected a finite number"),
        (["--percentile", "0"], "--percentile 0.0: must be in (0, 100]"),
        (["--min-agreement", "1.5"], "--min-agreement 1.5"),
        (["--max-drop", "0.5"], "--max-drop needs labelled images"),
        (["--max-drop", "-1", "--eval", "x"], "--max-drop -1.0"),
        (["--eval", "/nonexistent"], "--eval /nonexistent: not a folder"),
        (["--keep-fp16", "nope"], "--keep-fp16 nope: no node"),
        (["--trt-version", "eight"], "--trt-version 'eight'"),
        (["--agreement-images", "/nonexistent"], "not a folder"),
        (["--eval", "mnist_5k[:10]"], "that set makes inputs of [1, 3, 48, 96]"),
    ],
)
def test_bad_flags_are_refused_before_the_statistics_pass(tiny, tmp_path, capsys, extra, message):
    status, _, err = run(capsys, *base(tiny, tmp_path), *extra)
    assert status == 2 and message in err
    assert "statistics" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "model, message",
    [
        ("missing.onnx", "missing.onnx: file not found; pass an ONNX file or asset://NAME"),
        ("asset://nope", "unknown asset 'nope'; known assets:"),
    ],
)
def test_a_model_that_is_not_there_is_one_line(tiny, tmp_path, capsys, model, message):
    argv = base(tiny, tmp_path)
    status, _, err = run(capsys, str(tmp_path / model) if model.endswith(".onnx") else model, *argv[1:])
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1


def test_an_output_that_is_an_input_in_any_spelling_is_refused_before_the_work(tiny, tmp_path, capsys):
    model = tiny / "tiny.onnx"
    link = tmp_path / "hard.onnx"
    os.link(model, link)
    (tmp_path / "sym.onnx").symlink_to(model)
    for cache in (str(tiny / "calib" / ".." / "tiny.onnx"), str(link), str(tmp_path / "sym.onnx")):
        status, _, err = run(capsys, str(model), "--images", str(tiny / "calib"), *SIZE, "--cache", cache)
        said = "symbolic link" if cache.endswith("sym.onnx") else "same file as the input MODEL"  # links: refused as such
        assert status == 2 and said in err and "statistics" not in err
    status, _, err = run(capsys, *base(tiny, tmp_path), "--qdq", str(tmp_path / "t.cache"))
    assert status == 2 and "--qdq" in err and "same file as --cache" in err
    status, _, err = run(capsys, *base(tiny, tmp_path)[:-1], str(tmp_path / "missing" / "t.cache"))
    assert status == 2 and "does not exist" in err
    assert model.read_bytes()[:2] != b"TR"  # untouched


def test_eval_folder_with_labels_from_the_run_config(tiny, tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("model:\n  path: tiny.onnx\ninput:\n  size: [16, 16]\ntask:\n  type: classify\n  labels: [owl, dog, cat]\n")
    status, out, err = run(capsys, str(tiny / "tiny.onnx"), "--images", str(tiny / "calib"), "--config", str(cfg),
                           "--cache", str(tmp_path / "t.cache"), "--eval", str(tiny / "eval"))  # fmt: skip
    assert status == 0, err
    cfg.write_text("input:\n  size: [16, 16]\ntask:\n  type: classify\n  labels: [cat, dog]\n")
    status, _, err = run(capsys, str(tiny / "tiny.onnx"), "--images", str(tiny / "calib"), "--config", str(cfg),
                         "--cache", str(tmp_path / "t.cache"), "--eval", str(tiny / "eval"))  # fmt: skip
    assert status == 2 and "folder 'owl' is not among the 2 labels" in err
    (tmp_path / "labels.txt").write_bytes(b"cat\n\xffdog\n")
    cfg.write_text("input:\n  size: [16, 16]\ntask:\n  type: classify\n  labels: labels.txt\n")
    status, _, err = run(capsys, str(tiny / "tiny.onnx"), "--images", str(tiny / "calib"), "--config", str(cfg),
                         "--cache", str(tmp_path / "t.cache"), "--eval", str(tiny / "eval"))  # fmt: skip
    assert status == 2 and "task.labels" in err and "UTF-8" in err and len(err.strip().splitlines()) == 1
    cfg.write_text("input:\n  size: [16, 16]\ntask:\n  type: blazeface\n")
    status, _, err = run(capsys, str(tiny / "tiny.onnx"), "--images", str(tiny / "calib"), "--config", str(cfg),
                         "--cache", str(tmp_path / "t.cache"), "--eval", str(tiny / "eval"))  # fmt: skip
    # a declared decoder that the outputs do not fit is the first fault: named with the outputs, one line
    assert status == 2 and "key 'task.type': blazeface does not fit the model's outputs prob [1, 3]" in err
    assert len(err.strip().splitlines()) == 1


FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 1.0, 1e-9, 100.0, -0.0]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(agreement=FLOATS, drop=st.one_of(st.none(), FLOATS), percentile=FLOATS)
def test_number_flags_exit_0_1_or_2_with_one_line(tiny, tmp_path, capsys, agreement, drop, percentile):
    argv = [*base(tiny, tmp_path), f"--min-agreement={agreement!r}", f"--percentile={percentile!r}", "--method", "percentile"]
    argv += [f"--max-drop={drop!r}", "--eval", str(tiny / "eval")] if drop is not None else []
    status, _, err = run(capsys, *argv)
    assert status in (0, 1, 2)
    if status:
        assert len(err.strip().splitlines()[-1:]) == 1 and "Traceback" not in err
        assert "unexpected" not in err


NAMES = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"), min_size=1, max_size=12)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(folders=st.lists(NAMES, min_size=0, max_size=4, unique=True), labels=st.one_of(st.none(), st.lists(NAMES, max_size=5)),
       loose=st.booleans(), empty=st.booleans())  # fmt: skip
def test_eval_folder_layouts_are_read_or_refused_in_one_line(tmp_path_factory, folders, labels, loose, empty):
    from edge.calib.datasets import DIGITS_SPEC, labelled_folder
    from edge.errors import EdgeError

    root = tmp_path_factory.mktemp("eval")
    made = []
    for name in folders:
        try:
            (root / name).mkdir()
        except OSError:  # a name this file system refuses (".", "..", too long in bytes)
            continue
        made.append(name)
        if not empty:
            write_images(root / name, 1, 0)
    if loose:
        write_images(root, 1, 0)
    try:
        s = labelled_folder(root, DIGITS_SPEC, labels)
    except EdgeError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("--eval ")
        return
    classes = sorted(n for n in made if not n.startswith("."))
    names = labels or classes
    # Each image's class index is its folder's first position in the label list, folders in sorted order.
    expected = [names.index(c) for c in classes for _ in range(0 if empty else 1)]
    assert s.labels.tolist() == expected and s.count == len(expected)


def test_a_segmenter_whose_graph_ends_in_argmax_is_checked_by_its_class_ids(tmp_path, capsys):
    """Class ids [1, N, h, w] int64, the batch second (RapidAI's table lines end so): the check decodes them as ids
    of three classes, one image a run, and the raw output gets no SQNR. Read as float32 they were one channel of
    scores ("holds class 2, more than the 1 labels name"); two images a run were one map of two."""
    h, nh = onnx.helper, onnx.numpy_helper
    rng = np.random.default_rng(5)
    nodes = [
        h.make_node("Conv", ["x", "w"], ["scores"], "conv", pads=[1, 1, 1, 1]),
        h.make_node("ArgMax", ["scores"], ["ids"], "argmax", axis=1, keepdims=1),  # [N, 1, 16, 16]
        h.make_node("Transpose", ["ids"], ["out"], "batch_second", perm=[1, 0, 2, 3]),  # [1, N, 16, 16]
    ]
    graph = h.make_graph(
        nodes,
        "ids",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3, 16, 16])],
        [h.make_tensor_value_info("out", onnx.TensorProto.INT64, [1, "N", 16, 16])],
        [nh.from_array(rng.normal(0, 0.5, (3, 3, 3, 3)).astype(np.float32), "w")],
    )
    model = tmp_path / "ids.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 13)]), str(model))
    cfg = tmp_path / "seg.yaml"
    cfg.write_text(f"model:\n  path: {model}\ninput:\n  size: [16, 16]\ntask:\n  type: segment\n  labels: [a, b, c]\n")
    write_images(tmp_path / "calib", 6, 2)
    status, out, err = run(
        capsys, "--config", str(cfg), "--images", str(tmp_path / "calib"), "--cache", str(tmp_path / "s.cache")
    )
    assert status == 0, err
    assert "decisions of segment (3 classes)" in out and "(batch 1)" in err
    row = next(line.split() for line in out.splitlines() if line.strip().startswith("out "))
    assert row[1] == str(6 * 16 * 16) and row[-1] == "-"  # every pixel of the six images; no SQNR for ids
