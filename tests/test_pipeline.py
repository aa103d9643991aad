"""The threaded pipeline with real stages around stand-in sources/backends where timing must be controlled."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from edge.errors import RunFailed
from edge.runtime.postprocess import Result
from edge.runtime.schedule.pipeline import Pipeline
from edge.runtime.sources import Source


class Counter(Source):
    """A synthetic source: n small frames, as fast as asked, live or not."""

    def __init__(self, n, live, period=0.0):
        super().__init__()
        self.n, self.live, self.period, self.description = n, live, period, "counter"

    def read(self):
        if self._index >= self.n:
            return None
        if self.period:
            time.sleep(self.period)
        return self._frame(np.zeros((8, 8, 3), np.uint8))


class Collect:
    name, wants_image = "collect", False

    def __init__(self, fail_at=None):
        self.seen, self.fail_at = [], fail_at

    def write(self, frame, result, record, annotated):
        if frame.index == self.fail_at:
            raise RunFailed("sink 'collect': disk full")
        self.seen.append(record["frame"])

    def close(self, failed=False):
        return None


def make(source, sink, infer_s=0.0, **kw):
    def infer(feeds):
        time.sleep(infer_s)
        return {"y": feeds["x"]}

    return Pipeline(source, lambda img: (img, None), infer, "x", lambda out, tf: Result(), [sink], queue_size=2, **kw)


def test_file_source_processes_every_frame_in_order():
    sink = Collect()
    p = make(Counter(50, live=False), sink, infer_s=0.002)
    p.start()
    assert p.wait(30)
    assert sink.seen == list(range(50)) and p.metrics.dropped == 0
    s = p.metrics.summary()
    assert s["frames"] == 50 and set(s["latency_ms"]) == {
        "capture",
        "preprocess",
        "infer",
        "postprocess",
        "sink",
        "queued",
        "end_to_end",
    }


def test_live_source_drops_the_oldest_when_behind():
    sink = Collect()
    p = make(Counter(200, live=True, period=0.001), sink, infer_s=0.01)
    p.start()
    assert p.wait(30)
    m = p.metrics
    assert m.dropped > 50 and m.captured == 200
    assert len(sink.seen) + m.dropped == 200  # every captured frame is either processed or counted as dropped
    assert sink.seen == sorted(sink.seen)
    assert sink.seen[-1] == 199  # the newest frame survives


def test_stop_drains_frames_in_flight():
    sink = Collect()
    p = make(Counter(10_000, live=False), sink, infer_s=0.001)
    p.start()
    time.sleep(0.3)
    p.stop()
    assert p.wait(10)
    assert p.metrics.captured == p.metrics.frames == len(sink.seen) > 0
    assert sink.seen == list(range(len(sink.seen)))


def test_a_failing_stage_aborts_the_run_with_its_error():
    sink = Collect(fail_at=5)
    p = make(Counter(10_000, live=False), sink)
    p.start()
    assert p.wait(10)
    assert isinstance(p.error, RunFailed) and "disk full" in str(p.error)
    assert sink.seen == [0, 1, 2, 3, 4]


def test_an_unexpected_exception_becomes_a_named_run_failure():
    def boom(img):
        raise ValueError("bad frame")

    p = Pipeline(Counter(5, live=False), boom, lambda f: f, "x", lambda o, t: Result(), [Collect()])
    p.start()
    assert p.wait(10)
    assert isinstance(p.error, RunFailed) and "stage 'preprocess' failed: ValueError: bad frame" in str(p.error)


def test_max_frames_limits_capture():
    sink = Collect()
    p = make(Counter(100, live=False), sink, max_frames=7)
    p.start()
    assert p.wait(10)
    assert sink.seen == list(range(7))


@pytest.mark.parametrize("live", [False, True])
def test_stop_event_shared_with_the_source_ends_a_blocked_run(live):
    """A source that would run for ever stops when the shared event is set: no error, and the frames written are
    the ones read, in order (every one for a file source; a live one may drop, never reorder)."""
    stop = threading.Event()
    sink = Collect()
    p = make(Counter(10**9, live=live, period=0.01), sink, stop_event=stop)
    p.start()
    while len(sink.seen) < 3:
        time.sleep(0.01)
    stop.set()
    assert p.wait(5)
    assert p.error is None
    assert len(sink.seen) >= 3 and sink.seen == sorted(set(sink.seen))
    if not live:
        assert sink.seen == list(range(len(sink.seen)))


def test_status_line_means_are_per_frame_and_queued_is_the_wait_between_stages():
    from edge.runtime.status.metrics import Metrics

    m = Metrics()
    # two frames: 10 ms of inference and 2 ms of sink each, read 50 ms before they were done; capture is before t_capture
    for t in (100.0, 100.1):
        m.frame_done(t, {"capture": 0.005, "infer": 0.010, "sink": 0.002}, t + 0.050)
    line = m.status_line()
    assert "infer  10.0" in line and "sink   2.0" in line and "frames 2 drops 0" in line
    lat = m.summary()["latency_ms"]
    assert lat["queued"]["max"] == 38.0 and lat["end_to_end"]["max"] == 50.0
