"""pycuda memory and streams, in the one CUDA context that TensorRT uses too.

TensorRT works through the CUDA runtime API, which always uses the device's *primary* context. We retain that
same context through the driver API, so pycuda's buffers and streams are valid in TensorRT's calls, and push it
on whichever pipeline thread does CUDA work (a context is current per thread).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Any, Dict, Iterator, Optional, Tuple

import numpy as np

from edge.errors import EdgeError
from edge.lazy import require

log = logging.getLogger("edge.run")


def driver() -> Any:
    """pycuda.driver, imported on first use (it needs libcuda, which CI machines lack)."""
    return require("pycuda.driver", "TensorRT buffers and GPU preprocessing")


class CudaContext:
    """The primary context of one GPU, retained for the life of a backend."""

    def __init__(self, device_index: int = 0) -> None:
        cuda = driver()
        try:
            cuda.init()
            count = cuda.Device.count()
        except cuda.Error as exc:
            raise EdgeError(f"CUDA cannot start here ({exc}); is this a GPU machine with the NVIDIA driver loaded?") from None
        if not 0 <= device_index < count:
            raise EdgeError(f"CUDA device {device_index}: this machine has {count} CUDA device(s)")
        self.device = cuda.Device(device_index)
        self.name = self.device.name()
        major, minor = self.device.compute_capability()
        self.compute_capability = f"{major}.{minor}"
        self._ctx = self.device.retain_primary_context()
        self.cache: Dict[str, Any] = {}  # objects that live as long as this context (loaded kernel modules)
        attr = cuda.device_attribute
        self.integrated = bool(self.device.get_attribute(attr.INTEGRATED))  # shares DRAM with the CPU (Jetson)
        self.can_map_host_memory = bool(self.device.get_attribute(attr.CAN_MAP_HOST_MEMORY))

    @contextmanager
    def active(self) -> Iterator[None]:
        """Make the context current on the calling thread for the duration of the block."""
        self._ctx.push()
        try:
            yield
        finally:
            driver().Context.pop()

    def close(self) -> None:
        """Release our hold on the primary context; buffers, streams and events must be freed before.

        Call it from the thread that created the context (pycuda's rule for detaching).
        """
        if self._ctx is None:
            return
        with self.active():
            self.cache.clear()
        self._ctx.detach()
        self._ctx = None


class HostDeviceBuffer:
    """One tensor's page-locked host array and its device allocation, made once and reused for every frame.

    Page-locked memory is what lets copies run asynchronously on a stream (pageable memory makes them synchronous).
    """

    def __init__(self, shape: Tuple[int, ...], dtype: np.dtype) -> None:
        cuda = driver()
        self.host = cuda.pagelocked_empty(tuple(shape), np.dtype(dtype))
        self.device = cuda.mem_alloc(max(1, self.host.nbytes))  # a zero-size tensor still needs a valid address

    @property
    def ptr(self) -> int:
        return int(self.device)

    @property
    def nbytes(self) -> int:
        return self.host.nbytes

    def upload(self, stream: Any) -> None:
        driver().memcpy_htod_async(self.device, self.host, stream)

    def download(self, stream: Any) -> None:
        driver().memcpy_dtoh_async(self.host, self.device, stream)

    def free(self) -> None:
        self.device.free()
        self.host.base.free()


def choose_frame_memory(requested: str, integrated: bool, can_map: bool, gpu: str = "this GPU") -> str:
    """``mapped`` or ``upload`` for the frame buffers: ``auto`` maps them where the GPU shares the CPU's memory
    (an integrated GPU that can map host memory, i.e. a Jetson), so the kernel reads each frame where it was
    decoded; on a discrete GPU it reads mapped memory across PCIe on every access, so frames are uploaded instead."""
    if requested == "auto":
        return "mapped" if integrated and can_map else "upload"
    if requested == "mapped" and not can_map:
        raise EdgeError(
            f"frame_memory: mapped, but {gpu} cannot map host memory (CUDA device attribute CAN_MAP_HOST_MEMORY is 0); "
            "use frame_memory: upload or auto"
        )
    if requested not in ("mapped", "upload"):
        raise EdgeError(f"frame_memory {requested!r}: expected auto, mapped or upload")
    return requested


class PinnedFrameMemory:
    """Page-locked frame buffers for a ``FrameRing``: ``mapped`` ones also get a device pointer through which the
    kernel reads them in place (cuMemHostAlloc with CU_MEMHOSTALLOC_DEVICEMAP, cuMemHostGetDevicePointer)."""

    pinned = True

    def __init__(self, ctx: CudaContext, mapped: bool) -> None:
        self.ctx, self.mapped = ctx, mapped
        self.name = "mapped" if mapped else "pinned"
        self._live: Dict[int, np.ndarray] = {}
        self._abandoned = False

    def allocate(self, shape: Tuple[int, ...]) -> Tuple[np.ndarray, Optional[int]]:
        cuda = driver()
        flags = cuda.host_alloc_flags.DEVICEMAP if self.mapped else 0
        with self.ctx.active():
            array = cuda.pagelocked_empty(tuple(shape), np.uint8, mem_flags=flags)
            ptr = int(array.base.get_device_pointer()) if self.mapped else None
        self._live[id(array)] = array
        return array, ptr

    def free(self, array: np.ndarray) -> None:
        if self._live.pop(id(array), None) is not None and not self._abandoned:
            with self.ctx.active():
                array.base.free()

    def close(self) -> None:
        """Free every buffer still allocated (the backend calls it once the GPU is done with the frames)."""
        for array in list(self._live.values()):
            self.free(array)

    def abandon(self) -> None:
        """Never free: a capture thread stuck in a read may still write into a buffer (the process exits anyway)."""
        if self._live:
            log.warning("frame buffers: %d left allocated, a capture read is stalled", len(self._live))
        self._abandoned = True


def timing_event() -> Any:
    """An event that can be timed against others and that a waiting thread sleeps on instead of spinning
    (on a Jetson a spinning wait would take a CPU core from capture and postprocessing)."""
    cuda = driver()
    return cuda.Event(cuda.event_flags.BLOCKING_SYNC)
