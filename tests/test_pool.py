"""The pool: many sources over several engines. Real pool threads, FrameRings and Metrics around synthetic sources and
sleeping engines (the stand-ins are for cameras and inference runtimes, whose timing a test must control).

Each engine returns the frame's own index (encoded in the tensor), so a test checks that a result belongs to its
frame and that each source's results leave in capture order."""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest

from edge.errors import EdgeError, RunFailed
from edge.runtime.postprocess import Classification, Detection, Result
from edge.runtime.schedule.assign import Move
from edge.runtime.schedule.pool import STAGES, Engine, Lane, Pool
from edge.runtime.sources import Source
from edge.runtime.sources.frames import FrameRing
from edge.runtime.status.metrics import Metrics
from tests.conftest import PROMPT_S
from tests.test_pipeline import Images


class Counter(Source):
    """n frames whose pixels hold their index; ``period`` s between them (a camera) or none (a file)."""

    def __init__(self, n, live, period=0.0, fail_at=None, stall_at=None, stop=None):
        super().__init__()
        self.n, self.live, self.period, self.description = n, live, period, "counter"
        self.fail_at, self.stall_at, self.stop = fail_at, stall_at, stop

    def read(self):
        if self._index >= self.n:
            return None
        if self._index == self.fail_at:
            raise EdgeError("source 'counter': the camera went away")
        if self._index == self.stall_at:
            self.stop.wait()  # a stalled network read: returns only when the test ends
            return None
        if self.period:
            time.sleep(self.period)
        buf = self.ring.acquire((4, 4, 3)) if self.ring is not None else None
        image = buf.array if buf is not None else np.zeros((4, 4, 3), np.uint8)
        image[...] = 0
        image[0, 0, :2] = divmod(self._index, 256)
        return self._frame(image, buffer=buf)


class Collect:
    name, wants_image = "collect", False

    def __init__(self, fail_at=None):
        self.records, self.fail_at = [], fail_at

    def write(self, frame, result, record, annotated):
        if frame.index == self.fail_at:
            raise RunFailed("sink 'collect': disk full")
        self.records.append(record)

    def close(self, failed=False):
        return None


def preprocess(frame):
    hi, lo = frame.image[0, 0, :2]
    index = int(hi) * 256 + int(lo)
    return np.array([index], np.float32), ("transform of frame", index)


def decode(outputs, transform):
    index = int(outputs["y"][0])
    if transform != ("transform of frame", index):  # each frame's outputs are decoded with its own letterbox
        raise AssertionError(f"frame {index} decoded with {transform}")
    return Result(classes=[Classification(index, 1.0)])


def sleeper(seconds, fail_after=None, calls=None):
    """An engine that takes ``seconds`` (a callable for a varying time) per frame and echoes the frame's index."""
    count = [0]

    def infer(feeds):
        count[0] += 1
        if fail_after is not None and count[0] > fail_after:
            raise RuntimeError("engine lost")
        time.sleep(seconds() if callable(seconds) else seconds)
        if calls is not None:
            calls.append(threading.current_thread().name)
        return {"y": feeds["x"].copy()}

    return infer


def lane(name, source, sink=None, ring=None, **kw):
    source.ring = ring if ring is not None else FrameRing(16)
    return Lane(name, source, preprocess, decode, [sink or Collect()], **kw)


def engines(**times):
    return [Engine(name, sleeper(t), "x") for name, t in times.items()]


def run(pool, timeout=30.0, measure=True):
    if measure:
        pool.measure({"x": np.zeros(1, np.float32)}, frames=2)
    pool.start()
    assert pool.wait(timeout), "the pool did not finish"
    return pool


def indices(lane_):
    recs = lane_.sinks[0].records
    for r in recs:
        assert r["classes"][0]["class_id"] == r["frame"], "a result went to another frame"
    return [r["frame"] for r in recs]


def test_every_frame_of_every_file_source_leaves_in_capture_order():
    lanes = [lane(f"f{i}", Counter(60, live=False)) for i in range(4)]
    pool = run(Pool(lanes, engines(gpu=0.001, dla0=0.003, dla1=0.003)))
    assert pool.error is None
    for ln in lanes:
        assert indices(ln) == list(range(60))
        assert ln.metrics.frames == 60 and ln.metrics.dropped == 0 and ln.error is None
        assert ln.source.ring.in_use == 0
    served = pool.summary()["engines"]
    assert sum(e["frames"] for e in served.values()) == 240
    assert all(e["frames"] > 0 for e in served.values()), "an engine sat idle while four sources waited"


def test_a_spread_source_over_engines_of_different_speed_keeps_its_order():
    jitter = np.random.default_rng(7)
    ln = lane("fast", Counter(200, live=False), spread=True)
    pool = Pool([ln], [Engine("gpu", sleeper(lambda: jitter.uniform(0, 0.004)), "x"), Engine("dla0", sleeper(0.006), "x")])
    run(pool)
    assert indices(ln) == list(range(200))
    assert set(ln.served_by) == {"gpu", "dla0"}, "spreading used one engine only"


def test_a_live_source_faster_than_its_engine_drops_the_oldest_and_counts_every_drop():
    ln = lane("cam", Counter(120, live=True, period=0.001), queue_size=2)
    pool = run(Pool([ln], engines(gpu=0.01)))
    got = indices(ln)
    m = ln.metrics
    assert m.dropped > 0 and m.frames + m.dropped == m.captured == 120
    assert (pool.metrics.dropped, pool.metrics.frames, pool.metrics.captured) == (m.dropped, m.frames, 120)
    assert got == sorted(got) and len(got) == m.frames
    assert got[-1] == 119, "the newest frame is the one kept"


def test_a_dead_camera_ends_its_own_lane_only():
    dead = lane("dead", Counter(100, live=True, period=0.001, fail_at=5))
    good = [lane(f"ok{i}", Counter(80, live=False)) for i in range(2)]
    pool = run(Pool([dead, *good], engines(gpu=0.001, dla0=0.002)))
    assert pool.error is None
    assert "dead" in str(dead.error) and "went away" in str(dead.error)
    got = indices(dead)
    assert got == sorted(got) and dead.metrics.frames + dead.metrics.dropped == dead.metrics.captured == 5
    for ln in good:
        assert indices(ln) == list(range(80)) and ln.error is None
    assert pool.summary()["sources"]["dead"]["error"] == str(dead.error)


def test_a_stalled_camera_does_not_hold_the_others_and_the_pool_still_stops():
    release = threading.Event()
    stalled = lane("stalled", Counter(100, live=True, stall_at=3, stop=release))
    good = lane("ok", Counter(50, live=False))
    stop = threading.Event()
    pool = Pool([stalled, good], engines(gpu=0.001), stop_event=stop)
    pool.measure({"x": np.zeros(1, np.float32)})
    pool.start()
    deadline = time.monotonic() + 20
    while good.metrics.frames < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert indices(good) == list(range(50)), "the stalled camera held the other source"
    pool.abort()
    assert _until(pool.stages_done, 5), "engines and deliveries did not leave while a capture read was stalled"
    release.set()
    assert pool.wait(5)


def test_a_slow_engine_loses_its_sources_and_says_why(monkeypatch, caplog):
    # Waits on events, not on wall time: under load a sleeping engine's times stretch, and a fixed-length run could end
    # before the move, or the GPU's stretched times could earn a later move back.
    caplog.set_level("INFO", logger="edge.pool")
    monkeypatch.setattr("edge.runtime.schedule.pool.REBALANCE_S", 0.05)
    monkeypatch.setattr("edge.runtime.schedule.assign.COOLDOWN_S", 0.2)
    slow = [0.002]  # the DLA starts as fast as the GPU, then slows to 1 s a frame (another process took its bandwidth)
    cams = [lane(f"cam{i}", Counter(10**6, live=True, period=0.01)) for i in range(2)]
    pool = Pool(cams, [Engine("gpu", sleeper(0.002), "x"), Engine("dla0", sleeper(lambda: slow[0]), "x")])
    pool.measure({"x": np.zeros(1, np.float32)})
    t0 = time.monotonic()
    pool.start()
    on_dla = [m.source for _, m in pool.moves if m.new == "dla0"]
    assert len(on_dla) == 1, pool.moves  # equally fast at the start: one source on each engine
    assert _until(lambda: pool.engines[1].frames >= 3, 30)
    slow[0] = 1.0
    assert _until(lambda: any(m.old == "dla0" for _, m in pool.moves), 30), pool.moves
    pool.stop()
    assert pool.wait(30)
    first = next(m for m in pool.summary()["moves"] if m["from"] == "dla0")
    assert (first["source"], first["to"]) == (on_dla[0], "gpu") and first["why"].startswith("dla0 behind"), first
    assert t0 <= first["t"] <= time.monotonic() + 1e-3  # when it moved, on the pool's clock
    last = [m for m in pool.summary()["moves"] if m["source"] == on_dla[0]][-1]  # its cooldown counts from then
    assert last["t"] - 1.0 <= pool.assigner.moved_at[on_dla[0]] <= last["t"] + 1e-3
    logged = [r.getMessage() for r in caplog.records]
    assert any(m.startswith(f"source {on_dla[0]} -> dla0 (start: dla0 ") and m.endswith(")") for m in logged), logged
    assert any(m.startswith(f"source {on_dla[0]} moved dla0 -> gpu (dla0 behind: pool ") for m in logged), logged
    for ln in cams:
        got, m = indices(ln), ln.metrics
        assert got == sorted(got) and m.frames + m.dropped + m.abandoned == m.captured


def test_stop_with_frames_on_every_engine_delivers_them_all():
    cams = [lane(f"cam{i}", Counter(10_000, live=True, period=0.002)) for i in range(3)]
    pool = Pool(cams, engines(gpu=0.05, dla0=0.08, dla1=0.08))
    pool.measure({"x": np.zeros(1, np.float32)}, frames=1)
    pool.start()
    assert _until(lambda: all(e.frames >= 1 for e in pool.engines) and all(ln._next_seq > ln._expected for ln in cams), 10)
    pool.stop()
    assert pool.wait(10)
    for ln in cams:
        m = ln.metrics
        assert m.abandoned == 0 and m.frames + m.dropped == m.captured
        assert indices(ln) == sorted(indices(ln)) and ln.source.ring.in_use == 0


def test_an_engine_failure_aborts_the_pool_counts_what_was_in_flight_and_frees_every_buffer():
    cams = [lane(f"f{i}", Counter(500, live=False)) for i in range(3)]
    pool = Pool(cams, [Engine("gpu", sleeper(0.001), "x"), Engine("dla0", sleeper(0.002, fail_after=10), "x")])
    pool.start()  # unmeasured: the plan still uses both engines
    assert pool.wait(20)
    assert pool.count_abandoned() == pool.metrics.abandoned == sum(ln.metrics.abandoned for ln in cams)
    assert isinstance(pool.error, RunFailed) and "engine 'dla0'" in str(pool.error) and "engine lost" in str(pool.error)
    for ln in cams:
        m = ln.metrics
        assert m.frames + m.dropped + m.abandoned == m.captured
        assert ln.source.ring.in_use == 0


def test_an_abort_among_live_cameras_counts_dropped_and_abandoned_frames_apart():
    """Live cameras faster than the engines drop frames; an engine lost then abandons the ones in flight. Each
    captured frame is delivered, dropped or abandoned, once."""
    cams = [lane(f"live{i}", Counter(10_000, live=True, period=0.001)) for i in range(2)]
    pool = Pool(cams, [Engine("gpu", sleeper(0.01, fail_after=15), "x")])
    pool.start()
    assert pool.wait(20)
    abandoned = pool.count_abandoned()
    assert isinstance(pool.error, RunFailed) and "engine lost" in str(pool.error)
    assert abandoned == sum(ln.metrics.abandoned for ln in cams)
    assert sum(ln.metrics.dropped for ln in cams) > 0  # 1 ms a frame against 10 ms an inference
    for ln in cams:
        m = ln.metrics
        assert m.frames + m.dropped + m.abandoned == m.captured, (m.frames, m.dropped, m.abandoned, m.captured)


def test_a_failing_sink_ends_its_source_and_counts_what_it_did_not_write():
    bad = lane("bad", Counter(40, live=False), sink=Collect(fail_at=7))
    good = lane("good", Counter(40, live=False))
    pool = run(Pool([bad, good], engines(gpu=0.001)))
    assert "disk full" in str(bad.error) and indices(bad) == list(range(7))
    m = bad.metrics
    assert m.frames == 7 and m.frames + m.dropped + m.abandoned == m.captured
    assert bad.source.ring.in_use == 0  # the frames after the failure handed their buffers back
    assert indices(good) == list(range(40)) and pool.error is None


def test_frame_limits_per_source():
    lanes = [lane("a", Counter(100, live=False), max_frames=13), lane("b", Counter(100, live=False), max_frames=5)]
    run(Pool(lanes, engines(gpu=0.0)))
    assert indices(lanes[0]) == list(range(13)) and indices(lanes[1]) == list(range(5))


def test_names_must_be_unique():
    with pytest.raises(ValueError, match="unique"):
        Pool([lane("a", Counter(1, live=False)), lane("a", Counter(1, live=False))], engines(gpu=0.0))


def _until(cond, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return False


def test_each_record_carries_its_stage_times_source_and_engine_and_the_counts_add_up():
    lanes = [lane("a", Counter(30, live=False)), lane("b", Counter(30, live=False))]
    t0 = time.process_time()
    pool = run(Pool(lanes, engines(gpu=0.002, dla0=0.002)))
    for ln in lanes:
        for r in ln.sinks[0].records:
            ms = r["latency_ms"]
            assert set(ms) == {"capture", "preprocess", "wait", "infer", "postprocess"}  # the sink's own time follows
            assert all(0 <= v < 5000 for v in ms.values()) and ms["infer"] >= 1.5, ms
            assert r["source"] == ln.name and r["engine"] in ("gpu", "dla0")
        assert sum(ln.served_by.values()) == 30 and set(ln.served_by) == {ln.sinks[0].records[0]["engine"]}
    assert 0 < pool.cpu_s <= time.process_time() - t0
    for e in pool.engines:  # the recent ms per frame: the sleeper's 2 ms plus Python's overhead
        st = pool.summary()["engines"][e.name]
        infer_ms = sorted(r["latency_ms"]["infer"] for ln in lanes for r in ln.sinks[0].records if r["engine"] == e.name)
        assert 2.0 <= st["service_ms"] < 50 and st["frames"] == 30
        assert infer_ms[0] * 0.9 <= st["service_ms"] <= infer_ms[-1] * 1.1  # an average of its own frames' times
        assert st["wall_s"] == round(e.t_end - e.t_start, 3)
        assert 0 < st["busy"] <= 1 and 0 < st["wall_s"] < 30 and st["fps"] == pytest.approx(30 / st["wall_s"], rel=0.02)
        assert st["busy_s"] == pytest.approx(st["busy"] * st["wall_s"], rel=0.02, abs=0.002)
        assert st["busy_s"] >= 30 * 0.002  # busy: the sum of its 30 inferences of at least the sleeper's 2 ms each
    assert pool.summary()["cpu_ms_per_frame"] == pytest.approx(pool.cpu_s / 60 * 1e3, rel=1e-2)
    sink = pool.metrics.summary()["latency_ms"]["sink"]  # the sinks' own time: a list append here
    assert 0 <= sink["p50"] <= sink["max"] < 1000, sink
    line = pool.status_line("power 5 W")
    assert "| gpu 30 frames [a]" in line and "dla0 30 frames [b]" in line and line.endswith("| power 5 W"), line


def test_a_file_source_waits_for_room_instead_of_queueing_more_than_its_queue_size():
    ln = lane("file", Counter(40, live=False), queue_size=2)
    pool = Pool([ln], engines(gpu=0.01))
    pool.start()
    longest = 0
    while not pool.wait(0.001):
        longest = max(longest, len(ln._queue))
    assert longest == 2 and indices(ln) == list(range(40))


def test_a_python_error_in_a_lane_is_one_line_naming_the_source_and_the_stage():
    def broken(frame):
        if frame.index == 3:
            raise ValueError("bad pixels")
        return preprocess(frame)

    bad = lane("bad", Counter(10, live=False))
    bad.preprocess = broken
    good = lane("good", Counter(10, live=False))
    pool = run(Pool([bad, good], engines(gpu=0.001)))
    assert isinstance(bad.error, RunFailed) and str(bad.error) == "source 'bad': capture failed: ValueError: bad pixels"
    assert indices(bad) == [0, 1, 2] and indices(good) == list(range(10)) and pool.error is None


def test_one_engine_takes_its_sources_in_turn():
    a, b = lane("a", Counter(50, live=False)), lane("b", Counter(50, live=False))
    run(Pool([a, b], engines(gpu=0.002)))
    done_a = [r["t_done"] for r in a.sinks[0].records]
    done_b = [r["t_done"] for r in b.sinks[0].records]
    first_end = min(done_a[-1], done_b[-1])
    assert sum(t <= first_end for t in done_a + done_b) >= 97, "one source waited while the other was served"


def test_nominal_rates_seed_only_live_finite_positive_values():
    pool = Pool([lane("cam", Counter(1, live=True)), lane("file", Counter(1, live=False))], engines(gpu=0.0))
    pool.seed_rates({"cam": 25.0, "file": 0.0, "ghost": 30.0})
    assert pool.assigner.rate["cam"] == 25.0 and pool.assigner.rate["file"] == float("inf") and "ghost" not in pool.assigner.rate
    pool.seed_rates({"cam": float("inf")})
    pool.seed_rates({"cam": -5.0})
    assert pool.assigner.rate["cam"] == 25.0


def test_an_engines_stats_are_its_frames_over_its_wall_time():
    e = Engine("dla0", sleeper(0.0), "x", frames=30, busy_s=0.45678, t_start=10.0, t_end=11.5)
    # 1.5 s of wall time: 30 frames are 20 fps, 0.45678 s busy is 0.30452 of it
    assert e.stats() == {"frames": 30, "busy_s": 0.457, "wall_s": 1.5, "busy": 0.305, "fps": 20.0}
    third = Engine("gpu", sleeper(0.0), "x", frames=10, t_start=0.0, t_end=3.0)
    assert third.stats()["fps"] == 3.33  # to two decimals
    idle = Engine("dla1", sleeper(0.0), "x")  # never started: no time, so no share of it
    assert idle.stats() == {"frames": 0, "busy_s": 0.0, "wall_s": 0.0, "busy": 0.0, "fps": 0.0}


def test_the_status_line_ends_with_each_engines_frames_and_sources():
    pool = Pool([lane("a", Counter(1, live=False)), lane("b", Counter(1, live=False))], engines(gpu=0.0, dla0=0.0))
    pool.assigner.start(0.0)  # two unmeasured engines, two sources: one each, in engine order
    pool.engines[0].frames, pool.engines[1].frames = 3, 4
    no_frames = Metrics(STAGES).status_line()  # the pool's own part before any frame
    assert pool.status_line() == no_frames + " | gpu 3 frames [a], dla0 4 frames [b]"
    assert pool.status_line("power 5 W") == no_frames + " | gpu 3 frames [a], dla0 4 frames [b] | power 5 W"


def test_the_summary_says_what_each_source_offers_why_it_is_where_it_is_and_every_move():
    cam, file, spread = (
        lane("cam", Counter(1, live=True)),
        lane("file", Counter(1, live=False)),
        lane("s", Counter(1, live=False), spread=True),
    )
    pool = Pool([cam, file, spread], engines(gpu=0.0))
    pool.seed_rates({"cam": 25.123})
    pool.assigner.start(0.0)
    pool.moves += [(1.0, Move("cam", None, "gpu", "start")), (12.34567, Move("cam", "dla0", "gpu", "dla0 behind"))]
    s = pool.summary()
    src = s["sources"]
    assert (src["cam"]["offered_fps"], src["file"]["offered_fps"]) == (25.12, None)  # a file offers what it is given
    assert (src["s"]["engine"], src["s"]["why"]) == ("spread", "spread: any engine with nothing of its own")
    assert src["cam"]["engine"] == "gpu" and src["cam"]["why"] == "start: gpu not yet measured"
    assert [src[n]["error"] for n in ("cam", "file", "s")] == [None, None, None]
    # the moves between engines, to the millisecond; the first placements are not moves
    assert s["moves"] == [{"t": 12.346, "source": "cam", "from": "dla0", "to": "gpu", "why": "dla0 behind"}]


def test_the_measured_service_times_are_where_the_assignment_starts():
    pool = Pool([lane("a", Counter(1, live=False))], engines(gpu=0.001))
    measured = pool.measure({"x": np.zeros(1, np.float32)}, frames=1)
    assert pool.summary()["engines"]["gpu"]["service_ms"] == round(measured["gpu"] * 1e3, 3)
    pool.assigner.start(0.0)
    assert pool.summary()["sources"]["a"]["why"].startswith(f"start: gpu {measured['gpu'] * 1e3:.1f} ms/frame")


def test_one_engine_serves_its_sources_round_robin_from_the_one_after_the_last_skipping_empty_ones():
    """a, b, c hold 3, 1 and 3 frames; the engine holds a's first frame until every frame of all three is queued.
    Round robin from b: b0 c0 a1, then b is empty so c1, then a2, b empty again so c2."""
    a_taken = threading.Event()
    queued = {name: threading.Event() for name in "abc"}
    order = []

    class Held(Counter):
        def __init__(self, name, n):
            super().__init__(n, live=False)
            self.name = name

        def read(self):
            if self._index == 0 and self.name != "a":
                assert a_taken.wait(PROMPT_S)  # a's first frame is the engine's first
            if self._index == self.n:
                queued[self.name].set()
            return super().read()

    def infer(feeds):
        name, index = "abc"[int(feeds["x"][0]) // 100], int(feeds["x"][0]) % 100
        order.append(f"{name}{index}")
        if order == ["a0"]:
            a_taken.set()
            assert all(e.wait(PROMPT_S) for e in queued.values())
        return {"y": np.array([index], np.float32)}

    lanes = [lane(name, Held(name, n), queue_size=3) for name, n in zip("abc", (3, 1, 3))]
    for k, ln in enumerate(lanes):
        ln.preprocess = lambda frame, k=k: (preprocess(frame)[0] + 100 * k, None)
    pool = run(Pool(lanes, [Engine("gpu", infer, "x")]), timeout=PROMPT_S, measure=False)
    assert pool.error is None
    assert order == ["a0", "b0", "c0", "a1", "c1", "a2", "c2"]


def test_every_delivered_frame_reaches_on_frame_and_an_image_sink_gets_the_boxes_drawn():
    class Frames64(Counter):
        def read(self):
            return self._frame(np.zeros((64, 64, 3), np.uint8)) if self._index < self.n else None

    drawn = Images(True)
    ln = Lane(
        "cam",
        Frames64(2, live=False),
        lambda f: (np.zeros(1, np.float32), None),
        lambda o, t: Result([Detection([10.0, 30.0, 50.0, 60.0], 0.9)]),
        [drawn],
    )
    seen = []
    run(Pool([ln], engines(gpu=0.0), on_frame=lambda p: seen.append((p.source, p.frame.index, p.engine))), measure=False)
    assert seen == [("cam", 0, "gpu"), ("cam", 1, "gpu")]
    for image in drawn.images:
        # a 2-pixel green (BGR 0, 255, 0) rectangle from (10, 30) to (50, 60); inside it stays black
        assert image[45, 10].tolist() == [0, 255, 0] and image[60, 30].tolist() == [0, 255, 0]
        assert image[45, 30].tolist() == [0, 0, 0]


def test_a_failure_is_logged_once_naming_the_source_and_its_traceback_goes_to_debug(caplog):
    caplog.set_level(logging.DEBUG, logger="edge.pool")

    def broken(frame):
        raise ValueError("bad pixels")

    bad = lane("bad", Counter(3, live=False))
    bad.preprocess = broken
    pool = run(Pool([bad], [Engine("gpu", sleeper(0.0, fail_after=0), "x")]), measure=False)
    assert pool.error is None  # the lane failed before any frame reached the engine
    said = [(r.levelno, r.getMessage(), r.exc_info[1] if r.exc_info else None) for r in caplog.records if r.name == "edge.pool"]
    failures = [x for x in said if "failed" in x[1]]
    assert failures[0][:2] == (logging.DEBUG, "source 'bad': capture failed") and isinstance(failures[0][2], ValueError)
    assert failures[1:] == [
        (logging.ERROR, "source 'bad': capture failed: ValueError: bad pixels; the other sources go on", None)
    ]

    caplog.clear()
    pool = run(Pool([lane("f", Counter(3, live=False))], [Engine("gpu", sleeper(0.0, fail_after=0), "x")]), measure=False)
    assert "engine 'gpu' failed: RuntimeError: engine lost" in str(pool.error)
    (record,) = [r for r in caplog.records if r.name == "edge.pool" and "failed" in r.getMessage()]
    assert record.levelno == logging.DEBUG and record.getMessage() == "engine 'gpu' failed"
    assert isinstance(record.exc_info[1], RuntimeError)


def test_the_pools_threads_are_named_daemons():
    """edge-run finds a lane whose read is stalled by its thread's name (``capture-NAME``) and leaves it behind: no
    thread of the pool keeps the process from exiting (docs/robustness.md)."""
    release = threading.Event()
    ln = lane("cam", Counter(100, live=True, stall_at=1, stop=release))
    before = set(threading.enumerate())
    pool = Pool([ln], engines(gpu=0.0, dla0=0.0))
    pool.start()
    try:
        threads = set(threading.enumerate()) - before
        assert sorted(t.name for t in threads) == [
            "capture-cam",
            "deliver-cam",
            "engine-dla0",
            "engine-gpu",
            "pool-join",
            "pool-rebalance",
        ]
        assert all(t.daemon for t in threads)
    finally:
        release.set()
    assert pool.wait(PROMPT_S)


class Keep:
    """A sink that keeps what it is handed; ``wants_image`` as a sink that draws boxes would say."""

    name = "keep"

    def __init__(self, wants_image=False, fail_at=None):
        self.wants_image, self.fail_at, self.got = wants_image, fail_at, []

    def write(self, frame, result, record, annotated):
        if frame.index == self.fail_at:
            raise ValueError("no room")
        self.got.append((frame.index, result, annotated))

    def close(self, failed=False):
        return None


def test_each_sink_gets_the_frames_decoded_result_and_an_image_only_when_it_draws():
    plain, drawing = Keep(), Keep(wants_image=True)
    a, b = lane("a", Counter(5, live=False), sink=plain), lane("b", Counter(5, live=False), sink=drawing)
    pool = run(Pool([a, b], engines(gpu=0.0)))
    assert pool.error is None
    assert [(i, r.classes[0].class_id, img) for i, r, img in plain.got] == [(i, i, None) for i in range(5)]
    assert [i for i, _, _ in drawing.got] == list(range(5))
    assert all(img is not None and img.shape == (4, 4, 3) for _, _, img in drawing.got)
    assert {n: src["served_by"] for n, src in pool.summary()["sources"].items()} == {"a": {"gpu": 5}, "b": {"gpu": 5}}


def test_a_python_error_in_a_sink_is_the_lanes_delivery_failure():
    bad = lane("bad", Counter(6, live=False), sink=Keep(fail_at=2))
    pool = run(Pool([bad, lane("good", Counter(6, live=False))], engines(gpu=0.0)))
    assert pool.error is None and str(bad.error) == "source 'bad': delivery failed: ValueError: no room"


def test_a_file_source_offers_no_rate_even_after_it_ran():
    """Only a camera's frame intervals say what it offers; a file is read as fast as the engines take it."""
    ln = lane("file", Counter(20, live=False))
    pool = run(Pool([ln], engines(gpu=0.001)))
    assert pool.summary()["sources"]["file"]["offered_fps"] is None
    cam = lane("cam", Counter(6, live=True, period=0.02))
    pool = run(Pool([cam], engines(gpu=0.001)))
    assert 10 < pool.summary()["sources"]["cam"]["offered_fps"] < 55  # a frame each 20 ms, give or take the sleep


def test_the_summary_before_any_frame_and_an_engine_with_two_sources():
    pool = Pool([lane("a", Counter(1, live=False)), lane("b", Counter(1, live=False))], engines(gpu=0.0))
    pool.cpu_s = 0.5  # CPU time spent, no frame done: no per-frame share of it
    s = pool.summary()
    assert s["cpu_ms_per_frame"] is None and s["sources"]["a"]["why"] == "" and s["engines"]["gpu"]["sources"] == []
    pool.assigner.start(0.0)
    assert pool.summary()["engines"]["gpu"]["sources"] == ["a", "b"]
    assert pool.status_line().endswith(" | gpu 0 frames [a b]")
