"""Streaming statistics: exact re-binning, histograms equal to a one-shot histogram, the tensors TensorRT wants
scales for, memory planning, and collection through ONNX Runtime on a small real graph."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from edge.calib.datasets import ImageSet
from edge.calib.stats import BINS, SMALL, Collector, TensorStats, calibration_tensors, collect, plan, rebin
from edge.errors import EdgeError
from edge.graph.model import prepare
from edge.runtime.engines.preprocess import PreprocessSpec


def test_rebin_sums_neighbours_and_keeps_every_count():
    hist = np.arange(16, dtype=np.int64)
    out = rebin(hist, 4)
    assert list(out) == [6, 22, 38, 54] + [0] * 12
    assert out.sum() == hist.sum()
    assert rebin(hist, 32)[0] == hist.sum() and rebin(hist, 32)[1:].sum() == 0


def test_streamed_histogram_equals_one_histogram_over_the_final_range():
    rng = np.random.default_rng(0)
    batches = [rng.normal(0, s, 20_000).astype(np.float32) for s in (1.0, 3.0, 0.5, 9.0)]
    stats = TensorStats("t")
    for b in batches:
        stats.add(b.copy(), images=2)  # two images' worth: under the sampling threshold, every value is counted
    every = np.abs(np.concatenate(batches))
    assert stats.absmax == pytest.approx(float(every.max()))
    assert stats.hist.sum() == every.size
    first = float(np.abs(batches[0]).max())
    assert stats.range / first == 2 ** round(np.log2(stats.range / first))  # grew by powers of two only
    direct, _ = np.histogram(every, BINS, (0, stats.range))
    assert np.abs(direct - stats.hist).sum() <= 4  # only values within a float rounding of a bin edge may move


def test_values_are_not_modified_and_non_finite_values_are_reported():
    x = np.array([-1.0, 2.0, -3.0], np.float32)
    TensorStats("t").add(x)
    assert list(x) == [-1.0, 2.0, -3.0]
    with pytest.raises(EdgeError, match="tensor 'bad' holds inf or NaN"):
        TensorStats("bad").add(np.array([1.0, np.nan], np.float32))


def test_all_zero_tensor_counts_into_bin_zero_until_values_arrive():
    stats = TensorStats("t")
    stats.add(np.zeros(10, np.float32))
    stats.add(np.array([0.0, 2.0], np.float32))
    assert stats.hist[0] == 11 and stats.hist[-1] == 1 and stats.range == 2.0


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, SMALL), min_size=1, max_size=12),
    spreads=st.lists(st.sampled_from([0.0, 1e-3, 1.0, 7.5, 300.0]), min_size=3, max_size=3),
    seed=st.integers(0, 2**31),
)
def test_small_tensors_counted_together_get_the_histograms_each_would_get_alone(sizes, spreads, seed):
    """The reference is TensorStats.add, tensor by tensor, on the same runs: same maxima, ranges and bin counts."""
    rng = np.random.default_rng(seed)
    names = [f"t{k}" for k in range(len(sizes))]
    runs = [{n: (rng.standard_normal(size) * s).astype(np.float32) for n, size in zip(names, sizes)} for s in spreads]
    runs.append(runs[0])  # values equal to the range: the bin past the end
    together, alone = Collector(names), {n: TensorStats(n) for n in names}
    for k, run in enumerate(runs + [{}]):
        if k == len(runs):  # values on and just below every bin edge, where rounding decides the bin
            grid = {
                n: np.float32(alone[n].range / BINS) * (np.arange(size) % BINS).astype(np.float32)
                for n, size in zip(names, sizes)
            }
            run = {n: np.nextafter(g, np.float32(0)) if int(n[1:]) % 2 else g for n, g in grid.items()}
        for n, values in run.items():
            alone[n].add(values.copy())
        together.update({n: v.copy() for n, v in run.items()})
    for n in names:
        assert together.stats[n].absmax == alone[n].absmax
        assert together.stats[n].range == alone[n].range
        assert np.array_equal(together.stats[n].hist, alone[n].hist), n


def test_a_small_tensor_with_nan_is_named_when_counted_together():
    collector = Collector(["a", "b", "c"])
    first = {n: np.ones(10, np.float32) for n in "abc"}
    collector.update(first)  # ranges set: the next run takes the together path
    with pytest.raises(EdgeError, match="tensor 'b' holds inf or NaN"):
        collector.update({"a": np.ones(10, np.float32), "b": np.array([1.0, np.inf], np.float32), "c": np.ones(3, np.float32)})


def _tiny_model() -> onnx.ModelProto:
    """x -> Conv -> Relu -> Reshape -> MatMul (constant weight) -> Add (constant bias): the shape of a classifier."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.normal(size=(4, 3, 3, 3)).astype(np.float32), "conv.w")
    fc = numpy_helper.from_array(rng.normal(size=(4 * 8 * 8, 5)).astype(np.float32), "fc.w")
    bias = numpy_helper.from_array(rng.normal(size=(5,)).astype(np.float32), "fc.b")
    shape = numpy_helper.from_array(np.array([-1, 4 * 8 * 8], np.int64), "flat")
    nodes = [
        helper.make_node("Conv", ["x", "conv.w"], ["conv"], "conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"], "relu"),
        helper.make_node("Reshape", ["relu", "flat"], ["flat_out"], "flatten"),
        helper.make_node("MatMul", ["flat_out", "fc.w"], ["logits"], "fc"),
        helper.make_node("Add", ["logits", "fc.b"], ["y"], ""),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])],
        [w, fc, bias, shape],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_sampling_starts_above_sample_above_values_of_one_image():
    from edge.calib.stats import SAMPLE_ABOVE, counting_stride

    assert counting_stride((SAMPLE_ABOVE,)) == 1  # one image unless told: "more than SAMPLE_ABOVE" counts all
    assert counting_stride((SAMPLE_ABOVE + 1,)) == 3  # 3: the first prime from SAMPLE_STRIDE, and 65537 is prime


def test_per_image_bytes_are_float32_sizes_and_unknown_shapes_count_as_the_largest():
    from edge.calib.stats import per_image_bytes, session_bytes

    graph = prepare(_tiny_model(), {"x": (1, 3, 8, 8)})
    graph.shapes["unknown"] = ("N", 7)
    # conv: 4 x 8 x 8 floats; logits: 5 floats; the unknown one as the largest known
    assert per_image_bytes(graph, ["conv", "logits", "unknown"]) == {"conv": 1024, "logits": 20, "unknown": 1024}
    assert per_image_bytes(graph, ["unknown"]) == {"unknown": 4}  # nothing known: one float
    # a session costs about four times the model (PP-OCRv5 rec: 63 MB per session of a 16 MB model)
    assert session_bytes(graph.model) == 4 * graph.model.ByteSize()


def test_calibration_tensors_are_inputs_node_outputs_and_constants_outside_weight_slots():
    graph = prepare(_tiny_model(), {"x": (1, 3, 8, 8)})
    acts, consts = calibration_tensors(graph)
    assert acts == ["x", "conv", "relu", "flat_out", "logits", "y"]
    assert sorted(consts) == ["fc.b", "fc.w"]  # the Conv weight is a layer weight in TensorRT, not a tensor


def test_plan_fits_the_batch_to_the_budget_and_splits_only_when_one_image_is_too_big():
    sizes = {"a": 100, "b": 300}
    assert plan(sizes, 4000, 32) == (10, [["a", "b"]])
    assert plan(sizes, 4000, 4) == (4, [["a", "b"]])
    assert plan(sizes, 350, 32) == (1, [["a"], ["b"]])
    # a group filled to exactly the budget still fits: 200 + 200 = 400
    assert plan({"a": 200, "b": 200, "c": 200}, 400, 32) == (1, [["a", "b"], ["c"]])


@pytest.mark.parametrize("budget", [1, 10_000, 4 << 20])
def test_a_tiny_budget_never_splits_into_more_sessions_than_it_saves(budget):
    """An attack: --memory-mb 1 split PP-OCRv5 rec's 47 MB per image into a hundred groups, each an ONNX Runtime
    session of the model, and took 5.8 GB. Memory is about g * session + 2 * tensors / g for g groups; the plan's
    cost must be near the least over every g (found here by trying them all)."""
    mb = 1 << 20
    sizes = {f"t{k}": mb // 2 for k in range(94)}  # 47 MB per image, in tensors of 0.5 MB
    session = 64 * mb
    batch, groups = plan(sizes, budget, 32, session)
    assert batch == 1 and sorted(t for g in groups for t in g) == sorted(sizes)

    def cost(g: int) -> float:
        return g * session + 2 * 47 * mb / g

    best = min(cost(g) for g in range(1, 95))
    assert cost(len(groups)) <= 1.25 * best, (len(groups), cost(len(groups)) / best)
    assert len(plan(sizes, budget, 32)[1]) > len(groups) or budget > 2 * mb  # the budget alone would split further


def test_collect_runs_onnx_runtime_and_matches_numpy_on_the_same_tensors():
    ort = pytest.importorskip("onnxruntime")
    model = _tiny_model()
    graph = prepare(model, {"x": (1, 3, 8, 8)})
    acts, _ = calibration_tensors(graph)
    rng = np.random.default_rng(2)
    frames = [rng.integers(0, 256, (8, 8, 3), dtype=np.uint8) for _ in range(7)]
    images = ImageSet("synthetic", PreprocessSpec(width=8, height=8), lambda i: frames[i], len(frames))
    # A budget of two images' tensors: several batches and a short last one.
    calls = []
    stats = collect(
        model,
        graph,
        images,
        acts,
        budget_bytes=2 * 2 * 4 * (192 + 256 * 3 + 10),
        max_batch=32,
        progress=lambda *a: calls.append(a),
    )
    size = calls[0][1]  # progress(images done, batch size) after every batch, the last one short
    assert 1 < size < 7 and calls == [(min(k * size, 7), size) for k in range(1, math.ceil(7 / size) + 1)], calls
    batch = np.concatenate(list(images.batches(7)))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert stats["x"].absmax == pytest.approx(float(np.abs(batch).max()))
    assert stats["x"].hist.sum() == batch.size
    (y,) = sess.run(["y"], {"x": batch})
    assert stats["y"].absmax == pytest.approx(float(np.abs(y).max()), rel=1e-5)
    assert stats["y"].hist.sum() == y.size


def test_a_reshaped_tensor_is_not_counted_again_but_gets_the_statistics_of_its_own_values():
    """The Reshape's output is measured through its input; the reference is ONNX Runtime's own Reshape output on the
    same images, counted directly."""
    ort = pytest.importorskip("onnxruntime")
    from edge.calib.stats import value_sources

    model = _tiny_model()
    graph = prepare(model, {"x": (1, 3, 8, 8)})
    acts, _ = calibration_tensors(graph)
    assert value_sources(graph, acts) == {"flat_out": "relu"}  # "y" is produced by Add; outputs are measured anyway
    rng = np.random.default_rng(4)
    frames = [rng.integers(0, 256, (8, 8, 3), dtype=np.uint8) for _ in range(5)]
    images = ImageSet("synthetic", PreprocessSpec(width=8, height=8), lambda i: frames[i], len(frames))
    stats = collect(model, graph, images, acts)
    assert list(stats) == acts
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend([helper.make_empty_tensor_value_info("flat_out")])
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    direct = TensorStats("flat_out")
    direct.add(sess.run(["flat_out"], {"x": np.concatenate(list(images.batches(5)))})[0])
    got = stats["flat_out"]
    assert got.name == "flat_out" and got is not stats["relu"]
    assert got.absmax == direct.absmax and got.range == direct.range and np.array_equal(got.hist, direct.hist)


def test_large_tensors_count_a_sample_but_keep_the_exact_maximum():
    """Above SAMPLE_ABOVE values per image a run is counted at a stride; the maximum is still exact and, over a pass
    of many images, the percentiles stay put."""
    from edge.calib.methods import amax
    from edge.calib.stats import SAMPLE_ABOVE, counting_stride

    rng = np.random.default_rng(3)
    sampled, exact = TensorStats("big"), TensorStats("exact")
    size = 2 * SAMPLE_ABOVE + 7
    stride = counting_stride((size,))
    assert stride > 1 and counting_stride((size,), images=3) == 1  # the threshold counts per image
    counted = 0
    for image in range(16):
        big = rng.laplace(0, 1.0, size).astype(np.float32)
        if image == 5:
            big[stride * 1000 + 1] = 40.0  # a single outlier off the sampling grid still sets the maximum
        sampled.add(big)
        counted += len(range(0, size, stride))
        for start in range(0, size, SAMPLE_ABOVE):  # the same values in pieces small enough to count them all
            exact.add(big[start : start + SAMPLE_ABOVE])
    assert sampled.absmax == exact.absmax == 40.0
    assert sampled.hist.sum() == counted and exact.hist.sum() == 16 * size
    for p, tolerance in ((99.0, 0.03), (99.9, 0.03), (99.99, 0.06)):
        a = amax("percentile", sampled.hist, sampled.range, sampled.absmax, p)
        b = amax("percentile", exact.hist, exact.range, exact.absmax, p)
        assert abs(a - b) / b < tolerance, (p, a, b)


@pytest.mark.parametrize("shape", [(2, 96, 128, 3), (2, 45, 75, 99), (1, 3, 224, 224), (4, 7, 7, 1155)])
def test_the_sample_covers_every_channel_and_column(shape):
    """A stride that divides a dimension samples a fixed subset of it: at stride 3 an NHWC tensor with 3 channels is
    sampled in its first channel only. Here each position along every axis gets its own scale, and the sampled
    percentiles must still match a full count."""
    from edge.calib.methods import amax
    from edge.calib.stats import SAMPLE_ABOVE, sample_stride

    rng = np.random.default_rng(11)
    stride = sample_stride(shape)
    assert all(d % stride for d in shape) and math.prod(shape) > SAMPLE_ABOVE
    sampled, exact = TensorStats("sampled"), TensorStats("exact")
    for _ in range(8):  # batches: enough counted values that the 99.9th percentile is not sampling noise
        values = rng.laplace(0, 1.0, shape).astype(np.float32)
        for axis, size in enumerate(shape):
            values *= np.geomspace(0.2, 5.0, size, dtype=np.float32).reshape([-1 if a == axis else 1 for a in range(len(shape))])
        sampled.add(values)
        flat = values.reshape(-1)
        for start in range(0, flat.size, SAMPLE_ABOVE):
            exact.add(flat[start : start + SAMPLE_ABOVE])
    assert exact.absmax == sampled.absmax
    for p in (99.0, 99.9):
        a = amax("percentile", sampled.hist, sampled.range, sampled.absmax, p)
        b = amax("percentile", exact.hist, exact.range, exact.absmax, p)
        assert abs(a - b) / b < 0.08, (p, a, b)  # sampling noise is a few percent; stride 3 on NHWC was 92 % off


@given(st.lists(st.integers(min_value=1, max_value=5000), min_size=1, max_size=5))
@settings(max_examples=200, deadline=None)
def test_the_sample_stride_is_a_prime_dividing_no_dimension(shape):
    from edge.calib.stats import sample_stride

    k = sample_stride(tuple(shape))
    assert k >= 3 and all(k % d for d in range(2, k)) and all(n % k for n in shape)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_value_off_the_sampling_grid_is_still_refused(bad):
    """Only every k-th value of a large tensor is counted, but every value is checked: one NaN or infinity at a
    position the sample skips still stops the pass with the tensor named."""
    from edge.calib.stats import SAMPLE_ABOVE, counting_stride

    values = np.ones((2, 4 * SAMPLE_ABOVE + 1), np.float32)
    k = counting_stride(values.shape)
    assert k > 1
    values.reshape(-1)[k + 1] = bad  # not a multiple of k: the sample never reads it
    with pytest.raises(EdgeError, match="tensor 'big' holds inf or NaN"):
        TensorStats("big").add(values)


def test_an_empty_tensor_counts_nothing():
    stats = TensorStats("empty")
    stats.add(np.zeros((0, 3, 8, 8), np.float32))
    assert stats.absmax == 0.0 and stats.hist.sum() == 0


class _Tracked:
    """An item that counts how many of its kind are alive."""

    alive = 0
    most = 0

    def __init__(self) -> None:
        _Tracked.alive += 1
        _Tracked.most = max(_Tracked.most, _Tracked.alive)

    def __del__(self) -> None:
        _Tracked.alive -= 1


@pytest.mark.parametrize("alive", [1, 2, 3])
def test_prefetch_never_has_more_items_alive_than_its_slots(alive):
    """The statistics pass budgets memory per slot: a slow consumer must not let the producer run ahead of it."""
    import time

    from edge.calib.stats import prefetch

    _Tracked.alive = _Tracked.most = 0
    seen = 0
    for item in prefetch((_Tracked() for _ in range(12)), alive=alive):
        time.sleep(0.01)  # counting is slower than producing here: the producer waits for a slot
        assert isinstance(item, _Tracked)
        seen += 1
        del item
    assert seen == 12 and _Tracked.most == alive and _Tracked.alive == 0


def test_prefetch_hands_the_producers_error_to_the_consumer_and_stops_its_thread():
    import threading

    from edge.calib.stats import prefetch

    def items():
        yield 1
        raise OSError("camera gone")

    got = []
    with pytest.raises(OSError, match="camera gone"):
        for item in prefetch(items()):
            got.append(item)
    assert got == [1]
    assert not [t for t in threading.enumerate() if t.name == "calib-infer"]


def test_prefetch_left_early_stops_its_producer():
    import threading

    from edge.calib.stats import prefetch

    made = []

    def items():
        for k in range(1000):
            made.append(k)
            yield k

    for item in prefetch(items()):
        if item == 2:
            break
    assert not [t for t in threading.enumerate() if t.name == "calib-infer"]
    assert len(made) <= 4  # the slots bound how far the producer ran ahead of the break


def test_prefetch_passes_none_through_as_an_item():
    from edge.calib.stats import prefetch

    assert list(prefetch(iter([1, None, 2]))) == [1, None, 2]


def test_a_prefetch_left_open_does_not_keep_the_process_from_exiting():
    """A generator still held when the interpreter exits (an error path that never closes it): its producer waits for
    a slot forever, and the process must exit anyway."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import edge.calib.stats

    code = "from edge.calib.stats import prefetch\nitems = prefetch(iter(range(10)))\nnext(items)\nprint('done')\n"
    here = str(Path(edge.calib.stats.__file__).parents[2])  # the edge these tests import, not another install
    env = {**os.environ, "PYTHONPATH": here}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert (done.returncode, done.stdout) == (0, "done\n")
    # in this process too: its producer is a thread the interpreter does not wait for
    import threading

    items = edge.calib.stats.prefetch(iter(range(10)))
    next(items)
    assert [t.daemon for t in threading.enumerate() if t.name == "calib-infer"] == [True]
    items.close()


def test_giving_back_memory_is_glibcs_malloc_trim_and_a_no_op_elsewhere():
    import platform

    from edge.calib.stats import give_back_memory

    assert give_back_memory() is (platform.libc_ver()[0] == "glibc")


def test_the_collector_frees_each_tensor_of_a_run_once_counted():
    """Counting empties the run's dict, so no reference outlives the counting of its tensor."""
    from edge.calib.stats import Collector

    run = {"a": np.ones((1, 4), np.float32), "b": np.arange(6, dtype=np.float32), "ids": np.arange(3)}
    collector = Collector(["a", "b", "ids"])
    collector.update(run)
    assert run == {} and set(collector.stats) == {"a", "b"}  # the integer tensor is dropped, not counted
    assert collector.stats["b"].absmax == 5.0 and collector.stats["b"].hist.sum() == 6


def _fixed_batch_model(n: int) -> onnx.ModelProto:
    model = _tiny_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = n
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = n
    return model


def test_a_fixed_batch_model_counts_whole_batches_only():
    """A model exported with batch 4 cannot take the short last batch: 7 images count as one batch of 4."""
    from edge.calib.stats import fixed_batch

    model = _fixed_batch_model(4)
    graph = prepare(model, {})
    assert fixed_batch(graph) == 4 and fixed_batch(prepare(_tiny_model(), {"x": (1, 3, 8, 8)})) is None
    # a symbolic batch whose output the file fixes at 1 in front: [1, batch, h, w] class ids of an ArgMax export
    # (RapidAI's table lines), where images cannot be told apart in a larger batch
    ids_first = _tiny_model()
    ids_first.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 1
    assert fixed_batch(prepare(ids_first, {"x": (1, 3, 8, 8)})) == 1
    rng = np.random.default_rng(3)
    frames = [rng.integers(0, 256, (8, 8, 3), dtype=np.uint8) for _ in range(7)]
    images = ImageSet("synthetic", PreprocessSpec(width=8, height=8), lambda i: frames[i], len(frames))
    calls = []
    stats = collect(model, graph, images, ["x"], progress=lambda *a: calls.append(a))
    assert calls == [(4, 4)] and stats["x"].hist.sum() == 4 * 3 * 8 * 8
    few = ImageSet("synthetic", PreprocessSpec(width=8, height=8), lambda i: frames[i], 3)
    with pytest.raises(EdgeError, match="the model's input has a fixed batch of 4 but only 3 images were given"):
        collect(model, graph, few, ["x"])


def test_calibration_sessions_take_the_thread_count_and_say_what_is_missing(monkeypatch):
    import sys

    from edge.calib.stats import TensorTap, session_options
    from edge.lazy import MissingDependency

    opts, disabled = session_options(threads=1)
    assert opts.intra_op_num_threads == 1 and disabled == []
    assert session_options(simulated_int8=True)[1] == ["DoubleQDQPairsRemover"]
    tap = TensorTap(_tiny_model(), [["relu"]], threads=1)
    assert tap.sessions[0][0].get_session_options().intra_op_num_threads == 1
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MissingDependency, match="'onnxruntime' is needed for running the model for calibration but"):
        session_options()
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(MissingDependency, match="'onnx' is needed for exposing intermediate tensors but"):
        TensorTap(_tiny_model(), [["relu"]])


def test_weight_slots_and_integer_outputs_take_no_scale():
    """TensorRT's ONNX parser takes Conv's kernel and bias, BatchNormalization's four and InstanceNormalization's two
    as layer weights; a constant any other op reads (here an Add's per-channel term) becomes a constant layer whose
    output needs a scale. An integer output (ArgMax's class ids) is no INT8 activation."""
    rng = np.random.default_rng(4)

    def const(name, *shape):
        return numpy_helper.from_array(rng.normal(size=shape).astype(np.float32), name)

    inits = [const("w", 4, 3, 3, 3), const("b", 4), const("s", 4), const("bb", 4), const("m", 4), const("v", 4),
             const("is", 4), const("ib", 4), const("c", 1, 4, 1, 1)]  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["conv", "s", "bb", "m", "v"], ["bn"]),
        helper.make_node("InstanceNormalization", ["bn", "is", "ib"], ["inorm"]),
        helper.make_node("Add", ["inorm", "c"], ["add"]),
        helper.make_node("ArgMax", ["add"], ["ids"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "slots",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [
            helper.make_tensor_value_info("add", TensorProto.FLOAT, [1, 4, 8, 8]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 1, 8, 8]),
        ],
        inits,
    )
    acts, consts = calibration_tensors(prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), {}))
    assert acts == ["x", "conv", "bn", "inorm", "add"]
    assert sorted(consts) == ["c"]


def test_a_run_of_several_images_counts_each_image_as_one_would():
    """Sampling starts above SAMPLE_ABOVE values per image: a run of 2 images of 0.75 x that each is counted whole,
    a single image of 1.5 x that is sampled, through TensorStats.add and through the Collector alike."""
    from edge.calib.stats import SAMPLE_ABOVE

    values = np.random.default_rng(5).normal(size=int(1.5 * SAMPLE_ABOVE)).astype(np.float32)
    one, two = TensorStats("t"), TensorStats("t")
    one.add(values)  # one image by default
    two.add(values, images=2)
    assert 0 < one.hist.sum() < values.size and two.hist.sum() == values.size
    collector = Collector(["t"])
    collector.update({"t": values.copy()}, images=2)
    assert collector.stats["t"].hist.sum() == values.size


def test_a_missing_onnxruntime_names_calibration_in_the_tensor_tap(monkeypatch):
    import sys

    from edge.calib.stats import TensorTap
    from edge.lazy import MissingDependency

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MissingDependency, match="'onnxruntime' is needed for running the model for calibration but"):
        TensorTap(_tiny_model(), [["relu"]])


def test_the_range_grows_by_the_smallest_power_of_two_that_holds_the_new_maximum():
    """A maximum exactly 2x or 8x the range makes the range exactly that (the value sits in the top bin), not twice
    as wide: every bin keeps its resolution."""
    t = TensorStats("t")
    t.add(np.array([0.5, 1.0], np.float32))
    assert t.range == 1.0
    t.add(np.array([2.0], np.float32))
    assert t.range == 2.0 and t.hist[-1] == 1 and t.hist.sum() == 3
    t.add(np.array([16.0], np.float32))
    assert t.range == 16.0
    t.add(np.array([16.5], np.float32))
    assert t.range == 32.0 and t.hist.sum() == 5


def test_a_tiny_budget_makes_the_number_of_groups_that_costs_least_by_hand():
    """Four tensors of 100 bytes, sessions of 200: g groups cost about 200 g + 2 * 400 / g, which is 1000, 800 and
    1000 for 1, 2 and 4 groups: two groups of two."""
    sizes = {k: 100 for k in "abcd"}
    assert plan(sizes, 10, 1, 200) == (1, [["a", "b"], ["c", "d"]])
    assert plan(sizes, 10, 1, 0) == (1, [["a"], ["b"], ["c"], ["d"]])  # sessions free: the budget alone decides


def _relu_128() -> onnx.ModelProto:
    """x -> Relu -> y on 3 x 128 x 128 images: activations far larger than the model."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 128, 128])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 128, 128])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _frames(count: int, seed: int) -> ImageSet:
    rng = np.random.default_rng(seed)
    frames = [rng.integers(0, 256, (128, 128, 3), dtype=np.uint8) for _ in range(count)]
    return ImageSet("synthetic", PreprocessSpec(width=128, height=128), lambda i: frames[i], count)


def test_collect_keeps_to_max_batch_and_split_groups_measure_the_same_values():
    """The batch never exceeds max_batch however large the budget; a budget below one image's tensors runs them in
    groups (one ONNX Runtime session each) and must measure exactly what one group measures at the same batch."""
    from edge.calib.stats import per_image_bytes, session_bytes

    model, images = _relu_128(), _frames(5, 6)
    graph = prepare(model, {"x": (1, 3, 128, 128)})
    calls = []
    whole = collect(model, graph, images, ["x", "y"], max_batch=2, progress=lambda *a: calls.append(a))
    assert calls == [(2, 2), (4, 2), (5, 2)]
    one_image = 2 * 4 * 3 * 128 * 128  # x and y as float32
    assert plan(per_image_bytes(graph, ["x", "y"]), one_image // 2, 2, session_bytes(model)) == (1, [["x"], ["y"]])
    split = collect(model, graph, images, ["x", "y"], budget_bytes=one_image, max_batch=2)  # half each: one tensor
    whole = collect(model, graph, images, ["x", "y"], max_batch=1)
    for name in ("x", "y"):
        a, b = whole[name], split[name]
        assert (a.absmax, a.range) == (b.absmax, b.range) and np.array_equal(a.hist, b.hist), name
    assert whole["y"].hist.sum() == 5 * 3 * 128 * 128


def test_a_batch_of_images_each_below_the_sampling_threshold_is_counted_whole():
    """3 x 128 x 128 = 49,152 values per image, under SAMPLE_ABOVE (65,536): a batch of four (196,608 values in one
    run) is still counted value by value."""
    from edge.calib.stats import SAMPLE_ABOVE

    assert 3 * 128 * 128 < SAMPLE_ABOVE < 4 * 3 * 128 * 128
    model = _relu_128()
    graph = prepare(model, {"x": (1, 3, 128, 128)})
    stats = collect(model, graph, _frames(4, 7), ["x", "y"], max_batch=4)
    assert stats["x"].hist.sum() == stats["y"].hist.sum() == 4 * 3 * 128 * 128


def test_a_tensor_is_measured_through_another_only_when_that_one_is_measured_too():
    from edge.calib.stats import value_sources

    graph = prepare(_tiny_model(), {"x": (1, 3, 8, 8)})
    assert value_sources(graph, ["relu", "flat_out"]) == {"flat_out": "relu"}
    assert value_sources(graph, ["flat_out"]) == {}  # its input is not measured: it is measured itself


def test_the_range_grows_past_a_maximum_that_log2_rounds_down():
    """2^40 (1 + 2^-52) over a range of 1: Python's log2 gives exactly 40, yet 2^40 is below it; the range must be
    the next power of two, 2^41 (float64 tensors are calibrated as they are)."""
    m = 2.0**40 * (1 + 2.0**-52)
    assert math.log2(m) == 40.0 and 2.0**40 < m
    t = TensorStats("t")
    t.add(np.array([1.0]))
    t.add(np.array([m]))
    assert (t.range, t.absmax, t.hist.sum()) == (2.0**41, m, 2)


def test_a_model_onnx_runtime_refuses_is_one_line_with_its_first_line():
    ort = pytest.importorskip("onnxruntime")
    from edge.calib.stats import TensorTap

    model = _tiny_model()
    model.graph.node[1].op_type = "NoSuchOp"
    with pytest.raises(Exception) as direct:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    first = str(direct.value).splitlines()[0]
    with pytest.raises(EdgeError) as ours:
        TensorTap(model, [["relu"]])
    assert str(ours.value) == f"ONNX Runtime cannot load the model ({first})"


def test_cores_are_the_ones_this_process_may_run_on(monkeypatch):
    import os

    from edge.calib.stats import cores

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    assert cores() == 3  # taskset or a cgroup's cpuset, not the machine's count
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert cores() == 1  # macOS has no affinity call; cpu_count may not know


def test_a_simulated_int8_tap_keeps_the_qdq_pairs_as_ops_of_their_own():
    """ONNX Runtime's session setting 'session.disable_quant_qdq' keeps Q/DQ as float ops instead of its own integer
    kernels: the check's INT8 is then the simulation TensorRT's scales describe."""
    pytest.importorskip("onnxruntime")
    from edge.calib.stats import TensorTap

    tap = TensorTap(_tiny_model(), [["relu"]], simulated_int8=True)
    options = tap.sessions[0][0].get_session_options()
    assert options.get_session_config_entry("session.disable_quant_qdq") == "1"
    # and its workers do not spin: they would take the core that counts the previous batch
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert tap.sessions[0][0].get_providers() == ["CPUExecutionProvider"]


def test_an_untyped_output_is_measured_and_a_fixed_batch_is_read_before_any_symbol():
    """An output shape inference could not type (a custom op's) is still an activation to measure (the run says if it
    is float); a batch of 4 fixed in the file is fixed whatever the other dimensions are."""
    from edge.calib.stats import fixed_batch

    g = helper.make_graph(
        [helper.make_node("MyOp", ["x"], ["t"], domain="custom"), helper.make_node("Relu", ["t"], ["y"])],
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, "c", 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("custom", 1)])
    graph = prepare(model)
    acts, _ = calibration_tensors(graph)
    assert "t" not in graph.dtypes and acts == ["x", "t", "y"]
    assert fixed_batch(graph) == 4


def test_a_batch_of_0_is_no_fixed_batch():
    # ONNX Runtime takes a declared 0 for an empty axis; edge reads it as unknown, as edge dla does (dynamic)
    from edge.calib.stats import fixed_batch

    assert fixed_batch(prepare(_fixed_batch_model(0), {})) is None
    assert fixed_batch(prepare(_fixed_batch_model(1), {})) == 1


def test_small_tensors_counted_together_keep_each_ones_largest_value():
    """Tensors of at most SMALL values are counted in one pass once their range is known; each one's largest |x| is
    its own, wherever in the tensor it sits (here the first value), and every value lands in the histogram."""
    collector = Collector(["a", "b", "c"])
    first = {n: np.array([1.0, 0.5, -0.25], np.float32) for n in "abc"}
    collector.update(dict(first))  # sets each range (counted one by one)
    peaks = {"a": 3.0, "b": -7.0, "c": 5.0}
    collector.update({n: np.array([p, 0.5, 0.25, -0.125], np.float32) for n, p in peaks.items()})  # counted together
    for n, p in peaks.items():
        s = collector.stats[n]
        assert s.absmax == abs(p) and s.hist.sum() == 3 + 4, (n, s.absmax, s.hist.sum())
