"""A stand-in for ``pycuda.driver`` (and ``pycuda.compiler``) on a machine without a GPU.

pycuda cannot run here (no CUDA driver), so CPU tests of the TensorRT backend and the calibrator replace it. The
stand-in keeps device memory in host bytearrays and does every copy at once, but it records each operation with
the stream it was issued on, the events recorded and waited for, and the context current at the time, so tests
can check *ordering* (what a real GPU would race on) and *which context* memory belongs to. Kernels are not run:
a launch is recorded with its arguments. Timing on a real GPU is covered by the GPU tests (tests/test_gpu_trt.py).
"""

from __future__ import annotations

import itertools
import sys
import threading
import types
from typing import Any, Dict, List, Optional, Tuple

import numpy as np


class DeviceMemory:
    """Allocations by base address; pointers inside an allocation resolve to it."""

    def __init__(self) -> None:
        self.blocks: Dict[int, bytearray] = {}
        self._next = 0x7F0000000000

    def alloc(self, nbytes: int) -> int:
        base = self._next
        self._next += (max(1, nbytes) + 0xFFFF) & ~0xFFFF
        self.blocks[base] = bytearray(max(1, nbytes))
        return base

    def _find(self, ptr: int) -> Tuple[int, bytearray]:
        for base, block in self.blocks.items():
            if base <= ptr < base + len(block):
                return ptr - base, block
        raise ValueError(f"stand-in pycuda: {ptr:#x} is not device memory (freed, or never allocated)")

    def read(self, ptr: int, nbytes: int) -> bytes:
        off, block = self._find(ptr)
        return bytes(block[off : off + nbytes])

    def write(self, ptr: int, data: bytes, stream: Any = None) -> None:
        off, block = self._find(ptr)
        block[off : off + len(data)] = data

    def free(self, ptr: int) -> None:
        self.blocks.pop(ptr, None)


def make_pycuda(
    memory: Optional[DeviceMemory] = None, devices: Tuple[Tuple[str, Tuple[int, int]], ...] = (("stand-in GPU", (8, 7)),)
) -> types.ModuleType:
    """A ``pycuda`` package with ``driver`` and ``compiler``; ``driver.log`` lists every operation in order."""
    memory = memory or DeviceMemory()
    log: List[tuple] = []
    ids = itertools.count(1)
    local = threading.local()
    contexts_made: List[Any] = []

    def current() -> Optional[Context]:
        stack = getattr(local, "stack", None)
        return stack[-1] if stack else None

    class Error(Exception):
        pass

    class LogicError(Error):
        pass

    class Context:
        def __init__(self, device: Device, primary: bool) -> None:
            self.device, self.primary, self.id = device, primary, next(ids)
            self.detached = False

        def push(self) -> None:
            local.stack = getattr(local, "stack", []) + [self]

        @staticmethod
        def pop() -> None:
            stack = getattr(local, "stack", [])
            if not stack:
                raise LogicError("cuCtxPopCurrent failed: no context is current")
            stack.pop()

        @staticmethod
        def get_current() -> Optional[Context]:
            return current()

        @staticmethod
        def synchronize() -> None:
            log.append(("context.synchronize",))

        def detach(self) -> None:
            self.detached = True

    class Device:
        _primary: Dict[int, Context] = {}

        def __init__(self, index: int) -> None:
            if not 0 <= index < len(devices):
                raise LogicError(f"cuDeviceGet failed: invalid device ordinal {index}")
            self.index = index

        @staticmethod
        def count() -> int:
            return len(devices)

        def name(self) -> str:
            return devices[self.index][0]

        def compute_capability(self) -> Tuple[int, int]:
            return devices[self.index][1]

        def retain_primary_context(self) -> Context:
            if self.index not in Device._primary:
                Device._primary[self.index] = Context(self, primary=True)
            return Device._primary[self.index]

        def make_context(self) -> Context:  # what pycuda.autoinit does: a new, non-primary context
            ctx = Context(self, primary=False)
            contexts_made.append(ctx)
            ctx.push()
            return ctx

    def _need_context(what: str) -> Context:
        ctx = current()
        if ctx is None:
            raise LogicError(f"{what} failed: invalid device context (no context is current)")
        return ctx

    class DeviceAllocation:
        def __init__(self, nbytes: int) -> None:
            self.context = _need_context("cuMemAlloc")
            self.ptr = memory.alloc(nbytes)
            self.nbytes = nbytes
            log.append(("mem_alloc", self.ptr, nbytes, self.context.id, self.context.primary))

        def __int__(self) -> int:
            return self.ptr

        __index__ = __int__

        def free(self) -> None:
            memory.free(self.ptr)
            log.append(("mem_free", self.ptr))

    class HostAllocation:
        def __init__(self) -> None:
            self.freed = False

        def free(self) -> None:
            self.freed = True

    class Stream:
        def __init__(self, flags: int = 0) -> None:
            _need_context("cuStreamCreate")
            self.handle = next(ids) * 0x100
            log.append(("stream", self.handle))

        def synchronize(self) -> None:
            log.append(("stream.synchronize", self.handle))

        def wait_for_event(self, event: Event) -> None:
            log.append(("wait_for_event", self.handle, event.id, event.recorded_on))

    class Event:
        def __init__(self, flags: int = 0) -> None:
            self.id = next(ids)
            self.recorded_on: Optional[int] = None
            self.t = 0.0

        def record(self, stream: Optional[Stream] = None) -> Event:
            self.recorded_on = stream.handle if stream is not None else 0
            self.t = float(len(log))
            log.append(("event.record", self.id, self.recorded_on))
            return self

        def synchronize(self) -> None:
            log.append(("event.synchronize", self.id))

        def time_since(self, other: Event) -> float:
            return self.t - other.t

    def pagelocked_empty(shape: Any, dtype: Any) -> np.ndarray:
        base = np.empty(int(np.prod(shape)) * np.dtype(dtype).itemsize, np.uint8)
        arr = base.view(dtype).reshape(shape)
        holder = HostAllocation()
        arr_base = _PinnedBase(base, holder)
        return arr_base.view_as(arr)

    def mem_alloc(nbytes: int) -> DeviceAllocation:
        return DeviceAllocation(nbytes)

    def _stream_handle(stream: Optional[Stream]) -> int:
        return stream.handle if stream is not None else 0

    def memcpy_htod_async(dest: Any, src: np.ndarray, stream: Optional[Stream] = None) -> None:
        memory.write(int(dest), np.ascontiguousarray(src).tobytes())
        log.append(("htod", int(dest), src.nbytes, _stream_handle(stream)))

    def memcpy_dtoh_async(dest: np.ndarray, src: Any, stream: Optional[Stream] = None) -> None:
        data = memory.read(int(src), dest.nbytes)
        dest.reshape(-1).view(np.uint8)[:] = np.frombuffer(data, np.uint8)
        log.append(("dtoh", int(src), dest.nbytes, _stream_handle(stream)))

    def memcpy_htod(dest: Any, src: np.ndarray) -> None:
        _need_context("cuMemcpyHtoD")
        memcpy_htod_async(dest, src, None)

    def memcpy_dtoh(dest: np.ndarray, src: Any) -> None:
        memcpy_dtoh_async(dest, src, None)

    def init(flags: int = 0) -> None:
        log.append(("init",))

    driver = types.ModuleType("pycuda.driver")
    for name, value in dict(
        Error=Error,
        LogicError=LogicError,
        Context=Context,
        Device=Device,
        DeviceAllocation=DeviceAllocation,
        HostAllocation=HostAllocation,
        Stream=Stream,
        Event=Event,
        pagelocked_empty=pagelocked_empty,
        mem_alloc=mem_alloc,
        memcpy_htod_async=memcpy_htod_async,
        memcpy_dtoh_async=memcpy_dtoh_async,
        memcpy_htod=memcpy_htod,
        memcpy_dtoh=memcpy_dtoh,
        init=init,
        event_flags=types.SimpleNamespace(BLOCKING_SYNC=1, DISABLE_TIMING=2),
        log=log,
        memory=memory,
        contexts_made=contexts_made,
    ).items():
        setattr(driver, name, value)

    class _Function:
        def __init__(self, name: str) -> None:
            self.name = name

        def __call__(self, *args: Any, block: Any = None, grid: Any = None, stream: Optional[Stream] = None) -> None:
            _need_context("cuLaunchKernel")
            log.append(("launch", self.name, _stream_handle(stream), tuple(int(a) for a in args[:4])))

    class SourceModule:
        def __init__(self, source: str, **_: Any) -> None:
            self.source = source

        def get_function(self, name: str) -> _Function:
            if name not in self.source:
                raise LogicError(f"cuModuleGetFunction failed: named symbol not found ({name})")
            return _Function(name)

    compiler = types.ModuleType("pycuda.compiler")
    compiler.SourceModule = SourceModule
    package = types.ModuleType("pycuda")
    package.__path__ = []  # a package, so `import pycuda.driver` looks in sys.modules
    package.driver, package.compiler = driver, compiler
    return package


class _PinnedBase:
    """Gives a numpy array a ``.base`` with ``free()``, as pycuda's page-locked arrays have."""

    def __init__(self, buffer: np.ndarray, holder: Any) -> None:
        self.buffer, self.holder = buffer, holder

    def view_as(self, arr: np.ndarray) -> np.ndarray:
        out = _Pinned(arr.shape, arr.dtype, buffer=self.buffer.data)
        out._holder = self.holder
        return out


class _Pinned(np.ndarray):
    @property
    def base(self) -> Any:  # pycuda: arr.base is the HostAllocation
        return self._holder


def install(monkeypatch: Any, memory: Optional[DeviceMemory] = None) -> types.ModuleType:
    """Put the stand-in in sys.modules for one test; returns ``pycuda.driver``."""
    package = make_pycuda(memory)
    monkeypatch.setitem(sys.modules, "pycuda", package)
    monkeypatch.setitem(sys.modules, "pycuda.driver", package.driver)
    monkeypatch.setitem(sys.modules, "pycuda.compiler", package.compiler)
    monkeypatch.delitem(sys.modules, "pycuda.autoinit", raising=False)
    return package.driver
