"""Activation equalization (edge.calib.equalize): which channels are tied, what pays, and that the FP32 network's
outputs stay what they were. The outputs are compared by running both models in ONNX Runtime, and the ranges after
equalizing are measured by ONNX Runtime on the rewritten model, not taken from the module's own arithmetic."""

from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from edge.calib import equalize
from edge.graph.model import prepare

pytestmark = pytest.mark.timeout(120)


def _model(nodes: List, inits: Dict[str, np.ndarray], c_in: int, outputs: List[str], hw: int = 6) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c_in, hw, hw])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


class _Images:
    """Preprocessed inputs as an ImageSet hands them out (the pass needs nothing else)."""

    def __init__(self, x: np.ndarray) -> None:
        self.x = x
        self.count = len(x)

    def batches(self, batch_size: int):
        for start in range(0, len(self.x), batch_size):
            yield self.x[start : start + batch_size]


def _images(x: np.ndarray) -> _Images:
    return _Images(x)


def _run(model: onnx.ModelProto, x: np.ndarray, names: Optional[List[str]] = None) -> List[np.ndarray]:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    if names:
        del m.graph.output[:]
        m.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(names, {"x": x})


def _equalized(model: onnx.ModelProto, x: np.ndarray, strength: float = 1.0):
    graph = prepare(model, {"x": (1, *x.shape[1:])})
    result = equalize.equalize(model, graph, _images(x), strength, 64 << 20, 1)
    return result, graph


def _chain(w1: np.ndarray, dw: np.ndarray, w2: np.ndarray) -> onnx.ModelProto:
    """x -> Conv -> Relu -> depthwise Conv -> Conv -> y: the channels of 'a' and 'r' are tied and free."""
    c = w1.shape[0]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "dw"], ["d"], group=c, pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["d", "w2"], ["y"]),
    ]
    return _model(nodes, {"w1": w1, "b1": np.zeros(c), "dw": dw, "w2": w2}, w1.shape[1], ["y"])


def _positive_chain(scales: List[float], seed: int = 0):
    """A chain whose first convolution's output channels are all positive, channel c reaching about scales[c]."""
    rng = np.random.default_rng(seed)
    c = len(scales)
    w1 = rng.uniform(0.5, 1.0, (c, 2, 1, 1)) * np.array(scales)[:, None, None, None]
    dw = rng.uniform(0.5, 1.0, (c, 1, 3, 3))
    w2 = rng.normal(size=(3, c, 1, 1))
    x = rng.uniform(0.1, 1.0, (4, 2, 6, 6)).astype(np.float32)
    return _chain(w1, dw, w2), x


def test_full_strength_makes_every_tied_channel_span_the_median():
    model, x = _positive_chain([0.5, 2.0, 30.0, 400.0])
    before = _run(model, x, ["r", "y", "d"])
    original = onnx.ModelProto()
    original.CopyFrom(model)
    result, graph = _equalized(model, x)
    for init in model.graph.initializer:
        np.testing.assert_array_equal(graph.consts[init.name], numpy_helper.to_array(init))
    after = _run(model, x, ["r", "y", "d"])
    ranges_before = np.abs(before[0]).max(axis=(0, 2, 3))
    ranges_after = np.abs(after[0]).max(axis=(0, 2, 3))
    # strength 1: r's groups (read by the depthwise convolution only: free) divided by range / their median; d's
    # (read by the dense w2) by their range itself, a ** 1 / w ** 0, so each of d's channels then reaches 1
    np.testing.assert_allclose(ranges_after, np.median(ranges_before), rtol=1e-5)
    d_before = np.abs(before[2]).max(axis=(0, 2, 3))
    limited = np.clip(d_before, 1 / equalize.LIMIT, equalize.LIMIT)  # no factor beyond LIMIT
    np.testing.assert_allclose(np.abs(after[2]).max(axis=(0, 2, 3)), d_before / limited, rtol=1e-5)
    assert d_before.max() > equalize.LIMIT and d_before.min() < equalize.LIMIT  # both cases are tried
    np.testing.assert_allclose(after[1], before[1], rtol=1e-4, atol=1e-4 * np.abs(before[1]).max())
    assert result.groups == 8 and result.convs == 3  # the three convolutions pay: w1 and dw on both sides, w2 reads
    assert result.tensors == 2  # r and d (a is read only by the ReLU, so it is measured after it)
    widest = max(r.max() / r.min() for r in (np.abs(v).max(axis=(0, 2, 3)) for v in (before[0], before[2])))
    assert result.spread_before == pytest.approx(widest, rel=1e-5)  # a's channels are r's: all positive
    widest_after = max(r.max() / r.min() for r in (np.abs(v).max(axis=(0, 2, 3)) for v in (after[0], after[2])))
    assert result.spread_after == pytest.approx(widest_after, rel=1e-4)
    # the graph's own constants follow the model (the Q/DQ build reads them from there)
    assert original.graph.initializer[0].raw_data != model.graph.initializer[0].raw_data


def test_half_strength_leaves_the_square_root_of_the_spread():
    model, x = _positive_chain([1.0, 100.0])
    r0 = np.abs(_run(model, x, ["r"])[0]).max(axis=(0, 2, 3))
    _equalized(model, x, 0.5)
    r1 = np.abs(_run(model, x, ["r"])[0]).max(axis=(0, 2, 3))
    assert r1.max() / r1.min() == pytest.approx(np.sqrt(r0.max() / r0.min()), rel=1e-4)


def test_factors_are_bounded_and_dead_or_nan_channels_keep_one():
    model, x = _positive_chain([1.0, 1.0, 1.0, 1.0])
    p = equalize.plan(prepare(model, {"x": (1, 2, 6, 6)}))
    ranges = {"a": np.array([1e-9, 1.0, 1e9, 0.0]), "r": np.array([0.0, 1.0, np.nan, 0.0])}
    found = equalize.factors(p, ranges, 1.0)
    f = {k: found.get(p.root(("a", k))) for k in range(4)}
    assert f[3] is None  # never above zero: a dead channel is left alone
    assert f[2] is None  # NaN anywhere in the group: left alone (the statistics pass then names the tensor)
    # median of the live groups (1e-9 and 1.0) is 0.5: 1e-9 / 0.5 is far below 1/256
    assert f[0] == pytest.approx(1 / equalize.LIMIT) and f[1] == pytest.approx(2.0)


def test_a_group_a_dense_convolution_reads_balances_activation_and_weight():
    """SmoothQuant's migration by hand: a ** S / w ** (1 - S), w the largest |weight| on the channel in the reader."""
    model, x = _positive_chain([1.0, 1.0, 1.0, 1.0])
    graph = prepare(model, {"x": (1, 2, 6, 6)})
    p = equalize.plan(graph)
    dense = equalize.dense_weights(p, graph)
    w2 = np.abs(graph.consts["w2"])  # [3, 4, 1, 1]: d's channel j meets w2[:, j]
    assert sorted(dense) == sorted({p.root(("d", j)) for j in range(4)})  # r is read by the depthwise one only
    for j in range(4):
        assert dense[p.root(("d", j))] == pytest.approx(float(w2[:, j].max()))
    ranges = {"r": np.array([1.0, 4.0, 16.0, 64.0]), "d": np.array([9.0, 0.25, 100.0, 1e6])}
    dense = {p.root(("d", j)): w for j, w in enumerate([1.0, 4.0, 0.01, 1.0])}
    found = equalize.factors(p, ranges, 0.5, dense)
    assert [found[p.root(("d", j))] for j in range(4)] == pytest.approx([3.0, 0.25, 100.0, equalize.LIMIT])
    # the free groups: (a / median) ** S, the median of the free ones only (4 and 16 -> 10)
    assert [found[p.root(("r", j))] for j in range(4)] == pytest.approx([0.1**0.5, 0.4**0.5, 1.6**0.5, 6.4**0.5])


def test_a_grouped_convolutions_weights_are_read_per_input_channel():
    rng = np.random.default_rng(6)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "wg"], ["y"], group=2),
    ]
    wg = rng.normal(size=(6, 2, 1, 1))  # two groups of three outputs, each reading two of r's four channels
    model = _model(nodes, {"w1": rng.normal(size=(4, 2, 1, 1)), "wg": wg}, 2, ["y"])
    graph = prepare(model, {"x": (1, 2, 6, 6)})
    p = equalize.plan(graph)
    dense = equalize.dense_weights(p, graph)
    want = [np.abs(wg[0:3, 0]).max(), np.abs(wg[0:3, 1]).max(), np.abs(wg[3:6, 0]).max(), np.abs(wg[3:6, 1]).max()]
    assert [dense[p.root(("r", j))] for j in range(4)] == pytest.approx(want)


def test_graph_outputs_inputs_and_unknown_operators_pin_their_channels():
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"]),
        helper.make_node("HardSigmoid", ["a"], ["h"]),  # not homogeneous: a's channels stay
        helper.make_node("Conv", ["h", "w2"], ["b"]),
        helper.make_node("Relu", ["b"], ["y"]),  # y is a graph output: b's channels stay
    ]
    model = _model(nodes, {"w1": rng.normal(size=(3, 2, 1, 1)), "w2": rng.normal(size=(3, 3, 1, 1))}, 2, ["y"])
    x = rng.normal(size=(2, 2, 6, 6)).astype(np.float32)
    p = equalize.plan(prepare(model, {"x": (1, 2, 6, 6)}))
    assert p.tensors() == []
    assert _equalized(model, x)[0] is None


def test_a_weight_shared_by_two_convolutions_pays_nothing():
    rng = np.random.default_rng(2)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "w"], ["y"]),
    ]
    model = _model(nodes, {"w": rng.normal(size=(2, 2, 1, 1))}, 2, ["y"])
    assert equalize.plan(prepare(model, {"x": (1, 2, 6, 6)})).convs == []


def test_blazeface_pattern_residual_add_and_zero_channel_pad_keep_outputs():
    """BlazeFace's stage change: MaxPool, a Concat with zero channels, a residual Add, ReLU, then a dense head."""
    rng = np.random.default_rng(3)
    scales = np.array([0.3, 5.0, 80.0])[:, None, None, None]
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("ConstantOfShape", ["zshape"], ["z"]),
        helper.make_node("Concat", ["m", "z"], ["cat"], axis=1),
        helper.make_node("Conv", ["m", "dw"], ["d"], group=3, pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["d", "w1", "b1"], ["p"]),
        helper.make_node("Add", ["cat", "p"], ["s"]),
        helper.make_node("Relu", ["s"], ["t"]),
        helper.make_node("Conv", ["t", "head"], ["y"]),
    ]
    inits = {
        "w0": rng.normal(size=(3, 2, 3, 3)) * scales,
        "b0": rng.normal(size=3),
        "dw": rng.normal(size=(3, 1, 3, 3)),
        "w1": rng.normal(size=(5, 3, 1, 1)) * np.array([1, 1, 1, 40, 0.1])[:, None, None, None],
        "b1": rng.normal(size=5),
        "head": rng.normal(size=(2, 5, 1, 1)),
        "zshape": np.array([1, 2, 4, 4]),
    }
    model = _model(nodes, {k: v for k, v in inits.items() if k != "zshape"}, 2, ["y"], hw=8)
    model.graph.initializer.append(numpy_helper.from_array(inits["zshape"].astype(np.int64), "zshape"))
    x = rng.normal(size=(1, 2, 8, 8)).astype(np.float32)  # the zero channels' shape fixes the batch, as BlazeFace's
    tied = ["r", "m", "p", "s", "t"]  # channels 0-2 of each: one group per channel
    before = _run(model, x, [*tied, "y"])
    graph = prepare(model, {"x": (1, 2, 8, 8)})
    p = equalize.plan(graph)
    # the pooled channels, the concat's first three, the add and its ReLU are one group per channel
    assert p.root(("r", 1)) == p.root(("cat", 1)) == p.root(("t", 1)) == p.root(("p", 1)) == p.root(("m", 1))
    assert p.root(("t", 4)) == p.root(("p", 4)) != p.root(("t", 1))
    result = equalize.equalize(model, graph, _images(x), 1.0, 64 << 20, 1)
    after = _run(model, x, [*tied, "y"])
    np.testing.assert_allclose(after[-1], before[-1], rtol=1e-4, atol=1e-4 * np.abs(before[-1]).max())
    # the head reads t (dense): at S = 1 each group's largest value over all its tensors becomes 1 (a / a ** 1)
    group_range = [np.max([np.abs(v[:, :3]).max(axis=(0, 2, 3)) for v in run[:-1]], axis=0) for run in (before, after)]
    np.testing.assert_allclose(group_range[1], group_range[0] / np.clip(group_range[0], 1 / 256, 256), rtol=1e-5)
    assert result.convs == 4


def test_split_and_resize_tie_their_channels():
    rng = np.random.default_rng(4)
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["a"]),
        helper.make_node("Split", ["a", "sizes"], ["s0", "s1"], axis=1),
        helper.make_node("Resize", ["s1", "", "scales"], ["u"], mode="nearest"),
        helper.make_node("Conv", ["s0", "wa"], ["ya"]),
        helper.make_node("Conv", ["u", "wb"], ["yb"]),
    ]
    inits = {
        "w0": rng.normal(size=(4, 2, 1, 1)) * np.array([1, 10, 100, 0.1])[:, None, None, None],
        "wa": rng.normal(size=(2, 1, 1, 1)),
        "wb": rng.normal(size=(2, 3, 1, 1)),
        "scales": np.array([1, 1, 2, 2]),
    }
    model = _model(nodes, inits, 2, ["ya", "yb"])
    model.graph.initializer.append(numpy_helper.from_array(np.array([1, 3], np.int64), "sizes"))
    x = rng.normal(size=(2, 2, 6, 6)).astype(np.float32)
    graph = prepare(model, {"x": (1, 2, 6, 6)})
    p = equalize.plan(graph)
    assert p.root(("a", 0)) == p.root(("s0", 0)) and p.root(("a", 3)) == p.root(("s1", 2)) == p.root(("u", 2))
    before = _run(model, x)
    assert equalize.equalize(model, graph, _images(x), 1.0, 64 << 20, 1) is not None
    for b, a in zip(before, _run(model, x)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * np.abs(b).max())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    groups=st.sampled_from([1, 2, 4]),
    per_group=st.integers(1, 3),
    spread=st.floats(0.0, 4.0),
    strength=st.sampled_from([0.25, 0.5, 1.0]),
    seed=st.integers(0, 2**16),
    act=st.sampled_from(["Relu", "LeakyRelu", "MaxPool", "GlobalAveragePool"]),
)
def test_any_grouped_chain_keeps_its_outputs(groups, per_group, spread, strength, seed, act):
    """A Conv, a per-channel operator, a grouped Conv and a dense one: ONNX Runtime's outputs stay the same."""
    rng = np.random.default_rng(seed)
    c = groups * per_group
    w1 = rng.normal(size=(c, 3, 3, 3)) * (10.0 ** rng.uniform(-spread, spread, c))[:, None, None, None]
    extra = {"kernel_shape": [2, 2]} if act == "MaxPool" else {}
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node(act, ["a"], ["r"], **extra),
        helper.make_node("Conv", ["r", "wg", "bg"], ["g"], group=groups),
        helper.make_node("Conv", ["g", "w3"], ["y"]),
    ]
    inits = {
        "w1": w1,
        "b1": rng.normal(size=c),
        "wg": rng.normal(size=(2 * c, per_group, 1, 1)),
        "bg": rng.normal(size=2 * c),
        "w3": rng.normal(size=(2, 2 * c, 1, 1)),
    }
    model = _model(nodes, inits, 3, ["y"])
    x = rng.normal(size=(2, 3, 6, 6)).astype(np.float32)
    before = _run(model, x)[0]
    _equalized(model, x, strength)
    after = _run(model, x)[0]
    np.testing.assert_allclose(after, before, rtol=1e-3, atol=1e-4 * max(np.abs(before).max(), 1e-6))


@pytest.mark.parametrize(
    "asset, config, shape",
    [
        ("blazeface-back-256", "demo.yaml", None),
        ("retinaface-mnet025", "retinaface.example.yaml", (1, 3, 528, 720)),
    ],
)
def test_real_models_compute_what_they_did_and_their_channels_span_less(asset, config, shape, megamind_every_9th):
    """Two real ReLU/LeakyReLU detectors through edge-run's own preprocessing, on real frames: ONNX Runtime's
    outputs of the equalized model against the file's."""
    from pathlib import Path

    from edge import assets
    from edge.calib.datasets import ImageSet
    from edge.config import load_config
    from edge.graph.model import load_model, model_inputs
    from edge.runtime.engines import TensorInfo
    from edge.runtime.engines.model import preprocess_spec

    path = assets.resolve(asset, quiet=True)
    model = load_model(path)
    inp = model_inputs(model)[0]
    dims = shape or tuple(d.dim_value for d in inp.type.tensor_type.shape.dim)
    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / config)
    spec = preprocess_spec(cfg, TensorInfo(inp.name, dims, np.dtype(np.float32)), None)
    frames = megamind_every_9th[:6]
    images = ImageSet("frames", spec, lambda i: frames[i], len(frames))
    graph = prepare(model, {inp.name: dims})
    result = equalize.equalize(model, graph, images, 0.5, 256 << 20, 1)
    assert result is not None and result.spread_after < result.spread_before / 5  # 5883 -> 598, 69 -> 8.3
    original = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rewritten = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = next(images.batches(1))
    for a, b in zip(original.run(None, {inp.name: x}), rewritten.run(None, {inp.name: x})):
        assert np.abs(a - b).max() <= 1e-4 * np.abs(a).max()


def test_a_file_declaring_huge_channel_counts_is_skipped_in_bounded_time():
    """An attack: a few hundred bytes of ONNX declaring ReLUs over [1, 2**30, 1, 1] would have made a billion
    union-find entries. Channels that only unhandled operators touch cost nothing; tying past the cap stops."""
    import time

    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "huge",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2**30, 1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2**30, 1, 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    prepared = prepare(model)
    said: List[str] = []
    start = time.monotonic()
    assert equalize.equalize(model, prepared, _images(np.zeros((1, 1, 1, 1), np.float32)), 0.5, 1 << 20, say=said.append) is None
    assert time.monotonic() - start < 5.0
    assert said == [f"equalize: skipped, more than {equalize.MAX_CHANNELS} channels to tie (calibrating without it)"]
    with pytest.raises(equalize.TooLarge):
        equalize.plan(prepared)
    # a Reshape over the same declared size touches no channel: nothing is made for it
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "pinned",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2**30, 1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([1, -1], np.int64), "s")],
    )
    p = equalize.plan(prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])))
    assert p.size == 0 and not p.parent


def _plan(nodes, inits, c_in=4, outputs=("y",), opset=13, hw=6):
    model = _model(nodes, inits, c_in, list(outputs), hw)
    model.opset_import[0].version = opset
    return equalize.plan(prepare(model, {"x": (1, c_in, hw, hw)}))


def _relu_then(*middle, last: str = "q") -> list:
    """x -> Conv(w1) -> a -> Relu -> r, then ``middle``, then Conv(last, w2) -> y: r's channels are free unless
    ``middle`` pins them."""
    return [
        helper.make_node("Conv", ["x", "w1"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        *middle,
        helper.make_node("Conv", [last, "w2"], ["y"]),
    ]


def _pads(value):
    return numpy_helper.from_array(np.array(value, np.int64), "pads")


@pytest.mark.parametrize(
    "pads, mode, fill, ties",
    [
        ([0, 0, 1, 1, 0, 0, 1, 1], "constant", None, True),  # spatial zeros: the channels are the same channels
        ([0, 0, 1, 1, 0, 0, 1, 1], "constant", 1.0, False),  # a constant 1 does not scale with the channel
        ([0, 0, 1, 1, 0, 0, 1, 1], "reflect", None, True),  # reflection copies the channel's own values
        ([0, 1, 0, 0, 0, 0, 0, 0], "constant", None, False),  # a channel padded in: the channels shift
    ],
)
def test_a_pad_ties_only_what_keeps_each_channel_its_own(pads, mode, fill, ties):
    rng = np.random.default_rng(7)
    inputs = ["r", "pads"] + (["fill"] if fill is not None else [])
    nodes = _relu_then(helper.make_node("Pad", inputs, ["q"], mode=mode))
    inits = {"w1": rng.normal(size=(4, 4, 1, 1)), "w2": rng.normal(size=(2, 4 + pads[1] + pads[5], 1, 1))}
    if fill is not None:
        inits["fill"] = np.array(fill)
    model = _model(nodes, inits, 4, ["y"])
    model.graph.initializer.append(_pads(pads))
    p = equalize.plan(prepare(model, {"x": (1, 4, 6, 6)}))
    tied = "q" in p.channels and p.root(("r", 0)) == p.root(("q", 0)) and p.root(("r", 0)) in p.free_roots()
    assert tied == (ties and mode == "constant")  # reflect would be right too; edge ties constant zeros only
    assert (p.root(("r", 0)) in p.free_roots()) == (ties and mode == "constant")


def test_concat_and_split_off_the_channel_axis_or_with_values_pin():
    rng = np.random.default_rng(8)
    base = [helper.make_node("Conv", ["x", "w1"], ["a"]), helper.make_node("Relu", ["a"], ["r"])]
    inits = {"w1": rng.normal(size=(4, 4, 1, 1)), "w2": rng.normal(size=(2, 4, 1, 1)), "w3": rng.normal(size=(2, 8, 1, 1))}
    # a Concat of r with itself along the height: not the channels
    p = _plan([*base, helper.make_node("Concat", ["r", "r"], ["c"], axis=2), helper.make_node("Conv", ["c", "w2"], ["y"])], inits)
    assert p.root(("r", 0)) not in p.free_roots()
    # along the channels, with a constant of ones: those channels cannot scale; r's do not tie to them and pin
    inits["ones"] = np.ones((1, 4, 6, 6))
    p = _plan(
        [*base, helper.make_node("Concat", ["r", "ones"], ["c"], axis=1), helper.make_node("Conv", ["c", "w3"], ["y"])], inits
    )
    assert p.root(("r", 0)) not in p.free_roots()
    # along the channels counted from the end (-3 of 4 dims): tied
    p = _plan(
        [*base, helper.make_node("Concat", ["r", "r"], ["c"], axis=-3), helper.make_node("Conv", ["c", "w3"], ["y"])], inits
    )
    assert p.root(("r", 1)) == p.root(("c", 1)) == p.root(("c", 5)) and p.root(("r", 1)) in p.free_roots()
    # a Split without an axis splits the batch (axis 0): pinned
    split = [helper.make_node("Split", ["r"], ["s0"]), helper.make_node("Conv", ["s0", "w2"], ["y"])]
    assert _plan([*base, *split], inits).root(("r", 0)) not in _plan([*base, *split], inits).free_roots()


def test_a_convolution_pays_only_with_weights_and_bias_of_its_own():
    rng = np.random.default_rng(9)
    inits = {"w1": rng.normal(size=(4, 4, 1, 1)), "b": rng.normal(size=4), "w2": rng.normal(size=(4, 4, 1, 1))}
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "w2", "b"], ["y"]),  # the same bias: rescaling one would change the other
    ]
    assert _plan(nodes, inits).convs == []
    nodes[2] = helper.make_node("Conv", ["r", "w2"], ["y"])
    assert len(_plan(nodes, inits).convs) == 2
    # a weight computed in the graph (here a Constant node's output) is no initializer: that convolution cannot pay
    const = helper.make_node("Constant", [], ["wc"], value=numpy_helper.from_array(inits["w2"].astype(np.float32)))
    p = _plan([nodes[0], nodes[1], const, helper.make_node("Conv", ["r", "wc"], ["y"])], inits)
    assert len(p.convs) == 1 and p.root(("r", 0)) not in p.free_roots()


def test_the_channel_cap_counts_every_tied_tensor_once(monkeypatch):
    rng = np.random.default_rng(10)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["y"]),
    ]
    inits = {"w1": rng.normal(size=(4, 4, 1, 1)), "w2": rng.normal(size=(2, 4, 1, 1))}
    # x, a, r: 4 channels each (y is touched by no tying operator and the last Conv's output only)
    monkeypatch.setattr(equalize, "MAX_CHANNELS", 14)
    assert _plan(nodes, inits).size == 14  # exactly the cap: taken
    monkeypatch.setattr(equalize, "MAX_CHANNELS", 13)
    with pytest.raises(equalize.TooLarge):
        _plan(nodes, inits)


def test_a_fixed_batch_model_measures_whole_batches_only():
    """Three images for a model fixed at batch 2: the third fills no batch and is not measured (as in the statistics
    pass); the ranges are those ONNX Runtime gives for the first two."""
    rng = np.random.default_rng(11)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["y"]),
    ]
    model = _model(nodes, {"w1": rng.normal(size=(3, 2, 1, 1)), "w2": rng.normal(size=(2, 3, 1, 1))}, 2, ["y"])
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2
    graph = prepare(model)
    x = rng.normal(size=(3, 2, 6, 6)).astype(np.float32)
    x[2] *= 1000.0  # the image left out would dominate every range
    ranges = equalize.measure(model, graph, _images(x), ["r"], 64 << 20, 1)
    want = np.abs(_run(model, x[:2], ["r"])[0]).max(axis=(0, 2, 3))
    np.testing.assert_allclose(ranges["r"], want, rtol=1e-6)


def test_a_pad_without_a_mode_is_a_zero_pad():
    rng = np.random.default_rng(12)
    nodes = _relu_then(helper.make_node("Pad", ["r", "pads"], ["q"]))
    model = _model(nodes, {"w1": rng.normal(size=(4, 4, 1, 1)), "w2": rng.normal(size=(2, 4, 1, 1))}, 4, ["y"])
    model.graph.initializer.append(_pads([0, 0, 1, 1, 0, 0, 1, 1]))
    p = equalize.plan(prepare(model, {"x": (1, 4, 6, 6)}))
    assert p.root(("r", 2)) == p.root(("q", 2)) and p.root(("r", 2)) in p.free_roots()


def test_a_one_dimensional_convolution_chain_keeps_its_outputs():
    """Conv1d (rank 3, channels on axis 1) is equalized like the 2-D case."""
    rng = np.random.default_rng(13)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["y"]),
    ]
    inits = {
        "w1": rng.normal(size=(4, 2, 3)) * np.array([0.01, 1, 10, 300])[:, None, None],
        "b1": rng.normal(size=4),
        "w2": rng.normal(size=(3, 4, 1)),
    }
    graph_proto = helper.make_graph(
        nodes,
        "c1d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()],
    )
    model = helper.make_model(graph_proto, opset_imports=[helper.make_opsetid("", 13)])
    x = rng.normal(size=(3, 2, 16)).astype(np.float32)
    before = _run(model, x)[0]
    graph = prepare(model, {"x": (1, 2, 16)})
    assert equalize.equalize(model, graph, _images(x), 1.0, 64 << 20, 1) is not None
    after = _run(model, x)[0]
    np.testing.assert_allclose(after, before, rtol=1e-4, atol=1e-4 * np.abs(before).max())


def test_an_old_pad_reads_its_value_attribute_and_an_old_upsample_ties():
    """Opset 9 forms: Pad keeps its pads and fill value in attributes, Upsample resizes each channel by itself."""
    rng = np.random.default_rng(14)
    inits = {"w1": rng.normal(size=(4, 4, 1, 1)), "w2": rng.normal(size=(2, 4, 1, 1))}

    zero = helper.make_node("Pad", ["r"], ["q"], pads=[0, 0, 1, 1, 0, 0, 1, 1], value=0.0)
    p = _plan(_relu_then(zero), inits, opset=9)
    assert p.root(("r", 1)) == p.root(("q", 1)) and p.root(("r", 1)) in p.free_roots()
    ones = helper.make_node("Pad", ["r"], ["q"], pads=[0, 0, 1, 1, 0, 0, 1, 1], value=1.0)
    p = _plan(_relu_then(ones), inits, opset=9)
    assert p.root(("r", 1)) not in p.free_roots()
    up = helper.make_node("Upsample", ["r", "scales"], ["q"], mode="nearest")
    inits_up = {**inits, "scales": np.array([1.0, 1.0, 2.0, 2.0])}
    p = _plan(_relu_then(up), inits_up, opset=9)
    assert p.root(("r", 3)) == p.root(("q", 3)) and p.root(("r", 3)) in p.free_roots()
