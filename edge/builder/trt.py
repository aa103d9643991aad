"""The TensorRT module, what its API offers, and the process-wide logger.

JetPack 5 ships TensorRT 8.5, JetPack 6 ships 10.x, and TensorRT 11 / TensorRT-RTX are strongly typed with no
calibrators. Features are decided by the presence of an API (``BuilderFlag.INT8``, ``int8_calibrator``,
``num_DLA_cores``, compute-capability setters), never by parsing the version string, so a release that moves an
API is handled by what it really has.
"""

from __future__ import annotations

import importlib
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Iterator, List, Optional, Tuple

from edge.errors import MissingDependency

# Tried in this order: the real TensorRT (a Jetson's python3-libnvinfer), then TensorRT-RTX (a pip wheel whose
# builder runs on a machine without a GPU; CI uses it).
MODULES = ("tensorrt", "tensorrt_rtx")

_module: Optional[ModuleType] = None


def load() -> ModuleType:
    """The first TensorRT module that imports, or a MissingDependency saying what to install."""
    global _module
    if _module is None:
        errors = []
        for name in MODULES:
            try:
                _module = importlib.import_module(name)
                break
            except ImportError as exc:
                errors.append(f"{name}: {exc}")
        else:
            raise MissingDependency(
                "edge-build needs TensorRT's Python bindings and none imports ("
                + "; ".join(errors)
                + "); on a Jetson: sudo apt install python3-libnvinfer (it comes with JetPack); "
                "for CI without a GPU: pip install tensorrt-rtx-cu13==1.7.1.116"
            )
    return _module


Line = Tuple[str, str]  # (severity name: ERROR, WARNING, INFO, VERBOSE; message)


class _Sink:
    """Where log lines go during one build: a list for the placement report, a file, a console callback."""

    def __init__(self, file: Any = None, console: Optional[Callable[[str, str], None]] = None) -> None:
        self.lines: List[Line] = []
        self.file = file
        self.console = console


_sink_lock = threading.Lock()
_sink: Optional[_Sink] = None
_logger: Any = None


def logger() -> Any:
    """The one ILogger of this process.

    TensorRT keeps the first logger it is given for every later builder and runtime in the process (it says so
    and ignores the new one), so edge registers one logger and points it at a new sink per build.
    """
    global _logger
    if _logger is None:
        trt = load()

        class _Logger(trt.ILogger):
            def __init__(self) -> None:
                trt.ILogger.__init__(self)

            def log(self, severity: Any, msg: str) -> None:
                level = severity.name.split(".")[-1].replace("INTERNAL_ERROR", "ERROR")
                with _sink_lock:
                    sink = _sink
                if sink is None:
                    return
                try:
                    sink.lines.append((level, msg))
                    if sink.file is not None:
                        sink.file.write(f"[{level}] {msg}\n")
                    if sink.console is not None:
                        sink.console(level, msg)
                except (OSError, ValueError):  # a log file closed under a build abandoned after a signal
                    pass

        _logger = _Logger()
    return _logger


@contextmanager
def capture(file: Any = None, console: Optional[Callable[[str, str], None]] = None) -> Iterator[_Sink]:
    """Send TensorRT's log lines to a fresh sink for the duration of the block."""
    global _sink
    new = _Sink(file, console)
    with _sink_lock:
        previous, _sink = _sink, new
    try:
        yield new
    finally:
        with _sink_lock:
            _sink = previous


@dataclass(frozen=True)
class Capabilities:
    """What the installed TensorRT's API offers; every field comes from the presence of an attribute."""

    module: str  # tensorrt | tensorrt_rtx
    version: str
    int8_flag: bool  # BuilderFlag.INT8 (weakly typed: TensorRT <= 10.x)
    fp16_flag: bool  # BuilderFlag.FP16
    calibrators: bool  # IInt8EntropyCalibrator2 and config.int8_calibrator (removed in TensorRT 11)
    minmax_calibrator: bool
    strongly_typed_flag: bool  # NetworkDefinitionCreationFlag.STRONGLY_TYPED
    explicit_batch_flag: bool  # TensorRT 8.x needs EXPLICIT_BATCH for ONNX; later releases dropped the flag
    dla_api: bool  # builder.num_DLA_cores, config.DLA_core and DeviceType.DLA
    dla_cores: int
    compute_capabilities: Tuple[str, ...]  # targets the builder can build for without that GPU, e.g. ("8.6",)
    memory_pools: bool  # config.set_memory_pool_limit (8.4+)
    timing_cache: bool

    @property
    def weakly_typed(self) -> bool:
        """Precision chosen by builder flags; otherwise it comes from the tensor types in the ONNX."""
        return self.int8_flag or self.fp16_flag

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}


def compute_capability_name(member: str) -> Optional[str]:
    """'SM86' -> '8.6', 'SM120' -> '12.0'; None for CURRENT/NONE."""
    digits = member[2:] if member.startswith("SM") else ""
    if not digits.isdigit() or len(digits) < 2:
        return None
    return f"{digits[:-1]}.{digits[-1]}"


def detect(trt: ModuleType, builder: Any) -> Capabilities:
    config = builder.create_builder_config()
    flags = trt.BuilderFlag
    creation = trt.NetworkDefinitionCreationFlag
    dla_api = hasattr(builder, "num_DLA_cores") and hasattr(config, "DLA_core") and hasattr(trt.DeviceType, "DLA")
    ccs: Tuple[str, ...] = ()
    if hasattr(config, "set_compute_capability") and hasattr(trt, "ComputeCapability"):
        names = (compute_capability_name(m) for m in dir(trt.ComputeCapability) if m.startswith("SM"))
        ccs = tuple(sorted((n for n in names if n), key=lambda v: tuple(int(p) for p in v.split("."))))
    return Capabilities(
        module=trt.__name__,
        version=trt.__version__,
        int8_flag=hasattr(flags, "INT8"),
        fp16_flag=hasattr(flags, "FP16"),
        calibrators=hasattr(trt, "IInt8EntropyCalibrator2") and hasattr(config, "int8_calibrator"),
        minmax_calibrator=hasattr(trt, "IInt8MinMaxCalibrator"),
        strongly_typed_flag=hasattr(creation, "STRONGLY_TYPED"),
        explicit_batch_flag=hasattr(creation, "EXPLICIT_BATCH"),
        dla_api=dla_api,
        dla_cores=int(builder.num_DLA_cores) if dla_api else 0,
        compute_capabilities=ccs,
        memory_pools=hasattr(config, "set_memory_pool_limit"),
        timing_cache=hasattr(config, "create_timing_cache"),
    )


def cancelling_monitor(trt: ModuleType, config: Any, cancel: threading.Event) -> Any:
    """A progress monitor (TensorRT 10.0+) that cancels the build once ``cancel`` is set: ``step_complete`` returning
    False makes ``build_serialized_network`` return None at the next step. Set on ``config`` and returned, since
    the caller must keep it alive; None where the API has no monitor (8.5, 8.6), whose builds cannot be cancelled."""
    if not (hasattr(trt, "IProgressMonitor") and hasattr(config, "progress_monitor")):
        return None

    class _Monitor(trt.IProgressMonitor):  # trt-api: guarded above
        def __init__(self) -> None:
            trt.IProgressMonitor.__init__(self)  # trt-api: guarded above

        def phase_start(self, phase_name: str, parent_phase: Optional[str], num_steps: int) -> None:
            pass

        def step_complete(self, phase_name: str, step: int) -> bool:
            return not cancel.is_set()

        def phase_finish(self, phase_name: str) -> None:
            pass

    monitor = _Monitor()
    config.progress_monitor = monitor  # trt-api: guarded above
    return monitor


def dtype_name(trt: ModuleType, dtype: Any) -> str:
    """A TensorRT DataType as a numpy-style name ('float32', 'float16', 'int8'), the manifest's vocabulary."""
    try:
        import numpy as np

        return np.dtype(trt.nptype(dtype)).name
    except (TypeError, KeyError):  # types numpy lacks (bfloat16, fp8, int4)
        return str(dtype).split(".")[-1].lower()
