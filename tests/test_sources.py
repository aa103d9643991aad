"""Sources by URI on real files: video, image folders and globs, loops, vanishing files, clear errors; image headers
against the formats' definitions; cameras and streams in-process through a stand-in for cv2.VideoCapture."""

from __future__ import annotations

import logging
import re
import struct
import sys
import threading
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from edge.config import ReconnectConfig, SourceConfig
from edge.errors import EdgeError, MissingDependency, RunFailed
from edge.redact import redact
from edge.runtime.sources import (
    StreamSource,
    _jpeg_size,
    csi_pipeline,
    gstreamer_available,
    image_problem,
    open_source,
    read_image,
)


def src_cfg(uri, **kw):
    cfg = SourceConfig(uri=str(uri))
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg


def read_all(src, limit=10_000):
    frames = []
    while len(frames) < limit:
        f = src.read()
        if f is None:
            break
        frames.append(f)
    return frames


def test_video_file_gives_every_frame_with_indices_and_monotonic_times(megamind):
    src = open_source(src_cfg(megamind), threading.Event())
    frames = read_all(src)
    src.close()
    assert len(frames) == 270 and not src.live
    assert [f.index for f in frames] == list(range(270))
    assert all(b.t_capture >= a.t_capture for a, b in zip(frames, frames[1:]))
    assert frames[0].image.shape == (528, 720, 3)


def test_loop_restarts_a_file(megamind):
    src = open_source(src_cfg(megamind, loop=True), threading.Event())
    frames = read_all(src, limit=300)
    assert len(frames) == 300 and frames[-1].index == 299


@pytest.fixture()
def image_dir(tmp_path, megamind_frames):
    for i, f in megamind_frames.items():
        cv2.imwrite(str(tmp_path / f"f{i:03d}.jpg"), f)
    (tmp_path / "notes.txt").write_text("not an image")
    return tmp_path


def test_image_folder_glob_and_single_file(image_dir):
    names = [f.origin for f in read_all(open_source(src_cfg(image_dir), threading.Event()))]
    assert names == ["f000.jpg", "f001.jpg", "f125.jpg", "f200.jpg"]
    assert len(read_all(open_source(src_cfg(image_dir / "f0*.jpg"), threading.Event()))) == 2
    assert len(read_all(open_source(src_cfg(image_dir / "f200.jpg"), threading.Event()))) == 1


def test_image_that_vanishes_mid_run_is_skipped(image_dir):
    src = open_source(src_cfg(image_dir), threading.Event())
    first = src.read()
    (image_dir / "f001.jpg").unlink()
    rest = read_all(src)
    assert [f.origin for f in [first, *rest]] == ["f000.jpg", "f125.jpg", "f200.jpg"]
    assert src.info()["skipped"] == 1


@pytest.mark.parametrize(
    "uri, message",
    [
        ("/nonexistent/clip.mp4", "no such file or folder"),
        ("/dev/video97", "/dev/video97 does not exist"),
        ("v4l2:///dev/video97", "/dev/video97 does not exist"),
        ("csi://zero", "expected csi://N"),
    ],
)
def test_sources_that_cannot_open_say_why(uri, message):
    with pytest.raises(EdgeError, match=message):
        open_source(src_cfg(uri), threading.Event())


def test_unreadable_video_file_is_an_error(tmp_path):
    bad = tmp_path / "clip.mp4"
    bad.write_bytes(b"not a video at all" * 100)
    with pytest.raises(EdgeError, match="cannot be opened by OpenCV"):
        open_source(src_cfg(bad), threading.Event())


def test_csi_without_gstreamer_says_how_to_fix():
    if gstreamer_available():
        pytest.skip("this cv2 has GStreamer; the error path needs pip's cv2 without it")
    with pytest.raises(EdgeError, match="built without GStreamer.*python3-opencv"):
        open_source(src_cfg("csi://0"), threading.Event())


def test_csi_pipeline_carries_size_rate_and_flip():
    p = csi_pipeline(1, 1280, 720, 60, 2)
    assert "sensor-id=1" in p and "width=1280, height=720, framerate=60/1" in p and "flip-method=2" in p
    assert p.endswith("appsink drop=true max-buffers=1")


def test_stream_passwords_are_redacted_in_logs():
    assert redact("rtsp://admin:secret@10.0.0.2/stream") == "rtsp://admin:***@10.0.0.2/stream"


def test_live_flag_can_be_forced(megamind):
    """source.live overrides what the URI suggests, both ways: a file read as a live feed never reports a short
    file at its end (a live feed has no length), and the run summary says which it was."""
    default = open_source(SimpleNamespace(uri=str(megamind), loop=False, live=None), threading.Event())
    forced = open_source(SimpleNamespace(uri=str(megamind), loop=False, live=True), threading.Event())
    assert (default.live, forced.live) == (False, True)
    assert (default.info()["live"], forced.info()["live"]) == (False, True)
    told = []
    for src in (default, forced):
        src.declared = 10_000  # a header promising far more frames than the file holds
        while src.read() is not None:
            pass
        told.append(getattr(src, "_told_short", False))
    assert told == [True, False]  # the file source warns of a truncated file; the live one has no length to miss


# -- in-process: what each source hands over and says, with no child process --------------------------------------


def small_image():
    """A 40x30 BGR image with varied pixels (a flat one would compress to nothing)."""
    return (np.arange(30 * 40 * 3) % 251).astype(np.uint8).reshape(30, 40, 3)


def encoded(ext):
    ok, data = cv2.imencode(ext, small_image())
    assert ok
    return data.tobytes()


def write(path, data):
    path.write_bytes(data)
    return path


def with_fill_bytes(jpeg, n):
    """The JPEG with n 0xFF fill bytes before its start-of-frame marker (ITU-T T.81 B.1.1.2 allows any number)."""
    at = jpeg.find(b"\xff\xc0")  # OpenCV writes baseline JPEGs: SOF0
    assert at > 0
    return jpeg[:at] + b"\xff" * n + jpeg[at:]


def with_jpeg_size(jpeg, width, height):
    """SOF0 is FF C0, Lf (2 bytes), P (1), Y = lines (2), X = samples per line (2): T.81 B.2.2."""
    at = jpeg.find(b"\xff\xc0")
    return jpeg[: at + 5] + struct.pack(">HH", height, width) + jpeg[at + 9 :]


@pytest.mark.parametrize("fill", [1, 3])
def test_jpeg_size_skips_fill_bytes_before_a_marker(tmp_path, fill):
    """libjpeg decodes a JPEG with fill bytes before its SOF as the same image; its size is still read from the header,
    so one past the pixel cap is refused before decoding (an odd count catches a skip of two at a time)."""
    jpeg = with_fill_bytes(encoded(".jpg"), fill)
    decoded = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert decoded.shape == (30, 40, 3)
    assert _jpeg_size(jpeg) == (40, 30)
    assert image_problem(write(tmp_path / "ok.jpg", jpeg)) is None
    huge = write(tmp_path / "huge.jpg", with_jpeg_size(jpeg, 9000, 8000))
    assert image_problem(huge) == "9000x8000 pixels, over the 67-megapixel cap"


def test_image_problem_names_what_is_wrong_with_each_format(tmp_path):
    """Signatures and header sizes from the formats' definitions: PNG's 8-byte signature and IHDR width/height
    (big-endian at 16..23), BMP's 'BM' with width at 18..21 and height at 22..25 (signed, negative = top-down),
    RIFF....WEBP; the extension's case does not matter."""
    jpeg, png, bmp, webp = encoded(".jpg"), encoded(".png"), encoded(".bmp"), encoded(".webp")
    for name, data in (("a.jpg", jpeg), ("a.png", png), ("A.PNG", png), ("a.bmp", bmp), ("a.webp", webp)):
        path = write(tmp_path / name, data)
        assert image_problem(path) is None, name
        assert read_image(path).shape == (30, 40, 3), name  # and OpenCV decodes each of them
    assert image_problem(write(tmp_path / "cut.jpg", jpeg[:-2])) == "not a whole JPEG (truncated or damaged)"
    assert image_problem(write(tmp_path / "b.png", jpeg)) == "not a PNG"
    assert image_problem(write(tmp_path / "B.PNG", jpeg)) == "not a PNG"
    big_png = png[:16] + struct.pack(">II", 9000, 8000) + png[24:]
    assert image_problem(write(tmp_path / "big.PNG", big_png)) == "9000x8000 pixels, over the 67-megapixel cap"
    assert image_problem(write(tmp_path / "b.webp", b"RIFF\x00\x00\x00\x00WAVEfmt ")) == "not a WebP"
    top_down = bmp[:18] + struct.pack("<ii", 9000, -8000) + bmp[26:]
    assert image_problem(write(tmp_path / "top.bmp", top_down)) == "9000x8000 pixels, over the 67-megapixel cap"
    # 26 bytes hold the width and height: enough to refuse a size; 25 are not a BMP header
    assert image_problem(write(tmp_path / "h26.bmp", top_down[:26])) == "9000x8000 pixels, over the 67-megapixel cap"
    assert image_problem(write(tmp_path / "h25.bmp", top_down[:25])) == "not a BMP"


def test_folder_without_images_lists_the_extensions_it_takes(tmp_path):
    (tmp_path / "notes.txt").write_text("not an image")
    with pytest.raises(EdgeError) as exc:
        open_source(src_cfg(tmp_path), threading.Event())
    assert str(exc.value) == (
        f"source '{tmp_path}': folder has no images (.bmp, .jpeg, .jpg, .pgm, .png, .ppm, .tif, .tiff, .webp)"
    )


def test_a_device_that_is_no_file_says_what_to_give():
    with pytest.raises(EdgeError) as exc:
        open_source(src_cfg("/dev/null"), threading.Event())
    assert str(exc.value) == (
        "source '/dev/null': a character device, not a video or image file; give a video file, an image folder or "
        "glob, /dev/videoN for a camera, csi://N or rtsp://…"
    )


def test_relative_paths_are_taken_from_base_dir_or_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "frames").mkdir()
    write(tmp_path / "frames" / "a.jpg", encoded(".jpg"))
    src = open_source(src_cfg("frames"), threading.Event(), base_dir=tmp_path)
    assert src.info()["uri"] == str(tmp_path / "frames")  # the name the summary and errors show
    assert [f.origin for f in read_all(src)] == ["a.jpg"]
    monkeypatch.chdir(tmp_path)
    src = open_source(src_cfg("frames"), threading.Event())  # no base_dir: the working directory's
    assert src.info()["uri"] == "frames" and [f.origin for f in read_all(src)] == ["a.jpg"]


def test_skipped_images_say_why_and_only_the_first_ten_are_logged(tmp_path, caplog):
    write(tmp_path / "a.jpg", encoded(".jpg"))
    write(tmp_path / "b00.tif", b"II*\x00" + bytes(200))  # a TIFF signature, then nothing a decoder can use
    for i in range(1, 11):
        write(tmp_path / f"b{i:02d}.jpg", encoded(".jpg")[:-2])
    src = open_source(src_cfg(tmp_path), threading.Event())
    with caplog.at_level(logging.WARNING, logger="edge.source"):
        assert [f.origin for f in read_all(src)] == ["a.jpg"]
    lines = [r.getMessage() for r in caplog.records if r.name == "edge.source"]
    assert len(lines) == 10 and src.info()["skipped"] == 11
    assert lines[0] == f"source {tmp_path}: cannot read {tmp_path / 'b00.tif'} (OpenCV cannot decode it); skipped"
    assert lines[1] == (
        f"source {tmp_path}: cannot read {tmp_path / 'b01.jpg'} (not a whole JPEG (truncated or damaged)); skipped"
    )
    assert all(not line.endswith("in the summary)") for line in lines[:9])
    assert lines[9] == (
        f"source {tmp_path}: cannot read {tmp_path / 'b09.jpg'} (not a whole JPEG (truncated or damaged)); skipped; "
        "further skips are only counted (source.skipped in the summary)"
    )


def test_a_folder_of_only_broken_images_is_an_error_not_an_empty_run(tmp_path):
    for name in ("a.jpg", "b.jpg"):
        write(tmp_path / name, encoded(".jpg")[:-2])
    src = open_source(src_cfg(tmp_path), threading.Event())
    with pytest.raises(EdgeError) as exc:
        src.read()
    assert str(exc.value) == (
        f"source '{tmp_path}': none of its 2 files could be read as images (corrupt, or larger than 67 megapixels)"
    )


def test_a_one_frame_video_loops(tmp_path):
    clip = str(tmp_path / "one.avi")
    writer = cv2.VideoWriter(clip, cv2.VideoWriter_fourcc(*"MJPG"), 10, (40, 30))
    writer.write(small_image())
    writer.release()
    src = open_source(src_cfg(clip, loop=True), threading.Event())
    assert [f.index for f in read_all(src, limit=3)] == [0, 1, 2]
    assert src.info()["declared_frames"] == 1


def test_asset_clip_loops_and_reports_its_declared_frames(megamind):
    src = open_source(src_cfg("asset://megamind", loop=True), threading.Event())
    assert len(read_all(src, limit=272)) == 272  # the clip holds 270 frames: two more come from its start again
    assert src.info()["declared_frames"] == 270 and src.info()["uri"] == "asset://megamind"


def test_an_asset_photo_is_decoded_as_the_same_file_by_path(tmp_path):
    """asset://messi went through VideoCapture, whose FFmpeg JPEG decoder and colour conversion gave pixels up to 74
    levels from OpenCV's imread of the same file: a model saw another frame than from the file's path (found when the
    COCO SSD's detections on it differed from TFLite's by 0.003 in score)."""
    from edge import assets

    src = open_source(src_cfg("asset://messi"), threading.Event())
    (frame,) = read_all(src)
    want = cv2.imread(str(assets.resolve("messi")))
    assert want.shape == (342, 548, 3) and np.array_equal(frame.bgr(), want)
    assert src.info()["uri"] == "asset://messi"


def test_without_cv2_a_video_source_says_what_to_install(tmp_path, monkeypatch):
    clip = write(tmp_path / "clip.mp4", b"\x00" * 64)
    monkeypatch.setitem(sys.modules, "cv2", None)  # import cv2 now fails, as where OpenCV is not installed
    with pytest.raises(MissingDependency, match=r"^Python module 'cv2' is needed for video capture but cannot be"):
        open_source(src_cfg(clip), threading.Event())


# Cameras and streams through a stand-in for OpenCV: no camera, no network, and pip's cv2 here has no GStreamer.


def build_info(gstreamer):
    """This cv2's real build information with its 'GStreamer:' line saying ``gstreamer`` (e.g. 'YES (1.22.0)')."""
    text, n = re.subn(r"(?m)^(\s*GStreamer:\s+).*$", lambda m: m.group(1) + gstreamer, cv2.getBuildInformation())
    assert n == 1
    return text


def fake_build_info(monkeypatch, gstreamer):
    """cv2.getBuildInformation faked to say ``gstreamer`` on its GStreamer line."""
    info = build_info(gstreamer)
    monkeypatch.setattr(cv2, "getBuildInformation", lambda: info)


class FakeCapture:
    """Stands in for cv2.VideoCapture (monkeypatched: see ``capture``). Like OpenCV's it takes (target[,
    apiPreference[, params]]), records each cap.set(propId, value), declares a frame size through cap.get and hands
    out the frames queued for it."""

    def __init__(self, world, *args):
        self.world, self.args, self.sets = world, args, []
        self.opened = world.opens.pop(0) if world.opens else True
        world.caps.append(self)

    def isOpened(self):
        return self.opened

    def release(self):
        self.world.released += 1

    def set(self, prop_id, value):
        self.sets.append((prop_id, value))
        return True

    def get(self, prop_id):
        props = {
            cv2.CAP_PROP_FRAME_WIDTH: self.world.size[0],
            cv2.CAP_PROP_FRAME_HEIGHT: self.world.size[1],
            cv2.CAP_PROP_FRAME_COUNT: self.world.count,
        }
        return float(props.get(prop_id, 0))

    def read(self, image=None):
        return (True, self.world.frames.pop(0)) if self.world.frames else (False, None)


@pytest.fixture()
def capture(monkeypatch):
    """A cv2 with GStreamer whose VideoCapture is a FakeCapture; set ``opens`` (False: that open fails), ``size``
    and ``count`` (the frame size and count the capture declares) and ``frames`` before opening a source."""
    world = SimpleNamespace(opens=[], caps=[], released=0, size=(1920, 1080), count=0, frames=[])
    monkeypatch.setattr(cv2, "VideoCapture", lambda *args: FakeCapture(world, *args))
    fake_build_info(monkeypatch, "YES (1.22.0)")
    return world


def test_gstreamer_is_read_from_the_build_information(monkeypatch):
    """OpenCV's build information has a line like '    GStreamer:                   YES (1.22.0)' (faked here: this
    cv2 says NO)."""
    for line, want in (("YES (1.22.0)", True), ("NO", False)):
        fake_build_info(monkeypatch, line)
        assert gstreamer_available() is want, line


def test_csi_camera_opens_nvarguscamerasrc_through_gstreamer(capture):
    src = open_source(src_cfg("csi://1"), threading.Event())
    assert capture.caps[0].args == (
        "nvarguscamerasrc sensor-id=1 ! video/x-raw(memory:NVMM), width=1920, height=1080, framerate=30/1, "
        "format=NV12 ! nvvidconv flip-method=0 ! video/x-raw, format=BGRx ! videoconvert ! video/x-raw, format=BGR ! "
        "appsink drop=true max-buffers=1",
        cv2.CAP_GSTREAMER,
    )
    assert (src.live, src.format, src.info()["uri"]) == (True, "bgr", "csi://1")


def test_csi_camera_for_the_gpu_takes_nv12_at_the_configured_size(capture):
    cfg = src_cfg("csi://0", width=1280, height=720, framerate=60, flip=2, color_matrix="bt709", color_range="full")
    src = open_source(cfg, threading.Event(), gpu=True)
    assert capture.caps[0].args == (
        "nvarguscamerasrc sensor-id=0 ! video/x-raw(memory:NVMM), width=1280, height=720, framerate=60/1, "
        "format=NV12 ! nvvidconv flip-method=2 ! video/x-raw, format=NV12 ! appsink drop=true max-buffers=1",
        cv2.CAP_GSTREAMER,
    )
    assert src.format == "nv12" and src.info()["colour"] == "bt709-full"


def test_v4l2_camera_for_the_gpu_sets_size_rate_then_raw_yuyv(capture, tmp_path):
    device = tmp_path / "video0"
    device.touch()
    cfg = src_cfg(f"v4l2://{device}", width=1280, height=720, framerate=30, color_range="full")
    src = open_source(cfg, threading.Event(), gpu=True)
    cap = capture.caps[0]
    assert cap.args == (str(device), cv2.CAP_V4L2)
    assert cap.sets == [
        (cv2.CAP_PROP_FRAME_WIDTH, 1280),
        (cv2.CAP_PROP_FRAME_HEIGHT, 720),
        (cv2.CAP_PROP_FPS, 30),
        (cv2.CAP_PROP_FOURCC, cv2.VideoWriter_fourcc(*"YUYV")),  # the pixel format first, then conversion off
        (cv2.CAP_PROP_CONVERT_RGB, 0),
    ]
    assert src.format == "yuyv" and src.info()["colour"] == "bt601-full"
    assert src.description == f"v4l2://{device}" and src.info()["uri"] == f"v4l2://{device}"  # as the user wrote it
    capture.frames.append(np.zeros((720, 1280, 2), np.uint8))  # the camera's YUYV bytes
    frame = src.read()
    assert frame.format == "yuyv" and src.format == "yuyv"


def test_a_yuv_camera_that_opencv_converted_is_followed_with_a_warning(capture, caplog):
    src = open_source(src_cfg("csi://0"), threading.Event(), gpu=True)
    capture.frames.append(np.zeros((1080, 1920, 3), np.uint8))  # BGR, where NV12 was asked for
    with caplog.at_level(logging.WARNING, logger="edge.source"):
        frame = src.read()
    assert frame.format == "bgr" and src.format == "bgr" and frame.image.shape == (1080, 1920, 3)
    assert [r.getMessage() for r in caplog.records if r.name == "edge.source"] == [
        "source csi://0: OpenCV delivers BGR, not nv12; the CPU converted it"
    ]


def test_a_bgr_camera_that_delivers_four_channels_is_refused(capture):
    src = open_source(src_cfg("csi://0", format="bgr"), threading.Event())
    capture.frames.append(np.zeros((1080, 1920, 4), np.uint8))
    with pytest.raises(EdgeError) as exc:
        src.read()
    assert str(exc.value) == (
        "a bgr frame must be uint8 of shape (H, W, 3), got uint8 [1080, 1920, 4]: set source.format to what the camera delivers"
    )


def test_a_camera_declaring_more_than_the_pixel_cap_is_refused_before_a_frame(capture):
    capture.size = (8192, 8192)  # the cap itself opens
    open_source(src_cfg("csi://0"), threading.Event())
    capture.size = (8193, 8192)
    with pytest.raises(EdgeError) as exc:
        open_source(src_cfg("csi://0"), threading.Event())
    assert str(exc.value) == (
        "source 'csi://0': frames of 8193x8192 pixels are over the 67-megapixel cap (image files have it too); "
        "lower the camera's or stream's resolution"
    )
    assert capture.released == 1  # the refused capture is let go


def stream_cfg(uri, max_attempts):
    return src_cfg(uri, reconnect=ReconnectConfig(initial_delay_s=0.0, max_delay_s=0.0, max_attempts=max_attempts))


def test_stream_gives_up_after_max_attempts(capture):
    capture.opens = [False, False, False]  # never reachable
    uri = "rtsp://admin:secret@127.0.0.1:8554/cam"
    src = open_source(stream_cfg(uri, 2), threading.Event(), late=True)
    with pytest.raises(RunFailed) as exc:
        src.read()
    assert str(exc.value) == (
        "source 'rtsp://admin:***@127.0.0.1:8554/cam': stream lost and 2 reconnect attempts failed; check the "
        "camera/server, or raise source.reconnect.max_attempts (0 = forever)"
    )
    assert len(capture.caps) == 3 and capture.caps[0].args[:2] == (uri, cv2.CAP_FFMPEG)


def test_stream_that_comes_back_counts_a_reconnect(capture):
    capture.opens = [False]  # not reachable at the start, then back
    capture.frames.append(np.zeros((1080, 1920, 3), np.uint8))
    src = open_source(stream_cfg("rtsp://127.0.0.1:8554/cam", 0), threading.Event(), late=True)
    assert src.info()["reconnects"] == 0
    assert src.read().image.shape == (1080, 1920, 3)
    assert src.info()["reconnects"] == 1


def test_stream_frames_past_the_pixel_cap_stop_the_run(capture):
    capture.size = (0, 0)  # a stream that declares no size
    src = open_source(stream_cfg("rtsp://127.0.0.1:8554/cam", 0), threading.Event())
    capture.frames.append(np.broadcast_to(np.zeros(3, np.uint8), (9000, 8000, 3)))  # no memory behind it
    with pytest.raises(RunFailed) as exc:
        src.read()
    assert str(exc.value) == (
        "source 'rtsp://127.0.0.1:8554/cam': frames of 8000x9000 pixels are over the 67-megapixel cap (image files "
        "have it too); lower the camera's or stream's resolution"
    )


# -- what the second mutation sample left unpinned: network streams, cameras, short files, PNG heads -----------------

STREAM_TIMEOUTS = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, 10_000, cv2.CAP_PROP_READ_TIMEOUT_MSEC, 5_000]  # OpenCV's params list


def edge_log(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "edge.source"]


@pytest.mark.parametrize(
    "uri",
    [
        "rtsp://127.0.0.1:8554/cam",
        "RTSP://127.0.0.1:8554/cam",
        "rtsps://127.0.0.1:8322/cam",
        "Rtsps://127.0.0.1:8322/cam",
        "http://127.0.0.1:8080/video.mjpg",
        "HTTP://127.0.0.1:8080/video.mjpg",
        "https://127.0.0.1:8443/video.mjpg",
        "HTTPS://127.0.0.1:8443/video.mjpg",
        "hTtPs://127.0.0.1:8443/video.mjpg",
    ],
)
def test_network_streams_open_through_ffmpeg_with_open_and_read_timeouts(capture, uri):
    """Every network scheme, in any letter case, is a live stream opened as cv2.VideoCapture(uri, cv2.CAP_FFMPEG,
    [CAP_PROP_OPEN_TIMEOUT_MSEC, ms, CAP_PROP_READ_TIMEOUT_MSEC, ms]) (the fake records the arguments). The scheme
    FFmpeg is handed is lower-cased: the test below."""
    src = open_source(stream_cfg(uri, 0), threading.Event())
    assert [(cap.args[0].lower(), *cap.args[1:]) for cap in capture.caps] == [(uri.lower(), cv2.CAP_FFMPEG, STREAM_TIMEOUTS)]
    assert src.live is True and src.info()["live"] is True and src.format == "bgr"


@pytest.mark.parametrize("missing", ["CAP_PROP_OPEN_TIMEOUT_MSEC", "CAP_PROP_READ_TIMEOUT_MSEC"])
def test_a_stream_on_an_opencv_without_timeout_properties_opens_without_them(capture, monkeypatch, missing):
    """OpenCV before 4.5.2 (JetPack 4's) has neither property: faked here by deleting one from this cv2. The stream
    still opens, as cv2.VideoCapture(uri, cv2.CAP_FFMPEG), and reads."""
    monkeypatch.delattr(cv2, missing)
    src = open_source(stream_cfg("rtsp://127.0.0.1:8554/cam", 0), threading.Event())
    assert [cap.args for cap in capture.caps] == [("rtsp://127.0.0.1:8554/cam", cv2.CAP_FFMPEG)]
    capture.frames.append(np.zeros((30, 40, 3), np.uint8))
    assert src.read().image.shape == (30, 40, 3)


class RecordingStop:
    """Stands in for the stop event (threading.Event): never set, and its wait(timeout) records the timeout and
    returns at once, so the reconnect delays are seen without waiting for them."""

    def __init__(self):
        self.waits = []

    def is_set(self):
        return False

    def wait(self, timeout=None):
        self.waits.append(timeout)
        return False


def test_stream_reconnects_back_off_exponentially_up_to_the_maximum(capture, caplog):
    capture.opens = [False] * 7  # never reachable: the first open, then every reconnect
    stop = RecordingStop()
    cfg = src_cfg("rtsp://127.0.0.1:8554/cam", reconnect=ReconnectConfig(initial_delay_s=0.5, max_delay_s=4.0, max_attempts=6))
    src = open_source(cfg, stop, late=True)
    caplog.clear()  # the 'not reachable now' line of the open: pinned in the next test
    with caplog.at_level(logging.WARNING, logger="edge.source"), pytest.raises(RunFailed, match="6 reconnect attempts"):
        src.read()
    assert stop.waits == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]  # doubling, then held at max_delay_s
    assert edge_log(caplog) == [
        f"source rtsp://127.0.0.1:8554/cam: no frame; reconnect attempt {n} in {d:.1f} s" for n, d in enumerate(stop.waits, 1)
    ]


def test_an_unreachable_stream_fails_at_once_unless_late(capture, caplog):
    """Without ``late`` (open_source's default and StreamSource's) a stream that cannot be opened is an error at
    once; with it, a warning names it (password redacted) and its reads keep trying."""
    uri = "rtsp://admin:secret@127.0.0.1:8554/cam"
    capture.opens = [False, False]
    with pytest.raises(EdgeError) as exc:
        open_source(stream_cfg(uri, 1), threading.Event())
    assert str(exc.value).startswith("source 'rtsp://admin:***@127.0.0.1:8554/cam': cannot be opened by OpenCV")
    with pytest.raises(EdgeError, match="cannot be opened by OpenCV"):
        StreamSource(uri, 0.0, 0.0, 1, threading.Event())
    capture.opens = [False]
    with caplog.at_level(logging.WARNING, logger="edge.source"):
        src = open_source(stream_cfg(uri, 1), threading.Event(), late=True)
    assert edge_log(caplog) == [
        "source rtsp://admin:***@127.0.0.1:8554/cam: not reachable now; its reads keep trying (source.reconnect)"
    ]
    assert src.live is True
    src.close()  # nothing open to release, and no error


def test_close_releases_the_camera(capture):
    src = open_source(src_cfg("csi://0"), threading.Event())
    assert capture.released == 0
    src.close()
    assert capture.released == 1


def test_a_v4l2_camera_refuses_a_format_only_nvvidconv_gives(capture, tmp_path):
    device = tmp_path / "video0"
    device.touch()
    for fmt in ("rgba", "bgrx"):
        with pytest.raises(EdgeError) as exc:
            open_source(src_cfg(f"v4l2://{device}", format=fmt), threading.Event(), gpu=True)
        assert str(exc.value) == (
            f"source.format {fmt}: a V4L2 camera delivers bgr, yuyv, uyvy, nv12; use one of those (or a csi:// camera, "
            "whose nvvidconv gives bgrx and rgba)"
        )
    assert capture.caps == []  # refused before the device is opened


def test_a_source_config_made_in_code_without_colour_keys_is_bt601_limited(capture):
    """A cfg object with only the keys a source needs (no format, color_matrix or color_range) takes the documented
    defaults: for the GPU a CSI camera hands over NV12 in BT.601 limited range."""
    cfg = SimpleNamespace(uri="csi://0", loop=False, live=None, width=None, height=None, framerate=None, flip=0)
    src = open_source(cfg, threading.Event(), gpu=True)
    assert src.format == "nv12" and src.info()["colour"] == "bt601-limited"


def test_a_bgr_camera_that_delivers_one_channel_is_refused(capture):
    src = open_source(src_cfg("csi://0", format="bgr"), threading.Event())
    capture.frames.append(np.zeros((1080, 1920), np.uint8))  # a grey (2-D) frame
    with pytest.raises(EdgeError) as exc:
        src.read()
    assert str(exc.value) == (
        "a bgr frame must be uint8 of shape (H, W, 3), got uint8 [1080, 1920]: set source.format to what the camera delivers"
    )


def file_of_frames(capture, monkeypatch, tmp_path, declared, held):
    """A video file whose header declares ``declared`` frames and which holds ``held`` (the fake cv2.VideoCapture
    serves them again on every open, as a reopened file starts from its beginning)."""
    clip = [np.full((30, 40, 3), i % 256, np.uint8) for i in range(held)]

    def open_clip(*args):
        capture.frames[:] = list(clip)
        return FakeCapture(capture, *args)

    capture.count = declared
    monkeypatch.setattr(cv2, "VideoCapture", open_clip)
    return write(tmp_path / "clip.mp4", b"\x00" * 64)


def test_a_file_shorter_than_its_header_is_told_once_at_its_end(capture, monkeypatch, tmp_path, caplog):
    path = file_of_frames(capture, monkeypatch, tmp_path, declared=100, held=10)
    src = open_source(src_cfg(path), threading.Event())
    with caplog.at_level(logging.WARNING, logger="edge.source"):
        assert len(read_all(src, limit=9)) == 9
        assert edge_log(caplog) == []  # not before the end
        assert len(read_all(src)) == 1
        assert src.read() is None  # asked again at the end: told once
    assert edge_log(caplog) == [
        f"source {path}: ended after 10 of the 100 frames its header declares; the file is truncated or damaged"
    ]


def test_a_looping_short_file_is_told_once_not_every_pass(capture, monkeypatch, tmp_path, caplog):
    path = file_of_frames(capture, monkeypatch, tmp_path, declared=100, held=10)
    src = open_source(src_cfg(path, loop=True), threading.Event())
    with caplog.at_level(logging.WARNING, logger="edge.source"):
        frames = read_all(src, limit=35)  # three passes and a half
    assert [int(f.image[0, 0, 0]) for f in frames] == [i % 10 for i in range(35)]
    assert edge_log(caplog) == [
        f"source {path}: ended after 10 of the 100 frames its header declares; the file is truncated or damaged"
    ]


def test_a_png_head_of_24_bytes_holds_its_size(tmp_path):
    """The 8-byte signature, IHDR's length and type (8), then width and height big-endian at 16..23: 24 bytes are
    enough to read (and refuse) the size; 23 are not a PNG header."""
    png = encoded(".png")
    assert struct.unpack(">II", png[16:24]) == (40, 30)
    big = png[:16] + struct.pack(">II", 9000, 8000)
    assert image_problem(write(tmp_path / "h24.png", big)) == "9000x8000 pixels, over the 67-megapixel cap"
    assert image_problem(write(tmp_path / "small24.png", png[:24])) is None
    assert image_problem(write(tmp_path / "h23.png", big[:23])) == "not a PNG"


# -- bugs found by the mutation work, left for the module's owner (edge/ was not to be changed here) -----------------


def os2_bmp(image):
    """An OS/2 1.x BMP: the 14-byte file header, then a 12-byte BITMAPCOREHEADER whose width and height are 16-bit
    (bytes 18..19 and 20..21), then bottom-up 24-bit rows (4-byte aligned: 40 pixels are 120 bytes)."""
    h, w = image.shape[:2]
    rows = b"".join(image[y].tobytes() for y in range(h - 1, -1, -1))
    return b"BM" + struct.pack("<IHHI", 26 + len(rows), 0, 0, 26) + struct.pack("<IHHHH", 12, w, h, 1, 24) + rows


def test_an_os2_bmp_that_opencv_decodes_is_not_refused(tmp_path):
    data = os2_bmp(small_image())
    decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    np.testing.assert_array_equal(decoded, small_image())  # OpenCV reads this header kind
    path = write(tmp_path / "os2.bmp", data)
    assert image_problem(path) is None
    np.testing.assert_array_equal(read_image(path), small_image())
    # past the pixel cap, both 16-bit sizes read whole (the height's high byte too: 8000 is 0x1F40)
    big = write(tmp_path / "big.bmp", data[:18] + struct.pack("<HH", 9000, 8000) + data[22:])
    assert image_problem(big) == "9000x8000 pixels, over the 67-megapixel cap"


def test_an_upper_case_stream_scheme_reaches_ffmpeg_as_the_protocol_it_names(capture):
    """URI schemes are case-insensitive (RFC 3986 3.1), FFmpeg's protocol names ('rtsp', 'http', ...) are not: this
    cv2's FFmpeg connects for rtsp:// and http:// but never tries for RTSP:// or HTTP:// (it fails at once), so the
    scheme FFmpeg is given must be the lower-case one."""
    for uri in ("RTSP://127.0.0.1:8554/cam", "Rtsps://127.0.0.1:8322/cam", "HTTP://127.0.0.1/v", "HTTPS://127.0.0.1/v"):
        open_source(stream_cfg(uri, 0), threading.Event())
    assert [cap.args[0] for cap in capture.caps] == [
        "rtsp://127.0.0.1:8554/cam",
        "rtsps://127.0.0.1:8322/cam",
        "http://127.0.0.1/v",
        "https://127.0.0.1/v",
    ]


class Spinning(Exception):
    pass


def test_a_looping_folder_that_emptied_does_not_spin(image_dir, monkeypatch):
    from edge.runtime import sources

    tries = []

    def read_image_bounded(path):  # the real reader, but a spin ends the test instead of hanging it
        tries.append(path)
        if len(tries) > 100:
            raise Spinning(f"{len(tries)} reads of vanished files in one read()")
        return read_image(path)

    src = open_source(src_cfg(image_dir, loop=True), threading.Event())
    assert src.read().origin == "f000.jpg"
    for f in image_dir.glob("*.jpg"):
        f.unlink()
    monkeypatch.setattr(sources, "read_image", read_image_bounded)
    with pytest.raises(RunFailed) as err:  # the run ends saying why, after one pass over the vanished files
        src.read()
    assert str(err.value) == (
        f"source '{src.description}': none of its {len(src.files)} files can be read any more (removed or replaced since "
        "the run began, after 1 frame(s)); the run stops"
    )
    assert len(tries) == len(src.files)


# -- a JPEG with data after its end -------------------------------------------------------------------------------


def _jpeg(**params) -> bytes:
    flags = [x for k, v in params.items() for x in (getattr(cv2, f"IMWRITE_JPEG_{k.upper()}"), v)]
    ok, buf = cv2.imencode(".jpg", small_image(), flags)
    assert ok
    return buf.tobytes()


@pytest.mark.parametrize("params", [{}, {"progressive": 1}, {"rst_interval": 2}], ids=["baseline", "progressive", "restart"])
def test_a_jpeg_with_data_after_its_end_is_read_as_the_image(tmp_path, params):
    """A phone's Motion Photo is a JPEG with its video appended; OpenCV decodes the JPEG and ignores the rest, so edge
    must not call it truncated. Its end is found by walking the JPEG (progressive scans and restart markers too)."""
    jpeg = _jpeg(**params)
    path = write(tmp_path / "motion.jpg", jpeg + b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 40)
    assert cv2.imread(str(path)) is not None  # OpenCV reads it as it is
    assert image_problem(path) is None
    np.testing.assert_array_equal(read_image(path), cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR))


def test_a_truncated_jpeg_is_refused_whatever_follows_it(tmp_path):
    """Cut in its coded data, then followed by other bytes (a copy that broke off, padded), or carrying an EXIF
    thumbnail whose own end marker sits in the header: none of these has an end of its own."""
    jpeg = _jpeg()
    cut = jpeg[: len(jpeg) * 2 // 3]
    for name, data in (
        ("padded.jpg", cut + bytes(range(256)) * 40),
        ("zeros.jpg", cut + bytes(4096)),
        # APP1 "Exif" holding a whole small JPEG, its end marker included, then the cut image
        ("thumb.jpg", jpeg[:2] + b"\xff\xe1" + (len(jpeg) + 8).to_bytes(2, "big") + b"Exif\x00\x00" + jpeg + cut[2:]),
    ):
        path = write(tmp_path / name, data)
        assert image_problem(path) == "not a whole JPEG (truncated or damaged)", name
        assert read_image(path) is None, name


_JPEG_FOR_PROPERTIES = cv2.imencode(".jpg", np.full((24, 32, 3), 90, np.uint8))[1].tobytes()


@settings(max_examples=200, deadline=None)
@given(suffix=st.binary(max_size=600), junk=st.binary(max_size=600))
@example(suffix=b"", junk=b"\xff")  # a marker's first byte as the last byte: the walk stops before it
def test_the_jpeg_walk_finds_the_end_whatever_follows_and_never_fails_on_garbage(suffix, junk):
    from edge.runtime.sources import _jpeg_end

    jpeg = _JPEG_FOR_PROPERTIES
    assert _jpeg_end(jpeg + suffix) == len(jpeg)  # the image's own end, not a marker inside what follows
    end = _jpeg_end(b"\xff\xd8" + junk)  # garbage after a start marker: an end inside it, or none, never an error
    assert end is None or 2 < end <= len(junk) + 2


# -- the third mutation sample ------------------------------------------------------------------------------------


def test_fill_bytes_before_a_marker_do_not_hide_a_jpegs_end(tmp_path):
    """Fill bytes (T.81 B.1.1.2) before the frame header, and data after the end: the walk steps over them."""
    jpeg = with_fill_bytes(encoded(".jpg"), 3)
    path = write(tmp_path / "filled.jpg", jpeg + bytes(range(256)) * 8)
    assert image_problem(path) is None and read_image(path).shape == (30, 40, 3)


def test_the_size_is_read_from_a_head_that_ends_with_it():
    """The frame header's width sits in its last two bytes (T.81 B.2.2): a head cut right after them still tells."""
    jpeg = encoded(".jpg")
    at = jpeg.find(b"\xff\xc0")
    assert _jpeg_size(jpeg[: at + 9]) == (40, 30) and _jpeg_size(jpeg[: at + 8]) is None


@pytest.mark.parametrize("name", ["a.jpeg", "a.JPEG", "a.Jpg"])
def test_every_spelling_of_the_jpeg_extension_is_checked(tmp_path, name):
    assert image_problem(write(tmp_path / name, encoded(".jpg")[:-2])) == "not a whole JPEG (truncated or damaged)"


def test_netpbm_and_tiff_headers(tmp_path):
    """PGM/PPM start with P2/P3/P5/P6 then width and height as decimal numbers (netpbm's definition); a TIFF with II*\\0
    (little-endian) or MM\\0* (big-endian)."""
    for name in ("a.ppm", "a.pgm"):
        assert image_problem(write(tmp_path / name, b"P6\n40 30\n255\n" + bytes(3600))) is None, name
        assert image_problem(write(tmp_path / name, b"P9\n40 30\n255\n" + bytes(10))) == "not a PGM/PPM", name
        assert image_problem(write(tmp_path / name, b"P6\n40 x\n255\n" + bytes(10))) == "not a PGM/PPM", name
        assert image_problem(write(tmp_path / name, b"P6\nx 30\n255\n" + bytes(10))) == "not a PGM/PPM", name
    assert image_problem(write(tmp_path / "big.ppm", b"P6\n9000 8000\n255\n")) == "9000x8000 pixels, over the 67-megapixel cap"
    for head in (b"II*\x00", b"MM\x00*"):
        assert image_problem(write(tmp_path / "a.tif", head + bytes(60))) is None, head
    assert image_problem(write(tmp_path / "a.tiff", b"MM*\x00" + bytes(60))) == "not a TIFF"


@pytest.mark.parametrize("held,told", [(297, False), (296, True)])
def test_a_file_a_little_short_of_its_declared_count_is_not_told(capture, monkeypatch, tmp_path, caplog, held, told):
    """Containers' frame counts are estimates: 1 % short (at least 2 frames) passes silently, more is a warning."""
    path = file_of_frames(capture, monkeypatch, tmp_path, declared=300, held=held)
    src = open_source(src_cfg(path), threading.Event())
    with caplog.at_level(logging.WARNING, logger="edge.source"):
        assert len(read_all(src)) == held
    assert bool(edge_log(caplog)) is told


def test_each_time_a_stream_comes_back_is_counted(capture):
    capture.opens = [False, True, False]  # down at the start, back, lost again, back
    capture.frames.append(np.zeros((10, 10, 3), np.uint8))
    src = open_source(stream_cfg("rtsp://127.0.0.1:8554/cam", 0), threading.Event(), late=True)
    assert src.read() is not None and src.info()["reconnects"] == 1
    capture.frames.append(None)  # the stream drops
    capture.frames.append(np.zeros((10, 10, 3), np.uint8))
    while src.read() is None:
        pass
    assert src.info()["reconnects"] == 2


def test_a_name_opencv_cannot_take_is_refused_naming_it():
    """A file name holding bytes that are not UTF-8 reaches Python as a str with surrogates (os.fsdecode); OpenCV's
    binding would crash on it, so it is refused in one line that shows the name, escaped."""
    import os

    from edge.runtime.sources import opencv_name

    name = os.fsdecode(b"/tmp/cam\xff.mp4")
    with pytest.raises(EdgeError) as err:
        opencv_name(name, "source")
    assert str(err.value) == "source '/tmp/cam\\udcff.mp4': OpenCV cannot open a name that is not UTF-8; rename it"
    assert opencv_name("/tmp/cam.mp4", "source") == "/tmp/cam.mp4"
