"""The predictor's rules at the edges a mutation run of edge/dla/predict.py found unpinned (docs/development.md).

Each expected value is a hand calculation from a definition: ONNX's auto_pad and operator semantics and defaults, the
DLA limits of NvInfer.h as committed in tests/fixtures/nvidia_dla_facts.json, onnx-tensorrt's importers (reduce axes,
resize modes), NVIDIA's guide, and the multiply-add count or FP16 bytes of a layer. Report wording is the contract
docs/edge-dla.md shows.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest

from edge.dla.predict import _predict, predict
from edge.dla.rules import limits_for
from edge.errors import EdgeError
from edge.graph.model import prepare
from tests.test_dla_rules import binary, build, conv, helper, pool, slice_, unary, verdict, w


@pytest.mark.parametrize(
    "auto_pad, pads",
    # ONNX: total = (ceil(16 / 2) - 1) * 2 + (3 - 1) * 4 + 1 - 16 = 7; SAME_UPPER puts the odd one at the end.
    [("SAME_UPPER", "3x3x4x4"), ("SAME_LOWER", "4x4x3x3")],
)
def test_same_padding_is_resolved_from_the_input_size_then_checked_against_the_kernel(auto_pad, pads):
    v = verdict(conv((1, 4, 16, 16), (8, 4, 3, 3), strides=[2, 2], dilations=[4, 4], auto_pad=auto_pad))
    assert (v.rule, v.value) == ("conv.pad", f"pads {pads} with kernel 3x3")  # a pad of 3 or 4 is not below the kernel's 3


def test_a_clip_that_is_not_a_clipped_relu_stays_on_the_gpu():
    """NvInfer.h lists kCLIP among the DLA's activations; edge runs it there only as a clipped ReLU: [0, 1..127]."""
    relu6 = build([helper.make_node("Clip", ["x"], ["y"], min=0.0, max=6.0)], {"x": [1, 4, 8, 8]}, opset=6)
    assert verdict(relu6).device == "DLA"
    signed = build([helper.make_node("Clip", ["x"], ["y"], min=-1.0, max=6.0)], {"x": [1, 4, 8, 8]}, opset=6)
    v = verdict(signed)
    assert (v.device, v.rule, v.value) == ("GPU", "act.clip", "Clip [-1, 6]")


def test_upsample_7_takes_its_scales_from_the_attribute():
    def upsample(scales, mode="nearest"):
        return build([helper.make_node("Upsample", ["x"], ["y"], scales=scales, mode=mode)], {"x": [1, 4, 8, 8]}, opset=7)

    assert verdict(upsample([1.0, 1.0, 2.0, 2.0])).device == "DLA"
    v = verdict(upsample([1.0, 1.0, 64.0, 64.0]))  # nearest: at most 32 (NvInfer.h, IResizeLayer)
    assert (v.rule, v.value) == ("resize.range", "H,W scales 64x64 for nearest")
    v = verdict(upsample([1.0, 1.0, 2.0, 2.0], mode="linear"))  # Upsample-7 is asymmetric: not a linear mode DLA runs
    assert (v.rule, v.value) == ("resize.mode", "linear asymmetric")
    assert verdict(upsample([1.0, 1.0, 1.0, 2.0])).device == "DLA"  # a scale of 1 is in [1, 32]


def test_resize_with_sizes_or_runtime_scales_and_its_nearest_mode_in_the_reason():
    x = {"x": [1, 4, 8, 8]}
    sizes = build([helper.make_node("Resize", ["x", "", "", "s"], ["y"])], x, {"s": np.array([1, 4, 16, 16], np.int64)}, opset=13)
    assert (verdict(sizes).rule, verdict(sizes).value) == ("resize.scales", "output size given by 'sizes'")
    runtime = build([helper.make_node("Resize", ["x", "", "sc"], ["y"])], {**x, "sc": [4]}, opset=13)
    assert (verdict(runtime).rule, verdict(runtime).value) == ("resize.scales", "scales computed at run time")
    odd = build(
        [helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest", nearest_mode="ceil")],
        x,
        {"sc": np.array([1, 1, 2, 2], np.float32)},
        opset=13,
    )
    assert (verdict(odd).rule, verdict(odd).value) == ("resize.mode", "nearest half_pixel ceil")


def test_a_gemm_is_a_fully_connected_layer_with_its_feature_caps():
    """Gemm with a 2-D input and constant 2-D weights becomes FULLY_CONNECTED; its input and output features are the
    last dimensions of its input and output, each capped at 8192 like every DLA tensor dimension."""

    def gemm(k, n, trans_b):
        shape = (n, k) if trans_b else (k, n)
        return build([helper.make_node("Gemm", ["x", "w"], ["y"], transB=trans_b)], {"x": [1, k]}, {"w": w(*shape)})

    for trans_b in (0, 1):
        assert verdict(gemm(64, 16, trans_b)).device == "DLA"
        v = verdict(gemm(64, 9000, trans_b))  # transB: the weights are (n, k); the output is 1x9000 either way
        assert (v.rule, v.value) == ("gen.dim", "dimension 9000 in 1x9000")
        v = verdict(gemm(9000, 16, trans_b))
        assert (v.rule, v.value) == ("gen.dim", "dimension 9000 in 1x9000")
        assert verdict(gemm(8192, 8192, trans_b)).device == "DLA"
    transposed_a = build([helper.make_node("Gemm", ["x", "w"], ["y"], transA=1)], {"x": [64, 1]}, {"w": w(64, 16)})
    v = verdict(transposed_a)  # transA is not a fully connected layer, so its 2-D tensors break the 4-D rule
    assert (v.rule, v.value) == ("gen.rank4", "2-D tensor 64x1")


def test_flops_of_pooling_and_gemm_are_counted_by_hand():
    # AveragePool 2x2 stride 2 on 1x4x8x8: 1*4*4*4 = 64 outputs, 4 additions each.
    avg = predict(pool("AveragePool", (1, 4, 8, 8), kernel_shape=[2, 2], strides=[2, 2]), "orin", "10.3")
    assert avg.nodes[0].flops == 64 * 4
    # Gemm 1x64 by 64x16: 16 outputs, 64 multiply-adds each, counted twice.
    fc = build([helper.make_node("Gemm", ["x", "w"], ["y"])], {"x": [1, 64]}, {"w": w(64, 16)})
    assert predict(fc, "orin", "10.3").nodes[0].flops == 2 * 16 * 64
    # ConvTranspose 4->4 channels, 2x2 kernel, on 1x4x8x8: 256 inputs, each scattered into 4*2*2 multiply-adds.
    ct = build([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])], {"x": [1, 4, 8, 8]}, {"w": w(4, 4, 2, 2)})
    assert predict(ct, "orin", "10.3").nodes[0].flops == 2 * 256 * 16


def test_a_maxpool_with_dilation_is_not_a_dla_pooling_layer():
    v = verdict(pool("MaxPool", kernel_shape=[2, 2], dilations=[2, 2]))
    assert (v.device, v.rule, v.value) == ("GPU", "pool.kind", "MaxPool with indices or dilation")


def test_a_split_with_runtime_sizes_stays_on_the_gpu_and_constant_sizes_do_not():
    def split(const):
        inputs = {"x": [1, 8, 4, 4]} if const else {"x": [1, 8, 4, 4], "s": [2]}
        inits = {"s": np.array([4, 4], np.int64)} if const else None
        return build([helper.make_node("Split", ["x", "s"], ["y", "z"], axis=1)], inputs, inits, opset=13)

    assert (verdict(split(False), node=0).rule, verdict(split(False), node=0).value) == (
        "slice.const",
        "split sizes come from a runtime tensor",
    )
    assert verdict(split(True), node=0).device == "DLA"


def test_an_opset_9_slice_reads_its_attributes():
    cut_batch = build([helper.make_node("Slice", ["x"], ["y"], starts=[0], ends=[1], axes=[0])], {"x": [2, 4, 8, 8]}, opset=9)
    assert (verdict(cut_batch).rule, verdict(cut_batch).value) == ("slice.axis0", "slices the batch axis")
    channels = build([helper.make_node("Slice", ["x"], ["y"], starts=[0], ends=[2], axes=[1])], {"x": [1, 4, 8, 8]}, opset=9)
    assert verdict(channels).device == "DLA"


def test_int8_grouped_conv_with_channels_per_group_not_a_multiple_of_4_is_noted():
    # 12 -> 12 channels in 2 groups: 6 input and 6 output channels per group.
    model = conv((1, 12, 16, 16), (12, 6, 3, 3), group=2, pads=[1, 1, 1, 1])
    notes = verdict(model, precision="int8").notes
    assert "INT8 grouped conv with 6/6 channels per group runs FP16 (conv.int8_group)" in notes
    # 12 -> 16 in 2 groups: 6 in (not a multiple of 4) and 8 out per group: one of the two is enough for the note
    notes = verdict(conv((1, 12, 16, 16), (16, 6, 3, 3), group=2, pads=[1, 1, 1, 1]), precision="int8").notes
    assert "INT8 grouped conv with 6/8 channels per group runs FP16 (conv.int8_group)" in notes
    # 16 -> 8 in 2 groups: 8 in and 4 out per group, both multiples of 4: no note
    assert not any("int8_group" in n for n in verdict(conv((1, 16, 8, 8), (8, 8, 1, 1), group=2), precision="int8").notes)


def _pad_then(host, pads, own=(0, 0, 0, 0), kernel=(3, 3), fill=None, opset=13, **pad_attrs):
    """Pad (H and W pads from ``pads``, ONNX order begin..., end...) feeding one Conv or pooling layer."""
    inits = {"p": np.array(pads, np.int64)}
    pad_inputs = ["x", "p"]
    if fill is not None:
        inits["v"], pad_inputs = np.array(fill, np.float32), ["x", "p", "v"]
    if opset < 11:
        pad_node = helper.make_node("Pad", ["x"], ["t"], pads=list(pads), **pad_attrs)
        del inits["p"]
    else:
        pad_node = helper.make_node("Pad", pad_inputs, ["t"], **pad_attrs)
    if host in ("Conv", "ConvTranspose"):
        inits["w"] = w(4 if host == "ConvTranspose" else 8, 4, *kernel)
        layer = helper.make_node(host, ["t", "w"], ["y"], pads=list(own))
    else:
        layer = helper.make_node(host, ["t"], ["y"], kernel_shape=list(kernel), pads=list(own))
    return build([pad_node, layer], {"x": [1, 4, 40, 40]}, inits, opset=opset)


def _folded(model) -> bool:
    report = predict(model, "orin", "10.3")
    pad, host = report.nodes
    assert pad.op == "Pad"
    if pad.fused_into is not None:  # no layer of its own: the host's padding
        assert pad.trt_layers == [f"PADDING: Pad_0 (becomes the padding of {host.name})"] and pad.unconfirmed == ["pad.conv"]
        assert pad.layer == "SLICE(FILL)"
    return pad.fused_into is not None


@pytest.mark.parametrize(
    "host, pads, own, kernel, folded",
    [
        # The DLA's conv padding is at most 31 and below the kernel (NvInfer.h notes; the rule conv.pad): Pad + own pads.
        ("Conv", [0, 0, 1, 1, 0, 0, 1, 1], (1, 1, 1, 1), (3, 3), True),  # 2 < 3
        ("Conv", [0, 0, 2, 1, 0, 0, 1, 1], (1, 1, 1, 1), (3, 3), False),  # top 2 + 1 = 3, not below the kernel
        ("Conv", [0, 0, 0, 0, 0, 0, 2, 0], (0, 0, 0, 0), (3, 3), True),  # bottom 2
        ("Conv", [0, 0, 0, 0, 0, 0, 0, 3], (0, 0, 0, 0), (3, 3), False),  # right 3
        ("Conv", [0, 0, 0, 0, 0, 0, 2, 0], (0, 0, 1, 0), (3, 3), False),  # bottom 2 + its own 1 = 3
        ("Conv", [0, 0, 2, 4, 0, 0, 2, 4], (0, 0, 0, 0), (3, 5), True),  # 4 < 5 across, 2 < 3 down
        ("Conv", [0, 0, 3, 4, 0, 0, 2, 4], (0, 0, 0, 0), (3, 5), False),  # 3 down is not below 3
        ("Conv", [0, 0, 31, 31, 0, 0, 31, 31], (0, 0, 0, 0), (32, 32), True),  # the cap of 31
        ("Conv", [0, 0, 31, 30, 0, 0, 31, 31], (0, 1, 0, 0), (32, 32), True),
        ("Conv", [0, 0, 31, 31, 0, 0, 31, 31], (0, 1, 0, 0), (32, 32), False),  # 32 across
        ("Conv", [0, 0, 32, 0, 0, 0, 0, 0], (0, 0, 0, 0), (33, 33), False),  # 32 < 33, but past the cap of 31
        # Pooling: padding at most 7 (NvInfer.h IPoolingLayer) and below the window.
        ("MaxPool", [0, 0, 7, 7, 0, 0, 7, 7], (0, 0, 0, 0), (8, 8), True),
        ("MaxPool", [0, 0, 7, 7, 0, 0, 7, 7], (1, 0, 0, 0), (8, 8), False),
        ("AveragePool", [0, 0, 1, 1, 0, 0, 1, 1], (0, 0, 0, 0), (2, 2), True),
        ("ConvTranspose", [0, 0, 1, 1, 0, 0, 1, 1], (0, 0, 0, 0), (3, 3), False),  # only Conv and pooling take it
    ],
)
def test_a_zero_pad_folds_into_the_next_layer_only_within_that_layers_dla_padding(host, pads, own, kernel, folded):
    assert _folded(_pad_then(host, pads, own, kernel)) is folded


def test_only_a_constant_zero_pad_of_height_and_width_folds():
    hw = [0, 0, 1, 1, 0, 0, 1, 1]
    assert _folded(_pad_then("Conv", hw, opset=2))  # Pad-2: the pads are an attribute
    assert _folded(_pad_then("Conv", hw, fill=0.0))
    assert not _folded(_pad_then("Conv", hw, fill=0.5))  # a non-zero fill is not a conv's zero padding
    assert not _folded(_pad_then("Conv", hw, mode="reflect"))
    assert not _folded(_pad_then("Conv", [0, 1, 1, 1, 0, 0, 1, 1]))  # channels padded
    assert not _folded(_pad_then("Conv", [0, 0, 1, 1, 0, 0, -1, 1]))  # a crop


def test_an_activation_after_an_unnamed_deconvolution_fuses_into_it_by_its_report_name():
    """Found by the mutation run: an unnamed producer made fused_into '' and the fusion vanished from the table."""
    model = build(
        [helper.make_node("ConvTranspose", ["x", "w"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
        {"x": [1, 4, 8, 8]},
        {"w": w(4, 4, 2, 2)},
    )
    deconv, relu = predict(model, "orin", "10.3").nodes
    assert (deconv.name, relu.fused_into) == ("ConvTranspose_0", "ConvTranspose_0")


def test_a_square_deconvolution_stride_in_the_disabled_gap_is_named():
    # TensorRT disables square deconvolution kernels and strides of 23..32 on the DLA (the deconv.square rule).
    model = build(
        [helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[24, 24])], {"x": [1, 4, 4, 4]}, {"w": w(4, 4, 2, 2)}
    )
    v = verdict(model)
    assert (v.rule, v.value) == ("deconv.square", "square stride 24x24")


def test_a_negative_axis_that_is_the_batch_axis_is_slicing_the_batch():
    inits = {"s": np.array([0], np.int64), "e": np.array([1], np.int64), "a": np.array([-4], np.int64)}
    model = build([helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])], {"x": [2, 4, 8, 8]}, inits, opset=13)
    assert (verdict(model).rule, verdict(model).value) == ("slice.axis0", "slices the batch axis")


@pytest.mark.parametrize("op, opset", [("Resize", 10), ("Upsample", 9)])
def test_resize_10_and_upsample_9_take_their_scales_from_the_second_input(op, opset):
    model = build(
        [helper.make_node(op, ["x", "sc"], ["y"], mode="nearest")],
        {"x": [1, 4, 8, 8]},
        {"sc": np.array([1, 1, 2, 2], np.float32)},
        opset=opset,
    )
    assert verdict(model).device == "DLA"


def test_a_gemm_is_fully_connected_only_with_alpha_and_beta_1_and_a_runtime_input():
    def gemm(x_const=False, **attrs):
        inits = {"w": w(64, 16), **({"x": w(1, 64)} if x_const else {})}
        return build([helper.make_node("Gemm", ["x", "w"], ["y"], **attrs)], {} if x_const else {"x": [1, 64]}, inits)

    assert verdict(gemm()).layer == "FULLY_CONNECTED"
    for model in (gemm(beta=0.5), gemm(alpha=2.0)):
        assert (verdict(model).rule, verdict(model).value) == ("gen.rank4", "2-D tensor 1x64")  # a MatMul + scale then
    folded = predict(gemm(x_const=True), "orin", "10.3")  # both operands constant: computed at build time
    assert (folded.nodes, folded.folded) == ([], 1)


def test_a_flatten_before_a_fully_connected_layer_merges_unless_it_is_also_an_output():
    def model(also_output):
        graph = helper.make_graph(
            [helper.make_node("Flatten", ["x"], ["f"]), helper.make_node("Gemm", ["f", "w"], ["y"])],
            "t",
            [helper.make_tensor_value_info("x", 1, [1, 64, 1, 1])],
            [helper.make_tensor_value_info("y", 0, None)] + ([helper.make_tensor_value_info("f", 0, None)] if also_output else []),
            [helper.make_tensor(  # the weights
                "w", 1, [64, 16], np.ones(64 * 16, np.float32).tolist()
            )],
        )  # fmt: skip
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])

    flatten = predict(model(False), "orin", "10.3").nodes[0]
    assert (flatten.layer, flatten.fused_into) == ("SHUFFLE", "Gemm_1")
    assert flatten.trt_layers == ["SHUFFLE: Flatten_0 (merged with reshape_before_Gemm_1: no layer left)"]
    assert predict(model(True), "orin", "10.3").nodes[0].fused_into is None


def test_a_dynamic_input_is_named_with_its_dims_and_the_shape_to_build_with():
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"])],
        "t",
        [helper.make_tensor_value_info("x", 1, ["N", 3, 64, 64])],
        [helper.make_tensor_value_info("y", 0, None)],
        [helper.make_tensor("w", 1, [8, 3, 3, 3], np.ones(216, np.float32).tolist())],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(EdgeError) as info:
        predict(model, "orin", "10.3")
    assert str(info.value).endswith("pass the build shape, e.g. --shape x=1x3x64x64")
    report = predict(model, "orin", "10.3", {"x": (2, 3, 64, 64)})
    assert report.findings[0].startswith("input 'x' is dynamic in the file [N, 3, 64, 64]; DLA needs static shapes")
    assert report.to_dict()["model"] == "t" and report.summary()["gpu_nodes"] == 0
    typed = predict(model, "orin", "11.4", {"x": (1, 3, 64, 64)}).findings
    assert any(f.startswith("TensorRT 11 DLA builds are strongly typed") for f in typed)


def test_a_batchnorm_after_a_conv_costs_nothing_its_weights_are_folded():
    model = build(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["y"]),
        ],
        {"x": [1, 4, 8, 8]},
        {"w": w(8, 4, 3, 3), "g": w(8), "b": w(8), "m": w(8), "v": w(8)},
    )
    conv_v, bn = predict(model, "orin", "10.3").nodes
    assert conv_v.flops == 2 * (8 * 8 * 8) * (4 * 3 * 3) and (bn.fused_into, bn.flops) == ("Conv_0", 0)


def test_leaky_relu_on_the_dla_rests_on_an_unconfirmed_rule():
    # NvInfer.h lists kRELU, kSIGMOID, kTANH and kCLIP; LeakyRelu on the DLA is documented elsewhere only.
    v = verdict(build([helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.1)], {"x": [1, 4, 8, 8]}))
    assert (v.device, v.unconfirmed) == ("DLA", ["act.leaky"])
    assert verdict(build([helper.make_node("Relu", ["x"], ["y"])], {"x": [1, 4, 8, 8]})).unconfirmed == []


def test_int8_predictions_say_each_dla_region_needs_scales():
    model = conv()
    assert not any("INT8 on DLA" in f for f in predict(model, "orin", "10.3").findings)
    assert any(
        f.startswith("INT8 on DLA needs a scale for every tensor") for f in predict(model, "orin", "10.3", None, "int8").findings
    )


def test_a_per_channel_operand_broadcasts_on_the_dla_and_a_per_row_one_does_not():
    """Two runtime tensors (a constant per-channel one is a SCALE layer): C x 1 x 1 broadcasts, C x 1 x W does not."""
    per_channel = verdict(binary("Add", w(1, 8, 1, 1), runtime_b=True))
    per_row = verdict(binary("Add", w(1, 8, 1, 4), runtime_b=True))
    per_column = verdict(binary("Add", w(1, 8, 4, 1), runtime_b=True))
    assert per_channel.device == "DLA" and per_column.rule == "elt.broadcast"
    assert (per_row.device, per_row.rule, per_row.value) == ("GPU", "elt.broadcast", "operand 1x8x1x4 broadcast to 1x8x4x4")


def test_slicing_a_batch_of_one_whole_is_not_slicing_the_batch():
    inits = {"s": np.array([0], np.int64), "e": np.array([1], np.int64), "a": np.array([0], np.int64)}
    model = build([helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])], {"x": [1, 4, 8, 8]}, inits, opset=13)
    assert verdict(model).device == "DLA"


def test_a_precision_the_dla_does_not_run_is_refused_naming_it():
    with pytest.raises(EdgeError, match=r"^precision must be fp16 or int8 for DLA, not 'fp32'$"):
        predict(conv(), "orin", "10.3", None, "fp32")


def test_reduce_max_axes_from_an_initializer_are_checked_and_computed_ones_are_named():
    """ReduceMax-18 takes its axes as an input. TensorRT's parser (onnx-tensorrt 10.0, reduceTensor) takes that input
    only as an initializer ("Axis input must be an initializer!"); no axes at all reduce every axis."""

    def reduce_max(axes=None, runtime=False):
        inputs = {"x": [1, 4, 8, 8], **({"a": [1]} if runtime else {})}
        names = ["x", "a"] if runtime or axes is not None else ["x"]
        inits = {"a": np.array(axes, np.int64)} if axes is not None else None
        model = build([helper.make_node("ReduceMax", names, ["y"])], inputs, inits, opset=18)
        if runtime:
            model.graph.input[1].type.tensor_type.elem_type = 7  # INT64
        return model

    assert verdict(reduce_max([1])).device == "DLA"
    assert (verdict(reduce_max([0])).rule, verdict(reduce_max([0])).value) == ("reduce.axes", "reduces the batch axis")
    assert (verdict(reduce_max()).rule, verdict(reduce_max()).value) == ("reduce.axes", "reduces every axis")
    v = verdict(reduce_max(runtime=True))
    assert (v.device, v.rule, v.value) == ("GPU", "reduce.axes", "axes computed at run time")
    after_custom = build(  # no shape inference through a custom op: the input's shape is unknown
        [helper.make_node("MyOp", ["x"], ["t"], domain="custom"), helper.make_node("ReduceMax", ["t"], ["y"], axes=[1])],
        {"x": [1, 4, 8, 8]},
        opset=13,
    )
    after_custom.opset_import.append(helper.make_opsetid("custom", 1))
    assert verdict(after_custom).rule == "gen.static"


def test_a_fully_connected_layers_output_reshape_is_on_the_gpu_and_a_refused_one_is_a_matrix_multiply():
    """docs/edge-dla.md: FULLY_CONNECTED between reshape_before_<node> and reshape_after_<node>, the latter a GPU
    shuffle in every published log; refused (9000 output features > 8192), the parser's Gemm is a MATRIX_MULTIPLY."""

    def gemm(n):
        return build([helper.make_node("Gemm", ["x", "w"], ["y"])], {"x": [1, 64]}, {"w": w(64, n)})

    assert verdict(gemm(16)).trt_layers == [
        "SHUFFLE: reshape_before_Gemm_0",
        "FULLY_CONNECTED: Gemm_0",
        "SHUFFLE: reshape_after_Gemm_0 (GPU)",
    ]
    refused = verdict(gemm(9000))
    assert (refused.device, refused.layer, refused.trt_layers) == ("GPU", "MATRIX_MULTIPLY", ["MATRIX_MULTIPLY: Gemm_0"])
    assert verdict(conv()).trt_layers == ["CONVOLUTION: Conv_0"]  # only a fully connected layer has the GPU reshape


def test_the_report_names_the_file_and_the_jetpack_of_its_tensorrt(tmp_path):
    """TensorRT 10.3 is the TensorRT of JetPack 6.1 and 6.2 (NVIDIA's JetPack release notes)."""
    path = tmp_path / "c.onnx"
    onnx.save(conv(), str(path))
    report = predict(path, "orin", "10.3")
    assert (report.model, report.jetpack) == (str(path), "6.1/6.2")
    assert {k: report.to_dict()[k] for k in ("model", "target", "trt", "jetpack")} == {
        "model": str(path),
        "target": "orin",
        "trt": "10.3",
        "jetpack": "6.1/6.2",
    }


def test_a_squeeze_merges_into_a_fully_connected_layer_and_a_2d_activation_does_not():
    """Squeeze of [1, 64, 1, 1] to [1, 64] is the same no-op reshape as Flatten; a Relu on [1, 64] is a layer of its
    own (a 2-D tensor, so on the GPU) even though its input and output have the FC's shape."""

    def model(op, x_shape, **attrs):
        inits = {"w": w(64, 16), **({"ax": np.array([2, 3], np.int64)} if op == "Squeeze" else {})}
        inputs = ["x", "ax"] if op == "Squeeze" else ["x"]
        return build(
            [helper.make_node(op, inputs, ["f"], **attrs), helper.make_node("Gemm", ["f", "w"], ["y"])], {"x": x_shape}, inits
        )

    squeeze, fc = predict(model("Squeeze", [1, 64, 1, 1]), "orin", "10.3").nodes
    assert (squeeze.fused_into, fc.layer) == ("Gemm_1", "FULLY_CONNECTED")
    relu = predict(model("Relu", [1, 64]), "orin", "10.3").nodes[0]
    assert (relu.fused_into, relu.device, relu.rule) == (None, "GPU", "gen.rank4")


def test_a_split_along_the_batch_axis_is_named():
    model = build(
        [helper.make_node("Split", ["x", "s"], ["y", "z"], axis=0)], {"x": [2, 4, 8, 8]}, {"s": np.array([1, 1], np.int64)}
    )
    assert (verdict(model, node=0).rule, verdict(model, node=0).value) == ("slice.axis0", "splits the batch axis")


@pytest.mark.parametrize("transform", ["half_pixel", "pytorch_half_pixel"])
def test_a_linear_resize_with_pytorchs_half_pixel_runs_on_the_dla(transform):
    """onnx-tensorrt 10.0 imports pytorch_half_pixel as kHALF_PIXEL with selector kUPPER; NvInfer.h's DLA list
    accepts linear half_pixel with FORMULA or UPPER selector."""
    model = build(
        [helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="linear", coordinate_transformation_mode=transform)],
        {"x": [1, 4, 8, 8]},
        {"sc": np.array([1, 1, 2, 2], np.float32)},
    )
    assert verdict(model).device == "DLA"


def test_an_unused_pad_and_a_chain_of_pass_throughs_are_followed():
    """A Pad nobody reads is reported as itself; Conv -> Identity -> Identity -> Relu is one subgraph with no
    transition (the builder drops identities)."""
    dangling = build(
        [helper.make_node("Pad", ["x", "p"], ["unused"]), helper.make_node("Relu", ["x"], ["y"])],
        {"x": [1, 4, 8, 8]},
        {"p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)},
    )
    assert [(n.op, n.rule) for n in predict(dangling, "orin", "10.3").nodes] == [("Pad", "pad.fill"), ("Relu", None)]
    chain = build(
        [
            helper.make_node("Conv", ["x", "w"], ["c"]),
            helper.make_node("Identity", ["c"], ["i1"]),
            helper.make_node("Identity", ["i1"], ["i2"]),
            helper.make_node("Relu", ["i2"], ["y"]),
        ],
        {"x": [1, 4, 8, 8]},
        {"w": w(8, 4, 3, 3)},
    )
    report = predict(chain, "orin", "10.3")
    assert (len(report.subgraphs), report.transitions) == (1, 0)
    assert [n.op for n in report.nodes] == ["Conv", "Relu"] and report.nodes[1].fused_into == "Conv_0"


def test_the_gpu_count_per_rule_is_largest_first():
    """Three layers on the GPU for one rule (Exp is no DLA unary, unary.op) and one for another (op.unknown, which
    sorts first by name): the larger count is listed first."""
    nodes = [helper.make_node("Exp", [i], [o]) for i, o in (("x", "a"), ("a", "b"), ("b", "c"))]
    model = build(nodes + [helper.make_node("MyOp", ["c"], ["y"], domain="custom")], {"x": [1, 4, 8, 8]})
    model.opset_import.append(helper.make_opsetid("custom", 1))
    report = predict(model, "orin", "10.3")
    assert list(report.gpu_by_rule().items()) == [("unary.op", 3), ("op.unknown", 1)]
    as_dict = report.to_dict()
    assert (as_dict["inputs"], as_dict["findings"]) == ({"x": [1, 4, 8, 8]}, report.findings) and report.findings


def test_flops_of_max_pooling_reduction_and_a_transposed_gemm_by_hand():
    # MaxPool 2x2 stride 2 on 1x4x8x8: 64 outputs, 4 comparisons each.
    mp = predict(pool("MaxPool", (1, 4, 8, 8), kernel_shape=[2, 2], strides=[2, 2]), "orin", "10.3")
    assert mp.nodes[0].flops == 64 * 4
    # ReduceMax over C of 1x4x8x8: every input element is read once.
    rm = build([helper.make_node("ReduceMax", ["x"], ["y"], axes=[1])], {"x": [1, 4, 8, 8]})
    assert predict(rm, "orin", "10.3").nodes[0].flops == 256
    # Gemm transA on a 64x1 input (A' is 1x64) by 64x16: 16 outputs of 64 multiply-adds each, counted twice.
    ta = build([helper.make_node("Gemm", ["x", "w"], ["y"], transA=1)], {"x": [64, 1]}, {"w": w(64, 16)})
    assert predict(ta, "orin", "10.3").nodes[0].flops == 2 * 16 * 64


def _resize11(mode: str):
    """A Resize-11 doubling H and W, with every attribute but the mode at its default."""
    return build(
        [helper.make_node("Resize", ["x", "roi", "sc"], ["y"], mode=mode)],
        {"x": [1, 4, 8, 8]},
        {"roi": np.zeros(0, np.float32), "sc": np.array([1, 1, 2, 2], np.float32)},
        opset=11,
    )


def test_resize_11_defaults_to_half_pixel_and_a_valid_deconv_pads_nothing():
    """ONNX: Resize-11's coordinate_transformation_mode defaults to half_pixel, the DLA's linear mode; a
    ConvTranspose with auto_pad VALID has no padding, which the DLA's deconvolution requires."""
    assert verdict(_resize11("linear")).device == "DLA"
    valid = build(
        [helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], auto_pad="VALID")],
        {"x": [1, 4, 8, 8]},
        {"w": w(4, 4, 2, 2)},
    )
    assert verdict(valid).device == "DLA"


def test_runtime_conv_weights_and_a_batch_broadcast_operand_are_named_or_accepted():
    runtime = build([helper.make_node("Conv", ["x", "k"], ["y"])], {"x": [1, 4, 8, 8], "k": [8, 4, 3, 3]})
    assert (verdict(runtime).rule, verdict(runtime).value) == ("conv.weights", "weights come from a runtime tensor")
    # A per-sample, per-channel operand [2, 8, 1, 1] on a batch of 2: the batch matches, H and W broadcast.
    assert verdict(binary("Add", w(2, 8, 1, 1), (2, 8, 4, 4))).device == "DLA"


def test_a_bias_add_joins_its_fully_connected_matmul_only_when_it_is_the_only_reader():
    def model(second_reader):
        nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
        if second_reader:
            nodes.append(helper.make_node("Relu", ["m"], ["z"]))
        built = build(nodes, {"x": [1, 64]}, {"w": w(64, 16), "b": w(16)})
        if second_reader:
            built.graph.output.append(helper.make_tensor_value_info("z", 0, None))
        return predict(built, "orin", "10.3").nodes

    fc, add = model(False)
    assert (add.fused_into, add.device) == (fc.name, "DLA")
    fc, add, _ = model(True)
    assert (add.fused_into, add.device, add.rule) == (None, "GPU", "gen.rank4")


def test_two_fully_connected_layers_are_two_subgraphs_through_the_gpu_reshape():
    """Each fully connected layer's output leaves through its reshape_after on the GPU, so the next one starts a new
    DLA subgraph, and the tensor crosses twice."""
    model = build(
        [helper.make_node("Gemm", ["x", "w1"], ["h"]), helper.make_node("Gemm", ["h", "w2"], ["y"])],
        {"x": [1, 64]},
        {"w1": w(64, 32), "w2": w(32, 16)},
    )
    report = predict(model, "orin", "10.3")
    assert [(n.device, n.subgraph) for n in report.nodes] == [("DLA", 1), ("DLA", 2)]
    # As for any GPU layer between two DLA layers: out to the reshape and back in, and the reshape is a GPU island.
    assert (report.transitions, report.gpu_islands) == (2, 1)
    # 20 in a chain: 20 one-layer subgraphs wanted, 16 kept; 15 reshapes lead from one DLA layer to the next
    # (2 crossings and an island each), the 16th to the GPU layers past the cap (1 crossing).
    chain = build(
        [helper.make_node("Gemm", ["x" if i == 0 else f"h{i - 1}"], [f"h{i}" if i < 19 else "y"]) for i in range(20)],
        {"x": [1, 16]},
    )
    for i, node in enumerate(chain.graph.node):
        node.input.append(f"w{i}")
        chain.graph.initializer.append(onnx.numpy_helper.from_array(w(16, 16), f"w{i}"))
    report = predict(chain, "orin", "10.3")
    assert (report.candidate_subgraphs, len(report.subgraphs)) == (20, 16)
    assert (report.transitions, report.gpu_islands) == (31, 15)


def test_a_subgraphs_number_and_local_memory_at_fp16_and_the_1_gib_cap():
    """Conv 3x3 on 1x4x8x8 -> 1x8x6x6 feeding a Relu in the same loadable: 288 values held inside it, 2 bytes each.
    NvInfer.h: intermediate tensors of one DLA subgraph must total *less than* the local pool."""
    model = build(
        [helper.make_node("Conv", ["x", "w"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
        {"x": [1, 4, 8, 8]},
        {"w": w(8, 4, 3, 3)},
    )
    (sub,) = predict(model, "orin", "10.3").subgraphs
    assert (sub.index, sub.local_bytes) == (1, 288 * 2)
    graph = prepare(model)
    for cap, over in ((576, True), (577, False)):
        report = _predict(graph, dataclasses.replace(limits_for("orin"), max_local_bytes=cap), "fp16", "t")
        assert any("sub.local" in f for f in report.findings) is over, cap


def test_the_report_lists_unknown_ops_and_past_the_cap_how_many_nodes_move():
    nodes = [helper.make_node("MyOp", ["x"], ["a"], domain="custom")]
    nodes += [helper.make_node("Other", [i], [o], domain="custom") for i, o in (("a", "b"), ("b", "y"))]
    model = build(nodes, {"x": [1, 4, 8, 8]})
    model.opset_import.append(helper.make_opsetid("custom", 1))
    assert (
        "no shape inference for MyOp x1, Other x2: tensors after them have unknown shapes (gen.static)"
        in predict(model, "orin", "10.3").findings
    )
    # 17 Relus split by 16 GPU Exps: 17 candidate subgraphs, the 17th (one node) moves to the GPU.
    chain, x = [], "x"
    for i in range(17):
        chain.append(helper.make_node("Relu", [x], [f"r{i}"]))
        x = f"r{i}"
        if i < 16:
            chain.append(helper.make_node("Exp", [x], [f"e{i}"]))
            x = f"e{i}"
    chain[-1].output[0] = "y"
    report = predict(build(chain, {"x": [1, 4, 8, 8]}), "orin", "10.3")
    assert "17 DLA subgraphs > 16 per DLA core: TensorRT moves subgraphs 17..17 (1 nodes) to GPU (sub.cap)" in report.findings
    assert [(n.name, n.rule, n.value) for n in report.nodes if n.rule == "sub.cap"] == [
        ("Relu_32", "sub.cap", "would be DLA subgraph 17")
    ]


def test_the_report_dict_keeps_the_dynamic_inputs_and_the_unconfirmed_rules():
    graph = helper.make_graph(
        [helper.make_node("LeakyRelu", ["x"], ["y"])],
        "t",
        [helper.make_tensor_value_info("x", 1, ["N", 4, 8, 8])],
        [helper.make_tensor_value_info("y", 0, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    as_dict = predict(model, "orin", "10.3", {"x": (1, 4, 8, 8)}).to_dict()
    assert (as_dict["dynamic_inputs"], as_dict["unconfirmed_rules"]) == ({"x": ["N", 4, 8, 8]}, ["act.leaky"])


def test_the_reasons_of_runtime_operands_and_a_global_average_pool_are_named():
    cases = [
        (binary("MatMul", w(1, 1, 8, 16), (1, 1, 4, 8), runtime_b=True), "matmul.weights", "both operands are runtime tensors"),
        (slice_([0], [4], [1], runtime_starts=True), "slice.const", "start/end/axes/steps come from runtime tensors"),
        (unary("GlobalAveragePool"), "pool.global", "GlobalAveragePool (a REDUCE layer)"),
    ]
    for model, rule, value in cases:
        assert (verdict(model).rule, verdict(model).value) == (rule, value)


def test_clip_bounds_from_runtime_tensors_or_an_empty_constant():
    """Clip-11 takes min and max as inputs: either one computed at run time keeps it off the DLA; an empty constant
    is the bound's default (ONNX: no bound), so [0, inf] is not a clipped ReLU."""
    runtime_min = build(
        [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], {"x": [1, 4, 8, 8], "lo": []}, {"hi": np.array(6, np.float32)}
    )
    assert (verdict(runtime_min).rule, verdict(runtime_min).value) == ("act.clip", "Clip bounds come from runtime tensors")
    empty_max = build(
        [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
        {"x": [1, 4, 8, 8]},
        {"lo": np.array(0, np.float32), "hi": np.zeros(0, np.float32)},
    )
    assert (verdict(empty_max).rule, verdict(empty_max).value) == ("act.clip", "Clip [0, inf]")


def test_the_gap_of_square_deconvolution_kernels_ends_at_32_inclusive():
    """NVIDIA's developer guide: square deconvolution kernels and strides in [23, 32] are disabled on the DLA."""

    def deconv(k):
        return build([helper.make_node("ConvTranspose", ["x", "w"], ["y"])], {"x": [1, 4, 4, 4]}, {"w": w(4, 4, k, k)})

    assert (verdict(deconv(32)).rule, verdict(deconv(32)).value) == ("deconv.square", "square kernel 32x32")
    assert verdict(deconv(22)).rule != "deconv.square"


def test_a_batch_of_two_broadcasts_an_operand_with_a_batch_of_one():
    # A runtime [1, 8, 1, 1] operand on a batch of 2 (a constant one would be a SCALE layer): N and H, W broadcast.
    assert verdict(binary("Add", w(1, 8, 1, 1), (2, 8, 4, 4), runtime_b=True)).device == "DLA"


def test_a_scale_after_a_convolution_is_fused_and_a_pad_before_runtime_weights_is_not():
    scaler = build(
        [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("ImageScaler", ["c"], ["y"], scale=2.0, bias=[0.0] * 8)],
        {"x": [1, 4, 8, 8]},
        {"w": w(8, 4, 3, 3)},
        opset=9,
    )
    assert predict(scaler, "orin", "10.3").nodes[1].fused_into == "Conv_0"  # a SCALE layer: the builder's conv + scale
    pad_runtime = build(
        [helper.make_node("Pad", ["x", "p"], ["t"]), helper.make_node("Conv", ["t", "k"], ["y"])],
        {"x": [1, 4, 8, 8], "k": [8, 4, 3, 3]},
        {"p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)},
    )
    pad, conv_ = predict(pad_runtime, "orin", "10.3").nodes
    assert (pad.fused_into, pad.rule, conv_.rule) == (None, "pad.fill", "conv.weights")


def test_the_dla_share_of_the_work_is_rounded_to_four_places():
    """Conv 3x3, 4 -> 8 channels on 8x8: 288 outputs x 36 multiply-adds x 2 = 20736; each Exp after it (GPU): 288.
    20736 / 21312 = 0.972972..."""
    model = build(
        [
            helper.make_node("Conv", ["x", "w"], ["a"]),
            helper.make_node("Exp", ["a"], ["b"]),
            helper.make_node("Exp", ["b"], ["y"]),
        ],
        {"x": [1, 4, 8, 8]},
        {"w": w(8, 4, 3, 3)},
    )
    report = predict(model, "orin", "10.3")
    assert [n.flops for n in report.nodes] == [20736, 288, 288]
    assert report.summary()["dla_flops_share"] == 0.973
    assert [n["name"] for n in report.to_dict()["nodes"]] == ["Conv_0", "Exp_1", "Exp_2"]


def test_a_tensor_of_another_type_and_a_split_without_axis_are_named():
    relu = build([helper.make_node("Relu", ["x"], ["y"])], {"x": [1, 4, 8, 8]}, dtype=6, opset=14)  # INT32
    assert (verdict(relu).rule, verdict(relu).value) == ("gen.dtype", "tensor 'x' is int32")
    # ONNX: Split's axis defaults to 0, the batch axis.
    split = build([helper.make_node("Split", ["x", "s"], ["y", "z"])], {"x": [2, 8, 8, 8]}, {"s": np.array([1, 1], np.int64)})
    assert (verdict(split, node=0).rule, verdict(split, node=0).value) == ("slice.axis0", "splits the batch axis")


def test_flops_of_a_batched_matmul_by_hand():
    # MatMul 1x1x4x8 by 8x16: 64 outputs of 8 multiply-adds each, counted twice.
    assert predict(binary("MatMul", w(8, 16), (1, 1, 4, 8)), "orin", "10.3").nodes[0].flops == 2 * 64 * 8


def test_the_parser_of_the_release_asked_for_decides_and_orin_10_3_is_the_default():
    """Gelu's importer first appears in onnx-tensorrt 10.0 (not in 8.5-GA): on Xavier's TensorRT 8.5 there is no
    layer for it at all. Without a target the prediction is for Orin on TensorRT 10.3 (JetPack 6.1/6.2)."""
    gelu = build([helper.make_node("Gelu", ["x"], ["y"])], {"x": [1, 4, 8, 8]}, opset=20)
    old = predict(gelu, "xavier", "8.5").nodes[0]
    assert (old.rule, old.value) == ("parser.missing", "Gelu on TensorRT 8.5")
    assert predict(gelu, "orin", "10.3").nodes[0].rule != "parser.missing"
    default = predict(conv())
    assert (default.target, default.trt, default.jetpack) == ("orin", "10.3", "6.1/6.2")


def test_the_share_of_dla_nodes_and_how_to_confirm_the_prediction():
    """One of three layers on the DLA: 0.3333. The way to confirm names TensorRT's own call (IBuilderConfig's
    can_run_on_DLA in the 10.3 Python bindings) and the section of the build log."""
    model = build(
        [
            helper.make_node("Relu", ["x"], ["a"]),
            helper.make_node("Exp", ["a"], ["b"]),
            helper.make_node("Exp", ["b"], ["y"]),
        ],
        {"x": [1, 4, 8, 8]},
    )
    report = predict(model, "orin", "10.3")
    assert report.summary()["dla_node_share"] == 0.3333
    said = report.to_dict()["prediction_only"]
    assert "config.can_run_on_DLA(layer)" in said and "'Layers Running on DLA'" in said


def test_every_operand_of_a_multi_input_layer_is_checked_and_ai_onnx_is_the_default_domain():
    # The second operand of an Add comes out of a custom op (no shape inference): it is the tensor named.
    model = build(
        [helper.make_node("MyOp", ["x"], ["t"], domain="custom"), helper.make_node("Add", ["x", "t"], ["y"])], {"x": [1, 4, 8, 8]}
    )
    model.opset_import.append(helper.make_opsetid("custom", 1))
    assert (verdict(model).rule, verdict(model).value) == ("gen.static", "tensor 't' has shape unknown")
    # ONNX: "ai.onnx" is the default domain's other spelling; a Resize-11 declared so defaults to half_pixel.
    resize = build(
        [helper.make_node("Resize", ["x", "roi", "sc"], ["y"], mode="linear")],
        {"x": [1, 4, 8, 8]},
        {"roi": np.zeros(0, np.float32), "sc": np.array([1, 1, 2, 2], np.float32)},
        opset=11,
    )
    resize.opset_import[0].domain = "ai.onnx"
    assert verdict(resize).device == "DLA"


def test_a_subgraph_over_its_weight_cap_says_how_many_mib_and_the_report_has_its_legend():
    """512 x 256 x 3 x 3 weights at FP16: 2,359,296 bytes, 2.25 MiB."""
    model = build([helper.make_node("Conv", ["x", "w"], ["y"])], {"x": [1, 256, 4, 4]}, {"w": w(512, 256, 3, 3)})
    report = _predict(prepare(model), dataclasses.replace(limits_for("orin"), max_weight_bytes=1000), "fp16", "t")
    assert "DLA subgraph 1: weights 2 MiB at FP16 >= 512 MiB (sub.weights)" in report.findings
    assert report.to_dict()["legend"].startswith("reason = the value that broke the rule [rule id]")


def test_a_tensor_of_symbolic_shape_is_named_with_the_dimensions_onnx_inferred():
    """A Slice with runtime starts and ends keeps the rank; ONNX's own shape inference names each unknown dimension."""
    model = build(
        [helper.make_node("Slice", ["x", "s", "e"], ["r"]), helper.make_node("Relu", ["r"], ["y"])],
        {"x": [1, 4, 8, 8], "s": [4], "e": [4]},
    )
    for i in (1, 2):
        model.graph.input[i].type.tensor_type.elem_type = onnx.TensorProto.INT64
    inferred = onnx.shape_inference.infer_shapes(model).graph.value_info
    dims = [d.dim_param for v in inferred if v.name == "r" for d in v.type.tensor_type.shape.dim]
    assert len(dims) == 4 and all(dims)
    assert (verdict(model).rule, verdict(model).value) == ("gen.static", f"tensor 'r' has shape {'x'.join(dims)}")


@pytest.mark.parametrize("shape", [(1, 2, 1, 1), (2, 1, 1), (1, 1, 2, 1, 1)])
def test_a_per_channel_constant_of_two_channels_or_rank_three_is_a_scale_layer(shape):
    """TensorRT's ONNX parser makes a SCALE layer of an element-wise op whose constant holds one value per channel,
    however few channels (2 here) and whether or not the batch axis is spelled out (C x 1 x 1 broadcasts)."""
    model = binary("Mul", w(*shape), x_shape=(1, 2, 4, 4) if len(shape) < 5 else (1, 1, 2, 4, 4))
    v = verdict(model)
    want = ("scale.standalone", "Mul by a per-channel constant, not after a convolution")
    assert (v.rule, v.value) == (want if len(shape) < 5 else ("gen.rank4", "5-D tensor 1x1x2x4x4"))


def test_a_slice_without_axes_cuts_from_the_first_axis():
    """ONNX Slice: axes default to [0, 1, ..., len(starts) - 1], so one start cuts the batch axis."""
    x = {"x": [2, 4, 8, 8]}
    inputs = {"s": np.array([1], np.int64), "e": np.array([2], np.int64)}
    sliced = build([helper.make_node("Slice", ["x", "s", "e"], ["y"])], x, inputs)
    assert (verdict(sliced).rule, verdict(sliced).value) == ("slice.axis0", "slices the batch axis")
    old = build([helper.make_node("Slice", ["x"], ["y"], starts=[1], ends=[2])], x, opset=9)
    assert (verdict(old).rule, verdict(old).value) == ("slice.axis0", "slices the batch axis")
    # the whole batch kept, the channels cut: axes 0 and 1, nothing refused
    whole = build([helper.make_node("Slice", ["x"], ["y"], starts=[0, 0], ends=[2, 3])], x, opset=9)
    assert verdict(whole).device == "DLA"


@pytest.mark.parametrize("auto_pad, pads", [("SAME_UPPER", "1x1x2x1"), ("SAME_LOWER", "2x1x1x1")])
def test_same_padding_takes_height_and_width_from_their_own_axes(auto_pad, pads):
    """Input 9 high, 8 wide, 3 channels; kernel 2, stride 2, dilation 3 (ONNX auto_pad):
    height total = (ceil(9 / 2) - 1) * 2 + (2 - 1) * 3 + 1 - 9 = 3 -> 1 and 2; width (4 - 1) * 2 + 4 - 8 = 2 -> 1 and 1.
    A pad of 2 is not below the kernel of 2: conv.pad names them."""
    v = verdict(conv((1, 3, 9, 8), (8, 3, 2, 2), strides=[2, 2], dilations=[3, 3], auto_pad=auto_pad))
    assert (v.rule, v.value) == ("conv.pad", f"pads {pads} with kernel 2x2")


def test_a_pad_with_runtime_pads_or_an_old_nonzero_value_stays_a_layer_of_its_own():
    runtime = build(
        [helper.make_node("Pad", ["x", "p"], ["t"]), helper.make_node("Conv", ["t", "w"], ["y"])],
        {"x": [1, 4, 16, 16], "p": [8]},
        {"w": w(8, 4, 3, 3)},
    )
    runtime.graph.input[1].type.tensor_type.elem_type = onnx.TensorProto.INT64
    pad = predict(runtime, "orin", "10.3").nodes[0]
    assert (pad.op, pad.fused_into, pad.device) == ("Pad", None, "GPU")
    # Pad-2 takes its fill from the attribute 'value' (default 0): only a zero fill is a convolution's padding
    hw = [0, 0, 1, 1, 0, 0, 1, 1]
    assert _folded(_pad_then("Conv", hw, opset=2, value=0.0))
    assert not _folded(_pad_then("Conv", hw, opset=2, value=1.0))


@pytest.mark.parametrize("count", [20, 25])
def test_a_report_shows_twenty_folding_notes_and_counts_the_rest(count):
    """Constants each over a 1 KiB folding cap, one note each: a report prints the first 20 and counts the others."""
    one = onnx.numpy_helper.from_array(np.array([0.5], np.float32))
    nodes = [helper.make_node("ConstantOfShape", ["s"], [f"c{i}"], value=one) for i in range(count)]
    nodes += [helper.make_node("Sum", [f"c{i}" for i in range(count)], ["y"])]
    model = build(nodes, {}, {"s": np.array([1, 3, 64, 64], np.int64)})
    graph = prepare(model, cap_bytes=1024)
    assert len(graph.notes) == count
    report = _predict(graph, limits_for("orin"), "fp16", "t")
    shown = [f for f in report.findings if "not folded: its output would take" in f]
    assert shown == graph.notes[:20] and "'c19'" in shown[-1]
    more = [f for f in report.findings if "more nodes not folded" in f]
    assert more == ([] if count == 20 else ["5 more nodes not folded or not analysed"])


def test_an_input_declared_without_a_shape_is_dynamic_not_a_scalar():
    """ONNX: a tensor type without a shape field has an unknown shape; a shape with no dimensions is a scalar."""
    model = build([helper.make_node("Relu", ["x"], ["y"])], {"x": None})
    with pytest.raises(EdgeError, match=r"dynamic input 'x' \(no shape\): the DLA needs static shapes"):
        predict(model, "orin", "10.3")
    report = predict(model, "orin", "10.3", {"x": (1, 4, 8, 8)})
    assert report.findings[0].startswith(
        "input 'x' is declared without a shape; DLA needs static shapes: build with min = opt = max = 1x4x8x8"
    )
    assert report.dynamic_inputs == {"x": None} and report.nodes[0].device == "DLA"
    scalar = build([helper.make_node("Relu", ["x"], ["y"])], {"x": []})
    assert (verdict(scalar).rule, verdict(scalar).value) == ("gen.rank4", "0-D tensor (scalar)")


def test_a_scalar_counts_one_element_and_an_unknown_shape_none():
    """One operation per output element: a Neg of a scalar (a ReduceSum of everything, keepdims 0) is one."""
    model = build(
        [helper.make_node("ReduceSum", ["x"], ["t"], keepdims=0), helper.make_node("Neg", ["t"], ["y"])], {"x": [1, 4, 8, 8]}
    )
    assert predict(model, "orin", "10.3").nodes[1].flops == 1
    custom = build([helper.make_node("MyOp", ["x"], ["y"], domain="custom")], {"x": [1, 4, 8, 8]})
    custom.opset_import.append(helper.make_opsetid("custom", 1))
    assert predict(custom, "orin", "10.3").nodes[0].flops == 0


def test_a_refused_stride_names_it_and_a_negative_batch_axis_is_the_batch():
    v = verdict(conv(strides=[9, 9]))  # NvInfer.h: DLA convolution strides 1..8
    assert (v.rule, v.value) == ("conv.stride", "stride 9x9")
    # ONNX: a negative axis counts from the end; -4 of a 4-D tensor is axis 0
    model = build([helper.make_node("ReduceMax", ["x"], ["y"], axes=[-4])], {"x": [2, 4, 8, 8]})
    assert (verdict(model, trt="10.3").rule, verdict(model, trt="10.3").value) == ("reduce.axes", "reduces the batch axis")
    inner = build([helper.make_node("ReduceMax", ["x"], ["y"], axes=[-1])], {"x": [2, 4, 8, 8]})
    assert verdict(inner).rule != "reduce.axes"


def test_a_single_value_constant_is_an_elementwise_operand_not_a_per_channel_scale():
    """A 1 x 1 x 1 x 1 constant holds one value for every channel: TensorRT's parser keeps it ELEMENTWISE."""
    v = verdict(binary("Mul", w(1, 1, 1, 1)))
    assert (v.device, v.rule, v.layer) == ("DLA", None, "ELEMENTWISE(PROD)")


def test_a_matmul_with_weights_of_three_dimensions_is_not_a_fully_connected_layer():
    """A 2-D input runs on the DLA only as a fully connected layer, which takes 2-D weights; a 4-D input's batched
    product is no fully connected layer either, and the reason names the weights."""
    model = build([helper.make_node("MatMul", ["x", "b"], ["y"])], {"x": [4, 16]}, {"b": w(2, 16, 8)})
    assert (verdict(model).device, verdict(model).rule, verdict(model).value) == ("GPU", "gen.rank4", "2-D tensor 4x16")
    model = build([helper.make_node("MatMul", ["x", "b"], ["y"])], {"x": [1, 2, 4, 16]}, {"b": w(2, 16, 8)})
    v = verdict(model)
    assert (v.device, v.rule, v.value) == ("GPU", "matmul.fc", "3-D weights (a fully connected layer takes 2-D weights)")


def test_the_dynamic_input_error_shows_the_declared_dimensions_and_the_json_has_each_reason():
    model = build([helper.make_node("Relu", ["x"], ["y"])], {"x": ["N", 3, 64, 64]})
    with pytest.raises(EdgeError, match=r"^dynamic input 'x' \['N', 3, 64, 64\]: the DLA needs static shapes"):
        predict(model, "orin", "10.3")
    report = predict(conv(strides=[9, 9]), "orin", "10.3")
    assert report.to_dict()["nodes"][0]["reason"] == "stride 9x9 [conv.stride]"


def test_an_int8_comparison_needs_a_cast_after_it_and_nothing_else():
    """The DLA runs a comparison only in INT8 and only into a Cast (NVIDIA's DLA supported layers): one that is a
    network output, or also feeds another layer, stays on the GPU."""
    output = build([helper.make_node("Greater", ["x", "b"], ["y"])], {"x": [1, 4, 8, 8]}, {"b": w(1)})
    v = verdict(output, precision="int8")
    assert (v.device, v.rule, v.value) == ("GPU", "cmp.int8", "Greater in int8 not followed by a Cast")
    both = build(
        [
            helper.make_node("Greater", ["x", "b"], ["c"]),
            helper.make_node("Cast", ["c"], ["y"], to=onnx.TensorProto.FLOAT16),
            helper.make_node("Not", ["c"], ["z"]),
        ],
        {"x": [1, 4, 8, 8]},
        {"b": w(1)},
    )
    both.graph.output.append(helper.make_tensor_value_info("z", onnx.TensorProto.BOOL, None))
    v = verdict(both, precision="int8", node=0)
    assert (v.device, v.rule, v.value) == ("GPU", "cmp.int8", "Greater in int8 not followed by a Cast")


def test_a_runtime_prelu_slope_is_named_and_resize_11_defaults_to_round_prefer_floor():
    v = verdict(binary("PRelu", w(1, 8, 1, 1), runtime_b=True))
    assert (v.rule, v.value) == ("prelu.slope", "slope is a runtime tensor")
    # ONNX Resize-11: nearest_mode defaults to round_prefer_floor, coordinate_transformation_mode to half_pixel: a
    # pair the DLA runs
    assert verdict(_resize11("nearest")).device == "DLA"


def test_a_refused_fully_connected_gemm_keeps_its_bias_sum_on_the_gpu():
    """Refused as a fully connected layer (9000 output features), the Gemm is the parser's matrix multiply plus, when
    C is given, an element-wise sum for the bias (onnx-tensorrt's Gemm importer)."""
    inits = {"w": w(64, 9000), "c": w(9000)}
    with_c = build([helper.make_node("Gemm", ["x", "w", "c"], ["y"])], {"x": [1, 64]}, inits)
    v = verdict(with_c)
    assert v.device == "GPU" and v.trt_layers[-1] == "ELEMENTWISE: (Unnamed Layer*) [ElementWise] (bias)", v.trt_layers
    without = build([helper.make_node("Gemm", ["x", "w"], ["y"])], {"x": [1, 64]}, {"w": w(64, 9000)})
    assert not any("(bias)" in layer for layer in verdict(without).trt_layers)


def test_metadata_of_a_dynamic_model_is_read_under_the_files_name(tmp_path):
    model = build([helper.make_node("Relu", ["x"], ["y"])], {"x": ["N", 3, 64, 64]})
    for key, value in {"names": "{0: 'a'}", "imgsz": "[20000, 20000]", "task": "detect"}.items():
        model.metadata_props.add(key=key, value=value)
    path = tmp_path / "big.onnx"
    onnx.save(model, str(path))
    with pytest.raises(EdgeError, match=f"^{path}: metadata imgsz \\[20000, 20000\\] is larger than any camera input"):
        predict(path, "orin", "10.3")
    with pytest.raises(EdgeError, match="^the model: metadata imgsz"):
        predict(model, "orin", "10.3")


def test_every_dynamic_input_is_listed():
    model = build([helper.make_node("Add", ["a", "b"], ["y"])], {"a": ["N", 4, 8, 8], "b": [1, 4, "H", 8]})
    with pytest.raises(EdgeError, match=r"^dynamic input 'a' \['N', 4, 8, 8\], 'b' \[1, 4, 'H', 8\]: the DLA") as err:
        predict(model, "orin", "10.3")
    assert str(err.value).endswith("e.g. --shape a=1x4x8x8 --shape b=1x4x640x8")  # one flag per input


def test_a_refused_deconvolution_names_its_stride_or_dilation():
    from tests.test_dla_rules import deconv

    v = verdict(deconv(strides=[33, 33]))
    assert (v.rule, v.value) == ("deconv.stride", "stride 33x33")
    v = verdict(deconv(dilations=[2, 2]))
    assert (v.rule, v.value) == ("deconv.dilation", "dilation 2x2")


@pytest.mark.parametrize("opset", [9, 13])
def test_a_slice_with_axes_cuts_those_axes(opset):
    """Channels 1..3 of a batch of 2: axes [1] given, so the batch is whole and the DLA runs it."""
    x = {"x": [2, 4, 8, 8]}
    if opset < 10:
        model = build([helper.make_node("Slice", ["x"], ["y"], starts=[1], ends=[3], axes=[1])], x, opset=9)
    else:
        inits = {k: np.array(v, np.int64) for k, v in {"s": [1], "e": [3], "a": [1]}.items()}
        model = build([helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])], x, inits)
    assert verdict(model).device == "DLA"


def test_same_padding_without_strides_takes_stride_one_and_a_malformed_node_counts_no_work():
    v = verdict(conv((1, 3, 16, 16), (8, 3, 3, 3), auto_pad="SAME_UPPER"))  # ONNX: strides default to 1
    assert (v.device, v.rule) == ("DLA", None)
    no_kernel = build([helper.make_node("MaxPool", ["x"], ["y"])], {"x": [1, 4, 8, 8]})  # kernel_shape is required
    assert predict(no_kernel, "orin", "10.3").nodes[0].flops == 0


def test_hardswish_is_an_activation_the_dla_lacks_and_a_slice_10_reads_its_inputs():
    """HardSwish lowers to a hard sigmoid and a product (onnx-tensorrt); NvInfer.h's DLA activations have no hard
    sigmoid. Slice-10 takes starts, ends and axes as inputs, as Slice-13 does."""
    v = verdict(unary("HardSwish", opset=14))
    assert (v.device, v.rule, v.value) == ("GPU", "act.kind", "HardSwish")
    inits = {k: np.array(v, np.int64) for k, v in {"s": [1], "e": [3], "a": [1]}.items()}
    sliced = build([helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])], {"x": [2, 4, 8, 8]}, inits, opset=10)
    assert (verdict(sliced).device, verdict(sliced).rule) == ("DLA", None)


def test_the_unconfirmed_rules_are_those_of_refusals_and_of_notes_together():
    """A folded Pad rests on pad.conv (a note on its verdict); a Relu of a 2-D tensor is refused by gen.rank4 (its
    rule); both are rules no source settles (edge/dla/rules.py)."""
    model = build(
        [
            helper.make_node("Pad", ["x", "p"], ["t"]),
            helper.make_node("Conv", ["t", "w"], ["c"]),
            helper.make_node("Flatten", ["c"], ["f"]),
            helper.make_node("Relu", ["f"], ["y"]),
        ],
        {"x": [1, 4, 16, 16]},
        {"p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "w": w(8, 4, 3, 3)},
    )
    report = predict(model, "orin", "10.3")
    assert report.nodes[0].fused_into == "Conv_1" and report.nodes[-1].rule == "gen.rank4"
    assert report.unconfirmed_rules() == ["gen.rank4", "pad.conv"]


def test_a_subgraph_over_its_intermediate_cap_says_how_many_gib():
    """Conv -> Relu inside one subgraph: the Conv's 1 x 64 x 512 x 512 output at FP16 is 32 MiB, 0.03 GiB."""
    model = build(
        [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["y"])],
        {"x": [1, 4, 512, 512]},
        {"w": w(64, 4, 1, 1)},
    )
    report = _predict(prepare(model), dataclasses.replace(limits_for("orin"), max_local_bytes=1000), "fp16", "t")
    assert "DLA subgraph 1: intermediate tensors 0.03 GiB at FP16 >= 1 GiB (sub.local)" in report.findings


def test_deconvolution_and_pooling_refusals_name_what_broke_them():
    from tests.test_dla_rules import deconv

    runtime = build([helper.make_node("ConvTranspose", ["x", "k"], ["y"])], {"x": [1, 4, 8, 8], "k": [4, 4, 2, 2]})
    assert (verdict(runtime).rule, verdict(runtime).value) == ("conv.weights", "weights come from a runtime tensor")
    v = verdict(deconv((4, 4, 3, 3), strides=[2, 2], auto_pad="SAME_UPPER"))  # no pads given: the mode is named
    assert (v.rule, v.value) == ("deconv.pad", "padding SAME_UPPER")
    v = verdict(pool("AveragePool", kernel_shape=[2, 2]), target="xavier", trt="8.5")
    assert (v.rule, v.value) == ("pool.exclusive", "count_include_pad=0 (exclusive padding)")


def test_a_bias_add_joins_its_matmul_whichever_operand_comes_first_and_a_conv_without_pads_has_none():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["b", "m"], ["y"])]
    fc, add = predict(build(nodes, {"x": [1, 64]}, {"w": w(64, 16), "b": w(16)}), "orin", "10.3").nodes
    assert (add.fused_into, add.device) == (fc.name, "DLA")
    # a Conv without a pads attribute pads nothing (ONNX): a Pad of 2 on top of a 3x3 kernel folds (2 < 3)
    pad = helper.make_node("Pad", ["x", "p"], ["t"])
    conv_ = helper.make_node("Conv", ["t", "w"], ["y"])
    for pads in ([0, 0, 2, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 2]):  # top 2, then right 2
        inits = {"p": np.array(pads, np.int64), "w": w(8, 4, 3, 3)}
        assert _folded(build([pad, conv_], {"x": [1, 4, 40, 40]}, inits)), pads


def test_a_qdq_model_s_report_says_first_how_it_was_predicted():
    from edge.calib import qdq
    from tests.test_calib_qdq import two_layers

    model = two_layers()
    q_model, _ = qdq.build(model, prepare(model), {"x": 1.0, "a": 1.0, "r": 1.0})
    report = predict(q_model, "orin", "10.3")
    assert report.findings[0].startswith("Q/DQ model: predicted without its ")


def test_a_subgraphs_weights_are_every_layers_weights_at_fp16():
    """Two convolutions in one loadable: (8 x 4 x 3 x 3 + 8 x 8 x 3 x 3) weights x 2 bytes = 1728 bytes."""
    model = build(
        [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Conv", ["c", "w2"], ["y"])],
        {"x": [1, 4, 16, 16]},
        {"w1": w(8, 4, 3, 3), "w2": w(8, 8, 3, 3)},
    )
    (sub,) = predict(model, "orin", "10.3").subgraphs
    assert (len(sub.nodes), sub.weight_bytes) == (2, (8 * 4 * 9 + 8 * 8 * 9) * 2)
