"""The FP32 outputs the statistics pass keeps for the check (fidelity.Reference): agreement exactly as from the FP32
values themselves, SQNR within the report's precision, and the cases where float16 cannot hold them or the rows are
not one per image. The expectation is always the plain FidelityMeter fed the float32 outputs: the path used when the
check runs FP32 itself."""

from __future__ import annotations

import json
import math
import warnings
from types import SimpleNamespace
from typing import Dict, List

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.calib.fidelity import FidelityMeter, Reference

GRAPH = SimpleNamespace(producer={}, model=SimpleNamespace(graph=SimpleNamespace(node=[])))


def _meter() -> FidelityMeter:
    return FidelityMeter(GRAPH, ["y"], "nhwc")


def _both(runs: List[np.ndarray], int8: List[np.ndarray], limit: int = 1 << 30):
    """(direct, through a Reference, the Reference) over the same runs."""
    direct = _meter()
    for a, b in zip(runs, int8):
        direct.update({"y": a}, {"y": b})
    ref = Reference(_meter(), sum(len(a) for a in runs), limit)
    for a in runs:
        ref.add({"y": a}, len(a))
    kept = _meter()
    start = 0
    for b in int8:
        values, rows = ref.batch(start, start + len(b))
        kept.update(values, {"y": b}, rows)
        start += len(b)
    return direct.summary()[0], kept.summary()[0], ref


def test_near_ties_that_float16_would_merge_keep_fp32s_decision():
    """Two classes 1e-5 apart round to the same float16: argmax on the rounded values would pick the first."""
    a = np.array([[[1.0, 1.00001, 0.2]] * 4], np.float32)  # FP32 says class 1 at every step
    b = a.copy()
    direct, kept, ref = _both([a], [b])
    assert ref.values["y"].dtype == np.float16
    assert np.float16(1.0) == np.float16(1.00001)  # the premise: float16 cannot tell them apart
    assert direct.agreement == kept.agreement == 1.0


def test_values_float16_cannot_hold_are_kept_as_they_came():
    big = np.array([[1e6, -3e5, 2.0]], np.float32)  # beyond float16's 65504
    tiny = np.full((1, 3), 1e-7, np.float32) * np.array([1.0, 2.0, 3.0], np.float32)  # all below 2^-14
    for a in (big, tiny):
        b = a * np.float32(1.01)
        direct, kept, ref = _both([a], [b])
        assert ref.values["y"].dtype == np.float32
        assert (kept.signal, kept.noise, kept.agree) == (direct.signal, direct.noise, direct.agree)


def test_values_float16_cannot_hold_raise_no_warning():
    # float16 overflows to inf in the cast; the check then keeps the values as they came, silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _both([np.array([[1e6, 2.0]], np.float32)], [np.array([[1e6, 2.5]], np.float32)])


def test_float16s_smallest_normal_number_is_kept_and_only_smaller_ones_flushed():
    # 2^-14 is float16's smallest normal number: kept exactly; 2^-15 is below it: flushed to 0
    a = np.array([[100.0, 2.0**-14, 2.0**-15]], np.float32)
    _, _, ref = _both([a], [a])
    assert ref.values["y"].dtype == np.float16 and ref.values["y"].tolist() == [[100.0, 2.0**-14, 0.0]]


def test_a_float16_output_is_summed_in_float32_as_the_direct_check_does():
    # 1000 values of 10: a signal of 1e5 per image, past float16's 65504
    a = np.full((2, 1000), 10.0, np.float16)
    b = a + np.float16(0.5)
    direct, kept, _ = _both([a], [b])
    assert direct.signal == kept.signal == 2e5 and direct.noise == kept.noise == 500.0


def test_fp32_values_in_double_that_int8_gives_in_float_read_as_exact():
    # The digest is of float32 bytes: the same values in another float type are the same image. 1 + 2^-12 is not a
    # float16 (spacing 2^-10 at 1), so the kept values differ from FP32's: only the digest says they are the same.
    a = np.full((2, 4), 1 + 2.0**-12, np.float64)
    direct, kept, ref = _both([a], [a.astype(np.float32)])
    assert ref.values["y"].dtype == np.float16
    assert direct.sqnr_db == kept.sqnr_db == math.inf


def test_a_reference_missing_an_output_or_some_images_of_one_is_incomplete():
    meter = FidelityMeter(GRAPH, ["y", "z"], "nhwc")
    ref = Reference(meter, 4, 1 << 30)
    ref.add({"y": np.ones((2, 3), np.float32)}, 2)
    assert not ref.complete()  # z never came
    ref.add({"z": np.ones((2, 3), np.float32)}, 2)
    assert ref.complete()
    ref.add({"y": np.ones((2, 3), np.float32)}, 2)
    assert not ref.complete()  # y has 4 images, z 2
    ref.add({"z": np.ones((2, 3), np.float32)}, 2)
    assert ref.complete()


def test_a_later_run_float16_cannot_hold_turns_the_output_to_float32():
    rng = np.random.default_rng(1)
    first = rng.normal(size=(2, 5)).astype(np.float32)
    second = (rng.normal(size=(3, 5)) * 1e6).astype(np.float32)
    noise = [first + np.float32(0.01), second * np.float32(1.001)]
    direct, kept, ref = _both([first, second], noise)
    assert ref.values["y"].dtype == np.float32 and ref.complete() and ref.filled["y"] == 5
    assert np.array_equal(ref.values["y"][2:], second)
    assert np.allclose(ref.values["y"][:2], first, rtol=1e-3)
    assert kept.agree == direct.agree and kept.sqnr_db == pytest.approx(direct.sqnr_db, abs=0.01)


@pytest.mark.parametrize(
    "runs",
    [
        [np.zeros((3, 4), np.float32)],  # a run of 2 images whose output has 3 rows: not one row per image
        [np.zeros((2, 4), np.float32), np.zeros((2, 5), np.float32)],  # a shape that changes from run to run
        [np.zeros((), np.float32)],  # a scalar output
    ],
)
def test_outputs_that_are_not_one_row_per_image_are_not_kept(runs):
    ref = Reference(_meter(), 4, 1 << 30)
    for a in runs:
        ref.add({"y": a}, 2)
    assert ref.dropped and not ref.complete() and not ref.values


def test_outputs_over_the_memory_limit_are_not_kept():
    ref = Reference(_meter(), 100, limit_bytes=100 * 8 * 2 - 1)  # one byte short of 100 images x 8 float16
    ref.add({"y": np.ones((1, 8), np.float32)}, 1)
    assert ref.dropped and not ref.complete()
    fits = Reference(_meter(), 100, limit_bytes=100 * 8 * 2)
    fits.add({"y": np.ones((1, 8), np.float32)}, 1)
    assert not fits.dropped and fits.values["y"].nbytes == 1600


def test_integer_outputs_are_kept_exactly():
    ids = np.array([[3, 1, 4], [1, 5, 9]], np.int64)
    direct, kept, ref = _both([ids], [ids[::-1].copy()])
    assert ref.values["y"].dtype == np.int64 and np.array_equal(ref.values["y"], ids)
    assert (kept.positions, kept.agree) == (direct.positions, direct.agree)


@settings(max_examples=80, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.integers(-20, 15),  # the outputs' scale, 2^-20 .. 2^15
    st.sampled_from([1e-1, 1e-2, 1e-3]),  # INT8 error relative to the signal: SQNR about 20, 40, 60 dB
    st.sampled_from([(1, 12, 50), (4, 7), (2, 3, 5, 6)]),
    st.booleans(),  # softmax-like: most values tiny
)
def test_agreement_is_exact_and_sqnr_within_the_reports_precision(seed, exponent, error, shape, peaked):
    rng = np.random.default_rng(seed)
    runs: List[np.ndarray] = []
    int8: List[np.ndarray] = []
    for _ in range(3):
        a = rng.normal(size=shape)
        if peaked:
            a = np.exp(6 * a) / np.exp(6 * a).sum(axis=-1, keepdims=True)
        a = (a * 2.0**exponent).astype(np.float32)
        runs.append(a)
        int8.append((a + rng.normal(size=shape) * error * np.sqrt(np.mean(np.square(a)))).astype(np.float32))
    direct, kept, _ = _both(runs, int8)
    assert (kept.positions, kept.agree) == (direct.positions, direct.agree)
    assert kept.signal == pytest.approx(direct.signal, rel=1e-6)
    # The noise against rounded values is off by at most the rounding error's norm (triangle inequality).
    slack = math.sqrt(Reference.MAX_ROUNDING * direct.signal)
    assert max(0.0, math.sqrt(direct.noise) - slack) ** 2 * 0.999 <= kept.noise <= (math.sqrt(direct.noise) + slack) ** 2 * 1.001
    if direct.sqnr_db <= 30:
        assert kept.sqnr_db == pytest.approx(direct.sqnr_db, abs=0.15)


def test_the_recognisers_outputs_take_half_the_memory_and_give_the_same_check():
    """PP-OCRv5 rec's 12 x 18385 softmax on real digits: float16 with the tiny values flushed, the check's numbers as
    from float32."""
    ort = pytest.importorskip("onnxruntime")
    from edge.assets import resolve
    from edge.calib.datasets import dataset

    model = str(resolve("ppocrv5-rec", quiet=True))
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    images = dataset("opencv_digits[-8:]")
    runs: Dict[str, List[np.ndarray]] = {"y": []}
    for batch in images.batches(1):
        runs["y"].append(sess.run(None, {sess.get_inputs()[0].name: batch})[0])
    rng = np.random.default_rng(0)
    noisy = [(a * rng.uniform(0.9, 1.1, a.shape)).astype(np.float32) for a in runs["y"]]
    direct, kept, ref = _both(runs["y"], noisy)
    assert ref.values["y"].dtype == np.float16 and ref.values["y"].nbytes == sum(a.nbytes for a in runs["y"]) // 2
    assert (kept.positions, kept.agree) == (direct.positions, direct.agree)
    assert math.isclose(kept.sqnr_db, direct.sqnr_db, abs_tol=0.05)


def test_an_exact_copy_reads_as_exact_and_one_changed_image_as_its_own_noise():
    """INT8 that reproduces FP32 bit for bit has no noise, though the kept values are rounded to float16; when one
    image of three differs, the noise is that image's alone."""
    rng = np.random.default_rng(3)
    runs = [rng.normal(size=(3, 4, 9)).astype(np.float32)]
    direct, kept, ref = _both(runs, [runs[0].copy()])
    assert ref.values["y"].dtype == np.float16 and direct.sqnr_db == kept.sqnr_db == math.inf
    changed = runs[0].copy()
    changed[1] += np.float32(0.05)
    direct, kept, _ = _both(runs, [changed])
    assert kept.signal == pytest.approx(direct.signal, rel=1e-6)
    assert kept.noise == pytest.approx(direct.noise, rel=1e-2) and kept.noise > 0


def test_edge_calib_reports_the_same_check_with_and_without_the_kept_reference(tmp_path, capsys):
    """PP-OCRv5 rec on 12 real digits: with --memory-mb 1 nothing is kept and the check runs FP32 again; with the
    default the statistics pass's outputs are kept. The sidecars must agree: same positions and agreement, SQNR
    within the bound."""
    pytest.importorskip("onnxruntime")
    _same_check_kept_or_not(["asset://ppocrv5-rec", "--dataset", "opencv_digits[-12:]"], tmp_path, capsys)


def _same_check_kept_or_not(argv: List[str], tmp_path, capsys) -> None:
    """edge calib twice: with --memory-mb 1 (nothing kept, the check runs FP32 again) and the default (kept); the
    sidecars' check must agree: positions and agreement exactly, SQNR within the bound."""
    from edge import cli

    sides = []
    for extra in (["--memory-mb", "1"], []):
        cache = tmp_path / f"c{len(sides)}.cache"
        assert cli.main(["calib", *argv, "--cache", str(cache), *extra]) == 0, capsys.readouterr().err
        sides.append(json.loads((tmp_path / f"{cache.name}.json").read_text())["before"])
    rerun, kept = sides
    assert [o["positions"] for o in kept["outputs"]] == [o["positions"] for o in rerun["outputs"]]
    assert kept["agreement"] == rerun["agreement"]
    assert [o["sqnr_db"] for o in kept["outputs"]] == pytest.approx([o["sqnr_db"] for o in rerun["outputs"]], abs=0.05)


def _odd_output_model(path, tail: str):
    """Conv -> Relu -> GlobalAveragePool -> Flatten [N, 4], then an output edge calib must not mis-slice by image:
    cast to double, flattened across the batch, or summed to a scalar."""
    onnx = pytest.importorskip("onnx")
    h, nh, T = onnx.helper, onnx.numpy_helper, onnx.TensorProto
    tails = {
        "double": ([h.make_node("Cast", ["f"], ["y"], to=T.DOUBLE)], T.DOUBLE, ["N", 4]),
        "across-batch": ([h.make_node("Reshape", ["f", "minus1"], ["y"])], T.FLOAT, [None]),
        "scalar": ([h.make_node("ReduceSum", ["f"], ["y"], keepdims=0)], T.FLOAT, []),
    }
    nodes, out_type, out_shape = tails[tail]
    rng = np.random.default_rng(0)
    graph = h.make_graph(
        [
            h.make_node("Conv", ["x", "w"], ["c"], "conv", pads=[1, 1, 1, 1]),
            h.make_node("Relu", ["c"], ["r"], "relu"),
            h.make_node("GlobalAveragePool", ["r"], ["g"], "gap"),
            h.make_node("Flatten", ["g"], ["f"], "flat"),
            *nodes,
        ],
        "odd",
        [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, 16, 16])],
        [h.make_tensor_value_info("y", out_type, out_shape)],
        [
            nh.from_array(rng.normal(0, 0.5, (4, 3, 3, 3)).astype(np.float32), "w"),
            nh.from_array(np.array([-1], np.int64), "minus1"),
        ],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("tail", ["double", "across-batch", "scalar"])
def test_odd_outputs_give_the_same_check_kept_or_run_again(tmp_path, capsys, tail):
    cv2 = pytest.importorskip("cv2")
    model = _odd_output_model(tmp_path / "m.onnx", tail)
    images = tmp_path / "imgs"
    images.mkdir()
    for k, pixels in enumerate(np.random.default_rng(1).integers(0, 256, (10, 16, 16, 3), np.uint8)):
        cv2.imwrite(str(images / f"{k}.png"), pixels)
    _same_check_kept_or_not([str(model), "--images", str(images), "--set", "input.size=[16, 16]"], tmp_path, capsys)


def test_the_checks_own_first_fp32_pass_is_kept_and_reused():
    """Without the statistics pass's outputs, the first measurement runs FP32 and keeps what it saw; the next one
    runs only INT8 and measures the same."""
    pytest.importorskip("onnxruntime")
    from edge.assets import resolve
    from edge.calib.check import Checker
    from edge.calib.datasets import dataset
    from edge.graph.model import load_model, model_inputs, prepare

    model = load_model(resolve("ppocrv5-rec", quiet=True))
    images = dataset("opencv_digits[-8:]")
    graph = prepare(model, {model_inputs(model)[0].name: (1, 3, images.spec.height, images.spec.width)})
    checker = Checker(model, graph, images.spec.layout, images, threads=1)
    runs = []
    fp32 = checker.fp32
    checker._fp32_session = SimpleNamespace(run=lambda *a: runs.append(1) or fp32.run(*a), get_inputs=fp32.get_inputs)
    first = checker.measure(model)  # the FP32 model as its own "INT8" candidate: an exact copy
    assert runs and first.fidelity[0].sqnr_db == math.inf
    count = len(runs)
    second = checker.measure(model)
    assert len(runs) == count, "FP32 ran again"
    assert second.fidelity[0].sqnr_db == math.inf and second.agreement == first.agreement == 1.0
