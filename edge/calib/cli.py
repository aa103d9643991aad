"""`edge calib MODEL.onnx --images DIR|--dataset NAME`: INT8 calibration on any host, with ONNX Runtime.

Writes the TensorRT calibration cache that `edge-build --calib-cache` uses on the Jetson (no images needed there) and
its FP16-layer sidecar, optionally a Q/DQ ONNX for explicit quantization. It checks INT8 against FP32 before any
Jetson is involved: agreement and SQNR per output on images without labels, top-1/top-5 with ``--eval``, and meets
``--min-agreement`` / ``--max-drop`` by keeping the fewest layers in FP16.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from edge import argtypes
from edge.calib.cache import ALGORITHMS
from edge.config import short
from edge.errors import EdgeError, RunFailed, emit, printable

METHODS = ("mse", "entropy", "percentile", "minmax")  # calib_methods.METHODS, repeated so --help does not import numpy
# Chosen by the best mean rank over four models' tuning sets (`bench/calibration.py --only choose`, docs/benchmarks.md).
DEFAULT_METHOD = "percentile"
DEFAULT_PERCENTILE = 99.9
# --equalize auto: this strength, kept when the check says it helps. The strength whose worst tuning set is best among
# the default method's rows (`bench/calibration.py --only choose`; docs/edge-calib.md#equalization).
AUTO = "auto"
AUTO_STRENGTH = 0.5
LOW_AGREEMENT = 0.99  # below it a run without a budget says so, with the budget the docs suggest
# The TensorRT release of each JetPack, for the short forms of --trt-version (JetPack 6.0 ships 8.6.2).
TRT_RELEASES = {"8.5": "8.5.2", "8.6": "8.6.2", "10.3": "10.3.0"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model",
        nargs="?",
        help="the FP32 ONNX model, or asset://NAME for a pinned asset (edge assets list); default: the --config's model",
    )
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--images", metavar="DIR", help="a folder of calibration images (preprocessed as edge-run does)")
    src.add_argument("--dataset", metavar="NAME", help="a named image set, optionally sliced: mnist_5k, mnist_5k[-100:]")
    parser.add_argument(
        "--method", choices=METHODS, default=DEFAULT_METHOD, help=f"how scales are chosen (default {DEFAULT_METHOD})"
    )
    parser.add_argument(
        "--percentile",
        type=argtypes.finite_float,
        default=DEFAULT_PERCENTILE,
        help=f"for --method percentile (default {DEFAULT_PERCENTILE})",
    )
    parser.add_argument(
        "--equalize",
        type=equalize_strength,
        default=AUTO,
        metavar="S|auto",
        help="move the spread between an activation's channels into the convolutions' per-channel weights before "
        f"calibrating, from 0 (off) to 1 (ranges made equal); auto (default): {AUTO_STRENGTH}, kept only when the check "
        "agrees better than without; the rescaled FP32 model is written beside the cache and is the one to build",
    )
    parser.add_argument(
        "--equalized",
        type=argtypes.output_file,
        metavar="OUT.onnx",
        help="where the equalized model goes (default: beside the cache, face.cache -> face.equalized.onnx)",
    )
    parser.add_argument("--max-images", type=argtypes.positive_int, metavar="N", help="use at most the first N images")
    parser.add_argument(
        "--cache",
        type=argtypes.output_file,
        metavar="OUT.cache",
        help="calibration cache to write, with OUT.cache.json beside it (default MODEL_NAME.cache)",
    )
    parser.add_argument(
        "--trt-version",
        default="10.3",
        metavar="VERSION",
        help="TensorRT on the Jetson, for the cache header: 8.5 (JetPack 5), 8.6 (JetPack 6.0), 10.3 (JetPack 6.1/6.2) "
        "or X.Y.Z (default 10.3)",
    )
    parser.add_argument(
        "--cache-algorithm",
        choices=ALGORITHMS,
        default="EntropyCalibration2",
        help="calibrator named in the cache header, whatever --method computed the scales; the builder reads the cache "
        "with it (default EntropyCalibration2, the one the DLA needs)",
    )
    parser.add_argument(
        "--cache-for",
        choices=["tensorrt", "modelopt"],
        default="tensorrt",
        help="tensorrt: every scale TensorRT's own calibrator writes, constants included (default); modelopt: the "
        "scales without the stored weights, for Model Optimizer's --calibration_cache_path, which computes those itself and "
        "breaks a MatMul whose weight has an entry (edge-build fits them back either way)",
    )
    parser.add_argument(
        "--qdq",
        type=argtypes.output_file,
        metavar="OUT.onnx",
        help="also write a Q/DQ ONNX (explicit quantization, TensorRT 10+)",
    )
    parser.add_argument(
        "--eval",
        metavar="DIR|NAME",
        help="labelled images for top-1/top-5: a folder with one sub-folder per class, or a named set (mnist_5k[:1000])",
    )
    parser.add_argument(
        "--agreement-images", metavar="DIR", help="images for the label-free FP32/INT8 check (default: the calibration images)"
    )
    parser.add_argument(
        "--min-agreement",
        type=argtypes.finite_float,
        metavar="A",
        help="budget: every output's FP32/INT8 agreement at least A (0..1, e.g. 0.99); layers go to FP16 until it holds",
    )
    parser.add_argument(
        "--agreement-outputs",
        nargs="+",
        action="extend",
        default=[],
        metavar="OUTPUT",
        help="the outputs --min-agreement watches (default: all); leave out box regressors, whose argmax means nothing",
    )
    parser.add_argument(
        "--max-drop",
        type=argtypes.finite_float,
        metavar="POINTS",
        help="budget (with --eval): INT8 top-1 at most POINTS below FP32 (e.g. 0.5); layers go to FP16 until it holds",
    )
    parser.add_argument(
        "--keep-fp16",
        nargs="+",
        action="extend",
        default=[],
        metavar="NODE",
        help="nodes always kept in FP16 (node name, layer name or output tensor): no Q/DQ, listed for the build",
    )
    parser.add_argument("--config", "-c", metavar="RUN.yaml", help="edge-run config: its input: section preprocesses the images")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key (input.*, task.*)")
    parser.add_argument(
        "--memory-mb", type=argtypes.positive_int, default=160, help="memory for activations in flight (default 160)"
    )
    parser.add_argument("--threads", type=argtypes.threads, default=0, help="ONNX Runtime threads (default: all cores but one)")
    parser.add_argument(
        "--layer-images", type=argtypes.positive_int, default=32, help="images for the per-layer sensitivity ranking (default 32)"
    )
    parser.add_argument(
        "--full-checks",
        action="store_true",
        help="score every labelled image at each step of the budget search (slower, same choice; by default a step "
        "stops once the images left cannot make it meet the budget)",
    )


def trt_version(text: str) -> str:
    """'8.5' -> '8.5.2' (the JetPack release), '10.3' -> '10.3.0', a full X.Y.Z as given."""
    if text in TRT_RELEASES:
        return TRT_RELEASES[text]
    m = re.fullmatch(r"(\d{1,2})\.(\d)(?:\.(\d{1,2}))?(?:\.\d{1,4})?", text)
    if not m or not 7 <= int(m.group(1)) <= 11:
        # The cache header packs major, minor and patch into one integer (8.5.2 -> 8502, 10.3.0 -> 100300), so each
        # part has a few digits at most; TensorRT with calibrators runs from 7.x to 10.x.
        raise EdgeError(
            f"--trt-version {short(text, 40)}: expected 8.5, 8.6, 10.3 or a TensorRT version such as 8.6.2 (the Jetson's)"
        )
    return text if text.count(".") >= 2 else text + ".0"


def check_numbers(args: argparse.Namespace) -> None:
    """The ranges of the number flags, before anything is loaded (argparse has refused non-numbers, NaN and infinity)."""

    if not (math.isfinite(args.percentile) and 0.0 < args.percentile <= 100.0):
        raise EdgeError(f"--percentile {short(args.percentile)}: must be in (0, 100], e.g. 99.9")
    if args.equalize != AUTO and not (math.isfinite(args.equalize) and 0.0 <= args.equalize <= 1.0):
        raise EdgeError(f"--equalize {short(args.equalize)}: must be in [0, 1] (0: off, 1: full), e.g. 1")
    if args.equalized and args.equalize == 0.0:
        raise EdgeError("--equalized names where the equalized model goes, and --equalize 0 writes none; drop one of them")
    if args.min_agreement is not None and not (math.isfinite(args.min_agreement) and 0.0 < args.min_agreement <= 1.0):
        raise EdgeError(f"--min-agreement {short(args.min_agreement)}: must be a share in (0, 1], e.g. 0.99")
    if args.max_drop is not None:
        if not (math.isfinite(args.max_drop) and args.max_drop >= 0.0):
            raise EdgeError(f"--max-drop {short(args.max_drop)}: must be points of top-1 >= 0, e.g. 0.5")
        if not args.eval:
            raise EdgeError(
                "--max-drop needs labelled images: add --eval DIR (one sub-folder per class) or --eval mnist_5k[:1000]"
            )
    if args.agreement_outputs and args.min_agreement is None:
        raise EdgeError("--agreement-outputs chooses the outputs of --min-agreement; add --min-agreement A (e.g. 0.99)")


def _say(text: str) -> None:
    print(f"edge calib: {text}", file=sys.stderr, flush=True)


def _peak_rss_mb() -> float:
    try:
        import resource
    except ImportError:  # not on Windows
        return float("nan")
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _source(args: argparse.Namespace) -> Tuple[Any, Path, Optional[str]]:
    """(run config, model path, asset name) from MODEL or the config's model.path / model.asset."""
    from edge import assets
    from edge.config import load_config
    from edge.runtime.engines.model import model_path

    if args.model:
        path, asset = assets.model_argument(args.model)
        cfg = load_config(args.config, args.set, {"model.path": str(path.resolve()), "model.asset": None, "model.engine": None})
        return cfg, path, asset
    if not args.config:
        raise EdgeError("no model: pass MODEL.onnx (or asset://NAME), or --config RUN.yaml with model.path or model.asset")
    cfg = load_config(args.config, args.set)
    return cfg, model_path(cfg), cfg.model.asset


def _eval_set(args: argparse.Namespace, cfg: Any, spec: Any) -> Any:
    """The labelled set of --eval: an existing folder (classification layout) or a named set."""
    from edge.calib import datasets
    from edge.runtime.postprocess import load_labels

    if Path(args.eval).is_dir() or not datasets.is_named_set(args.eval):
        # Only a task the user set is held against the folder (auto may yet turn out a classifier).
        if cfg.task.type not in ("auto", "classify"):
            raise EdgeError(
                f"--eval {args.eval}: a folder of labelled images scores a classifier, but the run config has task.type "
                f"{cfg.task.type}; set task.type: classify, or check a detector with --agreement-images / --min-agreement"
            )
        try:
            labels = load_labels(cfg)
        except (OSError, UnicodeDecodeError) as exc:
            raise EdgeError(
                f"key 'task.labels': the labels file cannot be read as UTF-8 text ({exc}); one label per line"
            ) from None
        return datasets.labelled_folder(args.eval, spec, labels or None)
    named = datasets.dataset(args.eval, flag="--eval")
    if named.spec.input_shape != spec.input_shape:
        raise EdgeError(
            f"--eval {args.eval}: that set makes inputs of {list(named.spec.input_shape)}, the calibration images "
            f"{list(spec.input_shape)}; named sets belong to their benchmark model (edge calib --help)"
        )
    return named


def _check_classes(graph: Any, labelled: Any) -> None:
    """A label beyond the model's first output would score as a miss forever; refuse it before the work."""
    from edge.calib.datasets import class_scores
    from edge.graph.model import is_static

    # Only folders read the raw output as class scores; a named set brings its own reader.
    if getattr(labelled, "scores", None) is not class_scores or labelled.labels is None or not len(labelled.labels):
        return
    dims = graph.shape(graph.outputs[0])
    if not is_static(dims):
        return
    classes = math.prod(dims[1:])
    top = int(labelled.labels.max())
    if top >= classes:
        raise EdgeError(
            f"--eval {labelled.name}: class index {top} but the model's output '{graph.outputs[0]}' has {classes} classes; "
            "check task.labels or the class folders"
        )


def _refuse_with_qdq(args: argparse.Namespace, path: Path) -> None:
    """A Q/DQ model's quantization is its maker's: the flags that would change it are refused before any work."""
    for flag, given in (
        ("--max-drop", args.max_drop is not None),
        ("--min-agreement", args.min_agreement is not None),
        ("--keep-fp16", bool(args.keep_fp16)),
        ("--qdq", bool(args.qdq)),
    ):
        if given:
            raise EdgeError(
                f"{flag}: {path.name} already has Q/DQ pairs, so edge calib checks it as it is and writes its scales as a "
                f"cache; {flag} needs the model without Q/DQ (the FP32 export)"
            )


def equalize_strength(text: str) -> Any:
    """--equalize: 'auto' or a number (its range is checked with the others)."""
    return AUTO if text.strip().lower() == AUTO else argtypes.finite_float(text)


def strength(args: argparse.Namespace) -> float:
    return AUTO_STRENGTH if args.equalize == AUTO else float(args.equalize)


def _quality(m: Any) -> float:
    """One number to compare two INT8 models by: labelled top-1 (or mAP) when there are labels, else agreement."""
    return m.labelled.score if m.labelled is not None else m.agreement


def _quality_name(m: Any) -> str:
    return "labelled score" if m.labelled is not None else "agreement"


def equalized_path(args: argparse.Namespace, cache: Path) -> Optional[Path]:
    """Where the equalized model goes (None with --equalize 0)."""
    if args.equalize == 0.0:
        return None
    return Path(args.equalized) if args.equalized else cache.with_name(f"{cache.stem}.equalized.onnx")


def next_step(
    args: argparse.Namespace, path: Path, asset: Optional[str], cache: Path, graph: Any, built: Optional[Path] = None
) -> str:
    """The edge-build command for the Jetson: the model (``built`` when edge calib rewrote it), --int8, the cache,
    and the build shape of a dynamic input."""
    words = ["edge-build"]
    if built is not None:
        words.append(str(built))
    elif asset:
        words += ["--set", f"model.asset={asset}"]
    else:
        words.append(args.model or str(path))
    return _build_command(words + ["--int8", "--calib-cache", str(cache)], graph)


def _build_command(words: List[str], graph: Any) -> str:
    for name, dims in graph.input_shapes.items():
        if name in graph.dynamic_inputs():
            words += ["--shape", f"{name}={'x'.join(str(d) for d in dims)}"]
    return " ".join(shlex.quote(w) for w in words)


def here_step(args: argparse.Namespace, graph: Any) -> List[str]:
    """What this machine's builder can do with the result: a full TensorRT takes the cache as the Jetson does;
    TensorRT-RTX (strongly typed) takes no cache and no --int8, only a Q/DQ model."""
    from edge.lazy import available

    if available("tensorrt"):
        return []  # the same command works here, for this machine's GPU
    if not available("tensorrt_rtx"):
        return ["no TensorRT builder on this machine; docs/install.md says how to get one on a host"]
    if args.qdq:
        return [
            "on this machine, TensorRT-RTX takes no cache and no --int8; it builds the Q/DQ model as it is (a GPU "
            "engine for a desktop GPU, not for the Jetson):",
            "  " + _build_command(["edge-build", str(args.qdq), "-o", f"{Path(args.qdq).stem}.engine"], graph),
        ]
    return ["on this machine, TensorRT-RTX takes no cache and no --int8: add --qdq OUT.onnx for a model it can build"]


def main(args: argparse.Namespace) -> int:
    from edge.calib import datasets as calib_datasets
    from edge.calib import equalize as calib_equalize
    from edge.calib import fidelity, qdq, sensitivity
    from edge.calib import methods as calib_methods
    from edge.calib import stats as calib_stats
    from edge.calib.budget import Budget, describe_miss, search
    from edge.calib.cache import CalibrationCache, version_tag
    from edge.calib.check import Checker, Measurement, TopK
    from edge.calib.sidecar import Sidecar, sidecar_path
    from edge.graph.model import load_model, model_inputs, prepare, stored_constants
    from edge.graph.qdq_translate import embed, has_qdq, translate
    from edge.manifest import sha256_file
    from edge.outputs import Staged, check_outputs, commit_together, hold

    version = trt_version(args.trt_version)
    check_numbers(args)
    budget = Budget(args.min_agreement, args.max_drop, list(dict.fromkeys(args.agreement_outputs)))
    t0 = time.perf_counter()
    cfg, path, asset = _source(args)
    cache_path = Path(args.cache) if args.cache else Path(f"{asset or path.stem}.cache")
    side_path = sidecar_path(cache_path)
    eq_path = equalized_path(args, cache_path)
    check_outputs(
        {"--cache": cache_path, "--cache (its sidecar)": side_path, "--qdq": args.qdq, "--equalized": eq_path},
        {
            "MODEL": path,
            "--config": args.config,
            "--images": args.images,
            "--agreement-images": args.agreement_images,
            "--eval": args.eval if args.eval and Path(args.eval).is_dir() else None,
        },
    )
    _held = hold(cache_path, "--cache")  # noqa: F841 - held to the end of main: a second run on this cache is refused
    model = load_model(path)
    translated = None
    if has_qdq(model):  # a Q/DQ model (Model Optimizer's, a QAT export, edge's): checked as it is, not calibrated
        _refuse_with_qdq(args, path)
        translated = translate(model)
        given, model = model, translated.model  # the FP32 side: the same model without its pairs
    inputs = model_inputs(model)
    if len(inputs) != 1:
        raise EdgeError(
            f"{path}: the model has {len(inputs)} inputs ({', '.join(i.name for i in inputs)}); edge calib feeds one image input"
        )
    images = _images(args, cfg, model)
    spec = images.spec
    shape = spec.input_shape
    declared = inputs[0].type.tensor_type.shape.dim
    if declared and declared[0].HasField("dim_value") and declared[0].dim_value > 0:
        shape = (declared[0].dim_value, *shape[1:])
    dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in declared]
    if args.dataset and len(dims) == len(shape) and any(d is not None and d != s for d, s in zip(dims, shape)):
        raise EdgeError(
            f"--dataset {args.dataset}: that set makes inputs of {list(shape)}, and the model's input "
            f"'{inputs[0].name}' is {[d if d is not None else '?' for d in dims]}; calibrate with --images FOLDER"
        )
    graph = prepare(model, {inputs[0].name: shape})
    calib_stats.give_back_memory()  # shape inference's copies of the model: tens of MB the pass would otherwise keep
    activations, constants = calib_stats.calibration_tensors(graph)
    keep, keep_layers = qdq.match_nodes(graph, args.keep_fp16)
    notes: List[str] = []
    task = _task(cfg, model, graph, spec, path, notes)
    if task is None:
        measured = list(graph.outputs)
    elif task.head.kind == "segment":
        measured = [fidelity.PIXELS]
    else:
        measured = [*([fidelity.ANCHORS] if task.has_anchors else []), fidelity.DETECTIONS]
    unknown = [o for o in budget.outputs if o not in measured]
    if unknown and task is not None and unknown[0] in graph.outputs:
        # a raw output's agreement is not measured when a decoder decides: watching it would meet any budget
        raise EdgeError(
            f"--agreement-outputs {unknown[0]}: with the {task.name} decoder agreement is of its decisions "
            f"({', '.join(measured)}); that output gets its SQNR only; watch {' and '.join(measured)} or leave the flag out"
        )
    if unknown:
        raise EdgeError(f"--agreement-outputs {unknown[0]}: the measured outputs are {', '.join(measured)}")
    if args.eval and task is not None and task.head.kind == "segment":
        raise EdgeError(
            f"--eval {args.eval}: scores detectors by their boxes; a segmenter's INT8 is measured per pixel "
            "(the 'pixels' agreement), so leave --eval out"
        )
    if args.eval and task is not None and Path(args.eval).is_dir():
        from edge.calib import detection_eval

        labelled = detection_eval.load(args.eval, list(task.decoder.labels))
    else:
        labelled = _eval_set(args, cfg, spec) if args.eval else None
    _check_classes(graph, labelled)
    check_images = (
        calib_datasets.image_folder(args.agreement_images, spec, what="--agreement-images") if args.agreement_images else images
    )
    t_load = time.perf_counter() - t0

    def started() -> None:
        _say(
            f"{path.name}: {len(activations)} activation tensors, {len(constants)} constant tensors; {images.count} images from {images.name}"
        )
        for note in notes:
            _say(note)
        fixed = calib_stats.fixed_batch(graph)
        if fixed and images.count % fixed:
            _say(
                f"the model's batch is fixed at {fixed}: the last {images.count % fixed} image(s) fill no batch and are left out"
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

    # When the check runs on the calibration images, their FP32 outputs come from this pass (while they fit).
    reference = (
        fidelity.Reference(fidelity.FidelityMeter(graph, graph.outputs, spec.layout, task), images.count, args.memory_mb << 20)
        if check_images is images
        else None
    )

    threads = args.threads or max(1, calib_stats.cores() - 1)
    equalized = None
    said: List[bool] = []  # the opening line goes out once, after the first pass's ONNX Runtime took the model

    def start_once() -> None:
        said.append(True)
        started()

    if translated is None and eq_path is not None:
        equalized = calib_equalize.equalize(
            model, graph, images, strength(args), args.memory_mb << 20, threads, on_start=start_once, say=_say
        )
        if equalized is not None:
            _say(
                f"equalized: {equalized.groups} channel groups rescaled through {equalized.convs} convolutions (widest "
                f"channel over narrowest {equalized.spread_before:.0f}x -> {equalized.spread_after:.0f}x) in "
                f"{time.perf_counter() - t1:.1f} s"
            )
    t_equalize = time.perf_counter() - t1
    t1 = time.perf_counter()

    def calibrate(on_run: Any = None) -> Tuple[Dict[str, Any], Dict[str, float]]:
        """The statistics pass over the model as it stands, and each tensor's threshold."""
        found = calib_stats.collect(
            model,
            graph,
            images,
            activations,
            budget_bytes=args.memory_mb << 20,
            threads=threads,
            progress=progress,
            on_run=on_run,
            on_start=None if said else started,
        )
        thresholds = {n: calib_methods.amax(args.method, s.hist, s.range, s.absmax, args.percentile) for n, s in found.items()}
        for name, value in constants.items():
            thresholds.setdefault(name, float(abs(value).max()))  # exact values: no reason to clip
        return found, thresholds

    auto = equalized is not None and args.equalize == AUTO
    keep_reference = reference.add if reference is not None else None
    if translated is not None:
        stats, amax = {}, {}
    elif auto:
        # Both ways, the file's own weights first: the check's FP32 outputs are the file's.
        equalized.undo(model, graph)
        plain_stats, plain_amax = calibrate(keep_reference)
        equalized.redo(model, graph)
        stats, amax = calibrate()
    else:
        stats, amax = calibrate(keep_reference)
    t_stats = time.perf_counter() - t1
    if translated is not None:
        started()
        reference = None
    if reference is not None and not reference.complete():
        reference = None

    # The check: FP32 against the Q/DQ model, then the budget search when it is not met.
    t2 = time.perf_counter()
    # No histograms are counted from here on: ONNX Runtime gets every core.
    threads = args.threads or calib_stats.cores()
    if auto:
        equalized.undo(model, graph)
    checker = Checker(model, graph, spec.layout, check_images, labelled, threads, args.memory_mb << 20, reference, task)
    fp32_score = checker.fp32_labelled.score if checker.fp32_labelled else None
    tried: Dict[str, float] = {}
    if auto:
        # Keep the equalization only where this check says it helps (CenterFace's heatmap lost peaks to it).
        if reference is None:
            checker.fp32  # noqa: B018 - made now, from the file's weights (ONNX Runtime copies the model)
        q_plain, plain_quantized = qdq.build(model, graph, plain_amax, keep)
        plain = checker.measure(q_plain)
        equalized.redo(model, graph)
    if translated is None:
        q_model, quantized = qdq.build(model, graph, amax, keep)
    else:
        q_model = given
        quantized = {i for i, n in enumerate(graph.nodes) if any(x in translated.sources for x in n.input)}
    before = checker.measure(q_model)
    if auto:
        tried = {"equalized": _quality(before), "as given": _quality(plain)}
        if tried["as given"] >= tried["equalized"]:
            equalized.undo(model, graph)
            stats, amax, q_model, quantized, before, equalized = plain_stats, plain_amax, q_plain, plain_quantized, plain, None
        _say(
            f"equalize: INT8 {_quality_name(before)} {tried['equalized']:.4f} equalized, {tried['as given']:.4f} as "
            f"given; kept {'the equalized model' if equalized is not None else 'the model as given'}"
        )
    clipped = sum(1 for n, s in stats.items() if amax[n] < s.absmax)
    scales = {n: a / 127.0 for n, a in amax.items()} if translated is None else dict(translated.scales)
    cache = CalibrationCache(version_tag(version), args.cache_algorithm, scales)
    after, kept = before, set(keep)
    ranking: List[Any] = []
    result = None
    if translated is None and ((budget.given and budget.shortfall(before, fp32_score) > 0) or labelled is not None):
        ranking = sensitivity.layer_sensitivity(
            model, graph, amax, quantized, check_images.head(args.layer_images), threads, args.memory_mb << 20
        )
    if budget.given and budget.shortfall(before, fp32_score) > 0:
        order = [r.index for r in ranking]
        decide = None if args.full_checks else (lambda m: budget.shortfall(m, fp32_score) == 0.0)
        if decide is not None and isinstance(before.labelled, TopK):
            checker.wrong_first(before.labelled)

        def measure(k: int) -> Any:
            _say(f"budget: checking INT8 with the {k} most sensitive layer(s) in FP16")
            candidate, _ = qdq.build(model, graph, amax, keep | set(order[:k]))
            # without --min-agreement a step's answer is the labelled score alone: the agreement waits for the choice
            agreement = decide is None or budget.min_agreement is not None
            m = checker.measure(candidate, labelled=budget.max_drop is not None, meets=decide, agreement=agreement)
            if isinstance(m.labelled, TopK) and not m.labelled.complete:
                _say(f"budget: missed, certain after {m.labelled.scored} of {m.labelled.images} labelled images")
            return m

        result = search(order, measure, lambda m: budget.shortfall(m, fp32_score), before)
        kept = keep | set(order[: result.kept])
        q_model, quantized = qdq.build(model, graph, amax, kept)
        after = result.measurement
        if labelled is not None and (after.labelled is None or isinstance(after.labelled, TopK) and not after.labelled.complete):
            after = checker.measure(q_model)  # what is reported: every image (a search step may have stopped early)
        elif not after.fidelity:  # the step that met the budget skipped the agreement pass
            after = Measurement(checker.measure(q_model, labelled=False).fidelity, after.labelled)
    t_check = time.perf_counter() - t2

    nodes = graph.model.graph.node
    kept_layers = [qdq.layer_name(nodes[i]) for i in sorted(kept)] if translated is None else translated.fp16_layers
    method = args.method + (f" {args.percentile}" if args.method == "percentile" else "")
    if translated is None:
        lines = [
            f"model {path} ({spec.width}x{spec.height} input), {images.count} images from {images.name}, method {method}",
            f"scales: {len(stats)} activations ({clipped} clipped below their max |x|) + {len(constants)} constants",
        ]
    else:
        method = "its Q/DQ pairs"
        lines = [
            f"Q/DQ model {path} ({spec.width}x{spec.height} input): checked as it is against the same model without its "
            f"{translated.pairs} Q/DQ pairs; nothing calibrated",
            f"scales from {translated.source}: {len(translated.scales)} tensors ({len(translated.unary)} at 1.0 for the "
            f"DLA's Conv + Add), {len(translated.fp16_layers)} layer(s) reading a tensor without one in FP16",
        ]
        if translated.weight_mismatches:
            lines.append(
                f"note: {len(translated.weight_mismatches)} weight pair(s) do not use max|w| / 127 (e.g. "
                f"{translated.weight_mismatches[0]}); TensorRT's implicit INT8 on the DLA quantizes weights that way"
            )
    if task is not None and task.head.kind == "segment":
        lines.append(f"decisions of {task.name}: each pixel's class (the IoU of the FP32 and INT8 class maps)")
    elif task is not None:
        lines.append(
            f"decisions of {task.name}: "
            + ("the class each anchor picks and " if task.has_anchors else "")
            + f"the detections both report (IoU >= 0.5, same class{', mask IoU >= 0.5' if task.head.mask_dims else ''})"
            + " over those either reports"
        )
    lines += fidelity.render(before.fidelity, check_images.count, check_images.name)
    empty = fidelity.undecided(before.fidelity)
    if empty is not None and task is not None:
        lines.append(
            f"note: neither FP32 nor INT8 reports an object on these {check_images.count} images, so the {empty} agreement "
            f"measures nothing; check with images that show objects, or a task.score_threshold below "
            f"{task.decoder.task.score_threshold:g}"
        )
    if labelled is not None and checker.fp32_labelled is not None and before.labelled is not None:
        lines.append(_topk_line(labelled.name, checker.fp32_labelled, before.labelled))
    if ranking:
        lines += sensitivity.render(ranking, min(args.layer_images, check_images.count), kept)
    if result is not None:
        added = kept_layers if not keep else [qdq.layer_name(nodes[i]) for i in sorted(kept - keep)]
        lines.append(
            f"budget {_budget_text(budget)}: before {describe_miss(budget, before, fp32_score)}; "
            + (
                f"met with {len(kept - keep)} layer(s) in FP16"
                if result.met
                else f"NOT met with all {len(ranking)} quantized layers in FP16"
            )
            + f" ({len(result.tried)} INT8 checks)"
        )
        if result.met:
            lines += fidelity.render(after.fidelity, check_images.count, check_images.name + ", after")
            if after.labelled is not None and checker.fp32_labelled is not None:
                lines.append(_topk_line(labelled.name, checker.fp32_labelled, after.labelled))
            if added:  # named once, in the list of every FP16 layer below
                lines.append(f"kept in FP16 for the budget: {len(added)} layer(s), listed below")
    elif budget.given:
        lines.append(f"budget {_budget_text(budget)}: met with no layer in FP16")
    elif translated is None and before.fidelity and before.agreement < LOW_AGREEMENT:
        # without a budget nothing else says that the INT8 model decides otherwise than FP32 on these images
        lines.append(
            f"note: INT8 agrees with FP32 on {before.agreement:.2%} here ({fidelity.lowest(before.fidelity)[1]}); "
            f"--min-agreement {LOW_AGREEMENT} keeps the layers that cost most in FP16 until it does"
        )
    if result is not None and not result.met:
        print("\n".join(printable(line) for line in lines), flush=True)
        raise RunFailed(
            f"the budget {_budget_text(budget)} cannot be met: with every quantized layer in FP16 the best is "
            f"{describe_miss(budget, after, fp32_score)}; try another --method or a looser budget (nothing was written)"
        )

    # Write: the cache and its sidecar together, then the Q/DQ model with the final FP16 list.
    t3 = time.perf_counter()
    eq_bytes = qdq.serialize(model, "--equalized", "equalized model") if equalized is not None else None
    info = {
        "model": eq_path.name if eq_bytes is not None else path.name,
        "model_sha256": hashlib.sha256(eq_bytes).hexdigest() if eq_bytes is not None else sha256_file(path),
        "method": method,
        "budget": budget.to_dict(),
        "before": _summary(before, fp32_score),
        "after": _summary(after, fp32_score),
        "check_images": check_images.name,
        "ranking": [r.to_dict() for r in ranking[:50]],
    }
    if tried:
        info["equalize_check"] = tried
    if equalized is not None:
        # edge-build refuses this cache with any other model: its scales fit the rescaled weights only
        info["equalized"] = {
            "from": path.name,
            "from_sha256": sha256_file(path),
            "strength": strength(args),
            "auto": args.equalize == AUTO,
            **equalized.to_dict(),
        }
    # Every file is complete in its temp before any replaces an old one: a full disk, a file-size limit or a kill
    # while the Q/DQ model is written leaves the earlier cache, sidecar and Q/DQ model as a set.
    staged = [Staged(cache_path), Staged(side_path)] + ([Staged(args.qdq)] if args.qdq else [])
    staged += [Staged(eq_path)] if eq_bytes is not None else []
    written = cache
    if args.cache_for == "modelopt":
        # Only the weights the file stores: a constant computed from one (a reshape of it) stays, which Model
        # Optimizer 0.47 needs (without its line it looked for it among the initializers and stopped).
        stored = stored_constants(model)
        written = CalibrationCache(cache.trt_version, cache.algorithm, {n: v for n, v in cache.scales.items() if n not in stored})
    try:
        staged[0].write(written.to_bytes())
        staged[1].write(Sidecar(kept_layers, info).to_json().encode())
        if args.qdq:
            # the whole cache and the FP16 list travel in the Q/DQ model: a DLA build before TensorRT 11 takes them
            unwritable = set(cache.unwritable())
            embed(q_model, {n: s for n, s in cache.scales.items() if n not in unwritable}, kept_layers)
            staged[2].write(qdq.serialize(q_model))
        if eq_bytes is not None:
            staged[-1].write(eq_bytes)
        for s in staged[2:]:
            s.finish()
    except BaseException:
        for s in staged:
            s.discard()
        raise
    # Another folder: no journal spans both, so files elsewhere go last, one rename each after the pair.
    commit_together([s for s in staged if s.path.parent == cache_path.parent])
    for s in staged:
        if s.path.parent != cache_path.parent:
            s.commit()
    t_write = time.perf_counter() - t3

    n = images.count
    lines += [
        f"time: load {t_load:.1f} s, "
        + (f"equalize {t_equalize:.1f} s, " if equalized is not None or tried else "")
        + (f"statistics {t_stats:.1f} s ({n / max(t_stats, 1e-9):.0f} images/s), " if translated is None else "")
        + f"check {t_check:.1f} s, write {t_write:.1f} s; peak RSS {_peak_rss_mb():.0f} MB",
        f"cache: {cache_path} ({written.header}, {len(written.scales)} tensors; scales from {method}"
        + ("; stored weights left out, for Model Optimizer" if written is not cache else "")
        + f") + {side_path.name} ({len(kept_layers)} layer(s) in FP16)",
    ]
    if args.cache_algorithm != "EntropyCalibration2":
        lines.append("note: the DLA reads only EntropyCalibration2 caches; keep the default header for DLA builds")
    if args.qdq:
        lines.append(f"Q/DQ model: {args.qdq} ({len(quantized)} layers quantized)")
    if equalized is not None:
        lines.append(f"equalized model: {eq_path} (the FP32 model with rescaled weights: the cache's scales are for it)")
    if kept_layers:
        lines.append(f"kept in FP16 ({len(kept_layers)}): {', '.join(kept_layers)}")
        lines.append(f"  trtexec: --precisionConstraints=obey --layerPrecisions={','.join(f'{k}:fp16' for k in kept_layers)}")
    if not quantized:
        lines.append("note: no layer is left in INT8; an --int8 build of this runs FP16 throughout")
    dla = (
        "add --dla 0 to build for the DLA"
        if args.cache_algorithm == "EntropyCalibration2"
        else "for the DLA, calibrate again with the default header"
    )
    lines.append(f"next, on the Jetson with TensorRT {version} ({dla}):")
    if translated is not None:  # edge-build makes this cache itself for the DLA; the GPU takes the pairs as they are
        lines.append(f"  edge-build {args.model or path} -o {path.stem}.engine")
        lines.append("here too: TensorRT-RTX builds a Q/DQ model as it is (a GPU engine for a desktop GPU)")
    else:
        lines.append(
            f"  {next_step(args, path, asset if equalized is None else None, cache_path, graph, eq_path if equalized else None)}"
        )
        lines += here_step(args, graph)
    emit("\n".join(lines))
    return 0


def _task(cfg: Any, model: Any, graph: Any, spec: Any, path: Path, notes: List[str]) -> Any:
    """The detector whose decisions the check measures: the run config's task.type, or the one the outputs and the
    model's metadata reveal (None for a classifier, whose argmax is its decision, and for outputs no decoder fits
    when the type was left auto: each output is then measured on its own, said in ``notes`` once every check passed)."""
    import numpy as np

    from edge.calib.decisions import TaskDecisions
    from edge.errors import ConfigError
    from edge.lazy import require
    from edge.metadata import from_onnx
    from edge.runtime.engines import TensorInfo
    from edge.runtime.postprocess import create_postprocessor

    if cfg.task.type == "classify":
        return None  # its argmax is its decision: the per-output measure is the right one

    def dtype(name: str) -> Any:  # class ids computed in the graph are int64: read as scores they were one channel
        code = graph.dtypes.get(name)
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(code)) if code else np.dtype(np.float32)

    onnx = require("onnx")
    outputs = [TensorInfo(n, tuple(graph.shape(n) or ()), dtype(n)) for n in graph.outputs]
    try:
        decoder = create_postprocessor(cfg, outputs, spec, from_onnx(str(path), model))  # edge-run's own choice
    except ConfigError:
        if cfg.task.type != "auto":
            raise
        notes.append("task.type auto: the outputs are no detector's edge knows; agreement is measured per output")
        return None
    return None if decoder.head.kind == "classify" else TaskDecisions(decoder.head, decoder, spec)


def _images(args: argparse.Namespace, cfg: Any, model: Any) -> Any:
    from edge.calib import datasets as calib_datasets

    if args.dataset:
        return calib_datasets.dataset(args.dataset, args.max_images)
    import numpy as np

    from edge.graph.model import model_inputs
    from edge.metadata import from_onnx
    from edge.runtime.engines import TensorInfo
    from edge.runtime.engines.model import preprocess_spec

    files = calib_datasets.find_images(args.images, args.max_images)  # the folder's faults need no input size
    inp = model_inputs(model)[0]
    dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in inp.type.tensor_type.shape.dim)
    spec = preprocess_spec(cfg, TensorInfo(inp.name, dims, np.dtype(np.float32)), from_onnx(args.model or "the model", model))
    return calib_datasets.image_folder(args.images, spec, files=files)


def _budget_text(budget: Any) -> str:
    parts = []
    if budget.min_agreement is not None:
        parts.append(f"--min-agreement {budget.min_agreement}")
    if budget.max_drop is not None:
        parts.append(f"--max-drop {budget.max_drop}")
    return " ".join(parts)


def _topk_line(name: str, fp32: Any, int8: Any) -> str:
    if fp32.metric != "top-1":
        return (
            f"mAP@0.5:0.95 on {fp32.images} labelled images from {name} (pycocotools): FP32 {fp32.map:.4f}, INT8 "
            f"{int8.map:.4f} (drop {(fp32.map - int8.map) * 100:.2f} points); mAP@0.5 FP32 {fp32.map50:.4f}, INT8 {int8.map50:.4f}"
        )
    return (
        f"top-1 on {fp32.images} labelled images from {name}: FP32 {fp32.top1:.2%}, INT8 {int8.top1:.2%} "
        f"(drop {(fp32.top1 - int8.top1) * 100:.2f} points); top-5 FP32 {fp32.top5:.2%}, INT8 {int8.top5:.2%}"
    )


def _summary(m: Any, fp32_score: Optional[float]) -> Dict[str, Any]:
    out: Dict[str, Any] = {"agreement": m.agreement, "outputs": [f.to_dict() for f in m.fidelity]}  # lowest of all
    if m.labelled is not None and fp32_score is not None:
        if m.labelled.metric == "top-1":
            out.update(fp32_top1=fp32_score, int8_top1=m.labelled.top1, top1_drop_points=(fp32_score - m.labelled.top1) * 100)
        else:
            out.update(fp32_map=fp32_score, int8_map=m.labelled.map, map_drop_points=(fp32_score - m.labelled.map) * 100)
            out.update(int8_map50=m.labelled.map50)
    return out
