#!/usr/bin/env python3
"""Record where NVIDIA Model Optimizer puts Q/DQ in real models: the outside reference of tests/test_calib_fusions.py.

    python3 -m venv /tmp/mo && /tmp/mo/bin/pip install 'nvidia-modelopt[onnx]==0.47.0'
    /tmp/mo/bin/python scripts/modelopt_placement.py ~/.cache/edge/assets -o tests/fixtures/modelopt_placement.json

Runs Model Optimizer's INT8 ONNX PTQ (``modelopt.onnx.quantization.quantize``, calibration ``max`` on two seeded
random inputs: placement does not depend on the values) on each model and writes, per Add, pooling and Concat node
(keyed by its first output, which Q/DQ insertion leaves alone), the input slots that read a DequantizeLinear, and the
per-tensor scale of each quantized activation that a Concat reads or writes (equal scales are Model Optimizer's
concat elimination). Model Optimizer is never an edge dependency: this runs in its own virtual environment.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

# asset folder/file, the input shape to calibrate at
MODELS = {
    "yolox-ddddocr": ("common_det.onnx", "1x3x416x416"),
    "centerface": ("centerface.onnx", "10x3x32x32"),
    "blazeface-back-256": ("face_detection_back_256x256_barracuda.onnx", "1x256x256x3"),
    "retinaface-mnet025": ("retinaface-mnet025.onnx", "1x3x320x320"),
    "picodet-layout": ("layout_cdla.onnx", "1x3x800x608"),
}
RECORDED = ("Add", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Concat")


def placement(path: Path, shape: str) -> dict:
    import numpy as np
    import onnx
    from modelopt.onnx.quantization import quantize
    from onnx import numpy_helper

    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    model = onnx.load(str(path))
    inits = {i.name for i in model.graph.initializer}
    name = next(i.name for i in model.graph.input if i.name not in inits)
    dims = [int(v) for v in shape.split("x")]
    data = np.random.default_rng(0).uniform(0, 1, dims).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        out, src = Path(tmp) / "q.onnx", Path(tmp) / path.name
        src.write_bytes(path.read_bytes())  # quantize() rewrites the file it is given (its shape inference pass)
        quantize(
            str(src),
            quantize_mode="int8",
            calibration_data={name: data},
            calibration_method="max",
            calibration_shapes=f"{name}:{shape}",
            calibration_eps=["cpu"],
            output_path=str(out),
            log_level="ERROR",
            high_precision_dtype="fp32",
        )
        q = onnx.load(str(out))
    dq = {n.output[0] for n in q.graph.node if n.op_type == "DequantizeLinear"}
    init = {i.name: numpy_helper.to_array(i) for i in q.graph.initializer}
    scales = {
        n.input[0]: float(init[n.input[1]].reshape(-1)[0])
        for n in q.graph.node
        if n.op_type == "QuantizeLinear" and n.input[1] in init and init[n.input[1]].size == 1
    }
    slots, concat_scales = {}, {}
    for node in q.graph.node:
        if node.op_type not in RECORDED:
            continue
        slots[node.output[0]] = [k for k, i in enumerate(node.input) if i in dq]
        if node.op_type == "Concat":
            # the tensors a Concat reads (before their pairs) and writes, with the scale Model Optimizer gave them
            sources = {n.output[0]: n.input[0] for n in q.graph.node if n.op_type == "DequantizeLinear"}
            quantized = {n.output[0]: n.input[0] for n in q.graph.node if n.op_type == "QuantizeLinear"}
            members = [quantized.get(sources.get(i, ""), i) for i in node.input] + [node.output[0]]
            concat_scales[node.output[0]] = {m: scales[m] for m in members if m in scales}
    return {
        "file": path.name,
        "sha256": digest,
        "shape": shape,
        "slots": slots,
        "concat_scales": concat_scales,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("assets", type=Path, help="the folder edge's assets are in (~/.cache/edge/assets)")
    parser.add_argument("-o", "--out", type=Path, required=True)
    args = parser.parse_args()
    import modelopt
    import onnxruntime

    record = {
        "source": "NVIDIA Model Optimizer ONNX PTQ, quantize_mode=int8, calibration_method=max, default placement",
        "modelopt": modelopt.__version__,
        "onnxruntime": onnxruntime.__version__,
        "models": {},
    }
    for asset, (file, shape) in MODELS.items():
        print(f"{asset} ...", file=sys.stderr, flush=True)
        record["models"][asset] = placement(args.assets / asset / file, shape)
    args.out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
