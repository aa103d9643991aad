"""Frame sources chosen by URI, as jetson-inference does.

    video.mp4 | frames/ | 'frames/*.jpg' | img.png   files (not live: every frame is processed)
    /dev/video0 | v4l2:///dev/video0                  V4L2 camera through OpenCV (live)
    csi://0                                           MIPI CSI camera via nvarguscamerasrc (live, needs GStreamer in cv2)
    rtsp://… | http(s)://…                           network streams, reconnected with exponential backoff (live)
    asset://megamind                                  a pinned demo clip, fetched on first use

Each frame carries its index and a monotonic capture timestamp. Files and streams decode to BGR. A camera hands
over what ``source.format`` says: with ``preprocess: gpu`` and ``auto``, a CSI camera NV12 straight from nvvidconv
and a V4L2 camera its raw YUYV, so no colour conversion runs on the CPU (the CUDA kernel converts). Given a
``FrameRing`` (``Source.ring``), a source decodes into the ring's buffers; without one, every frame is a new array.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Optional, Tuple

import numpy as np

from edge import MAX_IMAGE_PIXELS
from edge.config import check_source_format
from edge.errors import EdgeError, RunFailed
from edge.inputs import open_regular, special
from edge.redact import redact
from edge.runtime.sources.frames import Frame, FrameBuffer, FrameRing
from edge.runtime.sources.pixels import BT601_LIMITED, Colour, colour, pixel_format

log = logging.getLogger("edge.source")

# Network streams: give up opening after this long, and a read that brings nothing for this long counts as lost.
OPEN_TIMEOUT_MS = 10_000
READ_TIMEOUT_MS = 5_000

IMAGE_EXTS = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".pgm", ".ppm"}


class Source:
    """Base: ``read()`` returns the next Frame, or None at the end; ``close()`` releases the device."""

    live = False
    description = ""
    format = "bgr"  # the pixel format of the frames (edge.runtime.sources.pixels)
    colour: Colour = BT601_LIMITED

    def __init__(self) -> None:
        self._index = 0
        self.reconnects = 0
        self.ring: Optional[FrameRing] = None  # set by the pipeline's owner: decode into reused buffers

    def _frame(self, image: np.ndarray, origin: str = "", buffer: Optional[FrameBuffer] = None) -> Frame:
        f = Frame(self._index, time.monotonic(), image, origin, self.format, self.colour, buffer)
        self._index += 1
        return f

    def read(self) -> Optional[Frame]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def info(self) -> dict[str, Any]:
        out = {"uri": self.description, "live": self.live, "reconnects": self.reconnects, "format": self.format}
        if pixel_format(self.format).yuv:
            out["colour"] = self.colour.key
        return out


def _cv2():
    from edge.lazy import require

    return require("cv2", "video capture")


def opencv_name(name: Any, what: str) -> Any:
    """``name`` unchanged when OpenCV can take it. OpenCV's Python binding crashes the process (a segmentation
    fault, not an exception) on a str that is not valid UTF-8, which is how Python hands over a file name holding
    other bytes, so such a name is refused here with one line."""
    if isinstance(name, (str, Path)):
        try:
            str(name).encode("utf-8")
        except UnicodeEncodeError:
            raise EdgeError(f"{what} {str(name)!r}: OpenCV cannot open a name that is not UTF-8; rename it") from None
    return name


class CaptureSource(Source):
    """Anything cv2.VideoCapture opens: video files, V4L2 cameras, GStreamer pipelines."""

    declared = 0  # frames a file's header declares; 0 for a camera or stream, and when it says nothing

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
        self.target, self.description, self.live, self.loop = opencv_name(target, "source"), description, live, loop
        self._api, self._props = api, props or {}
        self._params: list = []
        self._shape: Optional[Tuple[int, ...]] = None  # the array shape the capture delivers, once seen
        self.cap = self._open()
        if self.cap is None:
            raise EdgeError(
                f"source '{description}': cannot be opened by OpenCV; check the path/device exists and that cv2 can decode it"
            )
        cv2 = _cv2()
        w, h = int(self.cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(self.cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        if w * h > MAX_IMAGE_PIXELS:  # declared by the container or stream: refused before a frame is decoded
            self.cap.release()
            raise EdgeError(f"source '{description}': {_too_large(w, h)}")
        # A file's header says how many frames it holds; fewer read means a truncated or damaged file (told at the end).
        self.declared = 0 if live else max(0, int(self.cap.get(cv2.CAP_PROP_FRAME_COUNT)))

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

    def _grab(self) -> Optional[Frame]:
        """One frame from the capture: decoded straight into a ring buffer once the frame size is known (OpenCV
        writes into an array of the right shape in place); the first frame, and one of a new size, is copied in."""
        ring = self.ring
        buf = ring.acquire(self._shape) if ring is not None and self._shape is not None else None
        if buf is None and ring is not None and self._shape is not None:
            return None  # stopping while every buffer was in use
        try:
            ok, image = self.cap.read(image=buf.array) if buf is not None else self.cap.read()
        except BaseException:
            if buf is not None:
                buf.release()
            raise
        if not ok or image is None:
            if buf is not None:
                buf.release()
            return None
        if buf is not None and image is buf.array:
            return self._frame(image, buffer=buf)  # decoded in place
        if buf is not None:  # OpenCV allocated: the frame size changed
            buf.release()
        if image.shape != self._shape:
            if image.shape[0] * image.shape[1] > MAX_IMAGE_PIXELS:  # a stream that grew, or declared nothing
                raise RunFailed(f"source '{self.description}': {_too_large(image.shape[1], image.shape[0])}")
            self._check_format(image)
            self._shape = image.shape
        if ring is None:
            return self._frame(image)
        buf = ring.acquire(image.shape)  # the first frame of a size is copied in; the next ones decode in place
        if buf is None:
            return None
        np.copyto(buf.array, image)
        return self._frame(buf.array, buffer=buf)

    def _check_format(self, image: np.ndarray) -> None:
        """The first frame of a size must fit ``format``; an OpenCV that converted a camera's YUV to BGR itself
        (a build that honours CAP_PROP_CONVERT_RGB on GStreamer) is followed, with a warning."""
        if self.format == "bgr":
            if image.ndim == 3 and image.shape[2] == 3 and image.dtype == np.uint8:
                return
        elif pixel_format(self.format).yuv and image.ndim == 3 and image.shape[2] == 3 and image.dtype == np.uint8:
            log.warning("source %s: OpenCV delivers BGR, not %s; the CPU converted it", self.description, self.format)
            self.format = "bgr"
            return
        pixel_format(self.format).size(image)

    def read(self) -> Optional[Frame]:
        frame = self._grab()
        if frame is None and not self.live:
            self._tell_short()
        if frame is None and self.loop and not self.live and self._index > 0:
            self.cap.release()
            self.cap = self._open()
            frame = None if self.cap is None else self._grab()
        return frame

    def _tell_short(self) -> None:
        """At the end of the first pass: a file that ended well before the frame count in its header. The count is
        an estimate from the duration in some containers, so a frame or two (1 %) short is not told."""
        if getattr(self, "_told_short", False) or self.declared - self._index <= max(2, self.declared // 100):
            return
        self._told_short = True
        log.warning(
            "source %s: ended after %d of the %d frames its header declares; the file is truncated or damaged",
            self.description,
            self._index,
            self.declared,
        )

    def info(self) -> dict[str, Any]:
        out = super().info()
        if self.declared:
            out["declared_frames"] = self.declared
        return out

    def close(self) -> None:
        if self.cap is not None:
            self.cap.release()


def _too_large(w: int, h: int) -> str:
    return (
        f"frames of {w}x{h} pixels are over the {MAX_IMAGE_PIXELS // 1_000_000}-megapixel cap (image files have it "
        "too); lower the camera's or stream's resolution"
    )


class StreamSource(CaptureSource):
    """rtsp:// and http(s):// streams: on a failed read, reopen with exponential backoff."""

    def __init__(
        self, uri: str, initial_delay_s: float, max_delay_s: float, max_attempts: int, stop: threading.Event, late: bool = False
    ) -> None:
        """``late``: a stream that cannot be opened now is not an error; the first read keeps trying, as after a
        lost stream (a pool's other cameras start without it)."""
        self.initial_delay_s, self.max_delay_s, self.max_attempts = initial_delay_s, max_delay_s, max_attempts
        self.stop_event = stop
        cv2 = _cv2()
        try:
            super().__init__(uri, redact(uri), live=True, api=cv2.CAP_FFMPEG)
        except EdgeError:
            if not late:
                raise
            self.cap = None
            log.warning("source %s: not reachable now; its reads keep trying (source.reconnect)", self.description)

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
        frame = self._grab() if self.cap is not None else None
        if frame is not None:
            return frame
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
                frame = self._grab()
                if frame is not None:
                    self.reconnects += 1
                    log.warning("source %s: reconnected after %d attempt(s)", self.description, attempt)
                    return frame
            delay = min(delay * 2, self.max_delay_s)
        return None


class ImageSource(Source):
    """A folder, a glob or one image file, in sorted order."""

    def __init__(self, files: list[str], description: str, loop: bool) -> None:
        super().__init__()
        self.files, self.description, self.loop = files, description, loop
        self._pos = 0
        self.skipped = 0
        self._failing = 0  # files skipped in a row: a whole pass of them means none can be read any more

    def read(self) -> Optional[Frame]:
        while True:
            if self._pos >= len(self.files):
                if not self.loop:
                    return None
                self._pos = 0
            path = self.files[self._pos]
            self._pos += 1
            image = read_image(path)
            if image is not None:
                self._failing = 0
                return self._into_ring(image, os.path.basename(path))
            # A file that vanished or is not an image: skip it, but never spin on a folder that emptied.
            self.skipped += 1
            self._failing += 1
            if self.skipped <= WARN_SKIPPED:
                more = "; further skips are only counted (source.skipped in the summary)" if self.skipped == WARN_SKIPPED else ""
                why = image_problem(path) or "OpenCV cannot decode it"  # read again only for the few that are told
                log.warning("source %s: cannot read %s (%s); skipped%s", self.description, path, why, more)
            if self.skipped >= len(self.files) and self._index == 0:
                raise EdgeError(
                    f"source '{self.description}': none of its {len(self.files)} files could be read as images (corrupt, "
                    f"or larger than {MAX_IMAGE_PIXELS // 1_000_000} megapixels)"
                )
            if self._failing >= len(self.files):  # a looping folder whose files all vanished or broke since the start
                raise RunFailed(
                    f"source '{self.description}': none of its {len(self.files)} files can be read any more (removed or "
                    f"replaced since the run began, after {self._index} frame(s)); the run stops"
                )

    def _into_ring(self, image: np.ndarray, origin: str) -> Optional[Frame]:
        """cv2.imread has no decode-into-array, so a decoded image is copied into a page-locked ring buffer, the
        copy the GPU path would otherwise make before its upload; pageable memory gains nothing from a copy."""
        ring = self.ring
        if ring is None or not ring.memory.pinned:
            return self._frame(image, origin)
        buf = ring.acquire(image.shape)
        if buf is None:
            return None
        np.copyto(buf.array, image)
        return self._frame(buf.array, origin, buf)

    def info(self) -> dict[str, Any]:
        return {**super().info(), "files": len(self.files), "skipped": self.skipped}


WARN_SKIPPED = 10  # a folder of 100,000 broken files must not write 100,000 log lines
MAX_IMAGE_BYTES = 512 << 20  # the pixel cap in 16-bit RGBA, uncompressed; anything larger is not one image
_PNG = b"\x89PNG\r\n\x1a\n"


def image_problem(path: Any) -> Optional[str]:
    """Why a file cannot be an image edge decodes, from its header and last bytes alone; None when it may be one.

    A JPEG without its end marker would decode with libjpeg printing "Premature end of JPEG file" on stderr; every
    format whose header states the size (PNG, JPEG, BMP, PGM/PPM) is refused past the pixel cap before anything is
    allocated; BMP, PNM, TIFF and WebP must start with their signature. A damaged body is only found by decoding.
    """
    return _checked(path, whole=False)[1]


def _checked(path: Any, whole: bool) -> Tuple[Optional[bytes], Optional[str]]:
    """(the file's bytes when ``whole``, else None; why it cannot be an image, or None), from one open: a frame of
    an image folder is read once, header check included."""
    p = str(path)
    try:
        with open(open_regular(p), "rb") as f:  # a FIFO or /dev/zero behind the name is refused, not read
            head = f.read(_HEAD_BYTES)
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64))
            tail = f.read()
            data = None
            if _is_jpeg(p, head) and _EOI not in tail and size <= MAX_IMAGE_BYTES:
                # Data after the JPEG (a phone's Motion Photo appends its video): find the image's own end instead
                f.seek(0)
                data = f.read(size)
                end = _jpeg_end(data)
                data, tail = (data[:end], _EOI) if end is not None else (None, tail)
            problem = _problem(p, head, tail, size)
            if problem is not None or not whole:  # the header first: a file past the pixel cap is never read
                return None, problem
            if data is not None:
                return data, None
            if size > MAX_IMAGE_BYTES:
                return None, f"{size} bytes, more than the {MAX_IMAGE_BYTES >> 20} MiB an image file may hold"
            f.seek(0)
            return f.read(size), None  # read(n) allocates n bytes first: the size, not the cap
    except OSError as exc:
        return None, exc.strerror or str(exc)


def _problem(p: str, head: bytes, tail: bytes, size: int) -> Optional[str]:
    if size == 0:
        return "an empty file"
    ext = os.path.splitext(p)[1].lower()
    dims: Optional[Tuple[int, int]] = None
    if ext in (".jpg", ".jpeg"):
        if not head.startswith(b"\xff\xd8") or _EOI not in tail:
            return "not a whole JPEG (truncated or damaged)"
        dims = _jpeg_size(head)
    elif ext == ".png":
        if not head.startswith(_PNG) or len(head) < 24:
            return "not a PNG"
        dims = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    elif ext == ".bmp":
        if not head.startswith(b"BM") or len(head) < 26:
            return "not a BMP"
        if int.from_bytes(head[14:18], "little") == 12:  # OS/2's BITMAPCOREHEADER: 16-bit width and height
            dims = int.from_bytes(head[18:20], "little"), int.from_bytes(head[20:22], "little")
        else:  # BITMAPINFOHEADER and later: 32-bit, a negative height for rows stored top-down
            dims = (
                abs(int.from_bytes(head[18:22], "little", signed=True)),
                abs(int.from_bytes(head[22:26], "little", signed=True)),
            )
    elif ext in (".pgm", ".ppm"):
        fields = re.sub(rb"#[^\n]*", b" ", head[:1024]).split()
        if len(fields) < 3 or fields[0] not in (b"P2", b"P3", b"P5", b"P6") or not (fields[1].isdigit() and fields[2].isdigit()):
            return "not a PGM/PPM"
        dims = int(fields[1]), int(fields[2])
    elif ext in (".tif", ".tiff") and head[:4] not in (b"II*\x00", b"MM\x00*"):
        return "not a TIFF"
    elif ext == ".webp" and not (head.startswith(b"RIFF") and head[8:12] == b"WEBP"):
        return "not a WebP"
    if dims is not None and dims[0] * dims[1] > MAX_IMAGE_PIXELS:
        return f"{dims[0]}x{dims[1]} pixels, over the {MAX_IMAGE_PIXELS // 1_000_000}-megapixel cap"
    return None


_HEAD_BYTES = 1 << 16  # a JPEG's size sits after its EXIF and ICC blocks, usually well inside this


_EOI = b"\xff\xd9"


def _is_jpeg(p: str, head: bytes) -> bool:
    return os.path.splitext(p)[1].lower() in (".jpg", ".jpeg") and head.startswith(b"\xff\xd8")


def _jpeg_markers(data: bytes) -> Iterator[Tuple[int, int]]:
    """(offset, marker) of each marker after a JPEG's start, walking its segments by their lengths (so an EXIF
    thumbnail inside one, with its own end marker, is stepped over) and each scan's entropy-coded data, in which a
    0xFF byte is followed by 0x00 or a restart marker (ITU-T T.81, B.1.1); it stops where the data stops being a JPEG."""
    at, n = 2, len(data)
    while at + 1 < n:
        if data[at] != 0xFF:
            return
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte (B.1.1.2)
            at += 1
            continue
        yield at, marker
        if marker == 0xD9:
            return
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:  # markers without a length
            at += 2
            continue
        if at + 4 > n:
            return
        at += 2 + int.from_bytes(data[at + 2 : at + 4], "big")
        if marker == 0xDA:  # start of scan: coded data runs to the next marker
            while True:
                at = data.find(b"\xff", at)
                if at < 0 or at + 1 >= n:
                    return
                following = data[at + 1]
                if following == 0 or 0xD0 <= following <= 0xD7:
                    at += 2
                elif following == 0xFF:
                    at += 1
                elif following in _AFTER_SCAN:
                    break
                else:  # no marker a JPEG puts after its coded data: damaged, or data after a truncated image
                    return


def _jpeg_end(data: bytes) -> Optional[int]:
    """Where a JPEG's end-of-image marker ends; None when the image has none (truncated)."""
    return next((at + 2 for at, marker in _jpeg_markers(data) if marker == 0xD9), None)


# What may follow a scan's coded data (T.81, B.2.1 and B.5): the end of the image, another scan, tables (DQT, DHT,
# DAC, DRI, DNL), a comment or an application segment.
_AFTER_SCAN = frozenset([0xD9, 0xDA, 0xDB, 0xC4, 0xCC, 0xDD, 0xDC, 0xFE, *range(0xE0, 0xF0)])


def _jpeg_size(data: bytes) -> Optional[Tuple[int, int]]:
    """(width, height) from a JPEG's start-of-frame marker, or None when it is not within ``data``."""
    for at, marker in _jpeg_markers(data):
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # SOF: P, then Y (lines), X (T.81 B.2.2)
            if at + 9 > len(data):
                return None
            return int.from_bytes(data[at + 7 : at + 9], "big"), int.from_bytes(data[at + 5 : at + 7], "big")
    return None


def read_image(path: Any) -> Optional[np.ndarray]:
    """A BGR image, or None for a file that is not one edge can decode: missing, damaged, or past the pixel cap.
    One reader for sources, calibration and the builder's calibrator."""
    data, problem = _checked(path, whole=True)  # read here, so the name never reaches OpenCV (see opencv_name)
    if problem is not None or data is None:
        return None
    cv2 = _cv2()
    try:
        return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    except cv2.error:  # OpenCV 5 raises where 4.x returned None (e.g. past MAX_IMAGE_PIXELS)
        return None


def gstreamer_available() -> bool:
    cv2 = _cv2()
    for line in cv2.getBuildInformation().splitlines():
        if line.strip().startswith("GStreamer:"):
            return "YES" in line
    return False


def csi_pipeline(sensor_id: int, width: int, height: int, framerate: int, flip: int, fmt: str = "bgr") -> str:
    """The nvarguscamerasrc pipeline. For BGR, nvvidconv (the VIC) writes BGRx and GStreamer's videoconvert drops
    the fourth byte on the CPU; any other format comes straight out of nvvidconv, with no videoconvert."""
    head = (
        f"nvarguscamerasrc sensor-id={sensor_id} ! "
        f"video/x-raw(memory:NVMM), width={width}, height={height}, framerate={framerate}/1, format=NV12 ! "
        f"nvvidconv flip-method={flip} ! "
    )
    if fmt == "bgr":
        head += "video/x-raw, format=BGRx ! videoconvert ! video/x-raw, format=BGR ! "
    else:
        head += f"video/x-raw, format={pixel_format(fmt).gst} ! "
    return head + "appsink drop=true max-buffers=1"


# V4L2 cameras through OpenCV's own V4L2 backend (no GStreamer, so never a videoconvert): BGR is OpenCV converting
# on the CPU; a YUV format is the camera's raw buffer, with OpenCV's conversion off (CAP_PROP_CONVERT_RGB = 0).
V4L2_FOURCC = {"yuyv": "YUYV", "uyvy": "UYVY", "nv12": "NV12"}


def camera_format(cfg: Any, camera: str, gpu: bool) -> str:
    """The pixel format a camera source hands over: ``source.format``, or for ``auto`` the camera's own format
    when the GPU preprocesses (NV12 from nvvidconv, YUYV from a USB camera) and BGR otherwise."""
    fmt = getattr(cfg, "format", "auto")
    if fmt == "auto":
        return ("nv12" if camera == "csi" else "yuyv") if gpu else "bgr"
    if camera == "v4l2" and fmt != "bgr" and fmt not in V4L2_FOURCC:
        raise EdgeError(
            f"source.format {fmt}: a V4L2 camera delivers {', '.join(['bgr', *V4L2_FOURCC])}; use one of those "
            "(or a csi:// camera, whose nvvidconv gives bgrx and rgba)"
        )
    return fmt


def _file_source(path: Path, uri: str, loop: bool) -> Source:
    """One file: a photo decoded by OpenCV's image reader, anything else a video through VideoCapture."""
    if path.suffix.lower() in IMAGE_EXTS:
        return ImageSource([str(path)], uri, loop)
    return CaptureSource(str(path), uri, live=False, loop=loop)


def open_source(
    cfg: Any, stop: threading.Event, base_dir: Optional[Path] = None, gpu: bool = False, late: bool = False
) -> Source:
    """Open the source named by ``cfg.uri`` (a SourceConfig); relative file paths are relative to ``base_dir``.
    ``gpu``: the frames go to the CUDA kernel, which converts camera formats itself. ``late``: a stream that is not
    reachable yet keeps trying in its reads instead of failing here (a pool starts its other sources)."""
    uri = cfg.uri.strip()
    if hasattr(cfg, "format"):
        check_source_format(cfg, "source")  # also for a SourceConfig made in code, which load_config never saw
    fmt = "bgr"
    scheme = uri.split("://", 1)[0].lower() + "://" if "://" in uri else ""
    if scheme:  # RTSP://cam is rtsp://cam (RFC 3986), and FFmpeg knows its protocols by their lower-case names only
        uri = scheme + uri.split("://", 1)[1]
    if scheme == "asset://":
        from edge import assets

        # the pinned file, opened as a file path is (a photo through VideoCapture differed by up to 74 levels)
        src: Source = _file_source(assets.resolve(uri[len("asset://") :]), uri, cfg.loop)
    elif scheme in ("rtsp://", "rtsps://", "http://", "https://"):
        r = cfg.reconnect
        src = StreamSource(uri, r.initial_delay_s, r.max_delay_s, r.max_attempts, stop, late=late)
    elif scheme == "csi://":
        sensor = uri[len("csi://") :]
        if not sensor.isdigit():
            raise EdgeError(f"source '{uri}': expected csi://N with a sensor number, e.g. csi://0")
        if not gstreamer_available():
            raise EdgeError(
                f"source '{uri}': this cv2 was built without GStreamer, which csi:// needs; on a Jetson use JetPack's OpenCV "
                "(sudo apt install python3-opencv; pip uninstall opencv-python opencv-python-headless)"
            )
        fmt = camera_format(cfg, "csi", gpu)
        pipe = csi_pipeline(int(sensor), cfg.width or 1920, cfg.height or 1080, cfg.framerate or 30, cfg.flip, fmt)
        src = CaptureSource(pipe, uri, live=True, api=_cv2().CAP_GSTREAMER)
    elif scheme == "v4l2://" or uri.startswith("/dev/video"):
        device = uri[len("v4l2://") :] if uri.startswith("v4l2://") else uri
        if not os.path.exists(device):
            raise EdgeError(f"source '{uri}': {device} does not exist; list cameras with `v4l2-ctl --list-devices`")
        cv2 = _cv2()
        fmt = camera_format(cfg, "v4l2", gpu)
        props = {cv2.CAP_PROP_FRAME_WIDTH: cfg.width, cv2.CAP_PROP_FRAME_HEIGHT: cfg.height, cv2.CAP_PROP_FPS: cfg.framerate}
        props = {k: v for k, v in props.items() if v}
        if fmt != "bgr":  # the camera's own bytes: the pixel format first, then OpenCV's conversion off
            props[cv2.CAP_PROP_FOURCC] = cv2.VideoWriter_fourcc(*V4L2_FOURCC[fmt])
            props[cv2.CAP_PROP_CONVERT_RGB] = 0
        src = CaptureSource(device, uri, live=True, api=cv2.CAP_V4L2, props=props)
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
            src = _file_source(path, uri, cfg.loop)
        elif any(c in uri for c in "*?["):
            files = sorted(f for f in glob.glob(uri) if Path(f).suffix.lower() in IMAGE_EXTS)
            if not files:
                raise EdgeError(f"source '{uri}': the pattern matches no image files")
            src = ImageSource(files, uri, cfg.loop)
        elif special(path):
            raise EdgeError(
                f"source '{uri}': {special(path)}, not a video or image file; give a video file, an image folder or glob, "
                "/dev/videoN for a camera, csi://N or rtsp://…"
            )
        else:
            raise EdgeError(
                f"source '{uri}': no such file or folder; give a video file, an image folder or glob, /dev/videoN, csi://N or rtsp://…"
            )
    src.format = fmt
    if pixel_format(fmt).yuv:
        src.colour = colour(getattr(cfg, "color_matrix", "bt601"), getattr(cfg, "color_range", "limited"))
    if cfg.live is not None:
        src.live = cfg.live
    return src
