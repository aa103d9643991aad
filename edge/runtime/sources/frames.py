"""Frames and the ring of buffers they are decoded into.

A source decodes each frame into a buffer from a ``FrameRing`` (``VideoCapture.read(image=buffer)`` writes in
place), the frame travels down the pipeline in that buffer, and the pipeline hands the buffer back once the sinks
are done with the frame, or when a live source drops it. Buffers are allocated on first need, up to the ring's
capacity (the most frames the pipeline can hold), and then reused: no allocation per frame, and, when the ring's
memory is page-locked (GPU preprocessing), no copy between decode and upload. A new frame size (an image folder
of mixed sizes) retires the buffers of the old size as they come back.

The memory comes from an allocator: plain numpy arrays here; page-locked or mapped CUDA memory from
``edge.runtime.engines.cuda.memory.PinnedFrameMemory``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from edge.errors import RunFailed
from edge.runtime.sources.pixels import BT601_LIMITED, Colour, pixel_format, to_bgr


class HostMemory:
    """Pageable numpy arrays: the CPU path's frame memory."""

    name = "pageable"
    pinned = False  # page-locked: the GPU can copy from it asynchronously
    mapped = False  # the GPU reads it in place through a device pointer

    def allocate(self, shape: Tuple[int, ...]) -> Tuple[np.ndarray, Optional[int]]:
        """(array, device pointer or None)."""
        return np.empty(shape, np.uint8), None

    def free(self, array: np.ndarray) -> None:
        pass

    def abandon(self) -> None:
        pass


class FrameBuffer:
    """One reusable frame array. ``release()`` hands it back to its ring; a second call does nothing."""

    __slots__ = ("array", "device_ptr", "_ring", "_out")

    def __init__(self, ring: FrameRing, array: np.ndarray, device_ptr: Optional[int]) -> None:
        self.array, self.device_ptr, self._ring, self._out = array, device_ptr, ring, False

    @property
    def pinned(self) -> bool:
        return self._ring.memory.pinned

    def release(self) -> None:
        self._ring._release(self)


class FrameRing:
    """Frame buffers for one source, at most ``capacity`` of them, reused in turn."""

    def __init__(self, capacity: int, memory: Any = None, stop: Optional[threading.Event] = None) -> None:
        if capacity < 1:
            raise ValueError("a frame ring needs at least one buffer")
        self.capacity = capacity
        self.memory = memory if memory is not None else HostMemory()
        self._stop = stop
        self._cond = threading.Condition()
        self._shape: Optional[Tuple[int, ...]] = None
        self._idle: List[FrameBuffer] = []
        self._all: List[FrameBuffer] = []
        self.allocations = 0  # buffers allocated over the ring's life (stays at the working set once warm)
        self.acquired = 0
        self._closed = False

    @property
    def in_use(self) -> int:
        with self._cond:
            return sum(1 for b in self._all if b._out)

    @property
    def buffers(self) -> int:
        with self._cond:
            return len(self._all)

    def acquire(self, shape: Tuple[int, ...]) -> Optional[FrameBuffer]:
        """A buffer of ``shape``: an idle one, a new one while under capacity, else the next one handed back.
        None when the run stops while waiting (every wait wakes on the stop event within 0.1 s)."""
        shape = tuple(int(d) for d in shape)
        with self._cond:
            if self._closed:
                raise RunFailed("frame ring: used after it was closed")
            if shape != self._shape:
                self._shape = shape
                for buf in self._idle:  # the old size: free what is idle now, the rest as it comes back
                    self._drop(buf)
                self._idle = []
            while True:
                if self._idle:
                    buf = self._idle.pop()
                    break
                if len(self._all) < self.capacity:
                    array, ptr = self.memory.allocate(shape)
                    buf = FrameBuffer(self, array, ptr)
                    self._all.append(buf)
                    self.allocations += 1
                    break
                if self._stop is not None and self._stop.is_set():
                    return None
                self._cond.wait(0.1)
            buf._out = True
            self.acquired += 1
            return buf

    def _release(self, buf: FrameBuffer) -> None:
        with self._cond:
            if not buf._out:
                return
            buf._out = False
            if self._closed:
                return
            if buf.array.shape != self._shape:
                self._drop(buf)
            else:
                self._idle.append(buf)
            self._cond.notify()

    def _drop(self, buf: FrameBuffer) -> None:
        self._all.remove(buf)
        self.memory.free(buf.array)

    def close(self) -> None:
        """Free every buffer (call once nothing reads them any more: capture stopped, the GPU idle)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            for buf in self._all:
                self.memory.free(buf.array)
            self._all, self._idle = [], []
            self._cond.notify_all()

    def abandon(self) -> None:
        """Leave the buffers allocated for good: a capture thread stuck in a read may still write into one."""
        with self._cond:
            self._closed = True
            self.memory.abandon()
            self._cond.notify_all()

    def info(self) -> Dict[str, Any]:
        with self._cond:
            return {
                "memory": self.memory.name,
                "buffers": len(self._all),
                "allocations": self.allocations,
                "frames": self.acquired,
                "in_use": sum(1 for b in self._all if b._out),
            }


@dataclass
class Frame:
    index: int
    t_capture: float  # time.monotonic() when the frame was read
    image: np.ndarray  # the pixels, laid out as ``format`` says (HxWx3 uint8 BGR unless a camera says otherwise)
    origin: str = ""  # file name for image folders, else empty
    format: str = "bgr"  # see edge.runtime.sources.pixels
    colour: Colour = field(default=BT601_LIMITED)  # YCbCr formats: the source's matrix and range
    buffer: Optional[FrameBuffer] = None  # the ring buffer holding ``image``, handed back by release()

    @property
    def size(self) -> Tuple[int, int]:
        """(width, height) in pixels; an EdgeError when the array cannot hold a frame of its format."""
        return pixel_format(self.format).size(self.image)

    def bgr(self, copy: bool = False) -> np.ndarray:
        """The frame as uint8 BGR (H, W, 3); ``copy``: never the ring buffer itself (for holding past release)."""
        out = to_bgr(self.image, self.format, self.colour)
        return out.copy() if copy and out is self.image else out

    def release(self) -> None:
        """Hand the buffer back to the ring (the frame's pixels may then be overwritten); idempotent."""
        if self.buffer is not None:
            self.buffer.release()
