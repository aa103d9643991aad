"""A stand-in for the ``tensorrt`` Python module of TensorRT 8.5.2, 8.6.x and 10.3, built from NVIDIA's own sources.

TensorRT cannot run here (no Jetson, no GPU that executes its engines), so tests replace the module, and only it.
What the stand-in offers is decided by the surface generated from each release's pybind11 sources
(``tests/trt_surfaces/VERSION.json``, written by ``scripts/trt_surface.py``): a class, method, property or enum
member that the release lacks does not exist here either (AttributeError, as with the real module); a member the
release has but the stand-in does not model raises ``NotModelled`` when used, so a test can never pass by touching
something nobody checked.

Behaviour is modelled only where edge relies on it, each with its source in NVIDIA's headers:

- execution contexts and optimisation profiles (``NvInferRuntime.h``, ``createExecutionContext`` and
  ``setOptimizationProfileAsync``): on 8.5 only the first context of an engine with dynamic inputs gets profile 0,
  on 8.6 a new context gets profile 0 only if no live context holds it, from 9.0 every new context gets profile 0;
  ``set_input_shape`` and ``execute_async_v3`` fail on a context without a profile, a profile index must be in
  range, before 9.0 it must not be held by another live context, and contexts in concurrent use on an engine with
  dynamic inputs must hold different profiles (TensorRT does not check the last rule; the stand-in does, since the
  headers forbid it and the results would be undefined);
- ``Runtime.DLA_core``: the engine runs on the core the runtime had when it was deserialised;
- ``ILayer.precision``: recorded when set (``NvInfer.h``, ``ILayer::setPrecision``; ``kFLOAT`` until then);
- the calibrator trampolines (``pyInt8.cpp``): ``read_calibration_cache()`` returns a buffer or None,
  ``get_batch(names)`` a list of device pointers as integers (anything else ends calibration), and
  ``write_calibration_cache`` receives a memoryview; a cache whose header names another TensorRT or algorithm is
  ignored and the calibrator is asked for batches;
- ``ParserError``: the fields each release binds (8.5/8.6: code, desc, file, line, func, node; 10.x adds
  node_name and node_operator).

The ONNX parser behind ``OnnxParser`` is the real one from TensorRT-RTX (it runs on a CPU), so network tensors
carry the names a real parser gives them, including the ones it creates (``ONNXTRT_*``, inner activations). Its
layers are those of the RTX parser, which may differ in detail from the 8.5 parser's. Engines are opaque byte
strings registered on a ``Machine``; executing one runs a Python callable given by the test.
"""

from __future__ import annotations

import json
import operator
import types
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

SURFACES = Path(__file__).with_name("trt_surfaces")
VERSIONS = ("8.5.2", "8.6.1", "10.3.0")
# The surface folder -> the __version__ the JetPack that ships it reports (JetPack 5.1.x: 8.5.2.2; JetPack 6.0:
# 8.6.2.3, whose nearest open-source tag is v8.6.1; JetPack 6.1/6.2: 10.3.0.30).
RELEASED = {"8.5.2": "8.5.2.2", "8.6.1": "8.6.2.3", "10.3.0": "10.3.0.30", "11.1.0": "11.1.0.106"}  # 11.1: its VERSION file
# How a new execution context gets its optimisation profile (NvInferRuntime.h, createExecutionContext):
# 8.5.2 "The first execution context created will call setOptimizationProfile(0) implicitly";
# 8.6.1 "...if there are no other execution contexts assigned to optimization profile 0";
# 10.3.0 and 11.1.0 "The newly created execution context will be assigned optimization profile 0".
PROFILE_RULE = {"8.5.2": "first", "8.6.1": "if_free", "10.3.0": "always", "11.1.0": "always"}
# CalibrationAlgoType member -> the name TensorRT writes in the cache header.
ALGORITHM_NAMES = {
    "ENTROPY_CALIBRATION_2": "EntropyCalibration2",
    "ENTROPY_CALIBRATION": "EntropyCalibration",
    "MINMAX_CALIBRATION": "MinMaxCalibration",
    "LEGACY_CALIBRATION": "LegacyCalibration",
}


class NotModelled(AssertionError):
    """The release has this member, but the stand-in does not model it: the test touched something unchecked."""


def load_surface(version: str) -> dict:
    return json.loads((SURFACES / f"{version}.json").read_text())


# -- the simulated machine ---------------------------------------------------------------------------------------


@dataclass
class EnginePlan:
    """What a serialised engine holds, as far as the runtime shows it.

    ``tensors``: name -> (is_input, DataType member name, dims with -1 for dynamic); ``profiles``: one dict per
    optimisation profile, input name -> (min, opt, max); ``outputs``: input shapes -> output shapes (for dynamic
    outputs); ``run``: input arrays -> output arrays, called by execute_async_v3.
    """

    version: str
    tensors: Dict[str, Tuple[bool, str, Tuple[int, ...]]]
    profiles: List[Dict[str, Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...]]]] = field(default_factory=list)
    dla_core: Optional[int] = None
    outputs: Optional[Callable[[Dict[str, Tuple[int, ...]]], Dict[str, Tuple[int, ...]]]] = None
    run: Optional[Callable[[Dict[str, np.ndarray]], Dict[str, np.ndarray]]] = None
    formats: Dict[str, str] = field(default_factory=dict)

    @property
    def dynamic(self) -> bool:
        return any(d < 0 for is_in, _, dims in self.tensors.values() if is_in for d in dims)


@dataclass
class Machine:
    """The device the stand-in runs on: DLA cores, whether a GPU can load engines, and the engines it knows."""

    dla_cores: int = 2
    gpu: bool = True
    plans: Dict[bytes, EnginePlan] = field(default_factory=dict)
    memory: Any = None  # a device-memory stand-in with read(ptr, nbytes) / write(ptr, bytes), for execute_async_v3
    can_run_on_dla: Callable[[Any], bool] = lambda layer: False
    calls: List[tuple] = field(default_factory=list)  # what edge asked of TensorRT, in order
    run_with: Optional[Callable[[Dict[str, np.ndarray]], Dict[str, np.ndarray]]] = None  # for plans without ``run``

    def register(self, plan: EnginePlan, payload: Optional[bytes] = None) -> bytes:
        payload = payload or f"stand-in plan {len(self.plans)} for TensorRT {plan.version}".encode()
        self.plans[payload] = plan
        return payload


# -- surface machinery -------------------------------------------------------------------------------------------


class EnumValue:
    """A pybind11 enum member: ``.name``, ``int()``, equality within its enum, ``str()`` as ``Type.NAME``."""

    __slots__ = ("_enum", "name", "value")

    def __init__(self, enum: str, name: str, value: int) -> None:
        self._enum, self.name, self.value = enum, name, value

    def __int__(self) -> int:
        return self.value

    __index__ = __int__

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EnumValue):
            return self._enum == other._enum and self.value == other.value
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._enum, self.value))

    def __repr__(self) -> str:
        return f"<{self._enum}.{self.name}: {self.value}>"

    def __str__(self) -> str:
        return f"{self._enum}.{self.name}"


class _Unmodelled:
    """A member the release has and the stand-in does not model: present to hasattr(), loud when used."""

    def __init__(self, owner: str, name: str, kind: str) -> None:
        self.owner, self.name, self.kind = owner, name, kind

    def _fail(self, *_: Any, **__: Any) -> Any:
        raise NotModelled(f"tensorrt.{self.owner}.{self.name} exists in this TensorRT but the stand-in does not model it")

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if self.kind == "method":
            return self._fail
        if obj is None:
            return self
        return self._fail()

    def __set__(self, obj: Any, value: Any) -> None:
        self._fail()


class SurfaceObject:
    """Base of every generated class: no constructor unless the release binds one, no attributes it lacks."""

    _trt: Any = None
    _machine: Machine
    _surface_name = ""
    _members: Dict[str, dict] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(f"tensorrt.{type(self).__name__}: No constructor defined!")

    @classmethod
    def _new(cls, *args: Any, **kwargs: Any) -> Any:
        obj = object.__new__(cls)
        obj._init(*args, **kwargs)
        return obj

    def _init(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_") or "_standin" not in type(self).__dict__:  # internals, and Python subclasses
            object.__setattr__(self, name, value)
            return
        member = type(self)._members.get(name)
        if member is None:
            raise AttributeError(f"'tensorrt.{type(self).__name__}' object has no attribute '{name}'")
        if member["kind"] != "property" or not member.get("writable"):
            raise AttributeError(f"tensorrt.{type(self).__name__}.{name} is read-only")
        object.__setattr__(self, name, value)


# -- behaviour: only members of some release; the factory keeps those the chosen release has ----------------------


def _severity(trt: Any, name: str) -> Any:
    return getattr(trt.ILogger.Severity, name)


def _log(obj: Any, level: str, message: str) -> None:
    logger = getattr(obj, "_logger", None)
    if logger is not None:
        logger.log(_severity(obj._trt, level), message)


class B_ILogger:
    def __init__(self) -> None:
        pass


class B_Logger:
    def __init__(self, min_severity: Any = None) -> None:
        self._min = min_severity
        self._lines: List[Tuple[str, str]] = []

    def log(self, severity: Any, msg: str) -> None:
        self._lines.append((severity.name, msg))


class B_DataType:
    @property
    def itemsize(self) -> Optional[int]:
        return {"FLOAT": 4, "HALF": 2, "BF16": 2, "INT8": 1, "INT32": 4, "INT64": 8, "BOOL": 1, "UINT8": 1, "FP8": 1}.get(
            self.name
        )


class B_Runtime:
    def __init__(self, logger: Any) -> None:
        self._logger = logger
        self._core = -1

    @property
    def num_DLA_cores(self) -> int:
        return self._machine.dla_cores

    @property
    def DLA_core(self) -> int:
        return self._core

    @DLA_core.setter
    def DLA_core(self, value: int) -> None:
        self._machine.calls.append(("Runtime.DLA_core", value))
        self._core = int(value)

    def deserialize_cuda_engine(self, serialized_engine: Any) -> Any:
        m = self._machine
        data = bytes(serialized_engine)
        m.calls.append(("deserialize_cuda_engine", len(data)))
        if not m.gpu:
            _log(self, "ERROR", "stand-in: no GPU on this machine, so no engine can be deserialised")
            return None
        plan = m.plans.get(data)
        if plan is None:
            _log(self, "ERROR", "stand-in: these bytes are not a serialised engine")
            return None
        if plan.version != self._trt._surface_version:
            _log(self, "ERROR", f"stand-in: the engine was built by TensorRT {plan.version}, this is {self._trt.__version__}")
            return None
        core = None
        if plan.dla_core is not None:
            core = self._core if self._core >= 0 else plan.dla_core
            if core >= m.dla_cores:
                _log(self, "ERROR", f"stand-in: DLA core {core} requested, this machine has {m.dla_cores}")
                return None
        return self._trt.ICudaEngine._new(plan, core, self._logger)


class B_ICudaEngine:
    def _init(self, plan: EnginePlan, dla_core: Optional[int], logger: Any) -> None:
        self._logger = logger
        self._plan = plan
        self._dla_core = dla_core
        self._contexts: weakref.WeakSet[Any] = weakref.WeakSet()
        self._created = 0

    @property
    def num_io_tensors(self) -> int:
        return len(self._plan.tensors)

    def get_tensor_name(self, index: int) -> str:
        return list(self._plan.tensors)[index]

    def _tensor(self, name: str) -> Tuple[bool, str, Tuple[int, ...]]:
        if name not in self._plan.tensors:
            raise KeyError(name)
        return self._plan.tensors[name]

    def get_tensor_mode(self, name: str) -> Any:
        mode = self._trt.TensorIOMode
        return mode.INPUT if self._tensor(name)[0] else mode.OUTPUT

    def get_tensor_shape(self, name: str) -> Tuple[int, ...]:
        return tuple(self._tensor(name)[2])

    def get_tensor_dtype(self, name: str) -> Any:
        return getattr(self._trt.DataType, self._tensor(name)[1])

    def get_tensor_format(self, name: str) -> Any:
        self._tensor(name)
        return getattr(self._trt.TensorFormat, self._plan.formats.get(name, "LINEAR"))

    def get_tensor_profile_shape(self, name: str, profile_index: int) -> List[Tuple[int, ...]]:
        if not 0 <= profile_index < len(self._plan.profiles) or name not in self._plan.profiles[profile_index]:
            return []
        return [tuple(d) for d in self._plan.profiles[profile_index][name]]

    @property
    def num_optimization_profiles(self) -> int:
        return max(1, len(self._plan.profiles))

    @property
    def num_layers(self) -> int:
        return 1

    def create_engine_inspector(self) -> Any:
        return self._trt.EngineInspector._new()

    def create_execution_context(self) -> Any:
        profile = 0
        if self._plan.dynamic:
            rule = PROFILE_RULE[self._trt._surface_version]
            held = {c._profile for c in self._contexts}
            if rule == "first":
                profile = 0 if self._created == 0 else -1
            elif rule == "if_free":
                profile = 0 if 0 not in held else -1
        ctx = self._trt.IExecutionContext._new(self, profile)
        self._contexts.add(ctx)
        self._created += 1
        return ctx


class B_EngineInspector:
    """Layer placement is not modelled: the stand-in's inspector lists no layers."""

    def get_engine_information(self, format: Any) -> str:
        return json.dumps({"Layers": []})


class B_IExecutionContext:
    def _init(self, engine: Any, profile: int) -> None:
        self._engine = engine
        self._profile = profile
        self._shapes: Dict[str, Tuple[int, ...]] = {}
        self._addresses: Dict[str, int] = {}
        self._logger = engine._logger
        self._profile_stream: Optional[int] = None

    def _error(self, message: str) -> bool:
        self._machine.calls.append(("error", message))
        _log(self, "ERROR", f"stand-in: {message}")
        return False

    @property
    def active_optimization_profile(self) -> int:
        return self._profile

    @property
    def engine(self) -> Any:
        return self._engine

    def set_optimization_profile_async(self, profile_index: int, stream_handle: int) -> bool:
        eng = self._engine
        self._machine.calls.append(("set_optimization_profile_async", id(self), profile_index, stream_handle))
        if not 0 <= profile_index < eng.num_optimization_profiles:
            return self._error(f"profile {profile_index} out of range [0, {eng.num_optimization_profiles})")
        others = {c._profile for c in eng._contexts if c is not self}
        if eng._plan.dynamic and PROFILE_RULE[self._trt._surface_version] != "always" and profile_index in others:
            return self._error(f"profile {profile_index} is used by another execution context")
        self._profile = profile_index
        self._profile_stream = stream_handle
        self._shapes.clear()  # setOptimizationProfileAsync() must come before setInputShape()
        return True

    def set_input_shape(self, name: str, shape: Sequence[int]) -> bool:
        plan = self._engine._plan
        shape = tuple(int(d) for d in shape)
        self._machine.calls.append(("set_input_shape", id(self), name, shape))
        is_input, _, dims = plan.tensors.get(name, (False, "", ()))
        if not is_input:
            return self._error(f"'{name}' is not an input")
        if len(shape) != len(dims) or any(d >= 0 and d != s for d, s in zip(dims, shape)):
            return self._error(f"'{name}': shape {shape} does not fit {dims}")
        if plan.dynamic:
            if self._profile < 0:
                return self._error("no optimization profile selected for this execution context")
            lo, _, hi = plan.profiles[self._profile][name]
            if any(not a <= s <= b for a, s, b in zip(lo, shape, hi)):
                return self._error(f"'{name}': shape {shape} outside profile {self._profile} [{lo}, {hi}]")
        self._shapes[name] = shape
        return True

    def get_tensor_shape(self, name: str) -> Tuple[int, ...]:
        plan = self._engine._plan
        is_input, _, dims = plan.tensors[name]
        if is_input:
            return self._shapes.get(name, tuple(dims))
        if all(d >= 0 for d in dims):
            return tuple(dims)
        inputs = {n: self._shapes.get(n) for n, (i, _, _) in plan.tensors.items() if i}
        if any(s is None for s in inputs.values()) or plan.outputs is None:
            return tuple(dims)
        return tuple(plan.outputs(inputs)[name])

    def set_tensor_address(self, name: str, memory: int) -> bool:
        if name not in self._engine._plan.tensors:
            return self._error(f"no tensor '{name}'")
        self._addresses[name] = int(memory)
        return True

    def get_tensor_address(self, name: str) -> int:
        return self._addresses.get(name, 0)

    def execute_async_v3(self, stream_handle: int) -> bool:
        eng, plan = self._engine, self._engine._plan
        self._machine.calls.append(("execute_async_v3", id(self), self._profile, stream_handle))
        if plan.dynamic:
            if self._profile < 0:
                return self._error("execute_async_v3 without an optimization profile")
            sharing = [c for c in eng._contexts if c is not self and c._profile == self._profile and c._shapes]
            if sharing:
                return self._error(
                    f"two execution contexts of one engine in use with profile {self._profile} "
                    "(NvInferRuntime.h: each context in concurrent use must use a separate optimization profile)"
                )
        inputs = [n for n, (i, _, _) in plan.tensors.items() if i]
        if plan.dynamic and any(n not in self._shapes for n in inputs):
            return self._error("an input shape is not set")
        if any(n not in self._addresses for n in plan.tensors):
            return self._error("a tensor address is not set")
        run = plan.run or self._machine.run_with
        if run is not None and self._machine.memory is not None:
            mem = self._machine.memory
            feeds = {}
            for n in inputs:
                _, dt, _ = plan.tensors[n]
                shape = self.get_tensor_shape(n)
                dtype = _NUMPY[dt]
                feeds[n] = np.frombuffer(mem.read(self._addresses[n], int(np.prod(shape)) * dtype.itemsize), dtype).reshape(shape)
            for n, arr in run(feeds).items():
                _, dt, _ = plan.tensors[n]
                mem.write(self._addresses[n], np.ascontiguousarray(arr, _NUMPY[dt]).tobytes(), stream_handle)
        return True


_NUMPY = {
    "FLOAT": np.dtype("float32"),
    "HALF": np.dtype("float16"),
    "INT8": np.dtype("int8"),
    "INT32": np.dtype("int32"),
    "INT64": np.dtype("int64"),
    "UINT8": np.dtype("uint8"),
    "BOOL": np.dtype("bool"),
}


# -- builder side ------------------------------------------------------------------------------------------------


class B_Builder:
    def __init__(self, logger: Any) -> None:
        self._logger = logger

    @property
    def num_DLA_cores(self) -> int:
        return self._machine.dla_cores

    def create_network(self, flags: int = 0) -> Any:
        return self._trt.INetworkDefinition._new(flags)

    def create_builder_config(self) -> Any:
        return self._trt.IBuilderConfig._new()

    def create_optimization_profile(self) -> Any:
        return self._trt.IOptimizationProfile._new()

    def build_serialized_network(self, network: Any, config: Any) -> Any:
        return _build(self, network, config)


class B_IOptimizationProfile:
    def _init(self) -> None:
        self._shapes: Dict[str, Tuple[Tuple[int, ...], ...]] = {}

    def set_shape(self, input: str, min: Sequence[int], opt: Sequence[int], max: Sequence[int]) -> None:
        self._shapes[input] = (tuple(min), tuple(opt), tuple(max))

    def get_shape(self, input: str) -> List[Tuple[int, ...]]:
        return list(self._shapes.get(input, ()))


def _stored(name: str) -> property:
    """A read-write property kept in the object's ``_values`` (set up by ``_init``)."""

    def get(self: Any) -> Any:
        return self._values[name]

    def set_(self: Any, value: Any) -> None:
        self._machine.calls.append((f"IBuilderConfig.{name}", value))
        self._values[name] = value

    return property(get, set_)


class B_IBuilderConfig:
    def _init(self) -> None:
        self._flags: set = set()
        self._profiles: List[Any] = []
        self._calibration_profile = None
        self._pools: Dict[str, int] = {}
        self._timing = None
        trt = self._trt
        self._values = {
            "int8_calibrator": None,
            "default_device_type": trt.DeviceType.GPU,
            "DLA_core": -1,
            "profiling_verbosity": trt.ProfilingVerbosity.LAYER_NAMES_ONLY,
            "progress_monitor": None,
        }

    int8_calibrator = _stored("int8_calibrator")
    default_device_type = _stored("default_device_type")
    DLA_core = _stored("DLA_core")
    profiling_verbosity = _stored("profiling_verbosity")
    progress_monitor = _stored("progress_monitor")

    def set_flag(self, flag: Any) -> None:
        self._flags.add(flag.name)

    def get_flag(self, flag: Any) -> bool:
        return flag.name in self._flags

    def clear_flag(self, flag: Any) -> None:
        self._flags.discard(flag.name)

    def add_optimization_profile(self, profile: Any) -> int:
        self._profiles.append(profile)
        return len(self._profiles) - 1

    @property
    def num_optimization_profiles(self) -> int:
        return len(self._profiles)

    def set_calibration_profile(self, profile: Any) -> bool:
        self._calibration_profile = profile
        return True

    def get_calibration_profile(self) -> Any:
        return self._calibration_profile

    def can_run_on_DLA(self, layer: Any) -> bool:
        return bool(self._machine.dla_cores) and self._machine.can_run_on_dla(layer)

    def set_memory_pool_limit(self, pool: Any, pool_size: int) -> None:
        self._pools[pool.name] = int(pool_size)

    def get_memory_pool_limit(self, pool: Any) -> int:
        return self._pools.get(pool.name, 0)

    def create_timing_cache(self, serialized_timing_cache: bytes) -> Any:
        return self._trt.ITimingCache._new(bytes(serialized_timing_cache))

    def set_timing_cache(self, cache: Any, ignore_mismatch: bool) -> bool:
        if cache._data and not cache._data.startswith(f"timing {self._trt._surface_version}".encode()):
            return False
        self._timing = cache
        return True

    def get_timing_cache(self) -> Any:
        return self._timing


class B_ITimingCache:
    def _init(self, data: bytes) -> None:
        self._data = data

    def serialize(self) -> Any:
        return self._trt.IHostMemory._new(f"timing {self._trt._surface_version}".encode())


class B_IHostMemory:
    def _init(self, data: bytes) -> None:
        self._data = data

    def __bytes__(self) -> bytes:
        return self._data

    @property
    def nbytes(self) -> int:
        return len(self._data)


class B_INetworkDefinition:
    """A network filled by the real TensorRT-RTX ONNX parser, seen through this release's surface."""

    def _init(self, flags: int) -> None:
        self._flags = flags
        self._rtx = None  # the TensorRT-RTX network once parsed
        self._onnx: Optional[Path] = None

    @property
    def has_implicit_batch_dimension(self) -> bool:
        """8.x: a network is implicit-batch unless made with kEXPLICIT_BATCH (NvInfer.h); 10.x removed implicit batch."""
        if self._trt._surface_version.startswith("8."):
            return not self._flags & (1 << int(self._trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH))
        return False

    @property
    def num_inputs(self) -> int:
        return self._rtx.num_inputs if self._rtx is not None else 0

    @property
    def num_outputs(self) -> int:
        return self._rtx.num_outputs if self._rtx is not None else 0

    @property
    def num_layers(self) -> int:
        return self._rtx.num_layers if self._rtx is not None else 0

    def get_input(self, index: int) -> Any:
        return _tensor(self._trt, self._rtx.get_input(index))

    def get_output(self, index: int) -> Any:
        return _tensor(self._trt, self._rtx.get_output(index))

    def get_layer(self, index: int) -> Any:
        return self._trt.ILayer._new(self._rtx.get_layer(index))


# What the release's parser makes of a type it lacks: "TensorRT will attempt to cast down INT64 to INT32"
# (onnx-tensorrt 8.5-GA and 8.6-GA operators.md).
_DOWNCAST = {("DataType", "INT64"): "INT32"}


def _member(trt: Any, enum: str, value: Any) -> Any:
    """The member of this release's enum with the name of a TensorRT-RTX enum value; NotModelled if it has none."""
    name = str(value).split(".")[-1]
    if not hasattr(getattr(trt, enum), name):
        name = _DOWNCAST.get((enum, name), name)
    found = getattr(getattr(trt, enum), name, None)
    if found is None:
        raise NotModelled(f"TensorRT-RTX produced {enum}.{name}, which TensorRT {trt.__version__} does not have")
    return found


def _tensor(trt: Any, rtx_tensor: Any) -> Any:
    return None if rtx_tensor is None else trt.ITensor._new(rtx_tensor)


class B_ITensor:
    def _init(self, rtx: Any) -> None:
        self._rtx = rtx

    @property
    def name(self) -> str:
        return self._rtx.name

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self._rtx.shape)

    @property
    def dtype(self) -> Any:
        return _member(self._trt, "DataType", self._rtx.dtype)

    @property
    def allowed_formats(self) -> int:
        return int(self._rtx.allowed_formats)

    @allowed_formats.setter
    def allowed_formats(self, value: int) -> None:
        self._rtx.allowed_formats = value


class B_ILayer:
    def _init(self, rtx: Any) -> None:
        self._rtx = rtx

    @property
    def name(self) -> str:
        return self._rtx.name

    @property
    def type(self) -> Any:
        return _member(self._trt, "LayerType", self._rtx.type)

    @property
    def num_outputs(self) -> int:
        return self._rtx.num_outputs

    @property
    def num_inputs(self) -> int:
        return self._rtx.num_inputs

    def get_output(self, index: int) -> Any:
        return _tensor(self._trt, self._rtx.get_output(index))

    def get_input(self, index: int) -> Any:
        return _tensor(self._trt, self._rtx.get_input(index))

    @property
    def precision(self) -> Any:
        return self.__dict__.get("_precision", self._trt.DataType.FLOAT)  # NvInfer.h: kFLOAT until set

    @precision.setter
    def precision(self, value: Any) -> None:
        self._machine.calls.append(("ILayer.precision", self.name, value))
        object.__setattr__(self, "_precision", value)


class B_IConstantLayer:
    @property
    def weights(self) -> np.ndarray:
        import tensorrt_rtx

        rtx = self._rtx
        rtx.__class__ = tensorrt_rtx.IConstantLayer
        return np.asarray(rtx.weights)


class B_OnnxParser:
    def __init__(self, network: Any, logger: Any) -> None:
        self._network = network
        self._logger = logger
        self._errors: List[Any] = []

    def parse_from_file(self, model: str) -> bool:
        import tensorrt_rtx

        if self._network.has_implicit_batch_dimension:  # onnx-tensorrt 8.x ModelImporter::importModel's first ASSERT
            self._errors = [self._trt.ParserError._new("INVALID_VALUE", _ImplicitBatchError())]
            return False
        rtx_logger = tensorrt_rtx.Logger(tensorrt_rtx.Logger.ERROR)
        builder = tensorrt_rtx.Builder(rtx_logger)
        network = builder.create_network(0)
        parser = tensorrt_rtx.OnnxParser(network, rtx_logger)
        ok = parser.parse_from_file(str(model))
        self._errors = [
            self._trt.ParserError._new(e.code().name if hasattr(e.code(), "name") else str(e.code()), e)
            for e in (parser.get_error(i) for i in range(parser.num_errors))
        ]
        # Keep the RTX objects alive with the network that shows them.
        self._network._rtx, self._network._onnx = network, Path(model)
        self._network._keep = (builder, parser, rtx_logger)
        return bool(ok)

    @property
    def num_errors(self) -> int:
        return len(self._errors)

    def get_error(self, index: int) -> Any:
        return self._errors[index]


class _ImplicitBatchError:
    """The error onnx-tensorrt 8.5/8.6 reports for a network made without EXPLICIT_BATCH (its wording, node -1)."""

    def desc(self) -> str:
        return (
            'Assertion failed: !_importer_ctx.network()->hasImplicitBatchDimension() && "This version of the ONNX parser '
            "only supports TensorRT INetworkDefinitions with an explicit batch dimension. Please ensure the network was "
            'created using the EXPLICIT_BATCH NetworkDefinitionCreationFlag."'
        )

    def file(self) -> str:
        return "ModelImporter.cpp"

    def line(self) -> int:
        return 0

    def func(self) -> str:
        return "importModel"

    def node(self) -> int:
        return -1

    def node_name(self) -> str:
        return ""

    def node_operator(self) -> str:
        return ""


class B_ParserError:
    def _init(self, code: str, rtx: Any) -> None:
        self._code, self._rtx = code, rtx

    def code(self) -> Any:
        return getattr(self._trt.ErrorCode, self._code.split(".")[-1], self._trt.ErrorCode.INVALID_NODE)

    def desc(self) -> str:
        return self._rtx.desc()

    def file(self) -> str:
        return self._rtx.file()

    def line(self) -> int:
        return self._rtx.line()

    def func(self) -> str:
        return self._rtx.func()

    def node(self) -> int:
        return self._rtx.node()

    def node_name(self) -> str:
        return self._rtx.node_name()

    def node_operator(self) -> str:
        return self._rtx.node_operator()


class B_IProgressMonitor:
    """The abstract base (pyCore.cpp's PyProgressMonitor): the application's subclass supplies the three callbacks."""

    def __init__(self) -> None:
        pass


def _progress(config: Any) -> bool:
    """What NvInfer.h (10.3) says a build does with a progress monitor: phaseStart, stepComplete for each step
    ("false to stop the build"), and phaseFinish, also when a step asked to stop. False: the build was cancelled."""
    monitor = config._values.get("progress_monitor")
    if monitor is None:
        return True
    monitor.phase_start("Building the engine (stand-in)", None, 2)
    try:
        return all(monitor.step_complete("Building the engine (stand-in)", step) for step in range(2))
    finally:
        monitor.phase_finish("Building the engine (stand-in)")


class _Calibrator:
    """The calibrator base classes (pyInt8.cpp): a Python subclass supplies the overrides; get_algorithm is C++."""

    _algorithm = ""

    def __init__(self) -> None:
        pass

    def get_algorithm(self) -> Any:
        return getattr(self._trt.CalibrationAlgoType, self._algorithm)


class B_IInt8EntropyCalibrator2(_Calibrator):
    _algorithm = "ENTROPY_CALIBRATION_2"


class B_IInt8EntropyCalibrator(_Calibrator):
    _algorithm = "ENTROPY_CALIBRATION"


class B_IInt8MinMaxCalibrator(_Calibrator):
    _algorithm = "MINMAX_CALIBRATION"


class B_IInt8LegacyCalibrator(_Calibrator):
    _algorithm = "LEGACY_CALIBRATION"


def _drive_calibrator(builder: Any, network: Any, config: Any) -> Optional[str]:
    """What TensorRT's builder does with an INT8 calibrator before it builds. Returns an error, or None."""
    trt, cal = builder._trt, config.int8_calibrator
    algorithm = ALGORITHM_NAMES[cal.get_algorithm().name]
    tag = _version_tag(trt.__version__)
    header = f"TRT-{tag}-{algorithm}"
    cached = cal.read_calibration_cache()
    if cached is not None:
        text = bytes(memoryview(cached)).decode("ascii", "replace")
        if text.splitlines()[:1] == [header]:
            builder._machine.calls.append(("calibration cache used", text))
            return None
        # TensorRT ignores a cache from another version or algorithm and calibrates again.
    names = [network.get_input(i).name for i in range(network.num_inputs)]
    batches = 0
    while True:
        pointers = cal.get_batch(names)
        if pointers is None or len(pointers) == 0:
            break
        try:
            [operator.index(p) for p in pointers]  # pybind11 casts the list to std::vector<size_t>
        except TypeError:
            builder._machine.calls.append(("error", "get_batch did not return device pointers as integers"))
            break
        batches += 1
    builder._machine.calls.append(("calibration batches", batches))
    if batches == 0:
        return "stand-in: calibration failed, no batch was read and no usable cache was given"
    tensors = [network.get_input(i).name for i in range(network.num_inputs)]
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        tensors += [layer.get_output(k).name for k in range(layer.num_outputs)]
    # Placeholder scales (amax 1.0): the stand-in cannot compute TensorRT's entropy numbers.
    lines = [header] + [f"{name}: 3c010204" for name in tensors]
    cal.write_calibration_cache(memoryview(("\n".join(lines) + "\n").encode()))
    return None


def _version_tag(version: str) -> int:
    major, minor, patch = (int(p) for p in version.split(".")[:3])
    return major * 10000 + minor * 100 + patch if major >= 10 else major * 1000 + minor * 100 + patch


def _build(builder: Any, network: Any, config: Any) -> Any:
    trt, m = builder._trt, builder._machine

    def fail(message: str) -> None:
        _log(builder, "ERROR", message)
        return None

    dims = {}
    for i in range(network.num_inputs):
        t = network.get_input(i)
        dims[t.name] = (t.dtype.name, t.shape)
    dynamic = [n for n, (_, s) in dims.items() if any(d < 0 for d in s)]
    profiles = []
    for p in config._profiles:
        profiles.append({n: p._shapes[n] for n in dims if n in p._shapes})
    if dynamic and not profiles:
        return fail("stand-in: the network has dynamic inputs but no optimization profile was added")
    for p in profiles:
        for n in dynamic:
            if n not in p:
                return fail(f"stand-in: optimization profile lacks input '{n}'")
    dla = config.default_device_type == trt.DeviceType.DLA
    if dla and (m.dla_cores == 0 or not 0 <= config.DLA_core < m.dla_cores):
        return fail(f"stand-in: DLA core {config.DLA_core} requested, the machine has {m.dla_cores}")
    if hasattr(trt.BuilderFlag, "INT8") and config.get_flag(trt.BuilderFlag.INT8) and config.int8_calibrator is not None:
        error = _drive_calibrator(builder, network, config)
        if error:
            return fail(error)
    tensors = {n: (True, dt, tuple(s)) for n, (dt, s) in dims.items()}
    for i in range(network.num_outputs):
        t = network.get_output(i)
        tensors[t.name] = (False, t.dtype.name, tuple(t.shape))
    plan = EnginePlan(trt._surface_version, tensors, profiles, config.DLA_core if dla else None)
    onnx = getattr(network, "_onnx", None)
    if onnx is not None and any(d < 0 for _, _, s in tensors.values() for d in s):
        outputs = [n for n, (is_in, _, _) in tensors.items() if not is_in]

        def output_shapes(shapes: Dict[str, Tuple[int, ...]]) -> Dict[str, Tuple[int, ...]]:
            from edge.graph.model import prepare  # ONNX shape inference at the given input shapes

            graph = prepare(onnx, shapes)
            return {n: tuple(graph.shape(n)) for n in outputs}

        plan.outputs = output_shapes
    if not _progress(config):
        return fail("IBuilder::buildSerializedNetwork: Error Code 7: BuildCanceled (stand-in: the progress monitor said stop)")
    m.calls.append(("built", sorted(config._flags), len(profiles), plan.dla_core))
    return trt.IHostMemory._new(m.register(plan))


BEHAVIOURS: Dict[str, type] = {
    "ILogger": B_ILogger,
    "Logger": B_Logger,
    "Runtime": B_Runtime,
    "ICudaEngine": B_ICudaEngine,
    "EngineInspector": B_EngineInspector,
    "IExecutionContext": B_IExecutionContext,
    "Builder": B_Builder,
    "IBuilderConfig": B_IBuilderConfig,
    "IProgressMonitor": B_IProgressMonitor,
    "IOptimizationProfile": B_IOptimizationProfile,
    "ITimingCache": B_ITimingCache,
    "IHostMemory": B_IHostMemory,
    "INetworkDefinition": B_INetworkDefinition,
    "ITensor": B_ITensor,
    "ILayer": B_ILayer,
    "IConstantLayer": B_IConstantLayer,
    "OnnxParser": B_OnnxParser,
    "ParserError": B_ParserError,
    "IInt8EntropyCalibrator2": B_IInt8EntropyCalibrator2,
    "IInt8EntropyCalibrator": B_IInt8EntropyCalibrator,
    "IInt8MinMaxCalibrator": B_IInt8MinMaxCalibrator,
    "IInt8LegacyCalibrator": B_IInt8LegacyCalibrator,
}
ENUM_BEHAVIOURS: Dict[str, type] = {"DataType": B_DataType}


def _public(cls: type) -> Dict[str, Any]:
    """The members a behaviour class (and its behaviour bases) define."""
    out: Dict[str, Any] = {}
    for klass in reversed(cls.__mro__[:-1]):
        out.update({k: v for k, v in klass.__dict__.items() if not (k.startswith("__") and k not in ("__init__", "__bytes__"))})
    return out


# -- the factory -------------------------------------------------------------------------------------------------


class StandInModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"module 'tensorrt' ({self.__version__}, stand-in) has no attribute '{name}'")


def make_tensorrt(version: str, machine: Optional[Machine] = None, lean: bool = False, name: str = "tensorrt") -> Any:
    """The ``tensorrt`` module of ``version`` ('8.5.2', '8.6.1' or '10.3.0') on ``machine``.

    ``lean=True`` leaves out what only the full module binds (``#if EXPORT_ALL_BINDINGS``: the builder side), as
    on a runtime-only install.
    """
    surface = load_surface(version)
    machine = machine or Machine()
    trt = StandInModule(name)
    trt.__version__ = RELEASED[version]
    trt._surface_version = version
    trt._machine = machine

    def wanted(entry: dict) -> bool:
        return not (lean and entry.get("full_only"))

    # Enums first: classes refer to them, and nested enums hang off their class.
    enums: Dict[str, type] = {}
    for qual, enum in surface["enums"].items():
        if not wanted(enum):
            continue
        short = qual.split(".")[-1]
        extra = _public(ENUM_BEHAVIOURS[short]) if short in ENUM_BEHAVIOURS else {}
        cls = type(short, (EnumValue,), {"__slots__": (), **extra})
        members = {}
        for member, value in enum["values"].items():
            obj = object.__new__(cls)
            EnumValue.__init__(obj, short, member, value)
            members[member] = obj
        for member, obj in members.items():
            setattr(cls, member, obj)
        cls.__members__ = dict(members)
        enums[qual] = cls

    classes: Dict[str, type] = {}

    def build_class(cname: str) -> type:
        if cname in classes:
            return classes[cname]
        spec = surface["classes"][cname]
        bases = tuple(build_class(b) for b in spec["bases"] if b in surface["classes"] and wanted(surface["classes"][b]))
        members: Dict[str, dict] = {}
        for base in bases:
            members.update(base._members)
        members.update({k: v for k, v in spec["members"].items() if wanted(v)})
        behaviour = BEHAVIOURS.get(cname)
        ns: Dict[str, Any] = {"_standin": True, "_surface_name": cname, "_members": members}
        implemented = _public(behaviour) if behaviour else {}
        for key, value in implemented.items():
            if key.startswith("_") and key not in ("__init__",):
                ns[key] = value
        for member, entry in spec["members"].items():
            if not wanted(entry) or member.startswith("__"):
                continue
            ns[member] = implemented[member] if member in implemented else _Unmodelled(cname, member, entry["kind"])
        if spec["init"]:
            ns["__init__"] = implemented.get("__init__", _Unmodelled(cname, "__init__", "method")._fail)
        if "__bytes__" in implemented:
            ns["__bytes__"] = implemented["__bytes__"]
        cls = type(cname, bases or (SurfaceObject,), ns)
        cls._trt = trt
        cls._machine = machine
        classes[cname] = cls
        return cls

    for cname, spec in surface["classes"].items():
        if wanted(spec):
            setattr(trt, cname, build_class(cname))
    for qual, cls in enums.items():
        scope = surface["enums"][qual]["scope"]
        if scope is None:
            setattr(trt, qual, cls)
        elif scope in classes:
            setattr(classes[scope], qual.split(".")[-1], cls)
            if surface["enums"][qual]["exported"]:
                for member, obj in cls.__members__.items():
                    setattr(classes[scope], member, obj)
    for attr, value in surface["attributes"].items():
        if value.startswith("DataType.") and hasattr(trt, "DataType"):
            setattr(trt, attr, getattr(trt.DataType, value.split(".", 1)[1]))
        elif value.startswith('m.attr("'):
            target = value.split('"')[1]
            if hasattr(trt, target):
                setattr(trt, attr, getattr(trt, target))
    for fname in surface["functions"]:
        setattr(trt, fname, _Unmodelled("(module)", fname, "method")._fail)
    trt.nptype = _nptype(trt)
    trt.volume = lambda iterable: int(np.prod(list(iterable), dtype=np.int64))
    return trt


def _nptype(trt: Any) -> Callable[[Any], type]:
    """tensorrt/__init__.py's nptype(): the numpy type of a DataType; TypeError for those numpy lacks."""
    names = {"FLOAT": np.float32, "HALF": np.float16, "INT8": np.int8, "INT32": np.int32, "INT64": np.int64, "BOOL": np.bool_}
    names["UINT8"] = np.uint8

    def nptype(trt_type: Any) -> type:
        if getattr(trt.DataType, trt_type.name, None) == trt_type and trt_type.name in names:
            return names[trt_type.name]
        raise TypeError("Could not resolve TensorRT datatype to an equivalent numpy datatype.")

    return nptype


def behaviour_members() -> Dict[str, List[str]]:
    """Public members each behaviour class defines (a test checks every one exists in some release)."""
    out = {}
    for cname, cls in {**BEHAVIOURS, **ENUM_BEHAVIOURS}.items():
        out[cname] = [k for k in cls.__dict__ if not k.startswith("_")]
    return out
