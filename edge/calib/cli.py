"""`edge calib MODEL.onnx --images DIR|--dataset NAME`: INT8 calibration on any host, with ONNX Runtime.

Writes the TensorRT calibration cache that `edge-build --calib-cache` uses on the Jetson (no images needed there),
optionally a Q/DQ ONNX for explicit quantization, and with ``--eval`` an accuracy report of INT8 against FP32.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

from edge import argtypes
from edge.calib.cache import ALGORITHMS
from edge.errors import EdgeError

METHODS = ("entropy", "percentile", "minmax")  # calib_methods.METHODS, repeated so --help does not import numpy
# The TensorRT release of each JetPack, for the short forms of --trt-version.
TRT_RELEASES = {"8.5": "8.5.2", "10.3": "10.3.0"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the FP32 ONNX model, or asset://NAME for a pinned asset (edge assets list)")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--images", metavar="DIR", help="a folder of calibration images (preprocessed as edge-run does)")
    src.add_argument("--dataset", metavar="NAME", help="a named image set, optionally sliced: mnist_5k, mnist_5k[-100:]")
    parser.add_argument("--method", choices=METHODS, default="entropy", help="how scales are chosen (default entropy)")
    parser.add_argument("--percentile", type=argtypes.finite_float, default=99.99, help="for --method percentile (default 99.99)")
    parser.add_argument("--max-images", type=argtypes.positive_int, metavar="N", help="use at most the first N images")
    parser.add_argument("--cache", metavar="OUT.cache", help="calibration cache to write (default: MODEL_NAME.cache here)")
    parser.add_argument(
        "--trt-version",
        default="10.3",
        metavar="VERSION",
        help="TensorRT on the Jetson, for the cache header: 8.5 (JetPack 5), 10.3 (JetPack 6) or X.Y.Z (default 10.3)",
    )
    parser.add_argument(
        "--cache-algorithm",
        choices=ALGORITHMS,
        default="EntropyCalibration2",
        help="calibrator named in the cache header; the builder must read it with that calibrator "
        "(default EntropyCalibration2, the one the DLA needs)",
    )
    parser.add_argument("--qdq", metavar="OUT.onnx", help="also write a Q/DQ ONNX (explicit quantization, TensorRT 10+)")
    parser.add_argument("--eval", metavar="NAME", help="labelled set for the accuracy report, e.g. mnist_5k[:1000]")
    parser.add_argument(
        "--keep-fp16",
        nargs="+",
        action="extend",
        default=[],
        metavar="NODE",
        help="nodes left without Q/DQ (node name, layer name or output tensor), listed for the build",
    )
    parser.add_argument("--config", "-c", metavar="RUN.yaml", help="edge-run config whose input: section preprocesses --images")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key (input.*)")
    parser.add_argument(
        "--memory-mb", type=argtypes.positive_int, default=384, help="memory for activations in flight (default 384)"
    )
    parser.add_argument("--threads", type=argtypes.threads, default=0, help="ONNX Runtime threads (default: all cores but one)")
    parser.add_argument(
        "--layer-images", type=argtypes.positive_int, default=32, help="images for the per-layer report (default 32)"
    )


def _model_path(text: str) -> Path:
    if text.startswith("asset://"):
        from edge import assets

        return assets.resolve(text[len("asset://") :])
    return Path(text)


def trt_version(text: str) -> str:
    """'8.5' -> '8.5.2' (the JetPack release), '10.3' -> '10.3.0', a full X.Y.Z as given."""
    if text in TRT_RELEASES:
        return TRT_RELEASES[text]
    if not re.fullmatch(r"\d+\.\d+(\.\d+){0,2}", text):
        raise EdgeError(f"--trt-version {text}: expected 8.5, 10.3 or a version such as 8.6.2 (TensorRT on the Jetson)")
    return text if text.count(".") >= 2 else text + ".0"


def _images(args: argparse.Namespace, model: Any, path: Path) -> Any:
    from edge.calib import datasets as calib_datasets

    if args.dataset:
        return calib_datasets.dataset(args.dataset, args.max_images)
    import numpy as np

    from edge.config import load_config
    from edge.graph.model import model_inputs
    from edge.runtime.backends import TensorInfo
    from edge.runtime.model import preprocess_spec

    cfg = load_config(args.config, args.set, {"model.path": str(path.resolve())})
    inp = model_inputs(model)[0]
    dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in inp.type.tensor_type.shape.dim)
    spec = preprocess_spec(cfg, TensorInfo(inp.name, dims, np.dtype(np.float32)))
    return calib_datasets.image_folder(args.images, spec, args.max_images)


def _peak_rss_mb() -> float:
    try:
        import resource
    except ImportError:  # not on Windows
        return float("nan")
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _say(text: str) -> None:
    print(f"edge calib: {text}", file=sys.stderr, flush=True)


def main(args: argparse.Namespace) -> int:
    from edge.calib import methods as calib_methods
    from edge.calib import qdq
    from edge.calib import stats as calib_stats
    from edge.calib.cache import CalibrationCache, version_tag, write_cache
    from edge.graph.model import load_model, model_inputs, prepare

    version = trt_version(args.trt_version)
    t0 = time.perf_counter()
    path = _model_path(args.model)
    model = load_model(path)
    inputs = model_inputs(model)
    if len(inputs) != 1:
        raise EdgeError(
            f"{path}: the model has {len(inputs)} inputs ({', '.join(i.name for i in inputs)}); edge calib feeds one image input"
        )
    images = _images(args, model, path)
    shape = images.spec.input_shape
    declared = inputs[0].type.tensor_type.shape.dim
    if declared and declared[0].HasField("dim_value") and declared[0].dim_value > 0:
        shape = (declared[0].dim_value, *shape[1:])
    graph = prepare(model, {inputs[0].name: shape})
    activations, constants = calib_stats.calibration_tensors(graph)
    keep, keep_layers = qdq.match_nodes(graph, args.keep_fp16)
    t_load = time.perf_counter() - t0
    _say(
        f"{path.name}: {len(activations)} activation tensors, {len(constants)} constant tensors; {images.count} images from {images.name}"
    )

    t1 = time.perf_counter()
    last = [t1]

    def progress(done: int, batch: int) -> None:
        now = time.perf_counter()
        if now - last[0] >= 2.0 or done == images.count:
            last[0] = now
            _say(
                f"statistics {done}/{images.count} images (batch {batch}), {done / (now - t1):.1f} images/s, peak RSS {_peak_rss_mb():.0f} MB"
            )

    stats = calib_stats.collect(
        model,
        graph,
        images,
        activations,
        budget_bytes=args.memory_mb << 20,
        threads=args.threads or max(1, calib_stats.cores() - 1),
        progress=progress,
    )
    t_stats = time.perf_counter() - t1

    t2 = time.perf_counter()
    amax: Dict[str, float] = {
        n: calib_methods.amax(args.method, s.hist, s.range, s.absmax, args.percentile) for n, s in stats.items()
    }
    clipped = sum(1 for n, s in stats.items() if amax[n] < s.absmax)
    for name, value in constants.items():
        amax.setdefault(name, float(abs(value).max()))  # exact values: no reason to clip
    cache = CalibrationCache(version_tag(version), args.cache_algorithm, {n: a / 127.0 for n, a in amax.items()})
    cache_path = Path(args.cache) if args.cache else Path(f"{path.stem}.cache")
    write_cache(cache_path, cache)
    t_scales = time.perf_counter() - t2

    lines: List[str] = []
    t3 = time.perf_counter()
    q_model, quantized = qdq.build(model, graph, amax, keep) if (args.qdq or args.eval) else (None, set())
    if args.qdq:
        qdq.save(q_model, args.qdq)
    t_qdq = time.perf_counter() - t3

    n = images.count
    lines += [
        f"model {path} ({images.spec.width}x{images.spec.height} input), {n} images from {images.name}, method {args.method}"
        + (f" {args.percentile}" if args.method == "percentile" else ""),
        f"scales: {len(stats)} activations ({clipped} clipped below their max |x|) + {len(constants)} constants",
        f"time: load {t_load:.1f} s, statistics {t_stats:.1f} s ({n / max(t_stats, 1e-9):.0f} images/s), scales {t_scales:.2f} s"
        + (f", Q/DQ {t_qdq:.1f} s" if q_model is not None else "")
        + f"; peak RSS {_peak_rss_mb():.0f} MB",
        f"cache: {cache_path} ({cache.header}, {len(cache.scales)} tensors)",
    ]
    if args.qdq:
        lines.append(f"Q/DQ model: {args.qdq} ({len(quantized)} layers quantized)")
    if keep_layers:
        lines.append(f"kept in FP16 ({len(keep_layers)}): {', '.join(keep_layers)}")
        lines.append(f"  trtexec: --precisionConstraints=obey --layerPrecisions={','.join(f'{k}:fp16' for k in keep_layers)}")
    lines.append(f"on the Jetson (TensorRT {version}): edge-build {path.name} --calib-cache {cache_path.name}")
    print("\n".join(lines), flush=True)

    if args.eval:
        from edge.calib import accuracy as calib_eval
        from edge.calib import datasets as calib_datasets

        t4 = time.perf_counter()
        labelled = calib_datasets.dataset(args.eval)
        _say(f"accuracy report on {labelled.count} images from {labelled.name}")
        acc = calib_eval.evaluate(model, q_model, quantized, graph, labelled, activations, args.layer_images, args.threads)
        print("\n".join(calib_eval.render(acc) + [f"(report took {time.perf_counter() - t4:.1f} s)"]))
    return 0
