"""Sources by URI on real files: video, image folders and globs, loops, vanishing files, clear errors."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import cv2
import pytest

from edge.config import SourceConfig
from edge.errors import EdgeError
from edge.redact import redact
from edge.runtime.sources import csi_pipeline, gstreamer_available, open_source


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
