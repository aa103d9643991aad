"""The placement report from builder-log lines in the shapes TensorRT 8.5/10.x print on a Jetson (written here in
that format: no Jetson log is produced on this machine) and from an engine-inspector JSON document."""

from __future__ import annotations

import json

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
    data = json.loads((tmp_path / "m.engine.layers.json").read_text())
    assert data["source"] == "builder log and the pre-build pass" and data["dla_core"] == 0
    assert [p.name for p in tmp_path.iterdir()] == ["m.engine.layers.json"]


def test_more_dla_subgraphs_than_a_core_holds_is_a_warning():
    names = [f"{{ForeignNode[block{i}]}}" for i in range(SUBGRAPHS_PER_CORE + 1)]
    facts = parse_log([("INFO", f"[DlaLayer] {n}") for n in names])
    placement = assemble([], facts, "builder log", "test", 1, None)
    assert placement.dla_layers == 17 and placement.summary()["transitions"] is None
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
    layers = from_inspector(info, [])
    assert [(x.device, x.precision) for x in layers] == [("DLA", "INT8"), ("GPU", "FP32")]
    assert transitions(layers) == 1
    assert from_inspector({"Layers": ["conv1 + relu1"]}, ["conv1 + relu1"])[0].device == "DLA"


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
