"""Many sources over several engines in one process: each camera in order, no engine idle while another drowns.

    source lane (capture + preprocess thread) --queue--> engine worker (infer) --> lane delivery (decode, sinks)

Each source has a lane: its own thread reads and preprocesses frames into a small queue (a live camera drops the
oldest waiting frame and counts it; a file waits). Each engine has a worker that takes the next frame from the sources
the assignment gives it, round robin, and infers it. A frame gets its sequence number when an engine takes it, so the
numbers follow capture order; the lane's delivery thread decodes and writes results strictly in that order, holding
back a frame that finished early on a faster engine. Every frame is delivered, counted as dropped, or, after an
abort, counted as abandoned.

Which engine serves which source is ``assign.Assigner``'s: measured service times and frame rates, whole sources
moved when an engine falls behind. A source marked ``spread`` is not assigned: any engine with nothing of its own to
do takes its next frame (the order is kept all the same).

A lane's failure (its camera gone for good, a decoder or sink error) ends that lane and is reported at the end; the
other lanes go on. An engine's failure aborts the whole pool.
"""

from __future__ import annotations

import heapq
import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

import numpy as np

from edge.errors import EdgeError, RunFailed, one_line
from edge.runtime.outputs.sinks import Sink, annotate
from edge.runtime.postprocess import Result
from edge.runtime.schedule.assign import UNBOUNDED, Assigner, Move
from edge.runtime.schedule.control import Controls
from edge.runtime.schedule.pipeline import Packet, result_record
from edge.runtime.sources import Frame, Source
from edge.runtime.status.metrics import Metrics

log = logging.getLogger("edge.pool")

STAGES = ("capture", "preprocess", "wait", "infer", "postprocess", "sink")
REBALANCE_S = 1.0  # how often the assignment is looked at again
WAIT_S = 0.1  # every wait wakes at least this often to look at the stop and abort events


@dataclass
class Lane:
    """One source in the pool, with its own decoder and sinks."""

    name: str
    source: Source
    preprocess: Callable[[Frame], Tuple[np.ndarray, Any]]
    decode: Callable[[Dict[str, np.ndarray], Any], Result]
    sinks: List[Sink]
    queue_size: int = 2
    spread: bool = False
    max_frames: Optional[int] = None
    metrics: Metrics = field(default_factory=lambda: Metrics(STAGES))
    error: Optional[BaseException] = None
    broken: bool = False  # its decoder or a sink failed: frames still in flight are counted, not written
    reading: bool = True  # capture still running
    served_by: Dict[str, int] = field(default_factory=dict)  # engine -> frames
    _queue: Deque[Packet] = field(default_factory=deque)
    _next_seq: int = 0  # given to the next frame an engine takes
    _expected: int = 0  # the next sequence number to deliver
    _done: List[Tuple[int, Packet]] = field(default_factory=list)  # (seq, packet) finished, not delivered
    _cond: threading.Condition = field(default_factory=threading.Condition)

    @property
    def live(self) -> bool:
        return bool(self.source.live)


@dataclass
class Engine:
    """One engine (a GPU plan, a DLA plan on one core, an ONNX Runtime session) and what it did."""

    name: str
    infer: Callable[[Dict[str, np.ndarray]], Dict[str, np.ndarray]]
    input_name: str
    frames: int = 0
    busy_s: float = 0.0
    t_start: Optional[float] = None
    t_end: Optional[float] = None
    _rr: int = 0  # round-robin position over its sources

    def stats(self) -> Dict[str, Any]:
        wall = ((self.t_end or time.monotonic()) - self.t_start) if self.t_start is not None else 0.0
        return {
            "frames": self.frames,
            "busy_s": round(self.busy_s, 3),
            "wall_s": round(wall, 3),
            "busy": round(self.busy_s / wall, 3) if wall > 0 else 0.0,
            "fps": round(self.frames / wall, 2) if wall > 0 else 0.0,
        }


class Pool(Controls):
    def __init__(
        self,
        lanes: List[Lane],
        engines: List[Engine],
        stop_event: Optional[threading.Event] = None,
        on_frame: Optional[Callable[[Packet], None]] = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        names = [lane.name for lane in lanes]
        if len(set(names)) != len(names) or len({e.name for e in engines}) != len(engines):
            raise ValueError("pool: source and engine names must be unique")
        self.lanes, self.engines = lanes, engines
        self.assigner = Assigner([e.name for e in engines], [lane.name for lane in lanes if not lane.spread])
        super().__init__(stop_event)
        self.error: Optional[BaseException] = None
        self.on_frame = on_frame
        self.moves: List[Tuple[float, Move]] = []
        self._clock = clock
        self._cond = threading.Condition()  # guards the queues and the assignment; engines wait on it
        self._threads: List[threading.Thread] = []
        self._capture_threads: List[threading.Thread] = []
        self._annotate = {lane.name: any(s.wants_image for s in lane.sinks) for lane in lanes}
        self.metrics = Metrics(STAGES)  # every source together: the status line, the exporters, energy per frame
        self.cpu_s: Optional[float] = None  # process CPU seconds from start to the last thread's exit
        self._cpu0 = 0.0

    # -- set-up -----------------------------------------------------------------
    def measure(self, feeds: Dict[str, np.ndarray], frames: int = 3) -> Dict[str, float]:
        """Each engine's service time on ``feeds``, one engine at a time (no contention yet): where the assignment
        starts. The first inference of each is a warm-up and not counted."""
        out = {}
        for e in self.engines:
            e.infer(feeds)
            times = []
            for _ in range(frames):
                t0 = time.perf_counter()
                e.infer(feeds)
                times.append(time.perf_counter() - t0)
            out[e.name] = float(np.median(times))
            self.assigner.observe_service(e.name, out[e.name])
        return out

    def seed_rates(self, rates: Dict[str, float]) -> None:
        """What each live source says it delivers (a camera's nominal FPS) until its frames say otherwise."""
        for name, fps in rates.items():
            if name in self.assigner.rate and fps and fps > 0 and not math.isinf(fps):
                self.assigner.rate[name] = float(fps)

    # -- lanes --------------------------------------------------------------------
    def _lane_failed(self, lane: Lane, stage: str, exc: BaseException) -> None:
        if not isinstance(exc, EdgeError):
            log.debug("source '%s': %s failed", lane.name, stage, exc_info=exc)
            exc = RunFailed(f"source '{lane.name}': {stage} failed: {type(exc).__name__}: {one_line(exc, 300)}")
        elif not str(exc).startswith(f"source '{lane.name}'"):
            exc = type(exc)(f"source '{lane.name}': {exc}")
        if lane.error is None:
            lane.error = exc
            log.error("%s; the other sources go on", exc)

    def _capture_loop(self, lane: Lane) -> None:
        cond = self._cond
        try:
            while not self.stop_event.is_set() and not self.abort_event.is_set() and not lane.broken:
                if lane.max_frames is not None and lane.metrics.captured >= lane.max_frames:
                    break
                t0 = time.perf_counter()
                frame = lane.source.read()
                if frame is None:
                    break
                p = Packet(frame)
                t1 = time.perf_counter()
                p.timings["capture"] = t1 - t0
                lane.metrics.captured += 1
                self.metrics.captured += 1
                try:
                    p.tensor, p.transform = lane.preprocess(frame)
                except BaseException:
                    frame.release()
                    raise
                p.timings["preprocess"] = time.perf_counter() - t1
                p.t_queued, p.source = time.perf_counter(), lane.name
                with cond:
                    if lane.live and not lane.spread:
                        self.assigner.observe_capture(lane.name, frame.t_capture)
                    if lane.live:
                        while len(lane._queue) >= lane.queue_size:  # behind a camera: drop the oldest waiting frame
                            lane._queue.popleft().frame.release()
                            lane.metrics.dropped += 1
                            self.metrics.dropped += 1
                    else:
                        while len(lane._queue) >= lane.queue_size and not self.abort_event.is_set():
                            cond.wait(WAIT_S)
                        if self.abort_event.is_set():
                            frame.release()
                            break
                    lane._queue.append(p)
                    cond.notify_all()
        except BaseException as exc:
            self._lane_failed(lane, "capture", exc)
        finally:
            with cond:
                lane.reading = False
                if lane.broken:  # nothing more of this source goes to an engine
                    while lane._queue:
                        lane._queue.popleft().frame.release()
                        lane.metrics.abandoned += 1
                cond.notify_all()
            with lane._cond:
                lane._cond.notify_all()

    # -- engines ------------------------------------------------------------------
    def _take(self, engine: Engine) -> Optional[Tuple[Lane, Packet]]:
        """The next frame for ``engine`` (its own sources round robin, else a spread source's), or None when every
        source is finished and empty, or on abort. Called with the pool's lock held."""
        while not self.abort_event.is_set():
            mine = [lane for lane in self.lanes if self.assigner.assignment.get(lane.name) == engine.name]
            for group in (mine, [lane for lane in self.lanes if lane.spread]):
                n = len(group)
                for i in range(n):
                    lane = group[(engine._rr + i) % n]
                    if lane._queue:
                        engine._rr = (engine._rr + i + 1) % max(n, 1)
                        p = lane._queue.popleft()
                        p.seq = lane._next_seq
                        lane._next_seq += 1
                        self._cond.notify_all()  # a file source waiting for room
                        return lane, p
            if all(not lane.reading and not lane._queue for lane in self.lanes):
                return None
            self._cond.wait(WAIT_S)
        return None

    def _engine_loop(self, engine: Engine) -> None:
        engine.t_start = self._clock()
        try:
            while True:
                with self._cond:
                    taken = self._take(engine)
                if taken is None:
                    break
                lane, p = taken
                p.timings["wait"] = time.perf_counter() - p.t_queued
                t0 = time.perf_counter()
                try:
                    p.outputs = engine.infer({engine.input_name: p.tensor})
                except BaseException:
                    p.frame.release()
                    raise
                seconds = time.perf_counter() - t0
                p.timings["infer"] = seconds
                p.tensor, p.engine = None, engine.name
                engine.frames += 1
                engine.busy_s += seconds
                with self._cond:
                    self.assigner.observe_service(engine.name, seconds)
                with lane._cond:
                    lane.served_by[engine.name] = lane.served_by.get(engine.name, 0) + 1
                    heapq.heappush(lane._done, (p.seq, p))  # a lane's seq numbers are unique: p is never compared
                    lane._cond.notify_all()
        except BaseException as exc:
            self._fail(f"engine '{engine.name}'", exc)
        finally:
            engine.t_end = self._clock()

    def _fail(self, what: str, exc: BaseException) -> None:
        if self.error is None:
            if not isinstance(exc, EdgeError):
                log.debug("%s failed", what, exc_info=exc)
                exc = RunFailed(f"{what} failed: {type(exc).__name__}: {one_line(exc, 300)}")
            self.error = exc
        self.abort_event.set()
        with self._cond:
            self._cond.notify_all()

    # -- delivery -------------------------------------------------------------------
    def _next_done(self, lane: Lane) -> Optional[Packet]:
        """The next frame of ``lane`` in order, or None when the lane is finished (or the pool aborts)."""
        with lane._cond:
            while not self.abort_event.is_set():
                if lane._done and lane._done[0][0] == lane._expected:
                    lane._expected += 1
                    return heapq.heappop(lane._done)[1]
                with self._cond:
                    finished = not lane.reading and not lane._queue and lane._expected == lane._next_seq
                if finished:
                    return None
                lane._cond.wait(WAIT_S)
        return None

    def _deliver_loop(self, lane: Lane) -> None:
        while True:
            p = self._next_done(lane)
            if p is None:
                break
            if lane.broken:
                p.frame.release()
                lane.metrics.abandoned += 1
                continue
            try:
                t0 = time.perf_counter()
                p.result = lane.decode(p.outputs, p.transform)
                p.outputs = None
                t1 = time.perf_counter()
                p.timings["postprocess"] = t1 - t0
                record = result_record(p, time.monotonic())
                record["source"], record["engine"] = lane.name, p.engine
                image = annotate(p.frame.bgr(), p.result) if self._annotate[lane.name] else None
                for sink in lane.sinks:
                    sink.write(p.frame, p.result, record, image)
                p.timings["sink"] = time.perf_counter() - t1
                t_done = time.monotonic()
                lane.metrics.frame_done(p.frame.t_capture, p.timings, t_done)
                self.metrics.frame_done(p.frame.t_capture, p.timings, t_done)
                if self.on_frame is not None:
                    self.on_frame(p)
            except BaseException as exc:
                lane.broken = True
                self._lane_failed(lane, "delivery", exc)
                lane.metrics.abandoned += 1
            finally:
                p.frame.release()

    # -- the pool's own thread ------------------------------------------------------
    def _rebalance_loop(self) -> None:
        while not self.done.wait(REBALANCE_S):
            with self._cond:
                snapshot = self.assigner.copy()
            now = self._clock()
            moves = snapshot.rebalance(now)  # planning takes milliseconds: not while the engines wait for the lock
            if moves:
                with self._cond:
                    self.assigner.apply(moves, now)
                self._log_moves(moves)

    def _log_moves(self, moves: List[Move]) -> None:
        now = self._clock()
        for m in moves:
            self.moves.append((now, m))
            if m.old is None:
                log.info("source %s -> %s (%s)", m.source, m.new, m.reason)
            else:
                log.info("source %s moved %s -> %s (%s)", m.source, m.old, m.new, m.reason)

    def start(self) -> None:
        self._cpu0 = time.process_time()
        with self._cond:
            moves = self.assigner.start(self._clock())
        self._log_moves(moves)
        for lane in self.lanes:
            t = threading.Thread(target=self._capture_loop, args=(lane,), name=f"capture-{lane.name}", daemon=True)
            self._capture_threads.append(t)
        self._threads = [
            *(threading.Thread(target=self._engine_loop, args=(e,), name=f"engine-{e.name}", daemon=True) for e in self.engines),
            *(
                threading.Thread(target=self._deliver_loop, args=(lane,), name=f"deliver-{lane.name}", daemon=True)
                for lane in self.lanes
            ),
        ]
        for t in self._capture_threads + self._threads:
            t.start()
        threading.Thread(target=self._watch, name="pool-join", daemon=True).start()
        threading.Thread(target=self._rebalance_loop, name="pool-rebalance", daemon=True).start()

    def _watch(self) -> None:
        for t in self._capture_threads + self._threads:
            t.join()
        self._release_queued()
        self.cpu_s = time.process_time() - self._cpu0
        self.done.set()

    def _release_queued(self) -> None:
        """After an abort, frames left waiting or finished-but-undelivered hand their buffers back and are counted."""
        for lane in self.lanes:
            with self._cond:
                while lane._queue:
                    lane._queue.popleft().frame.release()
                    lane.metrics.abandoned += 1
            with lane._cond:
                while lane._done:
                    heapq.heappop(lane._done)[1].frame.release()
                    lane.metrics.abandoned += 1

    def stages_done(self) -> bool:
        """Every engine and delivery thread has exited (a capture thread stuck in a stalled read may remain)."""
        return all(not t.is_alive() for t in self._threads)

    def count_abandoned(self) -> int:
        """Frames captured but neither delivered, dropped nor counted yet: those an abort left on an engine."""
        for lane in self.lanes:
            m = lane.metrics
            m.abandoned = max(m.abandoned, m.captured - m.frames - m.dropped)
        self.metrics.abandoned = sum(lane.metrics.abandoned for lane in self.lanes)
        return self.metrics.abandoned

    def status_line(self, extra: str = "") -> str:
        """The whole pool's line, then each engine's FPS and sources: ``gpu 58.1 fps [cam0 cam2]``."""
        line = self.metrics.status_line()
        engines = []
        for e in self.engines:
            mine = " ".join(n for n, eng in self.assigner.assignment.items() if eng == e.name)
            engines.append(f"{e.name} {e.frames} frames [{mine}]")
        line += " | " + ", ".join(engines)
        return f"{line} | {extra}" if extra else line

    # -- what a user sees -----------------------------------------------------------
    def lock(self) -> threading.Condition:
        """The lock that guards the assignment, for readers on other threads (the metrics exporter)."""
        return self._cond

    def summary(self) -> Dict[str, Any]:
        sources = {}
        for lane in self.lanes:
            s = lane.metrics.summary()
            s["engine"] = "spread" if lane.spread else self.assigner.assignment.get(lane.name)
            s["why"] = "spread: any engine with nothing of its own" if lane.spread else self.assigner.reasons.get(lane.name, "")
            s["served_by"] = dict(lane.served_by)
            s["offered_fps"] = (
                None if math.isinf(self.assigner.rate.get(lane.name, UNBOUNDED)) else round(self.assigner.rate[lane.name], 2)
            )
            s["error"] = str(lane.error) if lane.error else None
            sources[lane.name] = s
        engines = {}
        for e in self.engines:
            st = e.stats()
            svc = self.assigner.service_s.get(e.name)
            st["service_ms"] = round(svc * 1e3, 3) if svc else None
            st["sources"] = sorted(n for n, eng in self.assigner.assignment.items() if eng == e.name)
            engines[e.name] = st
        moves = [
            {"t": round(t, 3), "source": m.source, "from": m.old, "to": m.new, "why": m.reason} for t, m in self.moves if m.old
        ]
        frames = sum(lane.metrics.frames for lane in self.lanes)
        cpu_ms = round(self.cpu_s / frames * 1e3, 3) if self.cpu_s is not None and frames else None
        return {"sources": sources, "engines": engines, "moves": moves, "cpu_ms_per_frame": cpu_ms}
