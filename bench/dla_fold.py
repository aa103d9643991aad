"""Folding with the byte cap against folding without it, side by side in one run, each in its own process.

The model is the hostile one of issue 13, scaled so that the uncapped run fits this machine: a few hundred bytes of
ONNX whose ConstantOfShape declares a [1, 3, N, N] float tensor. "uncapped" is `prepare(cap_bytes=1 TiB)` with the
256 MiB cap on all folded values together lifted to 1 TiB too, which materialises the constant as the predictor did
before the caps; "capped" is the default 64 MiB cap, which keeps the shape and notes the node. Wall time and peak RSS come from os.wait4 of each child.

    python bench/dla_fold.py             # N = 6000 (432 MB constant)
    python bench/dla_fold.py --n 3000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import sys
sys.path.insert(0, {root!r})
from edge.dla.predict import _predict, Report
from edge.dla.rules import limits_for
from edge.graph import fold
from edge.graph.model import prepare
fold.TOTAL_CAP_BYTES = max(fold.TOTAL_CAP_BYTES, {cap})  # "uncapped" lifts the cap on all folds together as well
graph = prepare({path!r}, cap_bytes={cap})
_predict(graph, limits_for("orin", "10.3"), "fp16", "bench")
"""


def model(path: Path, n: int) -> int:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    shape = numpy_helper.from_array(np.array([1, 3, n, n], dtype=np.int64), "s")
    one = numpy_helper.from_array(np.array([1.0], dtype=np.float32))
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["c"], value=one), helper.make_node("Add", ["x", "c"], ["y"])]
    g = helper.make_graph(
        nodes,
        "bomb",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, n, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [shape],
    )
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    path.write_bytes(data)
    return len(data)


def run(path: Path, cap: int):
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CHILD.format(root=str(ROOT), path=str(path), cap=cap)])
    _, status, usage = os.wait4(proc.pid, 0)
    if status:
        raise SystemExit(f"child failed with status {status}")
    return time.perf_counter() - start, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=6000, help="H = W of the declared constant")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bomb.onnx"
        size = model(path, args.n)
        print(
            f"model: {size} bytes declaring a [1, 3, {args.n}, {args.n}] float constant ({12 * args.n * args.n / 2**20:.0f} MiB)"
        )
        capped = run(path, 64 << 20)
        uncapped = run(path, 1 << 40)
    print(f"capped (64 MiB):  {capped[0]:6.2f} s  peak RSS {capped[1]:7.0f} MiB")
    print(f"uncapped:         {uncapped[0]:6.2f} s  peak RSS {uncapped[1]:7.0f} MiB")
    print(f"ratio uncapped/capped: time {uncapped[0] / capped[0]:.1f}x, peak memory {uncapped[1] / capped[1]:.1f}x")


if __name__ == "__main__":
    main()
