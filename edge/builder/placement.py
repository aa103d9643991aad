"""The placement report: which engine layer runs where (DLA or GPU), in what precision, and why a layer left the DLA.

Three sources, best first: the engine inspector (needs a GPU to load the engine; built with detailed profiling
verbosity), the builder log (the "Layers Running on DLA/GPU" sections, the per-layer fallback warnings and the
engine layer listing TensorRT prints at verbose level), and the pre-build pass (``config.can_run_on_DLA`` per
network layer plus the offline prediction of ``edge dla``). The report says which source it came from.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from edge.errors import printable
from edge.outputs import strict_json, write_atomic

DLA, GPU = "DLA", "GPU"
SUBGRAPHS_PER_CORE = 16  # loadables resident per DLA core; TensorRT sends the surplus to the GPU

_PRECISIONS = {
    "float": "FP32",
    "fp32": "FP32",
    "half": "FP16",
    "fp16": "FP16",
    "int8": "INT8",
    "bfloat16": "BF16",
    "bf16": "BF16",
    "int32": "INT32",
    "int64": "INT64",
    "bool": "BOOL",
    "uint8": "UINT8",
    "fp8": "FP8",
}

# The builder log, in the forms TensorRT 8.5-10.x and TensorRT-RTX print. The engine layer listing names each tensor
# with its type and dims: up to 8.5 as ``name[Float(1,3,28,28)]``, from 8.6 as ``name (Float[1,3,28,28])`` with
# vectorised formats as ``(Half[-1,32:8,14,14])`` (trtexec logs of 8.6.0 and 10.14.1 in NVIDIA's TensorRT cookbook,
# tests/fixtures/trt-logs).
_ENGINE_LAYER = re.compile(r"^Layer\((?P<kind>[^)]*)\): (?P<name>.*?), Tactic: \S+, (?P<io>.*)$")
_TENSOR = re.compile(r"\[(?P<type>[A-Za-z0-9]+)\((?P<dims>[^)]*)\)\]")
_TENSOR_86 = re.compile(r" ?\((?P<type>[A-Za-z][A-Za-z0-9]*)\[(?P<dims>[-0-9:, ]*)\]\)")
_RTX_LAYER = re.compile(
    r"^Name: (?P<name>.*?), LayerType: (?P<kind>[^,]*), Inputs: \[(?P<inputs>.*?)\], (?:Constants: .*?)?Outputs: \[(?P<outputs>.*?)\], Tactic"
)
_RTX_TENSOR = re.compile(r"Name: (?P<name>.*?), Dimensions: .*?Datatype: (?P<type>\w+)")
_DLA_LINE = re.compile(r"^\[DlaLayer\] (?P<name>.+)$")
_GPU_LINE = re.compile(r"^\[GpuLayer\] (?:(?P<kind>[A-Z_]+): )?(?P<name>.+)$")
_FALLBACKS: Tuple[Tuple[re.Pattern, Optional[str]], ...] = (
    # (pattern naming the layer, reason; None = the DLA message logged just before it)
    (re.compile(r"^Layer '(?P<name>.+)' \(\w+\): Unsupported on DLA\. Switching this layer's device type to GPU\."), None),
    (
        re.compile(r"^Default DLA is enabled but layer (?P<name>.+) is not (?:supported|running) on DLA, falling back to GPU\."),
        None,
    ),
    (re.compile(r"^Validation failed for DLA layer: (?P<name>.+)\. Switching to GPU fallback\."), None),
    (re.compile(r"^DLA supports only (?P<cap>\d+) subgraphs per DLA core\. Switching to GPU for layer (?P<name>.+)$"), "cap"),
    (re.compile(r"^DLA Layer (?P<name>.+) does not support dynamic shapes"), "dynamic shape: the DLA needs static shapes"),
    (
        re.compile(r"^DLA only supports FP16 and Int8 precision type\. Switching (?P<name>.+) device type to GPU"),
        "FP32: the DLA runs FP16 or INT8 only",
    ),
    (re.compile(r"^(?P<name>.+?) cannot run in INT8 mode due to missing scale"), "no INT8 scale for its tensors"),
)
_SPLITTING = re.compile(r"^Splitting DLA subgraph at: (?P<name>.+?) because")


def precision_of(type_name: str) -> str:
    text = type_name.lower()
    for key, value in _PRECISIONS.items():
        if re.search(rf"\b{key}\b", text):
            return value
    return type_name


@dataclass
class Layer:
    name: str
    type: str
    device: str  # DLA | GPU
    precision: str
    reason: Optional[str] = None  # why a GPU layer of a DLA build is not on the DLA, when known
    inputs: List[str] = field(default_factory=list)
    outputs: List[str] = field(default_factory=list)


@dataclass
class LogFacts:
    """What the builder log says about placement."""

    layers: List[Layer] = field(default_factory=list)  # the engine layer listing (verbose level)
    dla_names: List[str] = field(default_factory=list)  # "Layers Running on DLA"
    gpu_names: List[Tuple[str, str]] = field(default_factory=list)  # "Layers Running on GPU": (type, name)
    reasons: Dict[str, str] = field(default_factory=dict)  # network layer name -> why it left the DLA
    cap_hits: int = 0  # layers sent to GPU because a core had its DLA subgraphs already
    splits: List[str] = field(default_factory=list)


def _tensors(io: str) -> Tuple[List[Tuple[str, str]], List[Tuple[str, str]]]:
    """'a[Float(1,3)], b[Half(2)] -> c[Half(1,8)]' (up to 8.5) or 'a (Float[1,3]), b (Half[2]) -> c (Half[1,8])' (8.6+)
    -> ([(a, Float), (b, Half)], [(c, Half)])."""
    left, _, right = io.rpartition(" -> ")
    pattern = _TENSOR if _TENSOR.search(io) else _TENSOR_86

    def split(text: str) -> List[Tuple[str, str]]:
        out, start = [], 0
        for m in pattern.finditer(text):
            out.append((text[start : m.start()].lstrip(", ").strip(), m.group("type")))
            start = m.end()
        return out

    return split(left), split(right)


def parse_log(lines: Iterable[Tuple[str, str]]) -> LogFacts:
    facts = LogFacts()
    previous_dla_message: Optional[str] = None
    for level, message in lines:
        for line in message.splitlines():
            line = line.strip()
            m = _ENGINE_LAYER.match(line)
            if m:
                ins, outs = _tensors(m.group("io"))
                kind = m.group("kind")
                first = (outs or ins or [("", kind)])[0][1]
                device = DLA if "dla" in kind.lower() else GPU
                facts.layers.append(
                    Layer(m.group("name"), kind, device, precision_of(first), None, [n for n, _ in ins], [n for n, _ in outs])
                )
                continue
            m = _RTX_LAYER.match(line)
            if m:
                ins = _RTX_TENSOR.findall(m.group("inputs"))
                outs = _RTX_TENSOR.findall(m.group("outputs"))
                first = (outs or ins or [("", "")])[0][1]
                facts.layers.append(
                    Layer(
                        m.group("name"),
                        m.group("kind"),
                        GPU,
                        precision_of(first),
                        None,
                        [n for n, _ in ins],
                        [n for n, _ in outs],
                    )
                )
                continue
            m = _DLA_LINE.match(line)
            if m:
                facts.dla_names.append(m.group("name"))
                continue
            m = _GPU_LINE.match(line)
            if m:
                facts.gpu_names.append((m.group("kind") or "", m.group("name")))
                continue
            if level not in ("WARNING", "ERROR"):
                continue
            m = _SPLITTING.match(line)
            if m:
                facts.splits.append(m.group("name"))
                continue
            for pattern, reason in _FALLBACKS:
                m = pattern.match(line)
                if m is None:
                    continue
                name = m.group("name")
                if reason == "cap":
                    facts.cap_hits += 1
                    reason = f"over the {m.group('cap')} DLA subgraphs a core holds"
                facts.reasons.setdefault(name, reason or previous_dla_message or "unsupported on the DLA")
                previous_dla_message = None
                break
            else:
                if "DLA" in line:
                    # TensorRT logs the rule first ("X: DLA only supports concatenation on the C dimension."), then the switch.
                    _, sep, rule = line.partition(": ")
                    previous_dla_message = rule if sep else line
    return facts


def from_inspector(info: Dict[str, Any], dla_names: Sequence[str]) -> List[Layer]:
    """Layers from ``get_engine_information(LayerInformationFormat.JSON)`` built with detailed verbosity."""
    on_dla = set(dla_names)
    out = []
    for entry in info.get("Layers", []):
        if isinstance(entry, str):  # layer-names-only verbosity: no type or precision
            out.append(Layer(entry, "", DLA if entry in on_dla else GPU, "unknown"))
            continue
        name, kind = entry.get("Name", ""), entry.get("LayerType", "")
        ins, outs = entry.get("Inputs", []), entry.get("Outputs", [])
        first = (outs or ins or [{}])[0].get("Format/Datatype", "")
        device = DLA if ("dla" in kind.lower() or name in on_dla) else GPU
        out.append(
            Layer(
                name, kind, device, precision_of(first), None, [t.get("Name", "") for t in ins], [t.get("Name", "") for t in outs]
            )
        )
    return out


def _mentions(engine_layer: str, network_layer: str) -> bool:
    """Whether a (fused) engine layer name contains a network layer name as a whole part."""
    start = engine_layer.find(network_layer)
    while start >= 0:
        end = start + len(network_layer)
        if (start == 0 or engine_layer[start - 1] in " +(,[") and (end == len(engine_layer) or engine_layer[end] in " +),]"):
            return True
        start = engine_layer.find(network_layer, start + 1)
    return False


def transitions(layers: Sequence[Layer]) -> Optional[int]:
    """Tensors that cross between DLA and GPU (each costs a reformat); None without tensor names."""
    if not any(layer.inputs or layer.outputs for layer in layers):
        return None
    device_of = {t: layer.device for layer in layers for t in layer.outputs}
    return sum(1 for layer in layers for t in layer.inputs if t in device_of and device_of[t] != layer.device)


@dataclass
class Placement:
    source: str  # "engine inspector" | "builder log" (+ "and the pre-build pass")
    why: str  # why this source and not a better one
    layers: List[Layer]
    dla_core: Optional[int]
    prebuild: Optional[Dict[str, Any]] = None
    warnings: List[str] = field(default_factory=list)
    int8: Optional[str] = None  # where the INT8 scales came from: Q/DQ as it is, translated for the DLA, a cache

    @property
    def dla_layers(self) -> int:
        return sum(layer.device == DLA for layer in self.layers)

    def summary(self) -> Dict[str, Any]:
        return {
            "layers": len(self.layers),
            "dla_layers": self.dla_layers,
            "gpu_layers": len(self.layers) - self.dla_layers,
            # Each DLA layer of an engine is one loadable ({ForeignNode[...]}): a DLA subgraph.
            "dla_subgraphs": self.dla_layers,
            "dla_subgraphs_per_core_limit": SUBGRAPHS_PER_CORE,
            "transitions": transitions(self.layers),
            # layers TensorRT gives no precision (the DLA's signal/wait) say nothing of the engine's precisions
            "precisions": sorted({layer.precision for layer in self.layers if layer.precision}),  # trt-api: edge's Layer
        }

    def to_dict(self) -> Dict[str, Any]:
        return {
            "source": self.source,
            "why": self.why,
            "dla_core": self.dla_core,
            "int8": self.int8,
            "summary": self.summary(),
            "warnings": self.warnings,
            "layers": [asdict(layer) for layer in self.layers],
            "prebuild": self.prebuild,
        }


def assemble(
    layers: List[Layer], facts: LogFacts, source: str, why: str, dla_core: Optional[int], prebuild: Optional[Dict[str, Any]]
) -> Placement:
    """Mark DLA layers named in the log, give GPU layers of a DLA build their reason, add the warnings."""
    on_dla = set(facts.dla_names)
    for layer in layers:
        if layer.name in on_dla:
            layer.device = DLA
    if not layers:  # no engine listing at all: the log's two sections are all there is
        layers = [Layer(n, "ForeignNode", DLA, "unknown") for n in facts.dla_names]
        layers += [Layer(n, kind, GPU, "unknown") for kind, n in facts.gpu_names]
    if dla_core is not None:
        refused = {g["name"]: g["why"] for g in (prebuild or {}).get("gpu_layers", [])}
        for layer in layers:
            if layer.device != GPU:
                continue
            why_here = [r for n, r in facts.reasons.items() if _mentions(layer.name, n)]
            why_here += [r for n, r in refused.items() if _mentions(layer.name, n)]
            layer.reason = "; ".join(dict.fromkeys(why_here)) or None
    placement = Placement(source, why, layers, dla_core, prebuild)
    if placement.dla_layers > SUBGRAPHS_PER_CORE:
        placement.warnings.append(
            f"{placement.dla_layers} DLA subgraphs on core {dla_core}: a core holds {SUBGRAPHS_PER_CORE}; "
            "fewer GPU islands between DLA layers (see `edge dla --fix`) keep more of the model on the DLA"
        )
    if facts.cap_hits:
        placement.warnings.append(f"TensorRT moved {facts.cap_hits} layer(s) to the GPU because the DLA subgraph cap was reached")
    if facts.splits:
        placement.warnings.append(f"TensorRT split a DLA subgraph at {len(facts.splits)} layer(s): {', '.join(facts.splits[:5])}")
    return placement


def prebuild_pass(config: Any, network: Any, prediction: Any = None) -> Dict[str, Any]:
    """Before building: ``config.can_run_on_DLA`` for every network layer, with the offline prediction's reason."""
    predicted = {}
    for n in prediction.nodes if prediction is not None else []:
        predicted[n.name] = n
        for layer in n.trt_layers:  # the parser's and builder's own layers, as the network names them
            predicted.setdefault(layer.split(": ", 1)[-1].split(" (")[0], n)
    gpu_layers = []
    total = network.num_layers
    for i in range(total):
        layer = network.get_layer(i)
        if config.can_run_on_DLA(layer):
            continue
        verdict = predicted.get(layer.name)
        base, _, k = layer.name.rpartition("_")
        if verdict is None and k.isdigit():  # the parser names a node's further layers NODE_0, NODE_1, ...
            verdict = predicted.get(base)
        why = "can_run_on_DLA: false"
        if verdict is not None and verdict.reason:
            why += f"; edge dla: {verdict.reason}"
        gpu_layers.append({"name": layer.name, "type": str(layer.type).split(".")[-1], "why": why})
    return {
        "layers": total,
        "can_run_on_dla": total - len(gpu_layers),
        "gpu_layers": gpu_layers,
        "prediction": prediction.to_dict() if prediction is not None else None,
    }


def prebuild_lines(prebuild: Dict[str, Any], shown: int = 12) -> List[str]:
    gpu = prebuild["gpu_layers"]
    lines = [f"pre-build: TensorRT says {prebuild['can_run_on_dla']}/{prebuild['layers']} network layers can run on the DLA"]
    for g in gpu[:shown]:
        lines.append(f"  to GPU: {g['name']} ({g['type']}): {g['why']}")
    if len(gpu) > shown:
        lines.append(f"  … and {len(gpu) - shown} more (all in the placement report)")
    p = prebuild.get("prediction")
    if p:
        s = p["summary"]
        lines.append(
            f"pre-build: edge dla predicts {s['dla_nodes']}/{s['nodes']} ONNX nodes on the DLA in {s['subgraphs']} subgraph(s), "
            f"{s['transitions']} DLA<->GPU transitions"
        )
    return lines


def render(placement: Placement, report: str = "the placement report", width: int = 56) -> List[str]:
    """The table for stdout (a DLA build's: which layer went where and why), and the summary lines under it.

    A GPU engine has no placement to read, and its listing is mostly kernels TensorRT generated (Myelin's
    ``__myl_…`` fusions, TensorRT-RTX's whole graph): its rows stay in ``report`` and only the counts are shown."""
    s = placement.summary()
    precisions = ", ".join(s["precisions"]) or "-"
    if placement.dla_core is None:
        generated = sum(layer.name.startswith("__myl_") for layer in placement.layers)
        made = f", {generated} of them kernels TensorRT generated (__myl_…), not ONNX layers" if generated else ""
        lines = [
            f"placement from the {placement.source} ({placement.why})",
            f"engine layers: {s['layers']}, all on the GPU (no --dla){made}; precisions: {precisions}; every row is in {report}",
        ] + [f"warning: {w}" for w in placement.warnings]
        return [printable(line) for line in lines]
    lines = [f"{'layer':{width}} {'type':16} {'device':6} {'precision':9} reason", "-" * (width + 50)]
    for layer in placement.layers:
        # Names come from the model: escaped before they are cut to the column, so an escape sequence never runs.
        name, kind = printable(layer.name), printable(layer.type)
        name = name if len(name) <= width else name[: width - 1] + "…"
        kind = kind if len(kind) <= 16 else kind[:15] + "…"
        precision = layer.precision  # trt-api: edge's own Layer, not TensorRT's ILayer
        lines.append(f"{name:{width}} {kind:16} {layer.device:6} {precision:9} {layer.reason or ''}".rstrip())
    crossings = "unknown" if s["transitions"] is None else s["transitions"]
    lines += [
        "",
        f"placement from the {placement.source} ({placement.why})",
        f"engine layers: {s['layers']} ({s['dla_layers']} DLA, {s['gpu_layers']} GPU); DLA subgraphs: {s['dla_subgraphs']} "
        f"(a core holds {SUBGRAPHS_PER_CORE}); DLA<->GPU transitions: {crossings}; precisions: {precisions}",
    ]
    lines += [f"warning: {w}" for w in placement.warnings]
    return [printable(line) for line in lines]


def report_text(placement: Placement) -> str:
    """The placement report file's content (strict JSON)."""
    return json.dumps(strict_json(placement.to_dict()), indent=2) + "\n"


def write_report(path: Path, placement: Placement) -> None:
    """Beside the engine, through the atomic-write path."""
    write_atomic(path, report_text(placement))
