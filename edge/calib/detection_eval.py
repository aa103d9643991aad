"""Labelled detection sets and their mAP, for ``edge calib --eval DIR`` on a detector.

Two layouts of DIR are read:

- **COCO JSON**: one ``*.json`` in DIR with ``images``, ``annotations`` (``bbox`` as x, y, width, height in pixels)
  and ``categories``; each image's ``file_name`` relative to DIR or to ``DIR/images``. A category is the model's
  class of the same name (task.labels or the model's metadata names), else its rank among the category ids (COCO's
  91 ids onto the 80 classes of models trained on COCO).
- **YOLO txt** (Ultralytics' dataset layout): ``DIR/images/*.jpg`` with ``DIR/labels/NAME.txt``, or the ``.txt``
  beside each image; one ``class cx cy w h`` line per object, normalised to the image size.

mAP@0.5 and mAP@0.5:0.95 come from pycocotools' COCOeval (the reference implementation of COCO's metric), on the
detections the runtime's own decoder reports in frame pixels.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from edge.calib.datasets import find_images
from edge.config import short
from edge.errors import EdgeError
from edge.inputs import read_small
from edge.lazy import require

MAX_LABEL_BYTES = 256 << 20  # an annotation file of a few thousand images is megabytes; more is refused unread
MAX_TXT_BYTES = 1 << 20  # one image's YOLO labels


@dataclass
class DetectionSet:
    name: str
    files: List[Path]
    boxes: List[np.ndarray]  # per image, (K, 4) x1 y1 x2 y2 in image pixels
    classes: List[np.ndarray]  # per image, (K,) model class indices
    count: int = 0

    def __post_init__(self) -> None:
        self.count = len(self.files)


@dataclass
class DetectionScore:
    images: int
    map50: float
    map: float  # mAP@0.5:0.95, the headline (a budget's --max-drop counts its points)

    @property
    def score(self) -> float:
        return self.map

    metric = "mAP@0.5:0.95"


def is_detection_set(folder: str) -> bool:
    root = Path(folder)
    return root.is_dir() and (any(root.glob("*.json")) or (root / "labels").is_dir() or any(root.glob("*.txt")))


def _read_bytes(path: Path, cap: int, what: str) -> bytes:
    return read_small(path, cap, what, "is it the right file?")


def _coco(root: Path, path: Path, names: List[str]) -> DetectionSet:
    try:
        doc = json.loads(_read_bytes(path, MAX_LABEL_BYTES, "--eval").decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise EdgeError(f"--eval {path}: not COCO JSON ({short(exc, 100)})") from None
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), list) for k in ("images", "annotations", "categories")):
        raise EdgeError(f"--eval {path}: COCO JSON needs lists 'images', 'annotations' and 'categories'")
    try:
        cats = {int(c["id"]): str(c["name"]) for c in doc["categories"]}
        ranked = {cid: i for i, cid in enumerate(sorted(cats))}
        by_name = {n: i for i, n in enumerate(names)}
        to_class = {cid: by_name.get(name, ranked[cid]) if names else ranked[cid] for cid, name in cats.items()}
        images = {int(im["id"]): str(im["file_name"]) for im in doc["images"]}
        per: Dict[int, List[Tuple[List[float], int]]] = {i: [] for i in images}
        for a in doc["annotations"]:
            x, y, w, h = (float(v) for v in a["bbox"])
            if a.get("iscrowd"):
                continue  # COCO's crowd regions are neither matched nor missed; left out of both sides here
            per[int(a["image_id"])].append(([x, y, x + w, y + h], to_class[int(a["category_id"])]))
    except (KeyError, TypeError, ValueError) as exc:
        raise EdgeError(f"--eval {path}: a COCO entry lacks or mistypes a field ({short(exc, 80)})") from None
    files, boxes, classes = [], [], []
    for image_id, name in sorted(images.items()):
        candidates = [root / name, root / "images" / name]
        found = next((p for p in candidates if p.is_file() and root.resolve() in p.resolve().parents), None)
        if found is None:
            raise EdgeError(f"--eval {path}: image '{short(name, 80)}' is not in {root} or {root / 'images'}")
        rows = per[image_id]
        files.append(found)
        boxes.append(np.array([r[0] for r in rows], np.float64).reshape(-1, 4))
        classes.append(np.array([r[1] for r in rows], np.int64))
    return DetectionSet(str(root), files, boxes, classes)


def _yolo(root: Path) -> DetectionSet:
    import cv2

    image_root = root / "images" if (root / "images").is_dir() else root
    files = find_images(image_root, what="--eval")
    boxes, classes = [], []
    for f in files:
        txt = (root / "labels" / f.relative_to(image_root)).with_suffix(".txt")
        if not txt.is_file():
            txt = f.with_suffix(".txt")
        rows: List[List[float]] = []
        if txt.is_file():
            try:
                text = _read_bytes(txt, MAX_TXT_BYTES, "--eval").decode("utf-8")
                rows = [[float(v) for v in line.split()[:5]] for line in text.splitlines() if line.strip()]
            except (UnicodeDecodeError, ValueError) as exc:
                raise EdgeError(f"--eval {txt}: expected lines 'class cx cy w h' ({short(exc, 80)})") from None
            if any(len(r) != 5 or r[0] < 0 or r[0] != int(r[0]) for r in rows):
                raise EdgeError(f"--eval {txt}: expected lines 'class cx cy w h' with a class index first")
        shape = cv2.imread(str(f), cv2.IMREAD_UNCHANGED).shape
        h, w = shape[:2]
        arr = np.array(rows, np.float64).reshape(-1, 5)
        cx, cy, bw, bh = arr[:, 1] * w, arr[:, 2] * h, arr[:, 3] * w, arr[:, 4] * h
        boxes.append(np.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], axis=1))
        classes.append(arr[:, 0].astype(np.int64))
    return DetectionSet(str(root), files, boxes, classes)


def load(folder: str, names: List[str]) -> DetectionSet:
    """The labelled images of ``--eval DIR`` (COCO JSON when DIR has a .json, else YOLO txt)."""
    root = Path(folder)
    jsons = sorted(root.glob("*.json"))
    if len(jsons) > 1:
        raise EdgeError(f"--eval {folder}: {len(jsons)} .json files; keep the one COCO annotation file in the folder")
    dset = _coco(root, jsons[0], names) if jsons else _yolo(root)
    if not dset.count:
        raise EdgeError(f"--eval {folder}: no labelled images")
    return dset


def evaluate(dset: DetectionSet, predictions: List[List[Any]]) -> DetectionScore:
    """mAP of ``predictions`` (per image, Detection objects in image pixels) against the set, with pycocotools."""
    require("pycocotools", "mAP with --eval on a detector (pip install pycocotools)")
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    classes = sorted({int(c) for cs in dset.classes for c in cs} | {d.class_id for ds in predictions for d in ds})
    gt: Dict[str, Any] = {"images": [], "annotations": [], "categories": [{"id": c + 1, "name": str(c)} for c in classes]}
    dt = []
    for i, (boxes, cls, dets) in enumerate(zip(dset.boxes, dset.classes, predictions)):
        gt["images"].append({"id": i + 1})
        for b, c in zip(boxes, cls):
            w, h = float(b[2] - b[0]), float(b[3] - b[1])
            gt["annotations"].append(
                {
                    "id": len(gt["annotations"]) + 1,
                    "image_id": i + 1,
                    "category_id": int(c) + 1,
                    "bbox": [float(b[0]), float(b[1]), w, h],
                    "area": w * h,
                    "iscrowd": 0,
                }
            )
        for d in dets:
            x1, y1, x2, y2 = d.box
            dt.append({"image_id": i + 1, "category_id": d.class_id + 1, "bbox": [x1, y1, x2 - x1, y2 - y1], "score": d.score})
    if not gt["annotations"] or not dt:
        return DetectionScore(len(predictions), 0.0, 0.0)
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its tables
        coco = COCO()
        coco.dataset = gt
        coco.createIndex()
        result = coco.loadRes(dt)
        ev = COCOeval(coco, result, "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return DetectionScore(len(predictions), float(max(ev.stats[1], 0.0)), float(max(ev.stats[0], 0.0)))


def predict(
    sess: Any, dset: DetectionSet, spec: Any, decoder: Any, fixed: Optional[int] = None, callers: int = 1
) -> List[List[Any]]:
    """Detections in each image's own pixels, one image at a time, as edge-run would report them (``callers``
    images run at once, see ``check.ahead``)."""
    from edge.calib.check import ahead
    from edge.runtime.engines.preprocess import Preprocessor
    from edge.runtime.sources import read_image

    pre = Preprocessor(spec)
    outputs = [o.name for o in sess.get_outputs()]

    def tensors() -> Iterator[Tuple[np.ndarray, Any]]:
        for f in dset.files:
            frame = read_image(f)
            if frame is None:
                raise EdgeError(f"--eval: image '{f}' cannot be decoded; remove it or convert it to PNG/JPEG")
            tensor, tf = pre(frame)
            yield (np.repeat(tensor, fixed, axis=0) if fixed and fixed > 1 else tensor), tf

    out: List[List[Any]] = []
    for (_, tf), values in ahead(sess, tensors(), callers):
        out.append(decoder({k: v[:1] for k, v in zip(outputs, values)}, tf).detections)
    return out
