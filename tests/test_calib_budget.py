"""The label-free check, the budget search, the mse threshold and the FP16 sidecar, each against a truth from
outside: a brute-force INT8 round trip, hand-computed SQNR and agreement, real graphs (BlazeFace, PP-OCRv4 det)
for which outputs are probabilities, TensorRT-RTX's real ONNX parser for the layer names the sidecar must match, and
NVIDIA's binding sources (8.5.2, 10.3.0) for the precision API the builder calls."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.calib.budget import Budget, describe_miss, search
from edge.calib.check import Measurement
from edge.calib.fidelity import FidelityMeter, OutputFidelity, class_axis, decisions
from edge.calib.methods import amax, mse_bin, mse_errors
from edge.calib.sidecar import Sidecar, parse, read_sidecar, sidecar_path
from edge.errors import EdgeError

# --- mse ------------------------------------------------------------------------------------------------------------


def round_trip_mse(x: np.ndarray, threshold: float) -> float:
    """What INT8 does to the values, literally: scale T/127, round half to even, clip to +-127."""
    s = threshold / 127
    return float(np.mean((x - np.clip(np.round(x / s), -127, 127) * s) ** 2))


@pytest.mark.parametrize("kind", ["laplace", "relu", "uniform+outlier"])
def test_mse_model_matches_a_literal_round_trip_of_the_values(kind):
    rng = np.random.default_rng(3)
    x = {
        "laplace": lambda: np.abs(rng.laplace(size=200_000)),
        "relu": lambda: np.maximum(rng.standard_normal(200_000), 0),
        "uniform+outlier": lambda: np.abs(np.append(rng.uniform(-1, 1, 200_000), 40.0)),
    }[kind]()
    hist, edges = np.histogram(x, 2048, (0, x.max()))
    w = edges[1]
    err = mse_errors(hist) * w * w / x.size
    for i in (128, 256, 512, 1024, 2048):
        assert err[i - 1] == pytest.approx(round_trip_mse(x, i * w), rel=0.05)
    # The chosen threshold is within 1 % (of the range) of the best one a brute-force grid finds.
    grid = np.arange(16, 2049, 16)
    brute = grid[int(np.argmin([round_trip_mse(x, g * w) for g in grid]))]
    assert round_trip_mse(x, mse_bin(hist) * w) <= 1.01 * round_trip_mse(x, brute * w)


def test_mse_never_clips_a_spike_at_the_maximum_and_never_exceeds_max_abs():
    # Pixels normalised to [-1, 1] sit mostly at exactly +-1: clipping them costs more than any rounding saves.
    # (Entropy puts this threshold at 0.07: docs/benchmarks.md.)
    hist = np.zeros(2048)
    hist[-1], hist[:100] = 1000, 1
    assert mse_bin(hist) >= 2047
    assert amax("mse", hist, 1.0, 1.0) >= 0.999
    assert amax("mse", hist, 2.0, 1.7) == 1.7


# --- agreement and SQNR ----------------------------------------------------------------------------------------------


def test_decisions_follow_the_class_axis_of_each_kind_of_output():
    logits = np.array([[[0.2, -0.1], [-3.0, 0.5]]])  # [N=1, anchors=2, 2 classes]
    assert decisions(logits, class_axis(3, "nhwc"), 0.0).tolist() == [[0, 1]]
    score = np.array([[[0.3], [-0.2]]])  # one logit per anchor: yes when > 0
    assert decisions(score, 2, 0.0).tolist() == [[True, False]]
    prob_map = np.array([[[[0.7, 0.2], [0.4, 0.9]]]])  # [N, 1, H, W] from a Sigmoid: yes when > 0.5
    assert class_axis(4, "nchw") == 1 and decisions(prob_map, 1, 0.5).tolist() == [[[True, False], [False, True]]]


def test_agreement_and_sqnr_by_hand():
    graph = SimpleNamespace(producer={}, model=SimpleNamespace(graph=SimpleNamespace(node=[])))
    meter = FidelityMeter(graph, ["y"], "nchw")
    fp32 = {"y": np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 1.0]], np.float32)}
    int8 = {"y": np.array([[1.0, 0.0, 0.5], [0.0, 1.0, 1.5]], np.float32)}
    meter.update(fp32, int8)
    (r,) = meter.summary()
    # Row 1: argmax 0 vs 0; row 2: 1 vs 2. Signal 1 + 4 + 1 = 6, noise 0.25 + 1 + 0.25 = 1.5.
    assert r.positions == 2 and r.agreement == 0.5
    assert r.sqnr_db == pytest.approx(10 * math.log10(6 / 1.5))
    assert OutputFidelity("z", 3, 3, 1.0, 0.0).sqnr_db == math.inf


def test_which_real_outputs_are_probabilities():
    """PP-OCRv4 det ends in a Sigmoid (threshold 0.5); BlazeFace's scores are raw logits (threshold 0)."""
    from edge.assets import resolve
    from edge.calib.fidelity import is_probability
    from edge.graph.model import prepare

    pytest.importorskip("onnx")
    det = prepare(resolve("ppocrv4-det", quiet=True), {"x": (1, 3, 320, 320)})
    assert is_probability(det, det.outputs[0])
    face = prepare(resolve("blazeface-back-256", quiet=True))
    assert [is_probability(face, o) for o in face.outputs] == [False] * 4  # two score and two box outputs


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 3), st.integers(1, 6), st.integers(0, 2**31 - 1))
def test_identical_outputs_agree_everywhere_and_noise_only_lowers_sqnr(rank_extra, classes, seed):
    rng = np.random.default_rng(seed)
    shape = (2, *([3] * rank_extra), classes)
    a = rng.normal(size=shape).astype(np.float32)
    graph = SimpleNamespace(producer={}, model=SimpleNamespace(graph=SimpleNamespace(node=[])))
    same = FidelityMeter(graph, ["y"], "nhwc")
    same.update({"y": a}, {"y": a.copy()})
    assert same.summary()[0].agreement == 1.0 and same.summary()[0].sqnr_db == math.inf
    noisy = FidelityMeter(graph, ["y"], "nhwc")
    noisy.update({"y": a}, {"y": a + rng.normal(scale=0.1, size=shape).astype(np.float32)})
    r = noisy.summary()[0]
    assert 0.0 <= r.agreement <= 1.0 and r.sqnr_db < math.inf


def test_sqnr_over_millions_of_values_matches_a_float64_sum():
    """Batches of a large output (a recogniser's 1200 steps x 18385 classes, in spirit) summed in float32 dot
    products must give the SQNR a float64 sum gives, to well under the 0.1 dB the report shows."""
    rng = np.random.default_rng(5)
    graph = SimpleNamespace(producer={}, model=SimpleNamespace(graph=SimpleNamespace(node=[])))
    meter = FidelityMeter(graph, ["y"], "nhwc")
    signal = noise = 0.0
    for _ in range(4):
        a = (rng.normal(size=(8, 12, 20000)) * 3 + 5).astype(np.float32)  # a large mean: float32 sums drift most
        b = a + rng.normal(scale=0.02, size=a.shape).astype(np.float32)
        meter.update({"y": a}, {"y": b})
        signal += float(np.square(a.astype(np.float64)).sum())
        noise += float(np.square(a.astype(np.float64) - b.astype(np.float64)).sum())
    assert meter.summary()[0].sqnr_db == pytest.approx(10 * math.log10(signal / noise), abs=1e-3)


# --- the search ------------------------------------------------------------------------------------------------------


def fake(agreement: float) -> Measurement:
    return Measurement([OutputFidelity("y", 100, int(round(agreement * 100)))])


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 80), st.integers(0, 80))
def test_search_finds_the_smallest_k_of_a_monotone_budget_in_logarithmic_checks(n, needed):
    ranking = list(range(n))
    calls = []

    def measure(k):
        calls.append(k)
        return fake(1.0 if k >= needed else 0.5)

    budget = Budget(min_agreement=0.99)
    r = search(ranking, measure, lambda m: budget.shortfall(m, None), measure(0))
    if needed <= n:
        assert r.met and r.kept == needed
    else:
        assert not r.met and r.shortfall == pytest.approx(0.49)
    assert len(calls) <= 2 * max(1, math.ceil(math.log2(n + 1))) + 2


def test_budget_shortfall_of_top1_points():
    m = Measurement([], labelled=SimpleNamespace(top1=0.90, score=0.90, metric="top-1", top5=1.0, images=100))
    assert Budget(max_drop=0.5).shortfall(m, 0.915) == pytest.approx(1.0)
    assert Budget(max_drop=2.0).shortfall(m, 0.915) == 0.0


def test_a_search_that_never_meets_the_budget_keeps_the_closest_k_and_the_fewest_on_ties():
    shortfalls = {0: 0.5, 1: 0.3, 2: 0.1, 4: 0.2, 5: 0.1}  # 1, 2, 4, then the whole ranking of 5

    def measure(k):
        return Measurement([OutputFidelity("y", 100, k)])

    r = search(range(5), measure, lambda m: shortfalls[m.fidelity[0].agree], measure(0))
    assert (r.kept, r.met, r.shortfall, r.measurement.fidelity[0].agree) == (2, False, 0.1, 2)
    assert r.tried == [(0, 0.5), (1, 0.3), (2, 0.1), (4, 0.2), (5, 0.1)]


def test_a_search_over_no_layers_is_the_start_alone():
    start = fake(0.5)
    r = search([], lambda k: pytest.fail("nothing to measure"), lambda m: 0.25, start)
    assert (r.kept, r.met, r.measurement, r.shortfall, r.tried) == (0, False, start, 0.25, [(0, 0.25)])
    r = search([3, 1], lambda k: pytest.fail("nothing to measure"), lambda m: 0.0, start)
    assert (r.kept, r.met, r.tried) == (0, True, [(0, 0.0)])


def test_a_met_search_returns_the_measurement_of_the_k_it_keeps():
    measured = {k: fake(1.0 if k >= 3 else 0.5) for k in range(9)}
    budget = Budget(min_agreement=0.99)
    r = search(range(8), measured.__getitem__, lambda m: budget.shortfall(m, None), measured[0])
    # 1, 2, 4 (met), then 3 between 2 and 4
    assert (r.kept, r.met, r.shortfall) == (3, True, 0.0) and r.measurement is measured[3]
    assert r.tried == [(0, pytest.approx(0.49)), (1, pytest.approx(0.49)), (2, pytest.approx(0.49)), (4, 0.0), (3, 0.0)]


def test_the_agreement_budget_watches_the_named_outputs_or_all():
    m = Measurement([OutputFidelity("boxes", 10, 5), OutputFidelity("scores", 10, 9)])
    assert Budget(min_agreement=0.8).shortfall(m, None) == pytest.approx(0.3)  # boxes: 0.8 - 0.5
    assert Budget(min_agreement=0.8, outputs=["scores"]).shortfall(m, None) == 0.0
    assert Budget(min_agreement=0.95, outputs=["scores"]).shortfall(m, None) == pytest.approx(0.05)
    assert Budget(min_agreement=0.99).agreement(Measurement([])) == 1.0  # nothing watched: nothing missed
    # the larger of the two misses: 0.3 of agreement against 1.5 - 1.0 = 0.5 points
    labelled = SimpleNamespace(score=0.885, metric="top-1")
    both = Budget(min_agreement=0.8, max_drop=1.0)
    assert both.shortfall(Measurement(m.fidelity, labelled), 0.9) == pytest.approx(0.5)
    # without the labelled score (no labelled set, or no FP32 score) the drop is not judged
    assert both.shortfall(Measurement(m.fidelity, labelled), None) == pytest.approx(0.3)
    assert both.shortfall(m, 0.9) == pytest.approx(0.3)
    # a miss of float rounding's size is none
    assert Budget(min_agreement=0.1 + 0.2).shortfall(Measurement([OutputFidelity("y", 10, 3)]), None) == 0.0


def test_a_budget_is_given_by_either_limit_and_written_with_what_it_holds():
    assert not Budget().given and Budget().to_dict() == {}
    assert Budget(min_agreement=0.0).given and Budget(max_drop=0.0).given
    assert Budget(min_agreement=0.99, max_drop=1.5, outputs=["y"]).to_dict() == {
        "min_agreement": 0.99,
        "max_drop_points": 1.5,
        "outputs": ["y"],
    }
    assert Budget(max_drop=1.5).to_dict() == {"max_drop_points": 1.5}


def test_a_missed_budget_says_by_how_much():
    labelled = SimpleNamespace(score=0.885, metric="mAP@0.5:0.95")
    m = Measurement([OutputFidelity("y", 100, 95)], labelled)
    both = Budget(min_agreement=0.99, max_drop=0.5)
    assert describe_miss(both, m, 0.9) == (
        "agreement 0.9500 < 0.99 (short by 0.0400); mAP@0.5:0.95 drop 1.50 points > 0.5 (over by 1.00)"
    )
    assert describe_miss(Budget(min_agreement=0.95, max_drop=1.5), m, 0.9) == "met"  # equal is within the budget
    assert describe_miss(both, m, None) == "agreement 0.9500 < 0.99 (short by 0.0400)"
    assert describe_miss(Budget(max_drop=0.5), Measurement(m.fidelity), 0.9) == "met"


# --- the sidecar -----------------------------------------------------------------------------------------------------


def test_sidecar_round_trip_and_name(tmp_path):
    assert sidecar_path(tmp_path / "rec.cache") == tmp_path / "rec.cache.json"
    text = Sidecar(["Conv.0", "MatMul.8"], {"method": "mse"}).to_json()
    (tmp_path / "rec.cache.json").write_text(text)
    s = read_sidecar(tmp_path / "rec.cache")
    assert s.layers == ["Conv.0", "MatMul.8"] and s.info == {"method": "mse"}
    assert read_sidecar(tmp_path / "other.cache") is None


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=300), st.recursive(st.none() | st.booleans() | st.floats() | st.text(max_size=8),
       lambda c: st.lists(c, max_size=4) | st.dictionaries(st.sampled_from(["edge_fp16_layers", "layers", "x"]), c, max_size=3),
       max_leaves=12).map(lambda d: json.dumps(d).encode())))  # fmt: skip
def test_any_bytes_give_a_sidecar_or_one_line_edge_error(data):
    try:
        s = parse(data, "sidecar x")
    except EdgeError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("sidecar x: ")
        return
    assert all(isinstance(n, str) and n for n in s.layers)


# --- the builder applies it -------------------------------------------------------------------------------------------


def test_the_binding_names_the_builder_uses_exist_in_tensorrt_8_5_and_10_3():
    """Checked against the Python surfaces generated from NVIDIA's binding sources (scripts/trt_surface.py; a test
    regenerates them from ../shared/reference where that exists), so it runs in CI without the sources."""
    surfaces = Path(__file__).parent / "trt_surfaces"
    for version in ("8.5.2", "10.3.0"):
        surface = json.loads((surfaces / f"{version}.json").read_text())
        precision = surface["classes"]["ILayer"]["members"]["precision"]
        assert precision["kind"] == "property" and precision["writable"]
        assert {"OBEY_PRECISION_CONSTRAINTS", "FP16"} <= set(surface["enums"]["BuilderFlag"]["values"])
        assert "HALF" in surface["enums"]["DataType"]["values"]


def test_sidecar_layer_names_are_the_layer_names_of_tensorrts_parser(tmp_path):
    """TensorRT-RTX's real ONNX parser names the layers; the precision setters (absent from TensorRT-RTX, which is
    strongly typed) are a stand-in recording what the builder asked for."""
    pytest.importorskip("onnx")
    trt = pytest.importorskip("tensorrt_rtx")
    from edge.assets import resolve
    from edge.builder import trt as trt_api
    from edge.builder.engine import parse as parse_onnx
    from edge.builder.precision import apply_fp16_layers, fp16_from_sidecar
    from edge.calib.qdq import layer_name
    from edge.graph.model import load_model

    model = resolve("blazeface-back-256", quiet=True)
    builder = trt.Builder(trt_api.logger())
    caps = trt_api.detect(trt, builder)
    network, _parser = parse_onnx(trt, builder, caps, model, caps.strongly_typed_flag)
    convs = [layer_name(n) for n in load_model(model).graph.node if n.op_type == "Conv"][:3]

    class Layer:
        def __init__(self, real):
            self.name, self.precision = real.name, None

    class Network:
        num_layers = network.num_layers
        layers = [Layer(network.get_layer(i)) for i in range(network.num_layers)]

        def get_layer(self, i):
            return self.layers[i]

    class Config:
        flags = []

        def set_flag(self, flag):
            self.flags.append(flag)

    fake_trt = SimpleNamespace(
        DataType=SimpleNamespace(HALF="HALF"), BuilderFlag=SimpleNamespace(FP16="FP16", OBEY_PRECISION_CONSTRAINTS="OBEY")
    )
    net, config = Network(), Config()
    apply_fp16_layers(fake_trt, config, net, convs, "sidecar")
    assert sorted(layer.name for layer in net.layers if layer.precision == "HALF") == sorted(convs)
    assert config.flags == ["FP16", "OBEY"]
    with pytest.raises(EdgeError, match="layer 'no_such_layer' is not in the parsed network"):
        apply_fp16_layers(fake_trt, Config(), Network(), ["no_such_layer"], "sidecar")
    # The hook applies a sidecar only with the cache it belongs to.
    cache = tmp_path / "m.cache"
    cache.write_text("TRT-100300-EntropyCalibration2\n")
    sidecar_path(cache).write_text(Sidecar(convs).to_json())
    plan = SimpleNamespace(precisions=["fp32", "int8"], notes=[])
    fp16_from_sidecar(fake_trt, Config(), Network(), SimpleNamespace(cache_path=cache, cached=None), plan)
    assert plan.precisions == ["fp32", "int8"] and "not applied" in plan.notes[0]
    fp16_from_sidecar(fake_trt, Config(), Network(), SimpleNamespace(cache_path=cache, cached=b"..."), plan)
    assert plan.precisions == ["fp32", "int8", "fp16"] and "3 layer(s) in FP16 from m.cache.json" in plan.notes[1]
