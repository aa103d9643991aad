"""`edge-run` with ``sources:``: several sources over several ONNX Runtime sessions in one process, end to end, with
the demo model and clip. The pool must not change what a source's frames yield: each source's results are checked
against a plain single-source edge-run of the same clip, frame by frame."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge.config import load_config
from edge.errors import ConfigError

from ._fleettools import Mosquitto, Subscriber, wait_until
from .conftest import DEMO_CONFIG, edge_run_cmd, run_cli

DEMO = yaml.safe_load(DEMO_CONFIG.read_text())


def lines(path: Path) -> list:
    return [json.loads(x) for x in path.read_text().splitlines()]


def pool_config(tmp_path: Path, sources: list, engines=("cpu", "cpu1"), **extra) -> Path:
    cfg = {k: v for k, v in DEMO.items() if k != "source"}
    cfg.update(threads=1, sources=sources, pool={"engines": list(engines)}, **extra)
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def single(tmp_path_factory, demo_model, megamind):
    """The first 40 frames of the demo through a plain single-source run: what each pool source must match."""
    out = tmp_path_factory.mktemp("single") / "r.jsonl"
    r = run_cli("-c", str(DEMO_CONFIG), "--frames", "40", "--results", str(out), "-q")
    assert r.returncode == 0, r.stderr
    return {rec["frame"]: rec["detections"] for rec in lines(out)}


@pytest.mark.slow
def test_three_sources_over_two_sessions_each_in_order_and_as_a_single_run_decodes_them(tmp_path, single):
    sources = [
        {"name": "door", "uri": "asset://megamind", "sinks": {"results": "door.jsonl"}},
        {"name": "yard", "uri": "asset://megamind", "task": {"score_threshold": 0.9}, "sinks": {"results": "yard.jsonl"}},
        {"name": "gate", "uri": "asset://megamind", "spread": True, "sinks": {"results": "gate.jsonl"}},
    ]
    cfg = pool_config(tmp_path, sources, sinks={"results": "all.jsonl"})
    r = run_cli("-c", str(cfg), "--frames", "40", "--summary-json", str(tmp_path / "s.json"), "-q")
    assert r.returncode == 0, r.stderr
    door, yard, gate = (lines(tmp_path / f"{n}.jsonl") for n in ("door", "yard", "gate"))
    for recs, name in ((door, "door"), (yard, "yard"), (gate, "gate")):
        assert [x["frame"] for x in recs] == list(range(40)), name
        assert {x["source"] for x in recs} == {name}
    for rec in door + gate:
        assert rec["detections"] == single[rec["frame"]]
    for rec in yard:  # its own threshold: the single run's detections above 0.9, and only those
        assert rec["detections"] == [d for d in single[rec["frame"]] if d["score"] > 0.9]
    assert sum(len(x["detections"]) for x in yard) < sum(len(x["detections"]) for x in door)
    combined = lines(tmp_path / "all.jsonl")
    assert sorted((x["source"], x["frame"]) for x in combined) == sorted((x["source"], x["frame"]) for x in door + yard + gate)
    s = json.loads((tmp_path / "s.json").read_text())
    assert set(s["sources"]) == {"door", "yard", "gate"} and set(s["engines"]) == {"cpu", "cpu1"}
    assert s["sources"]["gate"]["engine"] == "spread"
    assert {s["sources"]["door"]["engine"], s["sources"]["yard"]["engine"]} == {"cpu", "cpu1"}, "two files on one engine"
    assert s["frames"] == 120 and all(src["frames"] == 40 and src["dropped"] == 0 for src in s["sources"].values())
    assert sum(e["frames"] for e in s["engines"].values()) == 120 and s["cpu_ms_per_frame"] > 0
    for name in ("door", "yard", "gate", "cpu", "cpu1"):
        assert name in r.stdout  # the per source and per engine tables


@pytest.mark.slow
def test_sigterm_with_frames_on_both_engines_drains_every_source(tmp_path, demo_model, megamind):
    sources = [{"name": f"c{i}", "uri": "asset://megamind", "loop": True, "sinks": {"results": f"c{i}.jsonl"}} for i in range(3)]
    cfg = pool_config(tmp_path, sources)
    proc = subprocess.Popen(
        [*edge_run_cmd(), "-c", str(cfg), "--summary-json", str(tmp_path / "s.json")], stderr=subprocess.PIPE, text=True
    )
    try:
        seen = ""
        deadline = time.monotonic() + 60
        while "fps" not in seen and time.monotonic() < deadline:  # the first status line: frames are flowing
            seen += proc.stderr.readline()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, seen + err
    s = json.loads((tmp_path / "s.json").read_text())
    for name, src in s["sources"].items():
        assert src["abandoned"] == 0 and src["frames"] + src["dropped"] == src["captured"], (name, src)
        recs = lines(tmp_path / f"{name}.jsonl")
        assert len(recs) == src["frames"] > 0 and [x["frame"] for x in recs] == sorted(x["frame"] for x in recs)


@pytest.mark.slow
def test_each_source_has_its_own_mqtt_topic(tmp_path, demo_model, megamind):
    broker = Mosquitto(tmp_path).start()
    sub = Subscriber(broker.port, "site")
    try:
        assert wait_until(lambda: sub.client.is_connected(), 10)
        sources = [{"name": "north", "uri": "asset://megamind"}, {"name": "south", "uri": "asset://megamind"}]
        cfg = pool_config(tmp_path, sources)
        r = run_cli("-c", str(cfg), "--frames", "10", "--mqtt", f"mqtt://127.0.0.1:{broker.port}/site", "-q")
        assert r.returncode == 0, r.stderr
        assert wait_until(lambda: len([m for m in sub.messages if m[0].endswith("/results")]) >= 20, 10)
        with sub.lock:
            topics = [t for t, _, _, _ in sub.messages if t.endswith("/results")]
        assert sorted(set(topics)) == ["site/north/results", "site/south/results"] and len(topics) == 20
    finally:
        sub.close()
        broker.stop()


@pytest.mark.slow
def test_prometheus_series_per_source_and_engine(tmp_path, demo_model, megamind):
    from prometheus_client.parser import text_string_to_metric_families

    sources = [{"name": "a", "uri": "asset://megamind"}, {"name": "b", "uri": "asset://megamind"}]
    cfg = pool_config(tmp_path, sources, metrics={"textfile": str(tmp_path / "m.prom"), "camera": "site1"})
    r = run_cli("-c", str(cfg), "--frames", "15", "-q")
    assert r.returncode == 0, r.stderr
    samples = {}
    for fam in text_string_to_metric_families((tmp_path / "m.prom").read_text()):
        for smp in fam.samples:
            samples[(smp.name, tuple(sorted(smp.labels.items())))] = smp.value
    assert samples[("edge_source_frames_total", (("camera", "site1"), ("source", "a")))] == 15
    assert samples[("edge_source_frames_total", (("camera", "site1"), ("source", "b")))] == 15
    engines = {dict(k[1])["engine"]: v for k, v in samples.items() if k[0] == "edge_engine_frames_total"}
    assert set(engines) == {"cpu", "cpu1"} and sum(engines.values()) == 30
    served = {dict(k[1])["source"]: dict(k[1])["engine"] for k in samples if k[0] == "edge_source_engine_info"}
    assert set(served) == {"a", "b"} and set(served.values()) <= {"cpu", "cpu1"}
    assert samples[("edge_frames_total", (("camera", "site1"),))] == 30


# -- refusals: one line, exit 2, naming the key ------------------------------------------------------------------
BAD = [
    (
        {"sources": [{"name": "a", "uri": "x.mp4"}, {"name": "a", "uri": "y.mp4"}]},
        "sources[1].name",
        "also the name of sources[0]",
    ),
    ({"sources": [{"name": "a/b", "uri": "x.mp4"}]}, "sources[0].name", "letters, digits"),
    ({"sources": [{"name": "a+#", "uri": "x.mp4"}]}, "sources[0].name", "letters, digits"),
    ({"sources": [{"uri": ""}]}, "sources[0].uri", "a source URI"),
    ({"pool": {"engines": ["cpu", "cpu1"]}}, "pool.engines", "list them under sources"),
    (
        {"sources": [{"uri": "x.mp4"}], "pool": {"engines": ["gpu"]}},
        "pool.engines",
        "'gpu' is not an engine of backend onnxruntime",
    ),
    ({"sources": [{"uri": "x.mp4"}], "pool": {"engines": ["cpu", "cpu"]}}, "pool.engines", "cpu is listed twice"),
    ({"sources": [{"uri": "x.mp4"}], "pool": {"dla_engine": "m.dla.engine"}}, "pool.dla_engine", "dla0/dla1"),
    ({"sources": [{"uri": "x.mp4"}], "pool": {"queue_size": 0}}, "pool.queue_size", "1..64"),
    ({"sources": [{"uri": "x.mp4"}], "source": {"uri": "y.mp4"}}, "source", "keep one"),
    ({"sources": [{"uri": "x.mp4"}], "sinks": {"display": True}}, "sinks.display", "live view"),
    ({"sources": [{"uri": "x.mp4"}], "sinks": {"video": "v.mp4"}}, "sinks.video", "sources[N].sinks.video"),
    ({"sources": [{"uri": "x.mp4", "task": {"score_threshold": 2}}]}, "sources[0].task.score_threshold", "between 0 and 1"),
    ({"sources": [{"uri": "x.mp4", "format": "nv12"}]}, "sources[0].format", "decodes to bgr"),
    ({"sources": [{"uri": "x.mp4", "bogus": 1}]}, "sources[0].bogus", "unknown key"),
]


@pytest.mark.parametrize("extra, key, why", BAD, ids=[b[1] + "-" + b[2][:12] for b in BAD])
def test_a_bad_pool_config_is_one_line_exit_2_naming_the_key(tmp_path, demo_model, extra, key, why):
    cfg = {k: v for k, v in DEMO.items() if k != "source"}
    cfg.update(extra)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = run_cli("-c", str(path), "--check")
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"'{key}'" in err[0] and why in err[0], err[0]


def test_a_bad_engines_flag_names_the_flag(tmp_path, demo_model):
    cfg = pool_config(tmp_path, [{"uri": "asset://megamind"}])
    for value, why in (
        ("", "'' is not an engine"),
        ("cpu,dla0", "'dla0' is not an engine of backend onnxruntime"),
        ("cpu,cpu", "listed twice"),
    ):
        r = run_cli("-c", str(cfg), "--engines", value, "--check")
        err = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(err) == 1 and err[0].startswith("edge-run: error: --engines") and why in err[0], r.stderr
    r = run_cli("-c", str(DEMO_CONFIG), "--engines", "cpu,cpu1", "--check")
    assert r.returncode == 2 and "--engines cpu,cpu1: a pool needs its sources" in r.stderr


def test_a_dla_engine_that_is_not_there_names_the_build_command(tmp_path):
    engine = tmp_path / "m.engine"
    engine.write_bytes(b"plan")
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump({"model": {"engine": str(engine)}, "sources": [{"uri": "x.mp4"}], "pool": {"engines": ["gpu", "dla0"]}})
    )
    with pytest.raises(ConfigError, match=r"pool.dla_engine.*m\.dla\.engine.*edge-build --engines gpu,dla"):
        load_config(path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(min_size=0, max_size=80))
def test_any_source_name_is_safe_or_refused(tmp_path, name):
    """A name goes into MQTT topics, Prometheus labels, logs and summaries: plain characters or a refusal."""
    path = tmp_path / "n.yaml"
    path.write_text(yaml.safe_dump({"model": {"asset": "blazeface-back-256"}, "sources": [{"name": name, "uri": "x.mp4"}]}))
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        assert "\n" not in str(exc) and "sources[0].name" in str(exc)
        return
    got = cfg.sources[0].name
    assert got == name and got[0].isalnum() and all(c.isalnum() and c.isascii() or c in "-_." for c in got)
    assert not any(c in got for c in "/+#") and len(got) <= 64


def test_the_watchdog_is_fed_while_any_source_makes_progress(tmp_path, monkeypatch, demo_model):
    """One unit serves a site: a source that ended (a camera gone) must not starve the watchdog while another flows."""
    import cv2

    from edge.runtime.pool_runner import PoolRunner
    from tests.test_notify import Receiver

    for name, count in (("short", 2), ("long", 3)):
        (tmp_path / name).mkdir()
        for i in range(count):
            cv2.imwrite(str(tmp_path / name / f"{i}.png"), np.full((90, 120, 3), 60 * i, np.uint8))
    address = f"/tmp/nfy-{os.getpid()}-pool"
    receiver = Receiver(address)
    try:
        monkeypatch.setenv("NOTIFY_SOCKET", address)
        monkeypatch.setenv("WATCHDOG_USEC", "200000")
        monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
        sources = [
            {"name": "short", "uri": str(tmp_path / "short")},
            {"name": "long", "uri": str(tmp_path / "long"), "loop": True, "live": True},
        ]
        values = {"sources": sources, "pool.engines": ["cpu"], "threads": 1, "pipeline.duration_s": 1.5, "logging.status": False}
        runner = PoolRunner(load_config(DEMO_CONFIG, values=values))
        t0 = time.monotonic()
        summary, error = runner.run()
    finally:
        messages = receiver.close()
        os.unlink(address)
    assert error is None and summary["sources"]["short"]["frames"] == 2 and summary["sources"]["long"]["frames"] > 2
    pings = [t - t0 for t, m in messages if m == "WATCHDOG=1"]
    assert pings and max(pings) > 1.2, f"the watchdog starved once the short source ended: {pings}"


@pytest.mark.slow
def test_a_network_camera_down_at_start_does_not_keep_the_others_from_running(tmp_path, demo_model, megamind):
    from ._deploytools import free_port

    down = f"rtsp://viewer:s3cret@127.0.0.1:{free_port()}/cam"  # nothing listens there
    sources = [
        {"name": "down", "uri": down, "reconnect": {"max_attempts": 2, "initial_delay_s": 0.1}},
        {"name": "up", "uri": "asset://megamind", "sinks": {"results": "up.jsonl"}},
    ]
    r = run_cli("-c", str(pool_config(tmp_path, sources, engines=("cpu",))), "--frames", "30", "-q")
    assert r.returncode == 1, r.stderr
    assert [x["frame"] for x in lines(tmp_path / "up.jsonl")] == list(range(30))
    err = [x for x in r.stderr.splitlines() if "error:" in x]
    assert len(err) == 1 and "source 'down'" in err[0] and "2 reconnect attempts failed" in err[0]
    assert "s3cret" not in r.stderr + r.stdout


def test_more_than_64_sources_are_refused(tmp_path):
    path = tmp_path / "many.yaml"
    path.write_text(yaml.safe_dump({"model": {"asset": "x"}, "sources": [{"uri": f"{i}.mp4"} for i in range(65)]}))
    with pytest.raises(ConfigError, match=r"key 'sources': expected at most 64 sources in one process, got '65 sources'"):
        load_config(path)


def test_check_loads_every_engine_and_names_the_sources_without_opening_them(tmp_path, demo_model):
    sources = [{"name": "door", "uri": "rtsp://10.255.255.1/never"}, {"name": "yard", "uri": "asset://megamind"}]
    r = run_cli("-c", str(pool_config(tmp_path, sources)), "--check")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("edge-run: check ok: pool of 2 engine(s) cpu (cpu), cpu1 (cpu); 2 source(s) door, yard;")
    assert "decoder blazeface" in r.stdout


def test_each_engine_gets_its_own_backend_config():
    from edge.runtime.pool_runner import engine_config, engine_names

    cfg = load_config(DEMO_CONFIG, values={"sources": [{"uri": "asset://megamind"}], "device": "auto"})
    assert engine_names(cfg) == ["cpu"] and engine_config(cfg, "cpu") is cfg  # no pool.engines: the run's own device
    cfg.pool.engines = ["cpu", "cuda1"]
    assert [engine_config(cfg, n).device for n in cfg.pool.engines] == ["cpu", "cuda"]
