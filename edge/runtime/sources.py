"""Frame sources chosen by URI, as jetson-inference does.

    video.mp4 | frames/ | 'frames/*.jpg' | img.png   files (not live: every frame is processed)
    /dev/video0 | v4l2:///dev/video0                  V4L2 camera through OpenCV (live)
    csi://0                                           MIPI CSI camera via nvarguscamerasrc (live, needs GStreamer in cv2)
    rtsp://… | http(s)://…                           network streams, reconnected with exponential backoff (live)
    asset://megamind                                  a pinned demo clip, fetched on first use

Each frame carries its index and a monotonic capture timestamp.
"""

from __future__ import annotations

import glob
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from edge import MAX_IMAGE_PIXELS
from edge.errors import EdgeError, RunFailed
from edge.redact import redact

log = logging.getLogger("edge.source")

# Network streams: give up opening after this long, and a read that brings nothing for this long counts as lost.
OPEN_TIMEOUT_MS = 10_000
READ_TIMEOUT_MS = 5_000

IMAGE_EXTS = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".pgm", ".ppm"}


@dataclass
class Frame:
    index: int
    t_capture: float  # time.monotonic() when the frame was read
    image: np.ndarray  # HxWx3 uint8 BGR
    origin: str = ""  # file name for image folders, else empty


class Source:
    """Base: ``read()`` returns the next Frame, or None at the end; ``close()`` releases the device."""

    live = False
    description = ""

    def __init__(self) -> None:
        self._index = 0
        self.reconnects = 0

    def _frame(self, image: np.ndarray, origin: str = "") -> Frame:
        f = Frame(self._index, time.monotonic(), image, origin)
        self._index += 1
        return f

    def read(self) -> Optional[Frame]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def info(self) -> dict[str, Any]:
        return {"uri": self.description, "live": self.live, "reconnects": self.reconnects}


def _cv2():
    from edge.lazy import require

    return require("cv2", "video capture")


class CaptureSource(Source):
    """Anything cv2.VideoCapture opens: video files, V4L2 cameras, GStreamer pipelines."""

    def __init__(
        self,
        target: Any,
        description: str,
        live: bool,
        loop: bool = False,
        api: Optional[int] = None,
        props: Optional[dict] = None,
    ) -> None:
        super().__init__()
        self.target, self.description, self.live, self.loop = target, description, live, loop
        self._api, self._props = api, props or {}
        self._params: list = []
        self.cap = self._open()
        if self.cap is None:
            raise EdgeError(
                f"source '{description}': cannot be opened by OpenCV; check the path/device exists and that cv2 can decode it"
            )

    def _open(self):
        cv2 = _cv2()
        if self._api is None:
            cap = cv2.VideoCapture(self.target)
        elif self._params:
            cap = cv2.VideoCapture(self.target, self._api, self._params)
        else:
            cap = cv2.VideoCapture(self.target, self._api)
        if not cap.isOpened():
            cap.release()
            return None
        for prop, value in self._props.items():
            cap.set(prop, value)
        return cap

    def read(self) -> Optional[Frame]:
        ok, image = self.cap.read()
        if not ok and self.loop and not self.live and self._index > 0:
            self.cap.release()
            self.cap = self._open()
            ok, image = (False, None) if self.cap is None else self.cap.read()
        return self._frame(image) if ok else None

    def close(self) -> None:
        if self.cap is not None:
            self.cap.release()


class StreamSource(CaptureSource):
    """rtsp:// and http(s):// streams: on a failed read, reopen with exponential backoff."""

    def __init__(self, uri: str, initial_delay_s: float, max_delay_s: float, max_attempts: int, stop: threading.Event) -> None:
        self.initial_delay_s, self.max_delay_s, self.max_attempts = initial_delay_s, max_delay_s, max_attempts
        self.stop_event = stop
        cv2 = _cv2()
        super().__init__(uri, redact(uri), live=True, api=cv2.CAP_FFMPEG)

    def _open(self):
        # A stalled server must not hold a read (and so a SIGTERM) for FFmpeg's default 30 s: time out, reconnect.
        cv2 = _cv2()
        timeouts = [
            getattr(cv2, "CAP_PROP_OPEN_TIMEOUT_MSEC", None),
            OPEN_TIMEOUT_MS,
            getattr(cv2, "CAP_PROP_READ_TIMEOUT_MSEC", None),
            READ_TIMEOUT_MS,
        ]
        self._params = timeouts if None not in timeouts else []  # JetPack 5's OpenCV 4.5.4 has both; older builds not
        return super()._open()

    def read(self) -> Optional[Frame]:
        ok, image = self.cap.read() if self.cap is not None else (False, None)
        if ok:
            return self._frame(image)
        delay, attempt = self.initial_delay_s, 0
        while not self.stop_event.is_set():
            if self.max_attempts and attempt >= self.max_attempts:
                raise RunFailed(
                    f"source '{self.description}': stream lost and {attempt} reconnect attempts failed; check the camera/server, or raise source.reconnect.max_attempts (0 = forever)"
                )
            attempt += 1
            log.warning("source %s: no frame; reconnect attempt %d in %.1f s", self.description, attempt, delay)
            if self.stop_event.wait(delay):
                break
            if self.cap is not None:
                self.cap.release()
            self.cap = self._open()
            if self.cap is not None:
                ok, image = self.cap.read()
                if ok:
                    self.reconnects += 1
                    log.warning("source %s: reconnected after %d attempt(s)", self.description, attempt)
                    return self._frame(image)
            delay = min(delay * 2, self.max_delay_s)
        return None


class ImageSource(Source):
    """A folder, a glob or one image file, in sorted order."""

    def __init__(self, files: list[str], description: str, loop: bool) -> None:
        super().__init__()
        self.files, self.description, self.loop = files, description, loop
        self._pos = 0
        self.skipped = 0

    def read(self) -> Optional[Frame]:
        cv2 = _cv2()
        while True:
            if self._pos >= len(self.files):
                if not self.loop:
                    return None
                self._pos = 0
            path = self.files[self._pos]
            self._pos += 1
            try:
                image = cv2.imread(path, cv2.IMREAD_COLOR)
            except cv2.error:  # OpenCV 5 raises where 4.x returned None (e.g. past the pixel cap)
                image = None
            if image is not None:
                return self._frame(image, os.path.basename(path))
            # A file that vanished or is not an image: skip it, but never spin on a folder that emptied.
            self.skipped += 1
            log.warning("source %s: cannot read %s; skipped", self.description, path)
            if self.skipped >= len(self.files) and self._index == 0:
                raise EdgeError(
                    f"source '{self.description}': none of its {len(self.files)} files could be read as images (corrupt, "
                    f"or larger than {MAX_IMAGE_PIXELS // 1_000_000} megapixels)"
                )

    def info(self) -> dict[str, Any]:
        return {**super().info(), "files": len(self.files), "skipped": self.skipped}


def gstreamer_available() -> bool:
    cv2 = _cv2()
    for line in cv2.getBuildInformation().splitlines():
        if line.strip().startswith("GStreamer:"):
            return "YES" in line
    return False


def csi_pipeline(sensor_id: int, width: int, height: int, framerate: int, flip: int) -> str:
    """The nvarguscamerasrc pipeline that hands OpenCV BGR frames (NVMM -> nvvidconv -> videoconvert)."""
    return (
        f"nvarguscamerasrc sensor-id={sensor_id} ! "
        f"video/x-raw(memory:NVMM), width={width}, height={height}, framerate={framerate}/1, format=NV12 ! "
        f"nvvidconv flip-method={flip} ! video/x-raw, format=BGRx ! videoconvert ! video/x-raw, format=BGR ! "
        "appsink drop=true max-buffers=1"
    )


def open_source(cfg: Any, stop: threading.Event, base_dir: Optional[Path] = None) -> Source:
    """Open the source named by ``cfg.uri`` (a SourceConfig); relative file paths are relative to ``base_dir``."""
    uri = cfg.uri.strip()
    if uri.startswith("asset://"):
        from edge import assets

        path = assets.resolve(uri[len("asset://") :])
        src: Source = CaptureSource(str(path), uri, live=False, loop=cfg.loop)
    elif uri.startswith(("rtsp://", "rtsps://", "http://", "https://")):
        r = cfg.reconnect
        src = StreamSource(uri, r.initial_delay_s, r.max_delay_s, r.max_attempts, stop)
    elif uri.startswith("csi://"):
        sensor = uri[len("csi://") :]
        if not sensor.isdigit():
            raise EdgeError(f"source '{uri}': expected csi://N with a sensor number, e.g. csi://0")
        if not gstreamer_available():
            raise EdgeError(
                f"source '{uri}': this cv2 was built without GStreamer, which csi:// needs; on a Jetson use JetPack's OpenCV "
                "(sudo apt install python3-opencv; pip uninstall opencv-python opencv-python-headless)"
            )
        pipe = csi_pipeline(int(sensor), cfg.width or 1920, cfg.height or 1080, cfg.framerate or 30, cfg.flip)
        src = CaptureSource(pipe, uri, live=True, api=_cv2().CAP_GSTREAMER)
    elif uri.startswith(("v4l2://", "/dev/video")):
        device = uri[len("v4l2://") :] if uri.startswith("v4l2://") else uri
        if not os.path.exists(device):
            raise EdgeError(f"source '{uri}': {device} does not exist; list cameras with `v4l2-ctl --list-devices`")
        cv2 = _cv2()
        props = {cv2.CAP_PROP_FRAME_WIDTH: cfg.width, cv2.CAP_PROP_FRAME_HEIGHT: cfg.height, cv2.CAP_PROP_FPS: cfg.framerate}
        src = CaptureSource(device, uri, live=True, api=cv2.CAP_V4L2, props={k: v for k, v in props.items() if v})
    else:
        path = Path(uri).expanduser()
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
            uri = str(path)
        if path.is_dir():
            files = sorted(str(p) for p in path.iterdir() if p.suffix.lower() in IMAGE_EXTS)
            if not files:
                raise EdgeError(f"source '{uri}': folder has no images ({', '.join(sorted(IMAGE_EXTS))})")
            src = ImageSource(files, uri, cfg.loop)
        elif path.is_file():  # before the glob test: a real file named 'a[1].mp4' is that file
            if path.suffix.lower() in IMAGE_EXTS:
                src = ImageSource([str(path)], uri, cfg.loop)
            else:
                src = CaptureSource(str(path), uri, live=False, loop=cfg.loop)
        elif any(c in uri for c in "*?["):
            files = sorted(f for f in glob.glob(uri) if Path(f).suffix.lower() in IMAGE_EXTS)
            if not files:
                raise EdgeError(f"source '{uri}': the pattern matches no image files")
            src = ImageSource(files, uri, cfg.loop)
        else:
            raise EdgeError(
                f"source '{uri}': no such file or folder; give a video file, an image folder or glob, /dev/videoN, csi://N or rtsp://…"
            )
    if cfg.live is not None:
        src.live = cfg.live
    return src
