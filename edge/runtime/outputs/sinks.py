"""Where results go: JSONL (one line per frame), an annotated video, a display window.

Files go through the atomic-write path (``edge.outputs``): written beside their target under a temporary name and
renamed into place when the run ends, so an interrupted or failed run never replaces a good file from an earlier
run. When the results sink's own write fails (disk full, a file-size limit) the run stops and the complete lines are
kept as ``<name>.partial``.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Optional

import numpy as np

from edge.errors import EdgeError, RunFailed
from edge.outputs import Staged, strict_json
from edge.runtime.postprocess import Result
from edge.runtime.sources import Frame, opencv_name


class Sink:
    name = "sink"
    wants_image = False  # needs the annotated frame

    def write(self, frame: Frame, result: Result, record: dict, annotated: Optional[np.ndarray]) -> None:
        raise NotImplementedError

    def close(self, failed: bool = False) -> Optional[str]:
        """Finish; return a note for the summary (where the output is) or None."""
        return None

    def discard(self) -> None:
        """Give up an output not yet committed (the run was stopped before its close): no temp file stays behind."""
        staged = getattr(self, "staged", None)
        if staged is not None:
            staged.discard()


class JsonlSink(Sink):
    name = "results"

    def __init__(self, path: str) -> None:
        self._lock = threading.Lock()  # a pool's sources share one results file
        self.path = Path(path)
        self.staged = Staged(self.path)
        self.lines = 0
        self.good_bytes = 0  # the file's size after the last complete line
        self.broken = False

    def write(self, frame: Frame, result: Result, record: dict, annotated: Optional[np.ndarray]) -> None:
        # Strict JSON (no NaN), unbuffered: a kill leaves whole lines; a failed write is cut back to the last one.
        data = (json.dumps(strict_json(record), separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self.broken:
                raise RunFailed(f"sink 'results': broken earlier; {self.lines} complete lines kept in {self.path}.partial")
            try:
                self.staged.write(data)
            except EdgeError as exc:
                self.broken = True
                os.ftruncate(self.staged.fd, self.good_bytes)
                raise RunFailed(f"sink 'results': {exc}; {self.lines} complete lines kept in {self.path}.partial") from None
            self.good_bytes += len(data)
            self.lines += 1

    def close(self, failed: bool = False) -> Optional[str]:
        if failed and self.lines == 0 and not self.broken:
            self.staged.discard()  # nothing to keep; an earlier run's file stays as it was
            return f"results: no frame got this far, nothing written; {self.path} is as it was"
        if self.broken:
            self.staged.keep_as(f"{self.path}.partial")
            return f"results: {self.lines} lines kept in {self.path}.partial"
        self.staged.commit()
        return f"results: {self.lines} lines -> {self.path}"


class VideoSink(Sink):
    """The annotated video. OpenCV's writer reports no write errors, so the finished file is read back (frame count)
    before it replaces anything: a full disk or a file-size limit leaves the previous video intact and fails the run."""

    name = "video"
    wants_image = True
    _FOURCC = {".mp4": "mp4v", ".avi": "MJPG", ".mkv": "MJPG", ".mov": "mp4v"}

    def __init__(self, path: str, fps: float) -> None:
        self.path = Path(opencv_name(path, "video file"))  # OpenCV writes it by name
        if self.path.suffix.lower() not in self._FOURCC:
            raise EdgeError(f"video file '{path}': unsupported extension; use one of {', '.join(self._FOURCC)}")
        self.staged = Staged(self.path)  # OpenCV opens the temp by name; the extension stays last
        self.fps = fps
        self.writer = None
        self.frames = 0

    def write(self, frame: Frame, result: Result, record: dict, annotated: Optional[np.ndarray]) -> None:
        import cv2

        if self.writer is None:
            h, w = annotated.shape[:2]
            fourcc = cv2.VideoWriter_fourcc(*self._FOURCC[self.path.suffix.lower()])
            self.writer = cv2.VideoWriter(str(self.staged.tmp), fourcc, self.fps, (w, h))
            if not self.writer.isOpened():
                raise RunFailed(f"sink 'video' ({self.path}): OpenCV cannot open a writer for it; try an .avi path")
        self.writer.write(annotated)
        self.frames += 1

    def _written_frames(self) -> int:
        import cv2

        cap = cv2.VideoCapture(str(self.staged.tmp))
        try:
            return int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) if cap.isOpened() else 0
        finally:
            cap.release()

    def close(self, failed: bool = False) -> Optional[str]:
        if self.writer is None:
            self.staged.discard()
            return None
        self.writer.release()
        written = self._written_frames()
        if written < self.frames:
            self.staged.discard()
            raise RunFailed(
                f"sink 'video' ({self.path}): the finished file holds {written} of {self.frames} frames (disk full or a "
                "file-size limit?); the previous video, if any, is unchanged"
            )
        self.staged.commit()
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


_PALETTE = [(0, 200, 255), (255, 80, 80), (80, 255, 80), (255, 0, 255), (0, 255, 255), (160, 80, 255)]  # BGR


def annotate(image: np.ndarray, result: Result) -> np.ndarray:
    """A copy of the frame with boxes, labels, scores and keypoints drawn, and segments tinted."""
    import cv2

    out = image.copy()
    for k, seg in enumerate(result.segments or []):
        from edge.runtime.postprocess.masks import decode_rle

        colour = np.array(_PALETTE[k % len(_PALETTE)], np.float32)
        where = decode_rle(seg.mask)
        out[where] = (0.5 * out[where] + 0.5 * colour).astype(np.uint8)  # half-transparent, so the scene stays legible
        x1, y1 = int(seg.box[0]), int(seg.box[1])
        cv2.putText(out, seg.label, (x1, max(12, y1 - 4)), cv2.FONT_HERSHEY_SIMPLEX, 0.5, tuple(map(int, colour)), 1, cv2.LINE_AA)
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
