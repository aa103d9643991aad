"""Where results go: JSONL (one line per frame), an annotated video, a display window.

Files are written beside their target under a temporary name and renamed into place when the run ends, so
an interrupted or failed run never replaces a good file from an earlier run. When a sink's own write fails
(disk full, unwritable path) the run stops and what was written is kept as ``<name>.partial``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, List, Optional

import numpy as np

from edge.errors import EdgeError, RunFailed
from edge.runtime.postprocess import Result
from edge.runtime.sources import Frame


def _staging_name(path: Path) -> Path:
    # Keep the extension last: OpenCV picks the container from it.
    return path.with_name(f".{path.stem}.{os.getpid()}.partial{path.suffix}")


def _check_writable(path: Path, what: str) -> None:
    parent = path.parent
    if not parent.is_dir():
        raise EdgeError(f"{what} '{path}': folder {parent} does not exist; create it or choose another path")
    if not os.access(parent, os.W_OK):
        raise EdgeError(f"{what} '{path}': folder {parent} is not writable")


class Sink:
    name = "sink"
    wants_image = False  # needs the annotated frame

    def write(self, frame: Frame, result: Result, record: dict, annotated: Optional[np.ndarray]) -> None:
        raise NotImplementedError

    def close(self, failed: bool = False) -> Optional[str]:
        """Finish; return a note for the summary (where the output is) or None."""
        return None


class JsonlSink(Sink):
    name = "results"

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        _check_writable(self.path, "results file")
        self.staging = _staging_name(self.path)
        self.fd = os.open(self.staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.lines = 0
        self.good_bytes = 0  # the file's size after the last complete line
        self.broken = False

    def write(self, frame: Frame, result: Result, record: dict, annotated: Optional[np.ndarray]) -> None:
        data = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        try:
            # Unbuffered: a kill leaves whole lines behind; a failed write is cut back to the last whole line.
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError as exc:
            self.broken = True
            os.ftruncate(self.fd, self.good_bytes)
            raise RunFailed(
                f"sink 'results' ({self.path}): write failed: {exc.strerror or exc}; {self.lines} complete lines kept in {self.path}.partial"
            ) from None
        self.good_bytes += len(data)
        self.lines += 1

    def close(self, failed: bool = False) -> Optional[str]:
        os.close(self.fd)
        if failed and self.lines == 0 and not self.broken:
            self.staging.unlink()  # nothing to keep; an earlier run's file stays as it was
            return None
        if self.broken:
            os.replace(self.staging, f"{self.path}.partial")
            return f"results: {self.lines} lines kept in {self.path}.partial"
        os.replace(self.staging, self.path)
        return f"results: {self.lines} lines -> {self.path}"


class VideoSink(Sink):
    name = "video"
    wants_image = True
    _FOURCC = {".mp4": "mp4v", ".avi": "MJPG", ".mkv": "MJPG", ".mov": "mp4v"}

    def __init__(self, path: str, fps: float) -> None:
        self.path = Path(path)
        if self.path.suffix.lower() not in self._FOURCC:
            raise EdgeError(f"video file '{path}': unsupported extension; use one of {', '.join(self._FOURCC)}")
        _check_writable(self.path, "video file")
        self.staging = _staging_name(self.path)
        self.fps = fps
        self.writer = None
        self.frames = 0

    def write(self, frame: Frame, result: Result, record: dict, annotated: Optional[np.ndarray]) -> None:
        import cv2

        if self.writer is None:
            h, w = annotated.shape[:2]
            fourcc = cv2.VideoWriter_fourcc(*self._FOURCC[self.path.suffix.lower()])
            self.writer = cv2.VideoWriter(str(self.staging), fourcc, self.fps, (w, h))
            if not self.writer.isOpened():
                raise RunFailed(f"sink 'video' ({self.path}): OpenCV cannot open a writer for it; try an .avi path")
        self.writer.write(annotated)
        self.frames += 1

    def close(self, failed: bool = False) -> Optional[str]:
        if self.writer is None:
            return None
        self.writer.release()
        if not self.staging.exists() or self.staging.stat().st_size == 0:
            return f"video: nothing written to {self.path}"
        os.replace(self.staging, self.path)
        return f"video: {self.frames} frames -> {self.path}"


class DisplaySink(Sink):
    name = "display"
    wants_image = True

    def __init__(self, title: str, on_quit: Any) -> None:
        import cv2

        self.title, self.on_quit = title, on_quit
        try:
            cv2.namedWindow(title, cv2.WINDOW_NORMAL)
        except cv2.error:
            raise EdgeError(
                "sinks.display: this OpenCV has no window support or there is no display; "
                "use opencv-python (not -headless) with DISPLAY set, or turn display off"
            ) from None

    def write(self, frame: Frame, result: Result, record: dict, annotated: Optional[np.ndarray]) -> None:
        import cv2

        cv2.imshow(self.title, annotated)
        if cv2.waitKey(1) & 0xFF in (ord("q"), 27):
            self.on_quit()

    def close(self, failed: bool = False) -> Optional[str]:
        import cv2

        cv2.destroyWindow(self.title)
        return None


def annotate(image: np.ndarray, result: Result) -> np.ndarray:
    """A copy of the frame with boxes, labels, scores and keypoints drawn."""
    import cv2

    out = image.copy()
    for d in result.detections:
        x1, y1, x2, y2 = (int(round(v)) for v in d.box)
        cv2.rectangle(out, (x1, y1), (x2, y2), (0, 255, 0), 2)
        cv2.putText(
            out, f"{d.label} {d.score:.2f}", (x1, max(12, y1 - 4)), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 255, 0), 1, cv2.LINE_AA
        )
        for x, y in d.keypoints or []:
            cv2.circle(out, (int(x), int(y)), 2, (0, 0, 255), -1)
    for row, c in enumerate(result.classes):
        cv2.putText(
            out, f"{c.label} {c.score:.2f}", (8, 20 + 18 * row), cv2.FONT_HERSHEY_SIMPLEX, 0.55, (0, 255, 0), 1, cv2.LINE_AA
        )
    return out


def open_sinks(cfg: Any, fps: float, on_quit: Any) -> List[Sink]:
    """The sinks a SinksConfig asks for; none at all is the null sink (results are computed and dropped)."""
    sinks: List[Sink] = []
    try:
        if cfg.results:
            sinks.append(JsonlSink(cfg.results))
        if cfg.video:
            sinks.append(VideoSink(cfg.video, fps))
        if cfg.display:
            sinks.append(DisplaySink("edge", on_quit))
    except EdgeError:
        for s in sinks:
            s.close(failed=True)
        raise
    return sinks
