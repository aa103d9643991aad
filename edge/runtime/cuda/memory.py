"""pycuda memory and streams, in the one CUDA context that TensorRT uses too.

TensorRT works through the CUDA runtime API, which always uses the device's *primary* context. We retain that
same context through the driver API, so pycuda's buffers and streams are valid in TensorRT's calls, and push it
on whichever pipeline thread does CUDA work (a context is current per thread).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Dict, Iterator, Tuple

import numpy as np

from edge.errors import EdgeError
from edge.lazy import require


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


def timing_event() -> Any:
    """An event that can be timed against others and that a waiting thread sleeps on instead of spinning
    (on a Jetson a spinning wait would take a CPU core from capture and postprocessing)."""
    cuda = driver()
    return cuda.Event(cuda.event_flags.BLOCKING_SYNC)
