"""The pool: many sources over several engines. Real pool threads, FrameRings and Metrics around synthetic sources and
sleeping engines (the stand-ins are for cameras and inference runtimes, whose timing a test must control).

Each engine returns the frame's own index (encoded in the tensor), so a test checks that a result belongs to its
frame and that each source's results leave in capture order."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from edge.errors import EdgeError, RunFailed
from edge.runtime.postprocess import Classification, Result
from edge.runtime.schedule.pool import Engine, Lane, Pool
from edge.runtime.sources import Source
from edge.runtime.sources.frames import FrameRing


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
    return np.array([int(hi) * 256 + int(lo)], np.float32), None


def decode(outputs, transform):
    return Result(classes=[Classification(int(outputs["y"][0]), 1.0)])


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
    caplog.set_level("INFO", logger="edge.pool")
    monkeypatch.setattr("edge.runtime.schedule.pool.REBALANCE_S", 0.05)
    monkeypatch.setattr("edge.runtime.schedule.assign.COOLDOWN_S", 0.2)
    slow = [0.002]  # the DLA starts fast, then slows to 40 ms (another process took its bandwidth)
    cams = [lane(f"cam{i}", Counter(400, live=True, period=0.01)) for i in range(2)]
    pool = Pool(cams, [Engine("gpu", sleeper(0.002), "x"), Engine("dla0", sleeper(lambda: slow[0]), "x")])
    pool.measure({"x": np.zeros(1, np.float32)})
    pool.start()
    time.sleep(0.3)
    slow[0] = 0.04
    assert pool.wait(30)
    s = pool.summary()
    assert all(src["engine"] == "gpu" for src in s["sources"].values()), s["sources"]
    moves = [m for m in s["moves"] if m["from"] == "dla0"]
    assert moves and "dla0 behind" in moves[0]["why"], s["moves"]
    logged = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("source cam") and " -> " in m and "(start: " in m for m in logged), logged
    assert any(m.startswith("source cam") and " moved dla0 -> gpu (dla0 behind" in m for m in logged), logged
    for ln in cams:
        got = indices(ln)
        assert got == sorted(got) and ln.metrics.frames + ln.metrics.dropped == 400


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
    pool.count_abandoned()
    assert isinstance(pool.error, RunFailed) and "engine 'dla0'" in str(pool.error) and "engine lost" in str(pool.error)
    for ln in cams:
        m = ln.metrics
        assert m.frames + m.dropped + m.abandoned == m.captured
        assert ln.source.ring.in_use == 0


def test_a_failing_sink_ends_its_source_and_counts_what_it_did_not_write():
    bad = lane("bad", Counter(40, live=False), sink=Collect(fail_at=7))
    good = lane("good", Counter(40, live=False))
    pool = run(Pool([bad, good], engines(gpu=0.001)))
    assert "disk full" in str(bad.error) and indices(bad) == list(range(7))
    m = bad.metrics
    assert m.frames == 7 and m.frames + m.dropped + m.abandoned == m.captured
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
    assert pool.summary()["cpu_ms_per_frame"] == pytest.approx(pool.cpu_s / 60 * 1e3, rel=1e-2)
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
