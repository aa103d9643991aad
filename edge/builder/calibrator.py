"""INT8 calibration from a folder of images, through the runtime's own preprocessing.

``CalibrationFeed`` does all the work a TensorRT calibrator does apart from being one: it lists and reads the
images, runs each through ``Preprocessor`` (the runner's exact preprocessing), stacks them into batches of the
network input's shape, copies each batch to the GPU, reports progress and reads or writes the cache file.
``make_calibrator`` wraps it in a subclass of TensorRT's ``IInt8EntropyCalibrator2`` or ``IInt8MinMaxCalibrator``;
those classes exist only in TensorRT <= 10.x, so the subclass is created only when the module has them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from edge.calib.cache import CalibrationCache, read_cache, writable
from edge.calib.sidecar import Sidecar, sidecar_path
from edge.errors import EdgeError
from edge.outputs import write_together
from edge.progress import Throttle, say

# calib.method -> the TensorRT base class.
CALIBRATOR_CLASSES = {"entropy": "IInt8EntropyCalibrator2", "minmax": "IInt8MinMaxCalibrator"}

Upload = Callable[[np.ndarray], int]  # host batch -> device pointer TensorRT reads


class PycudaUpload:
    """One device buffer per input, allocated on the first batch and reused, in the GPU's *primary* context.

    TensorRT's builder works through the CUDA runtime, which uses the primary context; ``pycuda.autoinit`` would
    create a second, non-primary context in the middle of the build. The context is made current only around each
    copy, on whichever thread TensorRT calls ``get_batch`` from (CUDA programming guide, "Interoperability between
    Runtime and Driver APIs": the runtime uses the primary context).
    """

    def __init__(self) -> None:
        from edge.runtime.engines.cuda.memory import CudaContext, driver

        self._cuda = driver()
        self._ctx = CudaContext(0)
        self._buffer: Any = None
        self._nbytes = 0

    def __call__(self, batch: np.ndarray) -> int:
        with self._ctx.active():
            if self._buffer is None or batch.nbytes != self._nbytes:
                if self._buffer is not None:
                    self._buffer.free()
                self._buffer = self._cuda.mem_alloc(batch.nbytes)
                self._nbytes = batch.nbytes
            self._cuda.memcpy_htod(self._buffer, np.ascontiguousarray(batch))
        return int(self._buffer)

    def close(self) -> None:
        """Free the buffer and release the primary context (after the build: TensorRT reads the last batch late)."""
        if self._ctx is None:
            return
        if self._buffer is not None:
            with self._ctx.active():
                self._buffer.free()
            self._buffer = None
        self._ctx.close()
        self._ctx = None


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
        about: Optional[Dict[str, Any]] = None,
    ) -> None:
        self.images = list(images)
        self.preprocess = preprocess
        self.input_name = input_name
        self.input_shape = tuple(input_shape)
        self.cache_path = cache_path
        self.about = about or {}  # the sidecar's facts (model, its sha256, method) when this build writes the cache
        self.cached = cached  # a checked cache TensorRT may use instead of calibrating; None = calibrate
        self.written: Optional[bytes] = None  # the cache TensorRT produced by calibrating here
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
        from edge.runtime.sources import read_image

        pending: List[np.ndarray] = []
        for path in self.images:
            frame = read_image(path)
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

    def close(self) -> None:
        """Free what the upload holds on the GPU (call after the build)."""
        close = getattr(self.upload, "close", None)
        if close is not None:
            close()

    def read_cache(self) -> Optional[bytes]:
        if self.cached is not None:
            where = self.cache_path if self.cache_path is not None else "the cache an earlier build calibrated"
            say(f"calibration: using the scales in {where}; no images are read")
        return self.cached

    def write_cache(self, data: bytes) -> None:
        self.written = bytes(data)
        if self.cache_path is None:
            return
        cache = CalibrationCache.from_bytes(data, origin="the cache TensorRT produced")
        # With a new sidecar, committed together: an FP16 list or an equalized model from `edge calib` belongs to the
        # old scales, and would otherwise be applied to (or refuse) these.
        sidecar = Sidecar([], {**self.about, "written_by": "edge-build"})
        write_together([(self.cache_path, cache.to_bytes()), (sidecar_path(self.cache_path), sidecar.to_json())])
        say(f"calibration: wrote {len(cache.scales)} scales to {self.cache_path} (and an empty FP16 list beside it)")


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


@dataclass
class CacheFit:
    """A calibration cache fitted to the parsed network: what TensorRT reads, and what was done to get there."""

    data: bytes  # the cache TensorRT is handed (the file on disk is not changed)
    named: int  # float network tensors the file names
    derived: Dict[str, str] = field(default_factory=dict)  # tensor -> where its scale came from
    missing: List[str] = field(default_factory=list)  # float tensors left without a scale
    total: int = 0  # float network tensors

    def lines(self, path: Path) -> List[str]:
        out = [f"calibration cache {path}: names {self.named} of the network's {self.total} float tensors"]
        if self.derived:
            out.append(
                f"  {len(self.derived)} tensors the ONNX parser created take the scale of the tensor they reshape or "
                f"broadcast, or of their constant weights (e.g. {', '.join(list(self.derived)[:3])})"
            )
        if self.missing:
            more = f" and {len(self.missing) - 3} more" if len(self.missing) > 3 else ""
            out.append(
                f"  {len(self.missing)} have no scale; TensorRT runs the layers that touch them in FP16/FP32: "
                f"{', '.join(self.missing[:3])}{more}"
            )
        return out


def fit_cache(trt: Any, network: Any, cache: CalibrationCache) -> CacheFit:
    """Give the tensors the ONNX parser creates a scale where one follows from the cache, and list the rest.

    A cache from ``edge calib`` names the ONNX model's tensors, but the parser adds tensors of its own: reshapes and
    broadcasts (``ONNXTRT_ShapeShuffle_*``, ``ONNXTRT_Broadcast_*``, reshapes around a Gemm), constants made from
    initializers, and inner outputs of ops it builds from several layers (HardSwish, Softmax); TensorRT's own caches
    name them (onnx-tensorrt builtin_op_importers.cpp; the names vary between parser releases, so they are found by
    layer type, not by name). A shuffle only moves values, so its output takes its input's scale; a constant's
    range is exact, max |weights|. Other tensors stay without a scale: TensorRT then keeps the layers that touch them
    in higher precision (it logs a warning for each) and the build goes on.
    """
    floats = {trt.DataType.FLOAT, trt.DataType.HALF}
    scales = dict(cache.scales)
    fit = CacheFit(b"", 0)
    needed: List[str] = []
    for i in range(network.num_inputs):
        t = network.get_input(i)
        if t.dtype in floats:
            needed.append(t.name)
    constant, shuffle = trt.LayerType.CONSTANT, trt.LayerType.SHUFFLE
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        for k in range(layer.num_outputs):
            t = layer.get_output(k)
            if t.dtype not in floats:
                continue
            needed.append(t.name)
            if t.name in scales:
                continue
            if layer.type == shuffle:
                source = layer.get_input(0)
                if source is not None and source.name in scales:
                    scales[t.name] = scales[source.name]
                    fit.derived[t.name] = f"reshape of {source.name}"
            elif layer.type == constant:
                layer.__class__ = trt.IConstantLayer  # TensorRT's Python API: the layer's own class by assignment
                weights = np.abs(np.asarray(layer.weights, dtype=np.float64))
                amax = float(weights.max()) if weights.size else 0.0
                if writable(amax / 127.0):
                    scales[t.name] = amax / 127.0
                    fit.derived[t.name] = "its constant weights"
    fit.total = len(needed)
    fit.named = sum(1 for n in needed if n in cache.scales)
    fit.missing = [n for n in needed if n not in scales]
    fit.data = CalibrationCache(cache.trt_version, cache.algorithm, scales).to_bytes()
    return fit


def usable_cache(
    path: Optional[Path], trt_version: str, algorithm: str, have_images: bool, trt: Any, network: Any
) -> Optional[bytes]:
    """The cache bytes TensorRT may use, or None to calibrate from the images.

    TensorRT would skip a cache from another version without a word and calibrate again (or, without images, build
    with no scales), so the header is checked here, the cache is fitted to the parsed network (``fit_cache``), and a
    cache that covers less than half of the network's tensors (another model, or another export of it) is refused.
    """
    if path is None or not path.exists():
        return None
    cache = read_cache(path)  # size-capped, regular files only
    problems = cache.problems(trt_version, algorithm)
    fit = None
    if not problems:
        fit = fit_cache(trt, network, cache)
        covered = fit.total - len(fit.missing)
        if fit.total and covered * 2 < fit.total:
            problems.append(
                f"it gives a scale to only {covered} of the network's {fit.total} float tensors (it names {fit.named}, e.g. "
                f"not {', '.join(fit.missing[:3])}): it was made for another model or another export of it"
            )
    if not problems:
        for line in fit.lines(path):
            say(line)
        return fit.data
    what = f"calibration cache '{path}' does not fit this build: " + "; ".join(problems)
    if not have_images:
        raise EdgeError(f"{what}; pass --calib-images DIR to calibrate again (the cache is then rewritten)")
    say(f"{what}; calibrating again from the images and replacing it")
    return None
