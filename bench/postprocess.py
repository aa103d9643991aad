"""YOLO post-processing on one CPU core, per frame: edge's decoder against Ultralytics' own and OpenCV's NMS.

A YOLOv8 detect head at 640 (``[1, 84, 8400]``: 8400 candidates x 80 classes), at conf 0.25 (what ``yolo predict``
and edge use) and conf 0.001 (what ``yolo val`` uses, nearly every candidate enters NMS), iou 0.7, max_det 300,
class-wise NMS, boxes mapped to a 1280x720 frame letterboxed into the input:

  edge        the ``yolo`` decoder's whole ``__call__`` (as edge-run makes it: heads.choose + heads.build): scores,
              candidate filter, NMS, mapping to the frame, ``Detection`` objects
  ultralytics ``ultralytics.utils.nms.non_max_suppression`` (as ``DetectionPredictor.postprocess`` calls it) then
              ``ultralytics.utils.ops.scale_boxes``, on a torch tensor over the same array
  opencv      the same candidate filter in numpy (best class > conf, at most 30000, xywh), then
              ``cv2.dnn.NMSBoxesBatched`` (class-wise), the first 300 kept, and the same mapping in numpy

The contenders run interleaved (one call of each per round, the order rotating) and each time is the median over its
rounds; a contender slower than ``--budget`` seconds per cell gets fewer rounds (at least 3). ``cand`` is how
many enter NMS, ``kept e/u/o`` how many boxes each returns with an area in the frame (edge drops the others, boxes
wholly in the letterbox padding; Ultralytics and the OpenCV path return them clipped to a line, counted out here
for a like-for-like check). Ratios are edge / other: below 1 edge is faster.

Data, none of it used to tune edge: ``synthetic_raw`` (tests/ultralytics_reference.py: boxes clustered so NMS has
work, scores uniform^4, so nearly every anchor's best class is above 0.25: "dense") for several seeds; the same with
95% of the anchors' scores scaled by 0.2 ("sparse": about 400 candidates above 0.25, as a real frame with a few
objects has), and, where the pinned asset ``yolox-ddddocr`` is in the edge cache, real
outputs of real weights: the YOLOX detector (MIT, 416x416, ONE class) as a v8-layout head
(``tests/yolox_models.py``, ``[1, 5, 3549]``) on real frames (reported separately; far fewer candidates).

Without torchvision, Ultralytics' NMS is its pure-torch ``TorchNMS`` (``utils/nms.py``), which visits every
candidate (no stop at max_det): slow at conf 0.001. With torchvision importable, this script imports it first, as a
normal Ultralytics install has it, so ``torchvision.ops.nms`` is used; the header line says which.

Threads: OMP/MKL/OpenBLAS/numexpr set to 1 before numpy or torch load, ``torch.set_num_threads(1)``,
``cv2.setNumThreads(1)``: one core. An Orin's Cortex-A78AE core is several times slower than this machine's x86
core; read the ratios, not the milliseconds, for a Jetson.

Run it with a Python that has edge, numpy, OpenCV, torch and ultralytics (test-only, AGPL; edge never imports it):

    /tmp/ultra-venv/bin/python bench/postprocess.py            # the reference venv (tests/ultralytics_reference.py)
    .venv/bin/python bench/postprocess.py --iters 50           # edge's venv once torch + ultralytics are installed:
        # pip install torch==2.13.0 && pip install --no-deps ultralytics==8.4.190

Options: ``--iters N`` rounds (default 30), ``--seeds 0 1 2``, ``--budget S`` seconds per contender and cell
(default 20), ``--no-real`` to skip the YOLOX outputs.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable, Dict, List, Tuple  # noqa: E402

try:
    import numpy as np
except ImportError as _exc:
    print(f"bench/postprocess.py: numpy is not installed ({_exc})", file=sys.stderr)
    sys.exit(2)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MAX_NMS, MAX_DET, IOU = 30000, 300, 0.7
FRAME_WH = (1280, 720)


def need(module: str, hint: str) -> None:
    if importlib.util.find_spec(module) is None:
        print(f"bench/postprocess.py: {module} is not installed ({hint})", file=sys.stderr)
        sys.exit(2)


def edge_decoder(raw: np.ndarray, conf: float, size: Tuple[int, int], classes: int):
    """edge's decoder for ``raw`` as edge-run builds it (task.type auto, labels from the class count)."""
    from edge.config import TaskConfig
    from edge.runtime.engines import TensorInfo
    from edge.runtime.engines.preprocess import PreprocessSpec
    from edge.runtime.postprocess import heads, resolved_task

    spec = PreprocessSpec(*size)
    labels = [f"c{i}" for i in range(classes)]
    infos = [TensorInfo("output0", raw.shape, raw.dtype)]
    task = TaskConfig(score_threshold=conf, iou_threshold=IOU, max_detections=MAX_DET)
    head = heads.choose(task, infos, spec, labels)
    return heads.build(head, resolved_task(task, head.kind), infos, spec, labels)


def contenders(raw: np.ndarray, conf: float, size: Tuple[int, int], tf, u) -> Dict[str, Callable[[], int]]:
    """name -> a call that post-processes ``raw`` for one frame and returns how many detections it kept."""
    import cv2

    torch, nms, ops = u["torch"], u["nms"], u["ops"]
    classes = raw.shape[1] - 4
    post = edge_decoder(raw, conf, size, classes)
    out = {"output0": raw}
    input_hw = (size[1], size[0])
    frame_hw = (tf.frame_height, tf.frame_width)

    def edge() -> int:
        return len(post(out, tf).detections)

    def ultralytics() -> int:
        pred = torch.from_numpy(raw)  # what the ONNX backend hands the predictor: a tensor over the output
        kept = nms.non_max_suppression(pred, conf, IOU, None, False, max_det=MAX_DET, nc=0, end2end=False)[0]
        b = ops.scale_boxes(input_hw, kept[:, :4], frame_hw)
        return int(((b[:, 2] > b[:, 0]) & (b[:, 3] > b[:, 1])).sum())  # those with an area in the frame, as edge

    def opencv() -> int:
        p = raw[0]
        scores = p[4:].max(0) if classes > 1 else p[4]
        idx = np.flatnonzero(scores > conf)
        if idx.size > MAX_NMS:
            idx = idx[np.argpartition(-scores[idx], MAX_NMS - 1)[:MAX_NMS]]
        cls = p[4:, idx].argmax(0) if classes > 1 else np.zeros(idx.size, np.int64)
        xywh = p[:4, idx].T.astype(np.float64)
        xywh[:, :2] -= xywh[:, 2:] / 2  # centre -> top-left, as cv2 Rect2d wants
        keep = cv2.dnn.NMSBoxesBatched(xywh, scores[idx], cls.astype(np.int32), conf, IOU)
        keep = np.asarray(keep, np.int64).reshape(-1)[:MAX_DET]
        boxes = xywh[keep]
        boxes[:, 2:] += boxes[:, :2]
        b = tf.to_frame(boxes.astype(np.float32))
        return int(((b[:, 2] > b[:, 0]) & (b[:, 3] > b[:, 1])).sum())

    return {"edge": edge, "ultralytics": ultralytics, "opencv": opencv}


def survivors(raw: np.ndarray, conf: float) -> int:
    scores = raw[0, 4:].max(0)
    return int(min(np.count_nonzero(scores > conf), MAX_NMS))


def timed(
    calls: Dict[str, Callable[[], int]], iters: int, budget: float
) -> Tuple[Dict[str, float], Dict[str, int], Dict[str, int]]:
    """Median ms per call of each contender over interleaved rounds; the kept counts; the rounds each got."""
    kept, rounds = {}, {}
    for name, call in calls.items():  # warm-up, and how many rounds fit the budget
        t = time.perf_counter()
        kept[name] = call()
        first = time.perf_counter() - t
        rounds[name] = int(max(3, min(iters, budget / max(first, 1e-9))))
    times: Dict[str, List[float]] = {n: [] for n in calls}
    names = list(calls)
    for r in range(max(rounds.values())):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            if r < rounds[name]:
                t = time.perf_counter()
                calls[name]()
                times[name].append(time.perf_counter() - t)
    return {n: statistics.median(v) * 1000 for n, v in times.items()}, kept, rounds


def yolox_outputs() -> List[Tuple[str, np.ndarray, object]]:
    """(frame name, v8-layout output [1, 5, 3549], Transform) of the real YOLOX weights on real frames, or []."""
    from edge import assets

    try:
        model_path = assets.resolve("yolox-ddddocr", quiet=True)
        frames = {"notes": assets.resolve("notes", quiet=True), "messi": assets.resolve("messi", quiet=True)}
        clip = assets.resolve("megamind", quiet=True)
    except Exception as exc:  # not fetched and no network: the real rows are optional
        print(f"(real YOLOX outputs skipped: {exc})")
        return []
    import cv2
    import onnx
    import onnxruntime as ort

    from edge.runtime.engines.preprocess import Preprocessor, PreprocessSpec
    from tests.yolox_models import build_variant

    images = {name: cv2.imread(str(p)) for name, p in frames.items()}
    images["notes-x3"] = np.ascontiguousarray(np.vstack([images["notes"]] * 3))
    cap = cv2.VideoCapture(str(clip))
    for i in range(85):
        ok, frame = cap.read()
        if ok and i == 84:
            images["megamind-84"] = frame
    cap.release()
    with tempfile.TemporaryDirectory() as tmp:
        path = build_variant(onnx.load(str(model_path)), "v8", Path(tmp) / "yolox_v8.onnx")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    pre = Preprocessor(PreprocessSpec(416, 416, color="bgr", scale=1.0, pad_value=114))  # YOLOX: BGR 0..255
    out = []
    for name, image in images.items():
        x, tf = pre(image)
        out.append((name, session.run(None, {"images": x})[0], tf))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--budget", type=float, default=20.0, help="seconds per contender and cell (fewer rounds if slower)")
    ap.add_argument("--no-real", action="store_true", help="skip the real YOLOX outputs")
    args = ap.parse_args(argv)

    need("cv2", "pip install opencv-python-headless")
    need("torch", "pip install torch==2.13.0")
    need("ultralytics", "pip install --no-deps ultralytics==8.4.190 (test-only, AGPL)")
    if importlib.util.find_spec("torchvision") is not None:
        import torchvision  # noqa: F401  (Ultralytics uses torchvision.ops.nms when it is imported)
    import cv2

    import tests.ultralytics_reference as R
    from edge.runtime.engines.preprocess import PreprocessSpec, plan_resize

    try:
        u = R._ultralytics()
    except BaseException as exc:  # the reference skips (pytest's Skipped, a BaseException) when an import fails
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        print(f"bench/postprocess.py: Ultralytics does not load here: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    torch = u["torch"]
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    nms_kind = "torchvision.ops.nms" if "torchvision" in sys.modules else "TorchNMS (pure torch, no torchvision)"
    print(
        f"one core: {platform.processor() or platform.machine()}, Python {platform.python_version()}, numpy {np.__version__}, "
        f"torch {torch.__version__} ({torch.get_num_threads()} thread), ultralytics {u['version']} NMS {nms_kind}, "
        f"OpenCV {cv2.__version__}; median of up to {args.iters} interleaved rounds; frame {FRAME_WH[0]}x{FRAME_WH[1]}"
    )
    header = (
        f"{'data':<22}{'conf':>6}{'cand':>7}{'kept e/u/o':>14}{'edge ms':>9}{'ultra ms':>10}{'cv2 ms':>8}"
        f"{'edge/ultra':>11}{'edge/cv2':>9}"
    )

    def row(label: str, raw: np.ndarray, conf: float, size: Tuple[int, int], tf) -> None:
        ms, kept, rounds = timed(contenders(raw, conf, size, tf, u), args.iters, args.budget)
        few = (
            ""
            if min(rounds.values()) == args.iters
            else f"  (rounds {rounds['edge']}/{rounds['ultralytics']}/{rounds['opencv']})"
        )
        print(
            f"{label:<22}{conf:>6}{survivors(raw, conf):>7}{'/'.join(str(kept[n]) for n in ('edge', 'ultralytics', 'opencv')):>14}"
            f"{ms['edge']:>9.2f}{ms['ultralytics']:>10.2f}{ms['opencv']:>8.2f}"
            f"{ms['edge'] / ms['ultralytics']:>11.2f}{ms['edge'] / ms['opencv']:>9.2f}{few}",
            flush=True,
        )

    print(
        "\nYOLOv8 head 640, 8400 candidates x 80 classes, synthetic_raw: dense (scores uniform^4) and sparse (5% of anchors confident)"
    )
    print(header)
    tf = plan_resize(PreprocessSpec(640, 640), *FRAME_WH)[2]
    for conf in (0.25, 0.001):
        for kind in ("dense", "sparse"):
            for seed in args.seeds:
                raw = R.synthetic_raw(80, 8400, 640, seed=seed)
                if kind == "sparse":
                    quiet = np.random.default_rng(seed).random(raw.shape[2]) < 0.95
                    raw[0, 4:, quiet] *= np.float32(0.2)
                row(f"{kind} seed {seed}", raw, conf, (640, 640), tf)

    if not args.no_real:
        real = yolox_outputs()
        if real:
            print("\nreal outputs: YOLOX (ddddocr common_det, MIT) as a v8-layout head, 416, 3549 candidates x 1 class")
            print(header)
            for conf in (0.25, 0.001):
                for name, raw, ftf in real:
                    row(f"yolox {name}", raw, conf, (416, 416), ftf)
    return 0


if __name__ == "__main__":
    sys.exit(main())
