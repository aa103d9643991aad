"""Ultralytics' own YOLO post-processing, run on raw numpy head outputs, as a reference for edge's decoders.

TEST-ONLY. Ultralytics is AGPL-3.0: this module *calls* the installed ``ultralytics`` package (a test-only dependency)
and never copies its code; nothing under ``edge/`` may import it or this module. Every import of ultralytics / torch
happens lazily inside the functions, through :func:`_ultralytics`, which skips the calling test (pytest ``Skipped``)
with a reason when they are missing.

Written against ultralytics 8.4.190 (torch 2.13.0+cpu, no torchvision). Line numbers below are of that release's
files under ``site-packages/ultralytics/``.

Lightest environment that runs everything here (1.3 GB, torch 754 MB of it; about 35 s to install)::

    python -m venv /tmp/ultra-venv
    /tmp/ultra-venv/bin/pip install /opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
    /tmp/ultra-venv/bin/pip install --no-deps ultralytics==8.4.190
    /tmp/ultra-venv/bin/pip install numpy opencv-python-headless pyyaml pillow onnx onnxruntime pytest

torchvision is not needed, with one shim: ``utils/__init__.py:89`` reads ``importlib.metadata.version("torchvision")``
at import time and raises ``PackageNotFoundError`` when the distribution is absent, so :func:`_ultralytics` answers
that one lookup with the release that pairs with the installed torch while it imports the package. Without
torchvision in ``sys.modules``, ``utils/nms.py:99`` picks ``TorchNMS.nms`` (``utils/nms.py:244``, documented there as
matching torchvision exactly) instead of ``torchvision.ops.nms`` (``utils/nms.py:154-157``). The full predictor
(``AutoBackend.warmup``, ``nn/autobackend.py:376-377``; ``engine/predictor.py:314`` for streams) and ``export(nms=True)``
(``NMSModel.forward``, ``engine/exporter.py:1992``) do import torchvision; this module uses neither.
matplotlib, polars, psutil, requests, nvidia-ml-py, ultralytics-thop and ultralytics-platform are declared
dependencies that none of these paths import.

Environment set before the import (only where unset): ``YOLO_OFFLINE=1`` (``is_online`` returns False without a DNS
probe, ``utils/__init__.py:877-892``), ``YOLO_AUTOINSTALL=0`` (no pip runs from ``check_requirements``),
``ULTRALYTICS_SKIP_REQUIREMENTS_CHECKS=1`` (``utils/checks.py:561``), ``YOLO_VERBOSE=0``, and ``YOLO_CONFIG_DIR`` to a
temporary folder so ``settings.json`` is not written under ``~/.config`` (``utils/__init__.py:982``).

What Ultralytics' predictor does, and what the functions here reproduce (``models/yolo/detect/predict.py``):

* Non-end2end heads: ``nms.non_max_suppression(preds, conf, iou, classes, agnostic_nms, max_det=max_det,
  nc=0 for detect else len(names), end2end=model.end2end)`` (``DetectionPredictor.postprocess``). Candidates need
  ``max class score > conf`` (strict), best class only, xywh -> xyxy, class-aware NMS by offsetting boxes by
  ``class * 7680``, suppression of IoU ``> iou`` (kept when equal), then the first ``max_det`` of the score-sorted keep
  list. Equal scores have no defined order (``argsort`` is not stable), so avoid exact ties in comparisons. Quirk: a
  prediction whose LAST axis is 6 is taken as end2end (``utils/nms.py:71``), so a hand-built ``[1, 4+C, 6]`` raw
  (exactly six anchors) is misread; :func:`detect` refuses it.
* End2end heads (YOLOv10, YOLO26, ``export(nms=False)``) and ``export(nms=True)`` graphs: ``[1, K, 6 + extra]`` rows,
  only ``score > conf`` and the first ``max_det`` rows in the order the model wrote them (``utils/nms.py:71-80``):
  no NMS, no sorting. The head itself emits rows sorted by descending score (top-k in ``Detect.get_topk_index``,
  ``nn/modules/head.py:266``), and the same anchor can appear once per class.
* Then ``ops.scale_boxes(input_hw, boxes, frame_shape)`` maps to the frame AND clips to it (``utils/ops.py:126``); the
  functions here stop before that (input pixels, unclipped) and :func:`scale_boxes` / :func:`scale_coords` do that
  step separately.
* Segment (``models/yolo/segment/predict.py:99-111``): default ``retina_masks=False`` -> ``ops.process_mask(proto,
  coeffs, boxes_in_input_px, input_hw, upsample=True)``: mask logits at proto resolution, bilinear upsample to the
  input size, ``> 0``, zeroed outside the (unclipped, input-pixel) box; then detections whose mask is all zero are
  DROPPED. ``retina_masks=True`` -> boxes first scaled to the frame, then ``ops.process_mask_native`` (letterbox
  padding cropped from the logits, upsampled straight to the frame size, ``> 0``, cropped to the frame box).
* Pose (``models/yolo/pose/predict.py:60-65``): keypoints are ``pred[:, 6:]`` reshaped to ``kpt_shape`` in input
  pixels, mapped by ``ops.scale_coords`` (clipped to the frame); visibility is passed through untouched.
* Preprocess: ``LetterBox(imgsz, auto=False for a static ONNX/engine, stride)`` (``data/augment.py:1675``):
  ``r = min(h_in/h, w_in/w)``, resized size ``max(round(w*r), 1) x max(round(h*r), 1)`` (cv2.INTER_LINEAR, skipped
  when the size already matches), padding split as ``top = round(dh/2 - 0.1)``, ``bottom = round(dh/2 + 0.1)`` (same
  for left/right; Python's round, half to even), pad value 114 on every channel; then BGR->RGB, HWC->CHW,
  ``float32 / 255`` (``engine/predictor.py:194-202``). ``scale_boxes`` recomputes the resized size the same way and
  uses a separate gain per axis (``new_w / w``, ``new_h / h``), not ``r``.

``.engine`` files written by ``yolo export format=engine`` (writer ``onnx2engine``, ``utils/export/engine.py:475-480``;
reader ``BaseBackend.engine_header``, ``nn/backends/base.py:133-148``, used by ``TensorRTBackend``,
``nn/backends/tensorrt.py:54-61``)::

    bytes 0..3      n = len(json_text), int32 little-endian (written signed, read back unsigned)
    bytes 4..4+n    json.dumps(metadata): ASCII (ensure_ascii default), so characters == bytes
    bytes 4+n..     the serialized TensorRT engine, untouched

The reader accepts the header only if ``0 < n <= file_size - 4`` and the n bytes parse as JSON; otherwise the whole
file is the engine (offset 0, empty metadata). A ``"dla"`` key is read before deserializing
(``nn/backends/tensorrt.py:58``). The JSON is the exporter's metadata dict (``engine/exporter.py:993-1015``), with
JSON's usual changes: ``names`` keys become strings (``{"0": "person", ...}``), tuples become lists.

Metadata keys (same dict for engine JSON and ONNX ``metadata_props``; ``engine/exporter.py:993-1015``):
``description, author ("Ultralytics"), date (ISO time), version (ultralytics version), license, docs, stride (int),
task ("detect"|"segment"|"pose"|...), head (head class name: "Detect", "Segment", "Pose", "v10Detect", ...),
batch (int), imgsz ([h, w]), names ({int: str}), args (export args relevant to the format, e.g. {'batch': 1,
'dynamic': False, 'quantize': None, 'opset': 17, 'simplify': False, 'nms': None} for onnx), channels (int),
end2end (bool)``, plus ``dla`` (engine on DLA) and, for pose, ``kpt_shape`` ([17, 3]) and ``kpt_names`` when the
model has them. ONNX stores every value as ``str(value)`` (``engine/exporter.py:1235-1238``): ``names`` is a Python
dict literal with int keys (``"{0: 'class0', ...}"``), ``imgsz`` ``"[160, 160]"``, ``end2end`` ``"True"/"False"``,
``args`` a Python dict literal with ``None``. The reader (``BaseBackend.apply_metadata``, ``nn/backends/base.py:195-223``)
``ast.literal_eval``s imgsz/names/kpt_shape/kpt_names/args/end2end, ``int``s stride/batch/channels, and sets
``end2end = end2end or args['nms']``. ONNX output names: ``output0`` (and ``output1`` = protos for segment);
input ``images`` (``engine/exporter.py:1162``, ``1205``).

Export and end2end in this release: ``export(nms=None)`` (the default) exports the one-to-many head even for YOLOv10 /
YOLO26 (``[1, 4+C(+extra), N]``, needs NMS); ``nms=False`` selects the NMS-free one-to-one head (``[1, 300, 6(+extra)]``,
``engine/exporter.py:730-733``); ``nms=True`` wraps a non-end2end model in ``NMSModel`` (needs torchvision).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np

_ENV_DEFAULTS = {
    "YOLO_OFFLINE": "1",
    "YOLO_AUTOINSTALL": "0",
    "ULTRALYTICS_SKIP_REQUIREMENTS_CHECKS": "1",
    "YOLO_VERBOSE": "0",
}

_LOADED: Dict[str, Any] = {}


def _skip_missing(module: str, reason: str):
    """Import ``module`` or skip the calling test (as ``pytest.importorskip`` does) with ``reason`` and the error."""
    import importlib

    import pytest

    try:
        return importlib.import_module(module)
    except ImportError as e:  # PackageNotFoundError (missing distribution metadata) is an ImportError too
        pytest.skip(f"{reason}: {e!r}")


def _paired_torchvision_version(torch_version: str) -> str:
    """The torchvision release that goes with a torch release (torch 2.N pairs with torchvision 0.(N+15))."""
    major, minor = (int(p) for p in torch_version.split("+")[0].split(".")[:2])
    return f"0.{minor + 15}.0" if major == 2 else f"0.{minor + 1}.0"


@contextmanager
def _torchvision_metadata_stand_in(torch_version: str):
    """While importing ultralytics, answer ``importlib.metadata.version('torchvision')`` if it is not installed.

    Ultralytics only reads the version string at import time (``utils/__init__.py:89``); nothing here imports
    torchvision itself, so its NMS falls back to Ultralytics' pure-torch ``TorchNMS``.
    """
    import importlib.metadata as md

    try:
        md.version("torchvision")
        yield
        return
    except md.PackageNotFoundError:
        pass
    real = md.version

    def version(name):
        if name == "torchvision":
            return _paired_torchvision_version(torch_version)
        return real(name)

    md.version = version
    try:
        yield
    finally:
        md.version = real


@contextmanager
def _environment_kept():
    """Undo what importing ultralytics writes into os.environ (OMP_NUM_THREADS=1, an LD_LIBRARY_PATH into cv2's
    wheel, log levels), which every later test's child processes would inherit.

    torch itself stays in this process: the hostile tests fork edge from pytest under an address-space cap, and a
    fork of a process holding torch ran out of it (edge calib hung, seen when the RT-DETR tests sorted before
    tests/test_hostile_*). Test files that import torch are therefore named test_ultralytics*, sorting after them."""
    kept = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(kept)


def _ultralytics():
    """Import torch and the ultralytics modules used here, or skip the calling test with the reason.

    Returns a dict with ``torch``, ``nms`` (ultralytics.utils.nms), ``ops`` (ultralytics.utils.ops), ``LetterBox``,
    ``YOLO``, ``BaseBackend`` and ``version``. Sets the offline/quiet environment (only variables that are unset).
    """
    if _LOADED:
        return _LOADED
    for k, v in _ENV_DEFAULTS.items():
        os.environ.setdefault(k, v)
    if "YOLO_CONFIG_DIR" not in os.environ:
        cfg = Path(tempfile.gettempdir()) / f"edge-ultralytics-config-{os.getuid() if hasattr(os, 'getuid') else 0}"
        cfg.mkdir(parents=True, exist_ok=True)
        os.environ["YOLO_CONFIG_DIR"] = str(cfg)
    torch = _skip_missing("torch", "the Ultralytics reference needs torch (test-only dependency)")
    if "ultralytics" not in sys.modules:
        import importlib.util

        if importlib.util.find_spec("ultralytics") is None:
            _skip_missing("ultralytics", "the Ultralytics reference needs the ultralytics package (test-only, AGPL)")
        with _torchvision_metadata_stand_in(torch.__version__), _environment_kept():
            ultralytics = _skip_missing("ultralytics", "ultralytics failed to import")
    else:
        ultralytics = sys.modules["ultralytics"]
    from ultralytics import YOLO
    from ultralytics.data.augment import LetterBox
    from ultralytics.nn.backends.base import BaseBackend
    from ultralytics.utils import nms, ops

    _LOADED.update(
        torch=torch,
        nms=nms,
        ops=ops,
        LetterBox=LetterBox,
        YOLO=YOLO,
        BaseBackend=BaseBackend,
        version=ultralytics.__version__,
    )
    return _LOADED


def _tensor(a: np.ndarray):
    """A float32 torch tensor holding a private copy of ``a`` (Ultralytics edits some inputs in place)."""
    torch = _ultralytics()["torch"]
    return torch.from_numpy(np.array(a, dtype=np.float32, copy=True))


def _check_bcn(raw: np.ndarray, what: str) -> None:
    """Refuse anything but a batch-1 ``[1, C, N]`` head output, and N == 6 (see the module docstring)."""
    if raw.ndim != 3 or raw.shape[0] != 1:
        raise ValueError(f"{what}: expected a [1, channels, anchors] head output, got {raw.shape}")
    if raw.shape[-1] == 6:
        raise ValueError(f"{what}: {raw.shape} has 6 anchors; Ultralytics' NMS would read it as end2end rows")


def _nms(raw: np.ndarray, conf: float, iou: float, max_det: int, agnostic: bool, nc: int, classes=None):
    """``non_max_suppression`` as the predictor calls it (batch 1): the torch ``[K, 6 + extra]`` rows of image 0."""
    u = _ultralytics()
    out = u["nms"].non_max_suppression(_tensor(raw), conf, iou, classes, agnostic, max_det=max_det, nc=nc, end2end=False)
    return out[0]


def detect(
    raw: np.ndarray, conf: float, iou: float, max_det: int, agnostic: bool = False, classes: Optional[Sequence[int]] = None
) -> np.ndarray:
    """Ultralytics' NMS on a v8/v11 (or v10/YOLO26 one-to-many) detect head output.

    ``raw``: ``[1, 4+C, N]``, rows cx, cy, w, h in input pixels then C class scores (already sigmoided, as the ONNX
    export gives them). Returns float32 ``[K, 6]``: x1, y1, x2, y2, score, class, in input pixels (not clipped, not
    mapped to the frame), score-descending, as ``DetectionPredictor.postprocess`` gets them before ``scale_boxes``.
    """
    _check_bcn(raw, "detect")
    return _nms(raw, conf, iou, max_det, agnostic, nc=0, classes=classes).numpy()


def segment(
    raw: np.ndarray,
    protos: np.ndarray,
    conf: float,
    iou: float,
    max_det: int,
    nm: int = 32,
    input_hw: Optional[Tuple[int, int]] = None,
    agnostic: bool = False,
) -> Tuple[np.ndarray, np.ndarray]:
    """Ultralytics' segment post-processing (default ``retina_masks=False``) at input resolution.

    ``raw``: ``[1, 4+C+nm, N]`` (output0), ``protos``: ``[1, nm, H/4, W/4]`` (output1); ``input_hw`` defaults to 4x
    the proto size. Returns ``(boxes [K, 6] float32 in input pixels, masks [K, H, W] uint8 0/1)``. Uses
    ``ops.process_mask(..., upsample=True)`` because that is what the predictor calls unless ``retina_masks=True``:
    coefficient @ protos, bilinear upsample to the input size, threshold at 0, crop to the box. Detections whose mask
    ends up empty are dropped, as the predictor does (``segment/predict.py:107-110``).
    """
    torch, ops, input_hw, pred = _seg_candidates("segment", raw, protos, conf, iou, max_det, nm, input_hw, agnostic)
    if pred.shape[0] == 0:
        return np.zeros((0, 6), np.float32), np.zeros((0, *input_hw), np.uint8)
    masks = ops.process_mask(_tensor(protos)[0], pred[:, 6:], pred[:, :4], tuple(input_hw), upsample=True)
    keep = masks.amax((-2, -1)) > 0
    pred, masks = pred[keep], masks[keep]
    return pred[:, :6].numpy(), masks.to(torch.uint8).numpy()


def _seg_candidates(what, raw, protos, conf, iou, max_det, nm, input_hw, agnostic):
    """(torch, ops, input size, Ultralytics' NMS rows with their mask coefficients) shared by the two -seg paths."""
    _check_bcn(raw, what)
    if input_hw is None:
        input_hw = (protos.shape[-2] * 4, protos.shape[-1] * 4)
    pred = _nms(raw, conf, iou, max_det, agnostic, nc=raw.shape[1] - 4 - nm)
    return _ultralytics()["torch"], _ultralytics()["ops"], input_hw, pred


def segment_native(
    raw: np.ndarray,
    protos: np.ndarray,
    conf: float,
    iou: float,
    max_det: int,
    frame_hw: Tuple[int, int],
    nm: int = 32,
    input_hw: Optional[Tuple[int, int]] = None,
    agnostic: bool = False,
) -> Tuple[np.ndarray, np.ndarray]:
    """The ``retina_masks=True`` path: boxes mapped to the frame, masks made at frame resolution.

    Same inputs as :func:`segment` plus ``frame_hw`` (the letterboxed frame's height, width). Boxes go through
    ``ops.scale_boxes`` (so they are clipped to the frame), then ``ops.process_mask_native`` crops the letterbox padding
    from the mask logits, upsamples to ``frame_hw`` and crops to the frame box. Returns ``(boxes [K, 6] in frame
    pixels, masks [K, frame_h, frame_w] uint8)``; empty masks are dropped as in :func:`segment`.
    """
    torch, ops, input_hw, pred = _seg_candidates("segment_native", raw, protos, conf, iou, max_det, nm, input_hw, agnostic)
    if pred.shape[0] == 0:
        return np.zeros((0, 6), np.float32), np.zeros((0, *frame_hw), np.uint8)
    pred[:, :4] = ops.scale_boxes(tuple(input_hw), pred[:, :4], tuple(frame_hw))
    masks = ops.process_mask_native(_tensor(protos)[0], pred[:, 6:], pred[:, :4], tuple(frame_hw))
    keep = masks.amax((-2, -1)) > 0
    pred, masks = pred[keep], masks[keep]
    return pred[:, :6].numpy(), masks.to(torch.uint8).numpy()


def pose(
    raw: np.ndarray, conf: float, iou: float, max_det: int, kpt_shape: Tuple[int, int] = (17, 3), agnostic: bool = False
) -> Tuple[np.ndarray, np.ndarray]:
    """Ultralytics' pose post-processing in input pixels.

    ``raw``: ``[1, 4+C+K*D, N]`` (YOLOv8-pose: ``[1, 4+1+51, N]``), keypoints already decoded to input pixels and
    visibility sigmoided by the exported head. Returns ``(boxes [M, 6], keypoints [M, K, D])`` (x, y[, visibility]),
    in input pixels, not clipped: what ``PosePredictor.construct_result`` holds before ``ops.scale_coords``
    (use :func:`scale_coords` for that step, which also clips).
    """
    _check_bcn(raw, "pose")
    k, d = kpt_shape
    nc = raw.shape[1] - 4 - k * d
    pred = _nms(raw, conf, iou, max_det, agnostic, nc=nc)
    return pred[:, :6].numpy(), pred[:, 6:].reshape(pred.shape[0], k, d).numpy()


def end2end(raw: np.ndarray, conf: float, max_det: int, classes: Optional[Sequence[int]] = None) -> np.ndarray:
    """What Ultralytics does with an end2end / embedded-NMS output ``[1, K, 6(+extra)]`` (x1, y1, x2, y2, score, class).

    ``non_max_suppression(..., end2end=True)``: rows with ``score > conf`` (strict), optionally of ``classes``, first
    ``max_det`` of them in the model's order. No NMS and no re-sorting. Returns float32 ``[M, 6(+extra)]`` in input
    pixels. (For end2end seg/pose the extra columns are mask coefficients / keypoints, decoded as in segment/pose.)
    """
    if raw.ndim != 3 or raw.shape[0] != 1 or raw.shape[-1] < 6:
        raise ValueError(f"end2end: expected [1, K, 6+extra], got {raw.shape}")
    u = _ultralytics()
    out = u["nms"].non_max_suppression(_tensor(raw), conf, 0.7, classes, False, max_det=max_det, end2end=True)
    return out[0].numpy()


def rtdetr(rows: np.ndarray, frame_hw: Tuple[int, int], conf: float, max_det: int) -> np.ndarray:
    """Ultralytics' ``RTDETRPredictor.postprocess`` (models/rtdetr/predict.py) on an RT-DETR export's ``[1, Q, 6]``
    output, for a frame of ``frame_hw``: rows x1, y1, x2, y2, score, class in frame pixels, in its order."""
    from types import SimpleNamespace

    _ultralytics()
    from ultralytics.models.rtdetr.predict import RTDETRPredictor

    if rows.ndim != 3 or rows.shape[0] != 1 or rows.shape[2] != 6:
        raise ValueError(f"rtdetr: expected a [1, queries, 6] output, got {rows.shape}")
    me = SimpleNamespace(
        args=SimpleNamespace(conf=conf, classes=None, max_det=max_det),
        batch=[["frame.jpg"]],
        model=SimpleNamespace(names={i: str(i) for i in range(1000)}),
    )
    frame = np.zeros((*frame_hw, 3), np.uint8)
    (result,) = RTDETRPredictor.postprocess(me, _tensor(rows), None, [frame])
    return result.boxes.data.numpy().astype(np.float64)


def synthetic_raw(nc: int = 80, n: int = 2100, imgsz: int = 320, extra: int = 0, clusters: int = 6, seed: int = 0) -> np.ndarray:
    """A plausible ``[1, 4+nc+extra, n]`` float32 head output for decoder comparisons (own code, no ultralytics).

    Random-weight exports are useless for numeric checks (every class score is the same ~1.6e-4 from the head's bias
    initialisation, boxes are huge), so this makes boxes jittered around ``clusters`` centres (NMS has overlaps to
    resolve), distinct uniform scores (no ties, whose order neither side defines) and ``extra`` normal channels (mask
    coefficients; for pose, overwrite them with keypoints). Boxes are cx, cy, w, h in input pixels.
    """
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0.1 * imgsz, 0.9 * imgsz, (clusters, 2))
    sizes = rng.uniform(0.05 * imgsz, 0.5 * imgsz, (clusters, 2))
    pick = rng.integers(0, clusters, n)
    xy = centres[pick] + rng.normal(0, 0.03 * imgsz, (n, 2))
    wh = sizes[pick] * rng.uniform(0.8, 1.25, (n, 2))
    scores = rng.uniform(0, 1, (n, nc)) ** 4  # most low, a few high
    cols = [xy, wh, scores]
    if extra:
        cols.append(rng.normal(0, 1, (n, extra)))
    return np.concatenate(cols, 1).T[None].astype(np.float32)


def letterbox(frame_bgr: np.ndarray, imgsz: Union[int, Tuple[int, int]], stride: int = 32, auto: bool = False) -> np.ndarray:
    """Ultralytics' ``LetterBox`` (pad 114, cv2.INTER_LINEAR, centred) on a BGR uint8 frame; returns the HWC image.

    ``imgsz``: int (square) or (h, w). ``auto=True`` is the minimum-rectangle mode the predictor only uses for
    PyTorch / dynamic models; static ONNX / engine inputs get ``auto=False``.
    """
    lb = _ultralytics()["LetterBox"](imgsz, auto=auto, stride=stride)
    return lb(image=np.ascontiguousarray(frame_bgr))


def preprocess(frame_bgr: np.ndarray, imgsz: Union[int, Tuple[int, int]], stride: int = 32) -> np.ndarray:
    """The predictor's input tensor ``[1, 3, H, W]`` float32 RGB in [0, 1]: :func:`letterbox` then the same steps as
    ``BasePredictor.preprocess`` (BGR->RGB, HWC->CHW, /255 in float32), redone in numpy."""
    img = letterbox(frame_bgr, imgsz, stride=stride, auto=False)
    return (img[..., ::-1].transpose(2, 0, 1)[None].astype(np.float32) / np.float32(255)).astype(np.float32)


def scale_boxes(
    boxes: np.ndarray, input_hw: Tuple[int, int], frame_hw: Tuple[int, int], ratio_pad=None, padding: bool = True
) -> np.ndarray:
    """``ultralytics.utils.ops.scale_boxes``: xyxy boxes from letterboxed-input pixels to frame pixels, CLIPPED to the
    frame (pass the first 4 columns of :func:`detect`). Works on a torch copy, as the predictor does."""
    ops = _ultralytics()["ops"]
    b = _tensor(np.asarray(boxes)[..., :4])
    return ops.scale_boxes(tuple(input_hw), b, tuple(frame_hw), ratio_pad=ratio_pad, padding=padding).numpy()


def scale_coords(coords: np.ndarray, input_hw: Tuple[int, int], frame_hw: Tuple[int, int]) -> np.ndarray:
    """``ultralytics.utils.ops.scale_coords``: keypoints ``[..., K, D]`` (x, y first) from input to frame pixels,
    clipped to the frame; other channels (visibility) untouched."""
    ops = _ultralytics()["ops"]
    return ops.scale_coords(tuple(input_hw), _tensor(coords), tuple(frame_hw)).numpy()


def engine_header(path: Union[str, Path]) -> Tuple[int, dict]:
    """Ultralytics' own reader of an ``.engine`` file's metadata header: ``(engine byte offset, metadata dict)``,
    ``(0, {})`` when there is none (``nn/backends/base.py:133``)."""
    return _ultralytics()["BaseBackend"].engine_header(path)


def write_engine_with_header(path: Union[str, Path], metadata: dict, engine_bytes: bytes) -> Path:
    """Write a file in the layout ``yolo export format=engine`` produces (see the module docstring), for tests of
    edge's reader without TensorRT: int32 LE length of the JSON text, the JSON, then ``engine_bytes``. Own code, no
    ultralytics needed."""
    text = json.dumps(metadata)
    p = Path(path)
    p.write_bytes(len(text).to_bytes(4, "little", signed=True) + text.encode() + bytes(engine_bytes))
    return p


def onnx_metadata(path: Union[str, Path]) -> Dict[str, str]:
    """The ONNX file's ``metadata_props`` as strings (what Ultralytics wrote), read with ``onnx``."""
    onnx = _skip_missing("onnx", "reading ONNX metadata needs onnx")
    m = onnx.load(str(path), load_external_data=False)
    return {p.key: p.value for p in m.metadata_props}


@contextmanager
def _cwd(path: Path):
    """Run the block with ``path`` as the working directory (``contextlib.chdir`` needs Python 3.11)."""
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def export_random(
    arch_yaml: str,
    imgsz: Union[int, Tuple[int, int]] = 160,
    task: Optional[str] = None,
    dir: Union[str, Path] = ".",  # noqa: A002 - the name the callers use
    *,
    opset: int = 17,
    nms: Optional[bool] = None,
    seed: int = 0,
    nc: Optional[int] = None,
) -> Path:
    """Build an Ultralytics model from its yaml with random weights (no download) and export it to ONNX.

    ``arch_yaml``: a built-in name (``yolov8n.yaml``, ``yolov8n-seg.yaml``, ``yolov8n-pose.yaml``, ``yolo11n.yaml``,
    ``yolov10n.yaml``, ``yolo26n.yaml``, ...) or a path. ``task`` defaults to what Ultralytics guesses from the yaml.
    ``nms``: Ultralytics' export argument: None = raw (one-to-many) head, False = NMS-free one-to-one head where the
    architecture has one (YOLOv10 / YOLO26 -> ``[1, 300, 6]``), True = embedded NMS (needs torchvision; skips without
    it). ``nc`` overrides the yaml's class count (e.g. ``yolo26-pose.yaml`` says 80, the released pose models 1): the
    yaml, as Ultralytics loads it, is written with that ``nc`` into ``dir`` under the same name (the name carries the
    n/s/m/l/x scale). Static batch 1, ``simplify=False``, CPU, torch seeded with ``seed``. Returns the path of the ``.onnx`` in
    ``dir`` (Ultralytics writes it in the working directory, so the export runs with ``dir`` as cwd); the
    ``export_seconds`` attribute of this function holds the last export's wall time.
    """
    u = _ultralytics()
    _skip_missing("onnx", "ONNX export needs onnx")
    if nms:
        _skip_missing("torchvision", "export(nms=True) traces torchvision.ops.nms")
    torch = u["torch"]
    out_dir = Path(dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    if nc is not None:
        import yaml
        from ultralytics.nn.tasks import yaml_model_load

        cfg = yaml_model_load(arch_yaml)
        cfg.pop("scale", None)
        cfg.pop("yaml_file", None)
        cfg["nc"] = int(nc)
        local = out_dir / Path(arch_yaml).name
        local.write_text(yaml.safe_dump(cfg, sort_keys=False))
        arch_yaml = str(local)
    torch.manual_seed(seed)
    with _cwd(out_dir):
        if Path(arch_yaml).name.startswith("rtdetr"):
            from ultralytics import RTDETR  # its own model class: YOLO() cannot build an RT-DETR yaml

            model = RTDETR(arch_yaml)
        else:
            model = u["YOLO"](arch_yaml, task=task)
        t0 = time.perf_counter()
        f = model.export(format="onnx", imgsz=imgsz, opset=opset, simplify=False, dynamic=False, batch=1, nms=nms, device="cpu")
        export_random.export_seconds = time.perf_counter() - t0
    return (out_dir / f).resolve()


export_random.export_seconds = float("nan")
