"""TensorRT backend: runs a prebuilt engine with the TensorRT *runtime* only (Runtime, ICudaEngine, IExecutionContext).

Nothing here touches the builder, the ONNX parser or the calibrators, so it works with a runtime-only TensorRT
install. Before TensorRT sees the engine, the manifest gate (``engine_gate``) refuses one that cannot run here.

Frames overlap on the GPU: the backend owns ``buffer_sets`` sets of (execution context, CUDA stream, page-locked
host and device buffer per I/O tensor), all allocated once. ``submit`` enqueues upload, inference and download of
one frame on a free set's stream and returns at once; ``collect`` waits for that frame and copies its outputs out.
With two sets, frame k+1 uploads while frame k computes and frame k-1 downloads.

Contexts and optimisation profiles (NvInferRuntime.h of 8.5.2, 8.6.1 and 10.3.0): on an engine with dynamic inputs
every context in concurrent use needs its own profile. Before 9.0 a second context has none until one is selected
(8.5: only the first context gets profile 0; 8.6: only while no other context holds it); from 9.0 every new context
shares profile 0. So each buffer set selects profile i with ``set_optimization_profile_async(i, its stream)`` before
setting shapes, and an engine with fewer profiles than buffer sets runs that many sets (edge-build makes one
identical profile per buffer set). An engine without dynamic inputs needs no selection: every context uses profile 0.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

import numpy as np

from edge.errors import EdgeError, RunFailed
from edge.lazy import require
from edge.manifest import manifest_path, read_l4t, refuse_rtx
from edge.metadata import NONE
from edge.metadata import read as read_metadata
from edge.runtime.engines import TensorInfo
from edge.runtime.engines.cuda.memory import (
    CudaContext,
    HostDeviceBuffer,
    PinnedFrameMemory,
    choose_frame_memory,
    driver,
    timing_event,
)
from edge.runtime.engines.cuda.preprocess import FrameInput
from edge.runtime.engines.engine_file import read_plan, split
from edge.runtime.engines.gate import DeviceFacts, check_platform, choose_dla_core, verify_manifest
from edge.runtime.engines.preprocess import PreprocessSpec, Transform

log = logging.getLogger("edge.run")
BUFFER_SETS = 2  # frames in flight; edge-build gives a dynamic engine one optimisation profile per set

# TensorRT DataType member name <-> numpy dtype; members missing from an older TensorRT (INT64 before 10) are skipped.
DTYPES: Tuple[Tuple[str, str], ...] = (
    ("FLOAT", "float32"),
    ("HALF", "float16"),
    ("INT8", "int8"),
    ("INT32", "int32"),
    ("INT64", "int64"),
    ("UINT8", "uint8"),
    ("BOOL", "bool"),
)
_EVENTS = ("start", "uploaded", "computed", "done")


def numpy_dtype(trt: Any, dt: Any) -> np.dtype:
    """The numpy dtype of a TensorRT DataType; BF16, FP8 and INT4 have none, and are refused."""
    for trt_name, np_name in DTYPES:
        if getattr(trt.DataType, trt_name, None) == dt:
            return np.dtype(np_name)
    raise EdgeError(f"engine tensor type {dt}: no numpy equivalent; rebuild with float32/float16/int8/int32 I/O tensors")


def trt_dtype(trt: Any, dtype: Any) -> Any:
    """The TensorRT DataType of a numpy dtype."""
    name = np.dtype(dtype).name
    for trt_name, np_name in DTYPES:
        if np_name == name and hasattr(trt.DataType, trt_name):
            return getattr(trt.DataType, trt_name)
    raise EdgeError(f"numpy dtype {name}: this TensorRT has no matching DataType")


@dataclass(frozen=True)
class IOTensor:
    """One engine I/O tensor with the concrete shape its buffers are made for."""

    name: str
    is_input: bool
    shape: Tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def info(self) -> TensorInfo:
        return TensorInfo(self.name, self.shape, self.dtype)


def plan_io(trt: Any, engine: Any, context: Any, profile: int = 0) -> List[IOTensor]:
    """Every I/O tensor's shape and dtype, inputs first. Dynamic inputs take ``profile``'s opt shape (set on
    ``context``, which must hold that profile); output shapes then come from the engine through that context."""
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    linear = getattr(getattr(trt, "TensorFormat", None), "LINEAR", None)
    inputs, outputs = [], []
    for name in names:
        if linear is not None and hasattr(engine, "get_tensor_format") and engine.get_tensor_format(name) != linear:
            raise EdgeError(
                f"engine tensor '{name}' uses format {engine.get_tensor_format(name)}; edge-run feeds and reads linear "
                "tensors: rebuild without DLA-native I/O formats (e.g. no DLA_HWC4 / CHW16)"
            )
        if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
            inputs.append(name)
        else:
            outputs.append(name)
    plan = []
    for name in inputs:
        shape = tuple(engine.get_tensor_shape(name))
        if any(d < 0 for d in shape):
            shape = tuple(engine.get_tensor_profile_shape(name, profile)[1])  # (min, opt, max)
        if not context.set_input_shape(name, shape):
            raise EdgeError(f"engine input '{name}': TensorRT rejects shape {list(shape)}")
        plan.append(IOTensor(name, True, shape, numpy_dtype(trt, engine.get_tensor_dtype(name))))
    for name in outputs:
        shape = tuple(context.get_tensor_shape(name))
        if any(d < 0 for d in shape):
            raise EdgeError(f"engine output '{name}' has a data-dependent shape {list(shape)}; edge-run needs fixed outputs")
        plan.append(IOTensor(name, False, shape, numpy_dtype(trt, engine.get_tensor_dtype(name))))
    return plan


def is_dynamic(trt: Any, engine: Any) -> bool:
    """Whether an input has a -1 dimension (a --shape-pinned dynamic ONNX keeps them in the engine)."""
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT and any(d < 0 for d in engine.get_tensor_shape(name)):
            return True
    return False


def set_profiles(trt: Any, engine: Any, wanted: int) -> List[Optional[int]]:
    """The optimisation profile each buffer set selects (None: no selection needed), one entry per set.

    Only profiles whose opt shapes equal profile 0's are used, since the buffers are made once for that shape.
    """
    if not is_dynamic(trt, engine):
        return [None] * wanted
    inputs = [
        name
        for name in (engine.get_tensor_name(i) for i in range(engine.num_io_tensors))
        if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
    ]

    def opt(profile: int) -> List[Tuple[int, ...]]:
        return [tuple(engine.get_tensor_profile_shape(n, profile)[1]) for n in inputs]

    usable = 1
    while usable < min(wanted, int(engine.num_optimization_profiles)) and opt(usable) == opt(0):
        usable += 1
    if usable < wanted:
        log.warning(
            "engine has %d optimization profile(s) for its dynamic inputs: %d buffer set(s) instead of %d, frames do not "
            "overlap on the GPU; rebuild it with edge-build, which adds one profile per buffer set",
            engine.num_optimization_profiles,
            usable,
            wanted,
        )
    return list(range(usable))


def load_plugins(trt: Any, logger: Any, why: str) -> bool:
    """Register TensorRT's plugin library (libnvinfer_plugin) with the runtime: only for an engine that needs it,
    so that every other engine runs on libnvinfer alone. Returns whether this TensorRT offers it."""
    init = getattr(trt, "init_libnvinfer_plugins", None)
    if init is None:
        return False
    init(logger, "")
    log.info("TensorRT plugins: loaded libnvinfer_plugin (%s)", why)
    return True


def load_engine(
    trt: Any,
    engine_path: Path,
    here_cc: str,
    requested_core: Optional[int],
    l4t: Optional[Dict[str, str]],
    logger: Any,
    manifest: Optional[Dict[str, Any]] = None,
    plan_offset: int = 0,
) -> Tuple[Any, Any, Optional[int]]:
    """Gate, then deserialise: (runtime, engine, DLA core in use or None). The DLA core is set on the runtime
    *before* deserialising; that is the only point at which TensorRT lets a runtime pick the core.

    ``manifest`` None with ``plan_offset`` > 0 is an Ultralytics engine (a JSON header before the plan, no manifest):
    nothing can be checked before TensorRT reads the plan, whose format is closed; TensorRT itself refuses a plan of
    another version or GPU, and the core asked for is checked against the cores this module has."""
    runtime = trt.Runtime(logger)
    cores = int(runtime.num_DLA_cores)
    plugins: List[str] = []
    if manifest is None and plan_offset:
        core = requested_core
        if core is not None and core >= cores:
            have = {0: "no DLA", 1: "only DLA core 0"}.get(cores, f"DLA cores 0..{cores - 1}")
            raise EdgeError(f"engine '{engine_path}': --dla {core} asks for DLA core {core}, but this module has {have}")
    else:
        if manifest is None:
            manifest = verify_manifest(engine_path)
        facts = DeviceFacts(str(trt.__version__), here_cc, cores, **(l4t or {}))
        check_platform(engine_path, manifest, facts)
        core = choose_dla_core(engine_path, manifest, requested_core, facts)
        plugins = [str(p) for p in manifest.get("plugins") or []]
    if core is not None:
        runtime.DLA_core = core
    loaded = bool(plugins) and load_plugins(trt, logger, f"the engine has {', '.join(plugins)}")
    plan = read_plan(engine_path, plan_offset)
    engine = runtime.deserialize_cuda_engine(plan)
    if engine is None and not loaded and load_plugins(trt, logger, "the engine did not load without them"):
        engine = runtime.deserialize_cuda_engine(plan)  # a plugin layer (an NMS) edge was not told of
    if engine is None:
        raise EdgeError(f"engine '{engine_path}': TensorRT could not deserialise it (its log above says why)")
    return runtime, engine, (int(runtime.DLA_core) if core is not None else None)


class _BufferSet:
    """One frame's worth of everything: execution context, stream, events and a buffer per I/O tensor."""

    def __init__(self, context: Any, profile: Optional[int]) -> None:
        self.context = context
        self.stream = driver().Stream()
        self.buffers: Dict[str, HostDeviceBuffer] = {}
        self.frame_in = FrameInput()  # the raw frame on its way to the kernel, with GPU preprocessing
        self.events = {k: timing_event() for k in _EVENTS}
        # The profile goes on this set's own stream, which later enqueues on this context, so the copies TensorRT may
        # queue for the switch are ordered before the first inference (setOptimizationProfileAsync's contract).
        if profile is not None and not context.set_optimization_profile_async(profile, self.stream.handle):
            raise EdgeError(f"TensorRT refuses optimization profile {profile} for a buffer set (its log above says why)")

    def bind(self, io: List[IOTensor]) -> None:
        """Allocate the buffers, then give the context its input shapes and tensor addresses."""
        self.buffers = {t.name: HostDeviceBuffer(t.shape, t.dtype) for t in io}
        for t in io:
            if t.is_input and not self.context.set_input_shape(t.name, t.shape):
                raise EdgeError(f"engine input '{t.name}': TensorRT rejects shape {list(t.shape)}")
            if not self.context.set_tensor_address(t.name, self.buffers[t.name].ptr):
                raise EdgeError(f"engine tensor '{t.name}': TensorRT rejects its buffer address")

    def free(self) -> None:
        for buf in self.buffers.values():
            buf.free()
        self.frame_in.free()
        self.buffers, self.events, self.stream, self.context = {}, {}, None, None


class Job:
    """A frame in flight: which set it occupies until its outputs have been copied out."""

    def __init__(self, slot: _BufferSet) -> None:
        self.slot: Optional[_BufferSet] = slot
        self.outputs: Optional[Dict[str, np.ndarray]] = None
        self.timeline: Dict[str, float] = {}  # ms from the backend's origin event to each stage's end
        self.lock = threading.Lock()


class TensorRTBackend:
    name = "tensorrt"

    def __init__(
        self,
        engine_path: str,
        dla_core: Optional[int] = None,
        buffer_sets: int = BUFFER_SETS,
        device_index: int = 0,
        trt: Any = None,
        l4t_file: str = "/etc/nv_tegra_release",
    ) -> None:
        if buffer_sets < 1:
            raise ValueError("buffer_sets must be >= 1")
        self.engine_path = Path(engine_path)
        self.model_metadata = NONE
        offset, header = split(self.engine_path) if self.engine_path.is_file() else (0, None)
        manifest: Optional[Dict[str, Any]] = None
        if header is not None and not manifest_path(self.engine_path).is_file():
            self.model_metadata = read_metadata(f"engine '{self.engine_path}'", header)
            dla = header.get("dla")  # Ultralytics' own loader puts such an engine on the core its export named
            if dla_core is None and isinstance(dla, int) and not isinstance(dla, bool) and dla >= 0:
                dla_core = dla
            log.warning(
                "engine %s: an Ultralytics export without an edge manifest; its sha256 and the TensorRT, GPU, JetPack "
                "and DLA core it was built for are not checked before TensorRT reads it (TensorRT refuses a plan "
                "from another version or GPU itself); edge-build writes engines with a manifest",
                self.engine_path,
            )
        else:
            offset = 0
            # The file checks need neither TensorRT nor CUDA: a tampered or half-copied engine is named as such anywhere.
            manifest = verify_manifest(self.engine_path)
        if manifest is not None and isinstance(manifest.get("model_metadata"), dict):
            self.model_metadata = read_metadata(f"manifest of '{self.engine_path}'", manifest["model_metadata"])
        if manifest is not None:
            refuse_rtx(self.engine_path, manifest)
        self._trt = trt or require("tensorrt", "the TensorRT backend")
        self._cuda = CudaContext(device_index)
        self._slots: List[_BufferSet] = []
        self._free: Deque[_BufferSet] = deque()
        self._inflight: Deque[Job] = deque()
        self._lock = threading.Lock()
        self._gpu_pre: Any = None
        self._gpu_input: Optional[str] = None
        self._frame_memory: Optional[PinnedFrameMemory] = None
        self._stage_ms: Deque[Tuple[float, float, float]] = deque(maxlen=10_000)
        self._closed = False
        self._engine = self._runtime = self._origin = None
        try:
            with self._cuda.active():
                self._logger = self._trt.Logger(self._trt.Logger.WARNING)
                self._runtime, self._engine, self.dla_core = load_engine(
                    self._trt,
                    self.engine_path,
                    self._cuda.compute_capability,
                    dla_core,
                    read_l4t(l4t_file),
                    self._logger,
                    manifest,
                    offset,
                )
                # Context i is created only after context i-1 holds its profile: the profile a new context gets
                # depends on what the others hold (8.6), and a refused selection names the set it broke.
                for profile in set_profiles(self._trt, self._engine, buffer_sets):
                    context = self._engine.create_execution_context()
                    if context is None:
                        raise EdgeError(
                            f"engine '{engine_path}': TensorRT could not create an execution context (out of memory?)"
                        )
                    slot = _BufferSet(context, profile)
                    self._slots.append(slot)
                    if len(self._slots) == 1:
                        self.io = plan_io(self._trt, self._engine, context, profile or 0)
                    slot.bind(self.io)
                self._free.extend(self._slots)
                self._origin = timing_event()
                self._origin.record()
        except BaseException:
            self.close()
            raise
        self.inputs = [t.info() for t in self.io if t.is_input]
        self.outputs = [t.info() for t in self.io if not t.is_input]
        self.device = f"dla:{self.dla_core}" if self.dla_core is not None else f"cuda:{device_index}"

    # -- GPU preprocessing ----------------------------------------------------
    def use_gpu_preprocess(self, spec: PreprocessSpec, input_name: str) -> Callable[[Any], Tuple[Any, Transform]]:
        """From now on the feed for ``input_name`` is the raw frame (a ``Frame`` in any camera format, or a BGR
        array), which the CUDA kernel turns into the input tensor on the frame's own stream. Returns the preprocess
        stage's callable: it only computes the geometry."""
        from edge.runtime.engines.cuda.preprocess import GpuPreprocessor

        t = next(t for t in self.io if t.name == input_name)
        if tuple(spec.input_shape) != t.shape or np.dtype(spec.dtype) != t.dtype:
            raise EdgeError(
                f"preprocess: gpu writes {spec.dtype} {list(spec.input_shape)} but engine input '{input_name}' is "
                f"{t.dtype} {list(t.shape)}; set input.dtype/layout/size to match the engine"
            )
        self._gpu_pre = GpuPreprocessor(spec, self._cuda)
        self._gpu_input = input_name
        return lambda frame: (frame, self._gpu_pre.transform(frame))

    def frame_memory(self, requested: str = "auto") -> PinnedFrameMemory:
        """The page-locked memory for the source's frame ring (``frame_memory`` in the config): mapped, so the kernel
        reads each frame in place, where the GPU shares the CPU's memory; else uploaded on the frame's stream."""
        if self._frame_memory is None:
            c = self._cuda
            choice = choose_frame_memory(requested, c.integrated, c.can_map_host_memory, f"GPU {c.name}")
            self._frame_memory = PinnedFrameMemory(c, mapped=choice == "mapped")
            log.info(
                "frame buffers: %s memory (frame_memory %s; %s GPU)",
                self._frame_memory.name,
                requested,
                "integrated" if c.integrated else "discrete",
            )
        return self._frame_memory

    # -- frames ---------------------------------------------------------------
    def submit(self, feeds: Dict[str, np.ndarray]) -> Job:
        """Enqueue one frame on a free buffer set and return without waiting for the GPU."""
        with self._cuda.active():
            slot = self._acquire()
            try:
                self._enqueue(slot, feeds)
            except BaseException:
                with self._lock:
                    self._free.appendleft(slot)
                raise
            job = Job(slot)
            with self._lock:
                self._inflight.append(job)
        return job

    def _enqueue(self, slot: _BufferSet, feeds: Dict[str, np.ndarray]) -> None:
        stream, ev = slot.stream, slot.events
        inputs = [t for t in self.io if t.is_input]
        # CPU copies into page-locked memory first, so the timeline's upload is the GPU's own time.
        for t in inputs:
            if t.name not in feeds:
                raise EdgeError(f"engine input '{t.name}' was not fed; the engine needs {', '.join(i.name for i in inputs)}")
            arr = feeds[t.name]
            if t.name == self._gpu_input:
                self._gpu_pre.prepare(arr, slot.frame_in)  # copies only a frame outside page-locked memory
                continue
            if arr.shape != t.shape:
                raise EdgeError(f"engine input '{t.name}' is {list(t.shape)} but got an array of shape {list(arr.shape)}")
            try:
                np.copyto(slot.buffers[t.name].host, arr, casting="same_kind")
            except TypeError:
                raise EdgeError(f"engine input '{t.name}' is {t.dtype}; got {arr.dtype}, set input.dtype to match") from None
        ev["start"].record(stream)
        for t in inputs:
            buf = slot.buffers[t.name]
            if t.name == self._gpu_input:
                self._gpu_pre.enqueue(feeds[t.name], slot.frame_in, buf.ptr, stream)  # writes the input tensor in place
            else:
                buf.upload(stream)
        ev["uploaded"].record(stream)
        if not slot.context.execute_async_v3(stream.handle):
            raise RunFailed(f"engine '{self.engine_path}': TensorRT execute_async_v3 failed (its log above says why)")
        ev["computed"].record(stream)
        for t in self.io:
            if not t.is_input:
                slot.buffers[t.name].download(stream)
        ev["done"].record(stream)

    def _acquire(self) -> _BufferSet:
        """A free buffer set; when all are in flight, finish the oldest frame (its outputs wait in its Job)."""
        while True:
            with self._lock:
                if self._free:
                    return self._free.popleft()
                oldest = self._inflight[0]
            self._finish(oldest)

    def _finish(self, job: Job) -> Dict[str, np.ndarray]:
        with job.lock:
            if job.outputs is None:
                slot = job.slot
                with self._cuda.active():
                    slot.events["done"].synchronize()
                    job.outputs = {t.name: slot.buffers[t.name].host.copy() for t in self.io if not t.is_input}
                    job.timeline = {k: slot.events[k].time_since(self._origin) for k in _EVENTS}
                tl = job.timeline
                with self._lock:
                    self._inflight.remove(job)
                    self._free.append(slot)
                    self._stage_ms.append(
                        (tl["uploaded"] - tl["start"], tl["computed"] - tl["uploaded"], tl["done"] - tl["computed"])
                    )
                job.slot = None
            return job.outputs

    def collect(self, job: Job) -> Dict[str, np.ndarray]:
        """Wait for a submitted frame and return its outputs (owned copies, shaped as the engine says)."""
        return self._finish(job)

    def infer(self, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        return self.collect(self.submit(feeds))

    def info(self) -> Dict[str, Any]:
        """What ran, for the run summary: engine, TensorRT, GPU, DLA core, buffer sets and mean GPU time per stage."""
        with self._lock:
            ms = np.array(self._stage_ms) if self._stage_ms else np.zeros((0, 3))
        mean = [round(float(v), 3) for v in ms.mean(axis=0)] if len(ms) else [None, None, None]
        return {
            "engine": str(self.engine_path),
            "tensorrt": str(self._trt.__version__),
            "gpu": f"{self._cuda.name} (compute capability {self._cuda.compute_capability})",
            "dla_core": self.dla_core,
            "buffer_sets": len(self._slots),
            "preprocess": "gpu" if self._gpu_pre is not None else "cpu",
            "frame_memory": self._frame_memory.name if self._frame_memory is not None else None,
            "gpu_ms_mean": dict(zip(("upload", "compute", "download"), mean)),
        }

    def close(self) -> None:
        """Wait for frames in flight, then free every buffer, stream, context, the engine and the runtime."""
        if self._closed:
            return
        self._closed = True
        with self._cuda.active():
            for job in list(self._inflight):
                self._finish(job)
            driver().Context.synchronize()  # a frame whose enqueue failed half-way may still be on a stream
            if self._frame_memory is not None:
                self._frame_memory.close()  # the frames' page-locked buffers: nothing reads them any more
            for slot in self._slots:
                slot.free()
            if self._gpu_pre is not None:
                self._gpu_pre.free()
            # TensorRT objects go in dependency order: contexts (freed above), engine, runtime.
            self._slots, self._free, self._gpu_pre, self._origin = [], deque(), None, None
            self._engine = None
            self._runtime = None
        self._cuda.close()


def create(cfg: Any) -> TensorRTBackend:
    from edge.runtime.engines.model import engine_path

    return TensorRTBackend(str(engine_path(cfg)), dla_core=cfg.dla_core)
