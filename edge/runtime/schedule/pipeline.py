"""The camera loop: one thread per named stage, bounded queues between them.

    capture -> preprocess -> infer -> postprocess -> sink

A live source drops its oldest queued frame when the pipeline is behind (and counts the drop); a file
source blocks instead, so every frame is processed. ``stop()`` (SIGINT/SIGTERM) ends capture and lets the
frames already in flight drain through the sinks; a failure in any stage aborts all of them.

Each frame's buffer goes back to the source's ring when its sinks are done, when a live source drops it, and,
after an abort, when the stages have exited: every buffer comes back however the run ends.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from edge.errors import EdgeError, RunFailed, one_line
from edge.runtime.engines.preprocess import Transform
from edge.runtime.outputs.sinks import Sink, annotate
from edge.runtime.postprocess import Result
from edge.runtime.schedule.control import Controls
from edge.runtime.sources import Frame, Source
from edge.runtime.status.metrics import Metrics

log = logging.getLogger("edge.pipeline")

_EOS = object()  # end of stream, passed down the queues once
_QUEUES = 4  # capture -> preprocess -> infer -> postprocess -> sink


def frames_in_flight(queue_size: int) -> int:
    """The most frames the pipeline holds at once: every queue full, one in each stage, one being captured."""
    return _QUEUES * queue_size + _QUEUES + 1


@dataclass
class Packet:
    frame: Frame
    timings: Dict[str, float] = field(default_factory=dict)
    tensor: Optional[np.ndarray] = None
    transform: Optional[Transform] = None
    outputs: Optional[Dict[str, np.ndarray]] = None
    result: Optional[Result] = None
    source: str = ""  # the pool's: the name of the frame's source
    seq: int = -1  # the pool's: its place among the frames of its source that went to an engine
    engine: str = ""  # the pool's: the engine that inferred it
    t_queued: float = 0.0  # the pool's: perf_counter() when it was queued for an engine


def result_record(p: Packet, t_done: float) -> Dict[str, Any]:
    """The result line of one frame (what JSONL, MQTT and the live view carry)."""
    f = p.frame
    record: Dict[str, Any] = {
        "frame": f.index,
        "t_capture": round(f.t_capture, 6),
        "t_done": round(t_done, 6),
        "latency_ms": {k: round(v * 1e3, 3) for k, v in p.timings.items()},
    }
    if f.origin:
        record["origin"] = f.origin
    record.update(p.result.to_dict())
    return record


class Pipeline(Controls):
    def __init__(
        self,
        source: Source,
        preprocess: Callable[[Frame], tuple],
        infer: Callable[[Dict[str, np.ndarray]], Dict[str, np.ndarray]],
        input_name: str,
        postprocess: Callable[[Dict[str, np.ndarray], Transform], Result],
        sinks: List[Sink],
        queue_size: int = 4,
        max_frames: Optional[int] = None,
        on_frame: Optional[Callable[[Packet], None]] = None,
        stop_event: Optional[threading.Event] = None,
    ) -> None:
        self.source, self.sinks = source, sinks
        self._preprocess, self._infer, self._postprocess = preprocess, infer, postprocess
        self.input_name = input_name
        self.max_frames = max_frames
        self.on_frame = on_frame
        self.metrics = Metrics()
        super().__init__(stop_event)
        self.error: Optional[BaseException] = None
        self._queues = [queue.Queue(maxsize=queue_size) for _ in range(_QUEUES)]
        self._annotate = any(s.wants_image for s in sinks)
        self._threads: List[threading.Thread] = []

    # -- stage bodies -------------------------------------------------------
    def _do_preprocess(self, p: Packet) -> None:
        p.tensor, p.transform = self._preprocess(p.frame)

    def _do_infer(self, p: Packet) -> None:
        p.outputs = self._infer({self.input_name: p.tensor})
        p.tensor = None

    def _do_postprocess(self, p: Packet) -> None:
        p.result = self._postprocess(p.outputs, p.transform)
        p.outputs = None

    def _do_sink(self, p: Packet) -> None:
        record = result_record(p, time.monotonic())
        image = annotate(p.frame.bgr(), p.result) if self._annotate else None
        for sink in self.sinks:
            sink.write(p.frame, p.result, record, image)

    def _stages(self) -> List[tuple]:
        return [
            ("preprocess", self._do_preprocess),
            ("infer", self._do_infer),
            ("postprocess", self._do_postprocess),
            ("sink", self._do_sink),
        ]

    def run_inline(self) -> None:
        """Every stage in turn on the calling thread, frame by frame: the sequential baseline for benchmarks."""
        stages = self._stages()
        while True:
            p = self._read_packet()
            if p is None:
                break
            try:
                for name, body in stages:
                    t0 = time.perf_counter()
                    body(p)
                    p.timings[name] = time.perf_counter() - t0
            except BaseException:
                p.frame.release()
                raise
            self._finish(p)  # releases the frame
        self.done.set()

    def _read_packet(self) -> Optional[Packet]:
        """The next frame from the source as a timed packet, or None at the end or the frame limit."""
        if self.max_frames is not None and self.metrics.captured >= self.max_frames:
            return None
        t0 = time.perf_counter()
        frame = self.source.read()
        if frame is None:
            return None
        p = Packet(frame)
        p.timings["capture"] = time.perf_counter() - t0
        self.metrics.captured += 1
        return p

    def _finish(self, p: Packet) -> None:
        try:
            self.metrics.frame_done(p.frame.t_capture, p.timings, time.monotonic())
            if self.on_frame is not None:
                self.on_frame(p)
        finally:
            p.frame.release()  # the sinks are done with its pixels: the buffer goes back to the ring

    # -- threads ------------------------------------------------------------
    def _put(self, q: queue.Queue, item: Any) -> bool:
        while not self.abort_event.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _fail(self, stage: str, exc: BaseException) -> None:
        if self.error is None:
            if not isinstance(exc, EdgeError):
                log.debug("stage '%s' failed", stage, exc_info=exc)  # the traceback, for --log-level debug only
                exc = RunFailed(f"stage '{stage}' failed: {type(exc).__name__}: {one_line(exc, 300)}")
            self.error = exc
        self.abort_event.set()

    def _capture_loop(self) -> None:
        out = self._queues[0]
        live = self.source.live
        try:
            while not self.stop_event.is_set() and not self.abort_event.is_set():
                packet = self._read_packet()
                if packet is None:
                    break
                if live:
                    # Behind a live camera: make room by dropping the oldest waiting frame.
                    while True:
                        try:
                            out.put_nowait(packet)
                            break
                        except queue.Full:
                            try:
                                dropped = out.get_nowait()
                            except queue.Empty:
                                continue
                            if dropped is not _EOS:
                                dropped.frame.release()
                                self.metrics.dropped += 1
                elif not self._put(out, packet):
                    packet.frame.release()
                    return
        except BaseException as exc:
            self._fail("capture", exc)
        finally:
            self._put(out, _EOS)

    def _stage_loop(self, name: str, body: Callable[[Packet], None], inq: queue.Queue, outq: Optional[queue.Queue]) -> None:
        try:
            while not self.abort_event.is_set():
                try:
                    p = inq.get(timeout=0.1)
                except queue.Empty:
                    continue
                if p is _EOS:
                    break
                t0 = time.perf_counter()
                try:
                    body(p)
                except BaseException:
                    p.frame.release()
                    raise
                p.timings[name] = time.perf_counter() - t0
                if outq is not None:
                    if not self._put(outq, p):
                        p.frame.release()
                        return
                else:
                    self._finish(p)
        except BaseException as exc:
            self._fail(name, exc)
            return
        if outq is not None:
            self._put(outq, _EOS)

    def start(self) -> None:
        q = self._queues
        specs = [(name, body, q[i], q[i + 1] if i + 1 < len(q) else None) for i, (name, body) in enumerate(self._stages())]
        self._threads = [threading.Thread(target=self._capture_loop, name="capture", daemon=True)]
        self._threads += [threading.Thread(target=self._stage_loop, args=s, name=s[0], daemon=True) for s in specs]
        for t in self._threads:
            t.start()
        threading.Thread(target=self._watch, name="pipeline-join", daemon=True).start()

    def _watch(self) -> None:
        for t in self._threads:
            t.join()
        self._release_queued()
        self.done.set()

    def _release_queued(self) -> None:
        """After an abort, frames left in the queues hand their buffers back (a drained run leaves none)."""
        for q in self._queues:
            while True:
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    break
                if item is not _EOS:
                    item.frame.release()

    def status_line(self, extra: str = "") -> str:
        return self.metrics.status_line(extra)

    def stages_done(self) -> bool:
        """Every stage but capture has exited. After an abort that is enough to finish the run: a capture thread
        stuck in a stalled network read (a daemon thread) is left behind rather than delaying shutdown."""
        return all(not t.is_alive() for t in self._threads[1:])

    def count_abandoned(self) -> int:
        """Frames captured but neither finished nor dropped: the ones an abort left in flight."""
        m = self.metrics
        m.abandoned = max(0, m.captured - m.frames - m.dropped)
        return m.abandoned
