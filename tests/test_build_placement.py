"""The placement report from builder logs: the DLA sections and fallback warnings in the shapes TensorRT 8.5/10.x
print on a Jetson (written here in that format: no Jetson log is produced on this machine), real engine layer
listings of TensorRT 8.x, 8.6 and 10.x published by NVIDIA and users (tests/fixtures/trt-logs, each with its
source), and an engine-inspector JSON document."""

from __future__ import annotations

import json
from pathlib import Path

from edge.builder.placement import SUBGRAPHS_PER_CORE, assemble, from_inspector, parse_log, render, transitions, write_report

ENGINE_INFO = """Engine Layer Information:
Layer(Reformat): Reformatting CopyNode for Input Tensor 0 to {ForeignNode[conv1...relu3]}, Tactic: 0x0, images[Float(1,3,64,64)] -> Reformatted images[Half(1,3,64,64)]
Layer(DLA): {ForeignNode[conv1...relu3]}, Tactic: 0x3, Reformatted images[Half(1,3,64,64)] -> relu3_out[Half(1,16,32,32)]
Layer(Shuffle): head/Reshape + head/Transpose, Tactic: 0x0, relu3_out[Half(1,16,32,32)] -> head_out[Half(1,1024,16)]
Layer(DLA): {ForeignNode[conv4...conv5]}, Tactic: 0x3, head_out[Half(1,1024,16)] -> scores[Half(1,4,32,32)]
Layer(Reformat): Reformatting CopyNode for Output Tensor 0, Tactic: 0x0, scores[Half(1,4,32,32)] -> out[Float(1,4,32,32)]"""

LOG = [
    ("INFO", "---------- Layers Running on DLA ----------"),
    ("INFO", "[DlaLayer] {ForeignNode[conv1...relu3]}"),
    ("INFO", "[DlaLayer] {ForeignNode[conv4...conv5]}"),
    ("INFO", "---------- Layers Running on GPU ----------"),
    ("INFO", "[GpuLayer] SHUFFLE: head/Reshape + head/Transpose"),
    ("WARNING", "head/Transpose: DLA only supports transposes of the C dimension."),
    ("WARNING", "Layer 'head/Transpose' (SHUFFLE): Unsupported on DLA. Switching this layer's device type to GPU."),
    ("WARNING", "DLA supports only 16 subgraphs per DLA core. Switching to GPU for layer conv9"),
    ("WARNING", "Splitting DLA subgraph at: head/Reshape because DLA validation failed for this layer."),
    ("VERBOSE", ENGINE_INFO),
]


def test_builder_log_sections_reasons_and_engine_listing():
    facts = parse_log(LOG)
    assert facts.dla_names == ["{ForeignNode[conv1...relu3]}", "{ForeignNode[conv4...conv5]}"]
    assert facts.gpu_names == [("SHUFFLE", "head/Reshape + head/Transpose")]
    assert facts.reasons == {
        "head/Transpose": "DLA only supports transposes of the C dimension.",
        "conv9": "over the 16 DLA subgraphs a core holds",
    }
    assert facts.cap_hits == 1 and facts.splits == ["head/Reshape"]
    assert [(x.type, x.device, x.precision) for x in facts.layers] == [
        ("Reformat", "GPU", "FP16"),
        ("DLA", "DLA", "FP16"),
        ("Shuffle", "GPU", "FP16"),
        ("DLA", "DLA", "FP16"),
        ("Reformat", "GPU", "FP32"),
    ]
    assert facts.layers[2].inputs == ["relu3_out"] and facts.layers[2].outputs == ["head_out"]


def test_assembled_report_gives_gpu_layers_their_reason_and_counts_crossings(tmp_path):
    facts = parse_log(LOG)
    prebuild = {"gpu_layers": [{"name": "head/Reshape", "type": "SHUFFLE", "why": "can_run_on_DLA: false"}]}
    placement = assemble(facts.layers, facts, "builder log and the pre-build pass", "no GPU", 0, prebuild)
    shuffle = placement.layers[2]
    assert shuffle.reason == "DLA only supports transposes of the C dimension.; can_run_on_DLA: false"
    s = placement.summary()
    assert (s["dla_subgraphs"], s["gpu_layers"]) == (2, 3)
    assert s["transitions"] == 4  # reformat->DLA, DLA->shuffle, shuffle->DLA, DLA->reformat
    assert any("cap was reached" in w for w in placement.warnings) and any(
        "split a DLA subgraph" in w for w in placement.warnings
    )
    text = "\n".join(render(placement))
    assert "placement from the builder log and the pre-build pass (no GPU)" in text and "DLA subgraphs: 2" in text
    write_report(tmp_path / "m.engine.layers.json", placement)
    assert (tmp_path / "m.engine.layers.json").read_text().startswith('{\n  "source": ')  # indented for people
    data = json.loads((tmp_path / "m.engine.layers.json").read_text())
    assert data["source"] == "builder log and the pre-build pass" and data["dla_core"] == 0
    assert [p.name for p in tmp_path.iterdir()] == ["m.engine.layers.json"]


def test_more_dla_subgraphs_than_a_core_holds_is_a_warning():
    names = [f"{{ForeignNode[block{i}]}}" for i in range(SUBGRAPHS_PER_CORE + 1)]
    facts = parse_log([("INFO", f"[DlaLayer] {n}") for n in names] + [("INFO", "[GpuLayer] SHUFFLE: head/Reshape")])
    placement = assemble([], facts, "builder log", "test", 1, None)
    assert placement.dla_layers == 17 and placement.summary()["transitions"] is None
    # no engine listing: the log's two sections are the layers, by name
    assert [(x.name, x.type, x.device) for x in placement.layers[-2:]] == [
        (names[-1], "ForeignNode", "DLA"),
        ("head/Reshape", "SHUFFLE", "GPU"),
    ]
    assert placement.summary()["dla_subgraphs_per_core_limit"] == SUBGRAPHS_PER_CORE == 16
    assert placement.warnings[0].startswith("17 DLA subgraphs on core 1: a core holds 16")


def test_engine_inspector_json():
    info = {
        "Layers": [
            {
                "Name": "{ForeignNode[conv1...relu3]}",
                "LayerType": "DLA",
                "Inputs": [{"Name": "images", "Format/Datatype": "Channel major FP16 format where channel % 16 == 0"}],
                "Outputs": [{"Name": "feat", "Format/Datatype": "Thirty-two wide channel vectorized row major Int8 format"}],
            },
            {
                "Name": "head",
                "LayerType": "CaskConvolution",
                "Inputs": [{"Name": "feat", "Format/Datatype": "Row major linear FP32"}],
                "Outputs": [{"Name": "out", "Format/Datatype": "Row major linear FP32"}],
            },
        ]
    }
    info["Layers"].append(
        {
            "Name": "head_sink",
            "LayerType": "Reformat",
            "Inputs": [{"Name": "out", "Format/Datatype": "Row major linear FP16 format"}],
        }
    )
    layers = from_inspector(info, [])
    assert [(x.device, x.precision) for x in layers] == [("DLA", "INT8"), ("GPU", "FP32"), ("GPU", "FP16")]
    assert [(x.name, x.type, x.inputs, x.outputs) for x in layers] == [
        ("{ForeignNode[conv1...relu3]}", "DLA", ["images"], ["feat"]),
        ("head", "CaskConvolution", ["feat"], ["out"]),
        ("head_sink", "Reformat", ["out"], []),  # no outputs listed: its precision is its input's
    ]
    assert transitions(layers) == 1
    assert from_inspector({"Layers": ["conv1 + relu1"]}, ["conv1 + relu1"])[0].device == "DLA"


# -- real builder logs: NVIDIA's TensorRT cookbook (trtexec 8.6.0 and 10.14.1) and a published 8.6.1 INT8 build --------

FIXTURES = Path(__file__).parent / "fixtures" / "trt-logs"


def real_log(name: str) -> list:
    lines = [line for line in (FIXTURES / name).read_text().splitlines() if not line.startswith("#")]
    return [("VERBOSE", "\n".join(lines))]


def test_tensorrt_8_6_listing_names_tensors_and_precisions():
    """8.6 prints `name (Half[-1,32:2,28,28])`: names, precisions and crossings come out of it, not the layer kind."""
    facts = parse_log(real_log("trtexec-8.6.0-fp16.log"))
    assert len(facts.layers) == 15
    conv = facts.layers[1]
    assert (conv.name, conv.type, conv.precision) == ("Conv-1 + ReLU-2", "CaskConvolution", "FP16")
    assert conv.inputs == ["Reformatted Input Tensor 0 to Conv-1 + ReLU-2"] and conv.outputs == ["tensor-2"]
    assert facts.layers[0].inputs == ["tensor-0"] and facts.layers[0].precision == "FP16"  # its output is Half
    topk = facts.layers[13]
    assert topk.outputs == ["(Unnamed Layer* 28) [TopK]_output_1", "(Unnamed Layer* 28) [TopK]_output_2"]
    assert topk.precision == "FP32"
    assert facts.layers[14].precision == "INT32"
    assert transitions(facts.layers) == 0  # a GPU-only build: names known, nothing crosses
    assert {x.precision for x in facts.layers} == {"FP16", "FP32", "INT32"}


def test_tensorrt_10_listing_with_constants_and_parenthesised_names():
    facts = parse_log(real_log("trtexec-10.14.1-fp16.log"))
    assert len(facts.layers) == 16
    constant = facts.layers[8]
    assert (constant.type, constant.inputs, constant.outputs) == ("Constant", [], ["(Unnamed Layer* 10) [Shuffle]_output"])
    pointwise = facts.layers[9]
    assert pointwise.inputs == ["(Unnamed Layer* 8) [Matrix Multiply]_output", "(Unnamed Layer* 10) [Shuffle]_output"]
    assert facts.layers[15].inputs == ["(Unnamed Layer* 22) [TopK]_output (1)"] and facts.layers[15].precision == "INT64"


def test_a_gpu_build_prints_counts_not_its_kernel_listing():
    """A GPU engine's listing is TensorRT's kernels; no placement to read, so stdout has the counts only."""
    facts = parse_log(real_log("trtexec-8.6.0-fp16.log"))
    placement = assemble(facts.layers, facts, "builder log", "test", None, None)
    lines = render(placement, "m.engine.layers.json")
    assert lines == [
        "placement from the builder log (test)",
        "engine layers: 15, all on the GPU (no --dla); precisions: FP16, FP32, INT32; every row is in m.engine.layers.json",
    ]
    on_dla = render(assemble(facts.layers, facts, "builder log", "test", 0, None))
    assert len(on_dla) == 2 + 15 + 3 and on_dla[2].startswith("Reformatting CopyNode")


def test_layers_without_a_precision_leave_the_precisions_summary_alone():
    """Rows TensorRT gives no type (a stream's signal/wait) are listed, but say nothing of the engine's precisions:
    the summary once read `precisions: , FP32`."""
    from edge.builder.placement import Layer, Placement

    layers = [Layer("wait0", "wait", "GPU", ""), Layer("conv", "Convolution", "GPU", "FP32"), Layer("sig0", "signal", "GPU", "")]
    placement = Placement("builder log", "test", layers, None)
    assert placement.summary()["precisions"] == ["FP32"] and placement.summary()["layers"] == 3
    assert "precisions: FP32;" in render(placement)[1]


def test_vectorised_int8_tensors_of_tensorrt_8_6():
    layer = parse_log(real_log("trt-8.6.1-int8-vectorised.log")).layers[0]
    assert layer.precision == "INT8" and layer.inputs == ["/model/img_backbone/layer1/layer1.1/relu1/Relu_output_0"]


def test_the_form_before_8_6_still_parses():
    facts = parse_log(real_log("trt-8.x-before-8.6.log"))
    assert len(facts.layers) == 11 and {x.precision for x in facts.layers} == {"FP32"}
    assert facts.layers[-1].outputs == ["(Unnamed Layer* 13) [TopK]_output_1", "(Unnamed Layer* 13) [TopK]_output_2"]
    assert transitions(facts.layers) == 0


def test_prebuild_pass_names_the_reason_for_the_builders_own_layers():
    """edge-build's pre-build pass uses edge dla's predictor: TensorRT's layer names, the builder's
    reshape_after_<node> included, find the verdict of the ONNX node they come from (fake config and network:
    no TensorRT with a DLA here)."""
    import pytest

    pytest.importorskip("onnx")
    from edge.builder.placement import prebuild_pass
    from edge.dla.predict import predict
    from tests.dla_corpus.models import tutorial_model_bn

    prediction = predict(tutorial_model_bn(), "orin", "8.5", {"input": (32, 3, 32, 32)}, "int8")

    class Layer:
        def __init__(self, name, kind):
            self.name, self.type = name, kind

    layers = [Layer("Conv_0", "CONVOLUTION"), Layer("GlobalAveragePool_8", "REDUCE"), Layer("reshape_after_Gemm_15", "SHUFFLE")]

    class Network:
        num_layers = len(layers)

        def get_layer(self, i):
            return layers[i]

    class Config:
        def can_run_on_DLA(self, layer):
            return layer.type == "CONVOLUTION"

    result = prebuild_pass(Config(), Network(), prediction)
    why = {g["name"]: g["why"] for g in result["gpu_layers"]}
    assert why["GlobalAveragePool_8"].endswith("[pool.global]")
    assert "reshape_after_Gemm_15" in why and result["can_run_on_dla"] == 1
    assert result["prediction"]["summary"]["subgraphs"] == 2


def test_prebuild_pass_finds_the_node_of_each_layer_the_real_parser_made():
    """TensorRT-RTX's ONNX parser (real; its network stands in for the Jetson's, whose parser names layers the same
    way) makes HardSwish an ACTIVATION named after the node and an ELEMENTWISE named NODE_0: both get edge dla's
    reason (the config is a stand-in: no DLA here says which layers it takes)."""
    import pytest

    trt = pytest.importorskip("tensorrt_rtx")
    onnx = pytest.importorskip("onnx")
    from edge.builder.placement import prebuild_pass
    from edge.dla.predict import predict

    h = onnx.helper
    graph = h.make_graph(
        [h.make_node("Relu", ["x"], ["r"], "relu"), h.make_node("HardSwish", ["r"], ["y"], "hs")],
        "g",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 4, 4])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3, 4, 4])],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 14)])
    logger = trt.Logger(trt.Logger.ERROR)
    network = trt.Builder(logger).create_network(0)
    assert trt.OnnxParser(network, logger).parse(model.SerializeToString())

    class Config:
        def can_run_on_DLA(self, layer):
            return layer.name == "relu"

    result = prebuild_pass(Config(), network, predict(model, "orin", "10.3", {"x": (1, 3, 4, 4)}, "int8"))
    why = {g["name"]: g["why"] for g in result["gpu_layers"]}
    assert set(why) == {"hs", "hs_0"}  # the parser's names
    assert all(w == "can_run_on_DLA: false; edge dla: HardSwish [act.kind]" for w in why.values()), why
    assert {g["name"]: g["type"] for g in result["gpu_layers"]} == {"hs": "ACTIVATION", "hs_0": "ELEMENTWISE"}


def test_prebuild_pass_reads_the_layers_a_prediction_lists_as_build_logs_print_them():
    """A node's ``trt_layers`` are "TYPE: name" with " (GPU)" after the builder's own output reshape (the form of the
    published build logs): a network layer of that name takes the node's reason; one it does not list takes none."""
    from types import SimpleNamespace

    from edge.builder.placement import prebuild_pass

    node = SimpleNamespace(
        name="Gemm_15",
        reason="Gemm with a second input not constant [gemm.weights]",
        trt_layers=["SHUFFLE: reshape_before_Gemm_15", "FULLY_CONNECTED: Gemm_15", "SHUFFLE: reshape_after_Gemm_15 (GPU)"],
    )
    prediction = SimpleNamespace(nodes=[node], to_dict=lambda: {"summary": {}})
    layers = [SimpleNamespace(name=n, type="SHUFFLE") for n in ("reshape_after_Gemm_15", "reshape_before_Gemm_15", "other")]
    network = SimpleNamespace(num_layers=3, get_layer=layers.__getitem__)
    result = prebuild_pass(SimpleNamespace(can_run_on_DLA=lambda layer: False), network, prediction)
    why = {g["name"]: g["why"] for g in result["gpu_layers"]}
    assert why == {
        "reshape_after_Gemm_15": f"can_run_on_DLA: false; edge dla: {node.reason}",
        "reshape_before_Gemm_15": f"can_run_on_DLA: false; edge dla: {node.reason}",
        "other": "can_run_on_DLA: false",
    }


def test_the_dla_table_cuts_long_names_and_types_to_their_columns():
    from edge.builder.placement import Layer, Placement

    long_name, long_type = "backbone/stage4/" + "x" * 44, "CaskConvolutionXYZ"  # 60 and 18 characters
    layers = [
        Layer(long_name, long_type, "GPU", "FP16", "DLA only supports FP16 and Int8"),
        Layer("{ForeignNode[a...b]}", "DLA", "DLA", "INT8"),
        Layer("tail", "CaskConvolution2", "GPU", "FP16"),  # 16 characters: fits its column whole
    ]
    lines = render(Placement("engine inspector", "test", layers, 0))
    assert lines[0] == f"{'layer':56} {'type':16} {'device':6} {'precision':9} reason" and lines[1] == "-" * 106
    assert lines[2] == f"{long_name[:55]}… CaskConvolution… GPU    FP16      DLA only supports FP16 and Int8"
    assert lines[3] == f"{'{ForeignNode[a...b]}':56} {'DLA':16} DLA    INT8"
    assert lines[4] == f"{'tail':56} CaskConvolution2 GPU    FP16"
    assert lines[7] == (
        "engine layers: 3 (1 DLA, 2 GPU); DLA subgraphs: 1 (a core holds 16); DLA<->GPU transitions: unknown; "
        "precisions: FP16, INT8"
    )


def test_prebuild_lines_name_each_gpu_layer_cut_the_rest_and_summarise_the_prediction():
    from edge.builder.placement import prebuild_lines

    gpu = [{"name": f"l{i}", "type": "ELEMENTWISE", "why": "can_run_on_DLA: false"} for i in range(3)]
    summary = {"dla_nodes": 7, "nodes": 9, "subgraphs": 2, "transitions": 3}
    lines = prebuild_lines({"layers": 10, "can_run_on_dla": 7, "gpu_layers": gpu, "prediction": {"summary": summary}}, shown=2)
    assert lines == [
        "pre-build: TensorRT says 7/10 network layers can run on the DLA",
        "  to GPU: l0 (ELEMENTWISE): can_run_on_DLA: false",
        "  to GPU: l1 (ELEMENTWISE): can_run_on_DLA: false",
        "  … and 1 more (all in the placement report)",
        "pre-build: edge dla predicts 7/9 ONNX nodes on the DLA in 2 subgraph(s), 3 DLA<->GPU transitions",
    ]
    assert prebuild_lines({"layers": 1, "can_run_on_dla": 1, "gpu_layers": [], "prediction": None}) == [
        "pre-build: TensorRT says 1/1 network layers can run on the DLA"
    ]


def test_a_network_layer_is_found_in_a_fused_name_only_as_a_whole_part():
    from edge.builder.placement import _mentions

    assert _mentions("conv1 + conv1_bn", "conv1")  # its first appearance is whole, a later one is not
    assert _mentions("PWN(conv1_bn, conv1)", "conv1") and not _mentions("conv10 + conv1_bn", "conv1")


def test_listed_tensor_names_keep_every_character():
    line = "Layer(CaskConvolution): Xconv, Tactic: 0x1, Xin[Float(1,3,8,8)], XXskip[Half(1,3,8,8)] -> Xout[Float(1,4,8,8)]"
    (layer,) = parse_log([("VERBOSE", line)]).layers
    assert (layer.name, layer.inputs, layer.outputs) == ("Xconv", ["Xin", "XXskip"], ["Xout"])
