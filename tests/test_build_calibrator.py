"""INT8 calibration without a GPU: the image batching, the runner's preprocessing, progress and the cache hooks run
for real. TensorRT's calibrator base classes (absent from TensorRT-RTX and TensorRT 11) come from the stand-in of
each release a JetPack ships (generated from its pyInt8.cpp: tests/trt_standin.py), driven the way the pybind11
trampolines call them; device memory is a host buffer, and the primary-context upload runs on the pycuda stand-in."""

from __future__ import annotations

import ctypes
import json
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from edge.builder.calibrator import CalibrationFeed, make_calibrator
from edge.calib.cache import CalibrationCache, read_cache
from edge.calib.datasets import find_images
from edge.errors import EdgeError
from edge.runtime.engines.preprocess import Preprocessor, PreprocessSpec
from tests import pycuda_standin
from tests.trt_standin import VERSIONS, make_tensorrt

cv2 = pytest.importorskip("cv2")

SPEC = PreprocessSpec(width=32, height=24, layout="nchw", scale=1 / 127.5, offset=-1.0)
CACHE_TEXT = b"TRT-8502-EntropyCalibration2\nx: 3c010204\nconv_out: 3d8f5c29\n"


@pytest.fixture(params=VERSIONS)
def trt(request):
    return make_tensorrt(request.param)


class HostUpload:
    """Stands in for the pycuda device buffer: keeps each batch in host memory and hands out its address."""

    def __init__(self) -> None:
        self.kept = []

    def __call__(self, batch: np.ndarray) -> int:
        self.kept.append(np.ascontiguousarray(batch))
        return self.kept[-1].ctypes.data


def drive_like_tensorrt(calibrator, names, shape, dtype=np.float32):
    """What TensorRT's builder does with a calibrator (pyInt8.cpp trampolines): read_calibration_cache() -> buffer
    or None; get_batch(names) -> device pointers, cast to std::vector<size_t>, until None or empty; then
    write_calibration_cache(memoryview)."""
    cached = calibrator.read_calibration_cache()
    if cached is not None:
        return bytes(memoryview(cached)), []
    seen = []
    while True:
        pointers = calibrator.get_batch(names)
        if pointers is None or len(pointers) == 0:
            break
        assert all(isinstance(p, int) for p in pointers)  # what the size_t cast takes
        count = int(np.prod(shape))
        buf = (ctypes.c_byte * (count * np.dtype(dtype).itemsize)).from_address(pointers[0])
        seen.append(np.frombuffer(buf, dtype).reshape(shape).copy())
    calibrator.write_calibration_cache(memoryview(CACHE_TEXT))
    return None, seen


@pytest.fixture
def images(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "calib"
    folder.mkdir()
    for i in range(7):
        cv2.imwrite(str(folder / f"img{i}.png"), rng.integers(0, 255, (48 + i, 64, 3), np.uint8))
    (folder / "notes.txt").write_text("not an image")
    (folder / "broken.jpg").write_bytes(b"not a jpeg")
    return folder


def feed_for(paths, tmp_path, batch=2, cached=None, messages=None):
    def progress(message, force=False):
        (messages if messages is not None else []).append(message)

    return CalibrationFeed(
        paths, Preprocessor(SPEC), "x", (batch, 3, 24, 32), tmp_path / "m.cache", cached, HostUpload(), progress
    )


def test_find_images_sorts_filters_and_caps(images, tmp_path):
    # broken.jpg is dropped by its bytes (not a JPEG), before any pass; the images stay sorted
    assert [p.name for p in find_images(images)] == [f"img{i}.png" for i in range(7)]
    assert len(find_images(images, max_images=3)) == 3
    (tmp_path / "empty").mkdir()
    with pytest.raises(EdgeError, match="no images found"):
        find_images(tmp_path / "empty")


def test_batches_are_the_runner_preprocessing_stacked(images, tmp_path):
    messages = []
    files = sorted(p for p in images.iterdir() if p.suffix != ".txt")  # broken.jpg included on purpose
    feed = feed_for(files, tmp_path, batch=2, messages=messages)
    batches = list(feed.batches())
    # 8 files: broken.jpg is skipped, 7 images make 3 full batches and one left over.
    assert len(batches) == 3 and feed.skipped == ["broken.jpg"]
    pre = Preprocessor(SPEC)
    expected = np.concatenate([pre(cv2.imread(str(images / f"img{i}.png")))[0] for i in (0, 1)])
    assert batches[0].shape == (2, 3, 24, 32) and batches[0].dtype == np.float32
    np.testing.assert_array_equal(batches[0], expected)
    assert "the last 1 image(s) do not fill a batch of 2" in messages[-1]


def test_preprocessing_that_does_not_fit_the_input_is_an_error(images, tmp_path):
    feed = CalibrationFeed(find_images(images), Preprocessor(SPEC), "x", (1, 3, 64, 64), None, None, HostUpload(), print)
    with pytest.raises(EdgeError, match=r"preprocessing makes \[3, 24, 32\].*input 'x' is \[1, 3, 64, 64\]"):
        next(feed.batches())


@pytest.mark.parametrize("method, algorithm", [("entropy", "ENTROPY_CALIBRATION_2"), ("minmax", "MINMAX_CALIBRATION")])
def test_calibrator_wiring_on_each_release(trt, images, tmp_path, method, algorithm):
    messages = []
    feed = feed_for(find_images(images), tmp_path, batch=2, messages=messages)
    calibrator = make_calibrator(trt, method, feed)
    base = trt.IInt8EntropyCalibrator2 if method == "entropy" else trt.IInt8MinMaxCalibrator
    assert isinstance(calibrator, base) and calibrator.get_algorithm() == getattr(trt.CalibrationAlgoType, algorithm)
    assert type(calibrator).__name__ == {"entropy": "EdgeInt8EntropyCalibrator2", "minmax": "EdgeInt8MinMaxCalibrator"}[method]
    assert calibrator.get_batch_size() == 2
    cached, seen = drive_like_tensorrt(calibrator, ["x"], (2, 3, 24, 32))
    assert cached is None and len(seen) == 3
    np.testing.assert_array_equal(seen[2], list(feed_for(find_images(images), tmp_path).batches())[2])
    assert messages[-1] == "calibrating: batch 3/3 (6 images)"  # 7 images (broken.jpg dropped by find_images)
    assert read_cache(tmp_path / "m.cache").scales.keys() == {"x", "conv_out"}  # written atomically by edge


def test_a_checked_cache_is_handed_over_and_no_image_is_read(trt, tmp_path):
    feed = feed_for([], tmp_path, cached=CACHE_TEXT)
    cached, seen = drive_like_tensorrt(make_calibrator(trt, "entropy", feed), ["x"], (2, 3, 24, 32))
    assert cached == CACHE_TEXT and seen == []


def test_errors_inside_tensorrt_callbacks_are_kept_for_the_build(trt, images, tmp_path):
    feed = feed_for(find_images(images), tmp_path)
    calibrator = make_calibrator(trt, "entropy", feed)
    assert calibrator.get_batch(["x", "mask"]) is None
    assert isinstance(feed.error, EdgeError) and "several inputs" in str(feed.error)


def test_no_calibrator_class_means_the_qdq_path(tmp_path):
    trt = SimpleNamespace(__name__="tensorrt_rtx", __version__="1.7.1.116")  # what TensorRT-RTX and 11.x offer
    with pytest.raises(EdgeError, match=r"has no IInt8MinMaxCalibrator.*edge calib --qdq"):
        make_calibrator(trt, "minmax", feed_for([], tmp_path))


def test_cache_written_by_tensorrt_must_parse(tmp_path):
    feed = feed_for([], tmp_path)
    with pytest.raises(EdgeError, match="first line should be TRT-"):
        feed.write_cache(b"garbage")
    assert not (tmp_path / "m.cache").exists()
    feed.write_cache(CACHE_TEXT)
    assert CalibrationCache.from_bytes((tmp_path / "m.cache").read_bytes()).header == "TRT-8502-EntropyCalibration2"
    # with its sidecar: no FP16 layers, who wrote it (the facts the build gives, none here)
    assert json.loads((tmp_path / "m.cache.json").read_text()) == {
        "edge_fp16_layers": 1,
        "layers": [],
        "written_by": "edge-build",
    }


def test_no_readable_image_at_all_is_one_error_naming_the_skipped_files(trt, tmp_path):
    bad = []
    for i in range(7):
        (tmp_path / f"b{i}.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
        bad.append(tmp_path / f"b{i}.png")
    feed = feed_for(bad, tmp_path)
    calibrator = make_calibrator(trt, "entropy", feed)
    assert calibrator.get_batch(["x"]) is None
    assert str(feed.error) == "calibration: no readable image among 7 (skipped: b0.png, b1.png, b2.png, b3.png, b4.png)"


def test_progress_counts_batches_images_and_the_unreadable(images, tmp_path):
    messages = []
    files = sorted(p for p in images.iterdir() if p.suffix != ".txt")  # broken.jpg included on purpose
    feed = feed_for(files, tmp_path, batch=2, messages=messages)
    calibrator = make_calibrator(make_tensorrt("10.3.0"), "entropy", feed)
    assert calibrator.get_batch(["x"]) is not None
    assert messages[-1] == "calibrating: batch 1/4 (2 images, 1 unreadable skipped)"  # broken.jpg sorts first
    while calibrator.get_batch(["x"]) is not None:
        pass
    assert messages[-1] == "calibrating: batch 3/4 (6 images, 1 unreadable skipped)"


def test_batches_go_to_the_gpu_in_the_primary_context_never_a_new_one(monkeypatch):
    """pycuda.autoinit would make a second, non-primary context during TensorRT's build; the upload retains the
    primary context (the one the CUDA runtime, and so TensorRT, uses) and leaves nothing current."""
    from edge.builder.calibrator import PycudaUpload

    driver = pycuda_standin.install(monkeypatch)
    upload = PycudaUpload()
    batch = np.arange(2 * 3 * 4 * 4, dtype=np.float32).reshape(2, 3, 4, 4)
    pointer = upload(batch)
    assert upload(batch + 1) == pointer  # the buffer is reused
    np.testing.assert_array_equal(np.frombuffer(driver.memory.read(pointer, batch.nbytes), np.float32), (batch + 1).ravel())
    allocations = [op for op in driver.log if op[0] == "mem_alloc"]
    assert len(allocations) == 1 and allocations[0][-1] is True  # made in the primary context
    assert driver.contexts_made == [] and "pycuda.autoinit" not in sys.modules
    assert driver.Context.get_current() is None
    upload.close()
    assert ("mem_free", pointer) in driver.log


def test_the_fit_summary_names_up_to_three_of_each_kind():
    from pathlib import Path

    from edge.builder.calibrator import CacheFit

    fit = CacheFit(b"", 5, {"a": "reshape of x", "b": "its constant weights"}, ["m1", "m2", "m3"], 10)
    assert fit.lines(Path("m.cache")) == [
        "calibration cache m.cache: names 5 of the network's 10 float tensors",
        "  2 tensors the ONNX parser created take the scale of the tensor they reshape or broadcast, or of their "
        "constant weights (e.g. a, b)",
        "  3 have no scale; TensorRT runs the layers that touch them in FP16/FP32: m1, m2, m3",
    ]
    fit.missing.append("m4")
    assert fit.lines(Path("m.cache"))[-1].endswith(": m1, m2, m3 and 1 more")
