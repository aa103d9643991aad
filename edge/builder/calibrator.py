"""INT8 calibration from a folder of images, through the runtime's own preprocessing.

``CalibrationFeed`` does all the work a TensorRT calibrator does apart from being one: it lists and reads the
images, runs each through ``Preprocessor`` (the runner's exact preprocessing), stacks them into batches of the
network input's shape, copies each batch to the GPU, reports progress and reads or writes the cache file.
``make_calibrator`` wraps it in a subclass of TensorRT's ``IInt8EntropyCalibrator2`` or ``IInt8MinMaxCalibrator``;
those classes exist only in TensorRT <= 10.x, so the subclass is created only when the module has them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from edge.calib.cache import CalibrationCache, write_cache
from edge.errors import EdgeError
from edge.lazy import require
from edge.progress import Throttle, say

# calib.method -> the TensorRT base class.
CALIBRATOR_CLASSES = {"entropy": "IInt8EntropyCalibrator2", "minmax": "IInt8MinMaxCalibrator"}

Upload = Callable[[np.ndarray], int]  # host batch -> device pointer TensorRT reads


class PycudaUpload:
    """One device buffer per input, allocated on the first batch and reused; pycuda is imported only here."""

    def __init__(self) -> None:
        require("pycuda.autoinit", "copying calibration batches to the GPU")  # creates the CUDA context
        self._cuda = require("pycuda.driver")
        self._buffer: Any = None
        self._nbytes = 0

    def __call__(self, batch: np.ndarray) -> int:
        if self._buffer is None or batch.nbytes != self._nbytes:
            self._buffer = self._cuda.mem_alloc(batch.nbytes)
            self._nbytes = batch.nbytes
        self._cuda.memcpy_htod(self._buffer, np.ascontiguousarray(batch))
        return int(self._buffer)


class CalibrationFeed:
    """Batches of preprocessed images for one network input, plus the calibration cache file."""

    def __init__(
        self,
        images: Sequence[Path],
        preprocess: Callable[[np.ndarray], Tuple[np.ndarray, Any]],
        input_name: str,
        input_shape: Tuple[int, ...],
        cache_path: Optional[Path] = None,
        cached: Optional[bytes] = None,
        upload: Optional[Upload] = None,
        progress: Optional[Callable[..., None]] = None,
    ) -> None:
        self.images = list(images)
        self.preprocess = preprocess
        self.input_name = input_name
        self.input_shape = tuple(input_shape)
        self.cache_path = cache_path
        self.cached = cached  # a checked cache TensorRT may use instead of calibrating; None = calibrate
        self.upload = upload
        self.progress = progress or Throttle()
        self.error: Optional[Exception] = None  # raised inside a TensorRT callback; re-raised after the build
        self.skipped: List[str] = []
        self.batches_done = 0
        self._iter: Optional[Iterator[np.ndarray]] = None

    @property
    def batch_size(self) -> int:
        """The network input's batch dimension: an explicit-batch network takes exactly that many images."""
        return self.input_shape[0]

    @property
    def total_batches(self) -> int:
        return len(self.images) // self.batch_size

    def batches(self) -> Iterator[np.ndarray]:
        """Host batches of ``input_shape``; unreadable images are skipped, a last partial batch is dropped."""
        cv2 = require("cv2", "reading calibration images")
        pending: List[np.ndarray] = []
        for path in self.images:
            frame = cv2.imread(str(path), cv2.IMREAD_COLOR)
            if frame is None:
                self.skipped.append(path.name)
                continue
            tensor, _ = self.preprocess(frame)
            if tuple(tensor.shape[1:]) != self.input_shape[1:]:
                raise EdgeError(
                    f"calibration: preprocessing makes {list(tensor.shape[1:])} from {path.name}, but input "
                    f"'{self.input_name}' is {list(self.input_shape)}; check the input section (size, layout)"
                )
            pending.append(tensor)
            if len(pending) == self.batch_size:
                yield np.concatenate(pending, axis=0)
                pending = []
        if pending:
            self.progress(f"calibration: the last {len(pending)} image(s) do not fill a batch of {self.batch_size}; not used")

    def next_batch(self, names: Sequence[str]) -> Optional[List[int]]:
        """Device pointers for the next batch in the order TensorRT names the inputs, or None when done."""
        if list(names) != [self.input_name]:
            raise EdgeError(
                f"calibration feeds one image input '{self.input_name}', TensorRT asks for {', '.join(names)}; "
                "models with several inputs need a calibration cache made elsewhere (--calib-cache)"
            )
        if self._iter is None:
            self._iter = self.batches()
        batch = next(self._iter, None)
        if batch is None:
            if self.batches_done == 0:
                raise EdgeError(
                    f"calibration: no readable image among {len(self.images)} (skipped: {', '.join(self.skipped[:5])})"
                )
            self.progress(self._status(), force=True)
            return None
        if self.upload is None:
            self.upload = PycudaUpload()
        pointer = self.upload(batch)
        self.batches_done += 1
        self.progress(self._status())
        return [pointer]

    def _status(self) -> str:
        skipped = f", {len(self.skipped)} unreadable skipped" if self.skipped else ""
        return (
            f"calibrating: batch {self.batches_done}/{self.total_batches} ({self.batches_done * self.batch_size} images{skipped})"
        )

    def read_cache(self) -> Optional[bytes]:
        if self.cached is not None:
            say(f"calibration: using the scales in {self.cache_path}; no images are read")
        return self.cached

    def write_cache(self, data: bytes) -> None:
        if self.cache_path is None:
            return
        cache = CalibrationCache.from_bytes(data, origin="the cache TensorRT produced")
        write_cache(self.cache_path, cache)
        say(f"calibration: wrote {len(cache.scales)} scales to {self.cache_path}")


def make_calibrator(trt: Any, method: str, feed: CalibrationFeed) -> Any:
    """A TensorRT calibrator of ``method`` ('entropy' or 'minmax') that delegates to ``feed``."""
    name = CALIBRATOR_CLASSES[method]
    base = getattr(trt, name, None)
    if base is None:
        raise EdgeError(
            f"calib.method {method}: this TensorRT ({trt.__name__} {trt.__version__}) has no {name}; "
            "implicit INT8 calibration ended with TensorRT 10.x: use a Q/DQ model from `edge calib --qdq`"
        )

    class EdgeCalibrator(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            base.__init__(self)
            self.feed = feed

        def get_batch_size(self) -> int:
            return self.feed.batch_size

        # An exception cannot cross TensorRT's C++ frames intact: keep it, end the data, and let build() raise it.
        def get_batch(self, names: Sequence[str], *_: Any) -> Optional[List[int]]:
            try:
                return self.feed.next_batch(names)
            except Exception as exc:
                self.feed.error = exc
                return None

        def read_calibration_cache(self, *_: Any) -> Optional[bytes]:
            return self.feed.read_cache()

        def write_calibration_cache(self, cache: Any, *_: Any) -> None:
            try:
                self.feed.write_cache(bytes(cache))
            except Exception as exc:
                self.feed.error = exc

    EdgeCalibrator.__name__ = EdgeCalibrator.__qualname__ = f"Edge{name[1:]}"
    return EdgeCalibrator()


def usable_cache(
    path: Optional[Path], trt_version: str, algorithm: str, tensors: Sequence[str], have_images: bool
) -> Optional[bytes]:
    """The cache bytes TensorRT may use, or None to calibrate from the images.

    TensorRT would skip a cache from another version without a word and calibrate again (or, without images, build
    with no scales), so the header and tensor names are checked here and any problem is said out loud.
    """
    if path is None or not path.is_file():
        return None
    data = path.read_bytes()
    problems = CalibrationCache.from_bytes(data, origin=f"calibration cache '{path}'").problems(trt_version, algorithm, tensors)
    if not problems:
        return data
    what = f"calibration cache '{path}' does not fit this build: " + "; ".join(problems)
    if not have_images:
        raise EdgeError(f"{what}; pass --calib-images DIR to calibrate again (the cache is then rewritten)")
    say(f"{what}; calibrating again from the images and replacing it")
    return None
