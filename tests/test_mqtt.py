"""The MQTT sink against a real mosquitto on 127.0.0.1 (paho-mqtt on both sides), and its URL parser under attack.

What the broker delivers is compared with the run's own JSONL file, frame by frame; the broker is killed and restarted
in the middle of a run; a password file and a TLS listener refuse what they should.
"""

from __future__ import annotations

import json
import signal
import time

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from edge.errors import EdgeError
from edge.runtime.outputs.mqtt import parse_url

from ._fleettools import EdgeRun, Mosquitto, Subscriber, make_tls, wait_until
from .conftest import DEMO_CONFIG, run_cli


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- the URL -----------------------------------------------------------------
@pytest.mark.parametrize(
    "url, expected",
    [
        ("mqtt://broker/edge/cam", (False, "broker", 1883, "edge/cam", None, None)),
        ("MQTTS://broker.example:8884/site/a/cam-1/", (True, "broker.example", 8884, "site/a/cam-1", None, None)),
        ("mqtt://u%40x:p%3Aw%2Fd@10.0.0.5:1884/edge", (False, "10.0.0.5", 1884, "edge", "u@x", "p:w/d")),
        ("mqtts://[::1]/edge/front", (True, "::1", 8883, "edge/front", None, None)),
        ("mqtt://token@broker/edge", (False, "broker", 1883, "edge", "token", None)),
    ],
)
def test_documented_url_forms(url, expected):
    u = parse_url(url)
    assert (u.tls, u.host, u.port, u.prefix, u.username, u.password) == expected


@pytest.mark.parametrize(
    "url, why",
    [
        ("http://broker/edge", "not mqtt or mqtts"),
        ("broker:1883/edge", "not mqtt or mqtts"),
        ("mqtt:///edge", "no broker host"),
        ("mqtt://broker:99999/edge", "the port is not a number"),
        ("mqtt://broker:http/edge", "the port is not a number"),
        ("mqtt://broker:0/edge", "port 0"),
        ("mqtt://broker", "no topic prefix"),
        ("mqtt://broker/", "no topic prefix"),
        ("mqtt://broker/edge/+/x", "wildcards"),
        ("mqtt://broker/edge/#", "no MQTT wildcards"),
        ("mqtt://broker/$SYS/x", "start with $"),
        ("mqtt://broker/edge?qos=1", "no ?query"),
        ("mqtt://[::1/edge", "the host is not valid"),
        ("mqtt://bro ker/edge", "no broker host"),
        ("mqtt://broker/ed\udcffge", "UTF-8"),
    ],
)
def test_bad_urls_are_one_line_naming_the_key(url, why):
    with pytest.raises(EdgeError) as e:
        parse_url(url)
    msg = str(e.value)
    assert msg.startswith("sinks.mqtt.url ") and why in msg and "\n" not in msg and "expected mqtt://" in msg


@settings(max_examples=300, deadline=None)
@given(
    scheme=st.sampled_from(["mqtt://", "mqtts://", "MQTT://", "http://", "://", "mqtt:/", "mqtt:", ""]),
    user=st.text(max_size=12),
    password=st.text(alphabet="QZXJqzxj_~", min_size=4, max_size=12),
    host=st.text(max_size=20),
    port=st.text(alphabet="0123456789-x", max_size=7),
    path=st.text(max_size=30),
)
def test_any_url_parses_or_is_one_line_without_the_password(scheme, user, password, host, port, path):
    url = f"{scheme}{user}:{password}@{host}{':' + port if port else ''}/{path}"
    assume(password not in url.replace(f":{password}@", ""))
    try:
        u = parse_url(url)
    except EdgeError as exc:
        msg = str(exc)
        assert "\n" not in msg and msg.startswith("sinks.mqtt.url ") and password not in msg
        return
    assert u.port > 0 and u.prefix and not any(c in u.prefix for c in "+#")
    if u.password and u.password not in u.host + u.prefix + (u.username or ""):  # a '/' in the user makes it a path
        assert u.password not in str(u)


def test_bad_url_on_the_command_line_exits_2_before_anything_runs(demo_model, tmp_path):
    r = run_cli(
        "-c",
        str(DEMO_CONFIG),
        "--frames",
        "5",
        "--mqtt",
        "mqtt://user:s3cret-pw@broker:http/edge",
        "--results",
        str(tmp_path / "r.jsonl"),
    )
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "sinks.mqtt.url" in err[0] and "s3cret-pw" not in r.stderr + r.stdout and "mqtt://***@broker:http/edge" in err[0]
    assert not (tmp_path / "r.jsonl").exists()


# -- a real broker ------------------------------------------------------------
@pytest.fixture
def broker(tmp_path):
    b = Mosquitto(tmp_path).start()
    yield b
    b.stop()


@pytest.mark.slow
def test_every_frame_arrives_as_its_jsonl_record_with_status_online_then_offline(broker, tmp_path, demo_model, megamind):
    sub = Subscriber(broker.port, "edge/test")
    try:
        assert wait_until(lambda: sub.client.is_connected(), 10)
        url = f"mqtt://127.0.0.1:{broker.port}/edge/test"
        r = run_cli(
            "-c", str(DEMO_CONFIG), "--frames", "40", "--mqtt", url, "--results", str(tmp_path / "r.jsonl"),
            "--summary-json", str(tmp_path / "s.json"), "-q",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        records = lines(tmp_path / "r.jsonl")
        assert wait_until(lambda: len(sub.on("results")) >= len(records), 10)
        got = {m["frame"]: m for m, _, _ in sub.on("results")}
        assert len(records) == 40 and sorted(got) == [rec["frame"] for rec in records]
        for rec in records:
            msg = dict(got[rec["frame"]])
            assert abs(msg.pop("t_wall") - time.time()) < 120
            assert msg == rec  # the same record as the JSONL line, detections and all
        # the offline status is published after the results: on a loaded machine it may reach us a moment later
        assert wait_until(lambda: len(sub.on("status")) >= 2, 10), sub.on("status")
        status = [m for m, _, _ in sub.on("status")]
        assert [s["state"] for s in status] == ["online", "offline"] and status[-1]["reason"] == "stopped"
        assert status[0]["model"] == "blazeface-back-256" and status[0]["backend"] == "onnxruntime" and status[0]["edge_version"]
        summary = json.loads((tmp_path / "s.json").read_text())
        assert summary["mqtt"]["published"] == summary["mqtt"]["sent"] == 40 and summary["mqtt"]["dropped"] == 0
        assert "acknowledged" not in summary["mqtt"] and summary["mqtt"]["protocol"] == "5"
        assert f"mqtt: 40 messages sent (QoS 0: no delivery receipt) -> {url}" in r.stdout
    finally:
        sub.close()
    late = Subscriber(broker.port, "edge/test")  # a dashboard that connects later still learns the camera is off
    try:
        assert wait_until(lambda: late.on("status"), 10)
        (status, retained, _), *_ = late.on("status")
        assert retained and status["state"] == "offline"
    finally:
        late.close()


@pytest.mark.slow
def test_only_detections_with_qos_1(broker, tmp_path, demo_model, megamind):
    sub = Subscriber(broker.port, "cams/x")
    try:
        assert wait_until(lambda: sub.client.is_connected(), 10)
        r = run_cli(
            "-c", str(DEMO_CONFIG), "--frames", "270",
            "--mqtt", f"mqtt://127.0.0.1:{broker.port}/cams/x", "--set", "sinks.mqtt.only_detections=true",
            "--set", "sinks.mqtt.qos=1", "--set", "task.score_threshold=0.9", "--results", str(tmp_path / "r.jsonl"),
            "--summary-json", str(tmp_path / "s.json"), "-q",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        with_faces = [rec["frame"] for rec in lines(tmp_path / "r.jsonl") if rec["detections"]]
        assert 0 < len(with_faces) < 270  # at this threshold some frames have no face (else the filter is untested)
        assert wait_until(lambda: len(sub.on("results")) >= len(with_faces), 10)
        assert sorted(m["frame"] for m, _, _ in sub.on("results")) == with_faces
        assert json.loads((tmp_path / "s.json").read_text())["mqtt"]["published"] == len(with_faces)
    finally:
        sub.close()


@pytest.mark.slow
def test_last_will_says_offline_when_the_process_dies(broker, tmp_path, demo_model, megamind):
    sub = Subscriber(broker.port, "edge/will")
    run = EdgeRun(
        tmp_path,
        "-c",
        str(DEMO_CONFIG),
        "--loop",
        "--duration",
        "60",
        "--mqtt",
        f"mqtt://127.0.0.1:{broker.port}/edge/will",
        "-q",
    )
    try:
        assert wait_until(lambda: sub.on("results"), 60), run.stderr
        run.stop(signal.SIGKILL)  # no clean stop: only the broker can say it
        assert wait_until(lambda: [s for s, _, _ in sub.on("status") if s["state"] == "offline"], 10)
        offline = [s for s, _, _ in sub.on("status") if s["state"] == "offline"]
        assert offline[-1]["reason"] == "connection lost"
        # the will is written before the connection it speaks for: no time in it that would predate "online"
        assert "t_wall" not in offline[-1] and offline[-1]["model"] == "blazeface-back-256"
    finally:
        run.stop(signal.SIGKILL)
        sub.close()


@pytest.mark.slow
def test_broker_killed_and_restarted_mid_run(broker, tmp_path, demo_model, megamind):
    """The run never waits for the broker: frames keep flowing while it is gone, publishing resumes when it is back,
    the run exits 0, and every frame is either published or counted as dropped."""
    sub = Subscriber(broker.port, "edge/r")
    url = f"mqtt://127.0.0.1:{broker.port}/edge/r"
    run = EdgeRun(
        tmp_path, "-c", str(DEMO_CONFIG), "--loop", "--duration", "26", "--mqtt", url, "--set", "sinks.mqtt.queue_size=10",
        "--results", str(tmp_path / "r.jsonl"), "--summary-json", str(tmp_path / "s.json"), "-q",
    )  # fmt: skip
    try:
        assert wait_until(lambda: len(sub.on("results")) >= 20, 60), run.stderr
        broker.kill()
        t_kill = time.time()
        time.sleep(6)
        t_back = time.time()
        broker.start()
        assert wait_until(lambda: [t for _, _, t in sub.on("results") if t > t_back], 20), "publishing did not resume"
        assert run.wait(120) == 0, run.stderr
    finally:
        run.stop()
        sub.close()
    summary = json.loads((tmp_path / "s.json").read_text())
    mq = summary["mqtt"]
    assert mq["dropped"] > 0 and mq["connects"] >= 2
    assert mq["published"] + mq["dropped"] == summary["frames"]  # every frame accounted for
    assert "dropped while the broker was away" in run.stdout
    assert "lost the broker" in run.stderr and "connected to" in run.stderr
    # The pipeline's pace while the broker was gone, from the frames' own completion times (monotonic clock).
    records = lines(tmp_path / "r.jsonl")
    offset = time.time() - time.monotonic()  # close enough to place the kill on the frames' clock
    t_done = [rec["t_done"] + offset for rec in records]
    before = [t for t in t_done if t_kill - 6 <= t < t_kill]
    during = [t for t in t_done if t_kill + 0.5 <= t < t_back]
    gaps = [b - a for a, b in zip(t_done, t_done[1:]) if t_kill <= a < t_back]
    assert during and max(gaps) < 1.0, "a frame waited on the broker"
    fps_before, fps_during = len(before) / 6, len(during) / (t_back - t_kill - 0.5)
    assert fps_during >= 0.6 * fps_before, (fps_before, fps_during)


@pytest.mark.slow
def test_broker_away_at_start_then_there(tmp_path, demo_model, megamind):
    broker = Mosquitto(tmp_path)
    url = f"mqtt://cam-user:pw-never-shown@127.0.0.1:{broker.port}/edge/late"
    run = EdgeRun(
        tmp_path,
        "-c",
        str(DEMO_CONFIG),
        "--loop",
        "--duration",
        "14",
        "--mqtt",
        url,
        "--summary-json",
        str(tmp_path / "s.json"),
        "-q",
    )
    sub = None
    try:
        assert wait_until(lambda: "not reachable" in run.stderr, 60), run.stderr
        broker.start()
        sub = Subscriber(broker.port, "edge/late")
        assert wait_until(lambda: sub.on("results"), 30), run.stderr
        assert run.wait(120) == 0, run.stderr
    finally:
        run.stop()
        broker.stop()
        if sub:
            sub.close()
    text = run.stdout + run.stderr + (tmp_path / "s.json").read_text()
    assert "pw-never-shown" not in text and "cam-user:***@" in run.stderr


@pytest.mark.slow
def test_refused_credentials_are_one_line_and_exit_2(tmp_path, demo_model, megamind):
    broker = Mosquitto(tmp_path, users={"cam": "right-pw"}).start()
    try:
        for url in (f"mqtt://cam:wrong-pw@127.0.0.1:{broker.port}/edge/a", f"mqtt://127.0.0.1:{broker.port}/edge/a"):
            r = run_cli("-c", str(DEMO_CONFIG), "--frames", "3", "--mqtt", url, "--results", str(tmp_path / "r.jsonl"))
            err = r.stderr.strip().splitlines()
            assert r.returncode == 2 and len(err) == 1 and "Traceback" not in r.stderr, r.stderr
            assert "the broker refused the connection" in err[0] and "wrong-pw" not in r.stderr
            assert not (tmp_path / "r.jsonl").exists()
        r = run_cli(
            "-c", str(DEMO_CONFIG), "--frames", "3", "--mqtt", f"mqtt://cam:right-pw@127.0.0.1:{broker.port}/edge/a", "-q"
        )
        assert r.returncode == 0 and "mqtt: 3 messages" in r.stdout and "right-pw" not in r.stdout + r.stderr, r.stderr
    finally:
        broker.stop()


@pytest.mark.slow
def test_mqtts_with_a_ca_file(tmp_path, demo_model, megamind):
    tls = make_tls(tmp_path)
    broker = Mosquitto(tmp_path, tls=tls).start()
    sub = Subscriber(broker.port, "edge/tls", tls_ca=tls["ca"])
    try:
        url = f"mqtts://127.0.0.1:{broker.port}/edge/tls"
        r = run_cli("-c", str(DEMO_CONFIG), "--frames", "5", "--mqtt", url, "--set", f"sinks.mqtt.ca_file={tls['ca']}", "-q")
        assert r.returncode == 0 and "mqtt: 5 messages" in r.stdout, r.stderr
        assert wait_until(lambda: len(sub.on("results")) == 5, 10)
        for ca, why in ((tls["other_ca"], "TLS with the broker failed"), (str(tmp_path / "none.pem"), "file not found")):
            r = run_cli("-c", str(DEMO_CONFIG), "--frames", "5", "--mqtt", url, "--set", f"sinks.mqtt.ca_file={ca}")
            err = r.stderr.strip().splitlines()
            assert r.returncode == 2 and len(err) == 1 and why in err[0], r.stderr
        r = run_cli(
            "-c",
            str(DEMO_CONFIG),
            "--frames",
            "5",
            "--mqtt",
            url.replace("mqtts", "mqtt"),
            "--set",
            f"sinks.mqtt.ca_file={tls['ca']}",
        )
        assert r.returncode == 2 and "use mqtts://" in r.stderr, r.stderr
    finally:
        sub.close()
        broker.stop()


@pytest.mark.slow
def test_sigterm_while_the_broker_is_away_stops_promptly_and_counts_every_frame(tmp_path, demo_model, megamind):
    from ._deploytools import free_port

    url = f"mqtt://127.0.0.1:{free_port()}/edge/none"  # nothing listens there, for the whole run
    run = EdgeRun(
        tmp_path, "-c", str(DEMO_CONFIG), "--loop", "--duration", "120", "--mqtt", url, "--summary-json", str(tmp_path / "s.json")
    )
    try:
        assert wait_until(lambda: "frames" in run.stderr and "not reachable" in run.stderr, 60), run.stderr
        time.sleep(3)  # paho is now between reconnect attempts
        t0 = time.monotonic()
        run.stop()
        assert run.proc.returncode == 0 and time.monotonic() - t0 < 30, run.stderr  # the run is 120 s long
    finally:
        run.stop(signal.SIGKILL)
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["mqtt"]["published"] == 0 and summary["mqtt"]["dropped"] == summary["frames"] > 0


# -- the network review (../shared/reference/reviews/hostile-network-2026-12.md W1, W2, W3, W5, S5, S6) -------------
def spec_packet_size(topic: str, payload: bytes, qos: int, v5: bool) -> int:
    """MQTT 5 section 3.3 / 3.1.1 section 3.3, written out here apart from edge's own: fixed header byte, the
    remaining length as a variable byte integer, topic with its length, packet id above QoS 0, properties length."""
    remaining = 2 + len(topic.encode()) + (2 if qos else 0) + (1 if v5 else 0) + len(payload)
    varint = 1
    while remaining >= 128**varint:
        varint += 1
    return 1 + varint + remaining


@pytest.mark.parametrize("qos", [0, 1])
def test_results_over_the_brokers_packet_limit_are_dropped_before_sending_and_the_rest_arrive(
    tmp_path, qos, demo_model, megamind
):
    """mosquitto with max_packet_size 400, told to the client in MQTT 5's CONNACK: a result with a face (~540 bytes)
    is never sent, so the connection stays up and every result without one arrives. Before, QoS 0 lost results in
    the broker's disconnects while claiming none lost, and QoS 1 resent the oversized one after every reconnect."""
    b = Mosquitto(tmp_path, extra=["max_packet_size 400"]).start()
    sub = Subscriber(b.port, "edge/small")
    try:
        assert wait_until(lambda: sub.client.is_connected(), 10)
        url = f"mqtt://127.0.0.1:{b.port}/edge/small"
        r = run_cli(
            "-c", str(DEMO_CONFIG), "--frames", "60", "--mqtt", url, "--set", f"sinks.mqtt.qos={qos}",
            "--results", str(tmp_path / "r.jsonl"), "--summary-json", str(tmp_path / "s.json"), "-q",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        mq = json.loads((tmp_path / "s.json").read_text())["mqtt"]
        assert mq["packet_limit"] == 400 and mq["connects"] == 1, mq
        assert wait_until(lambda: len(sub.on("results")) >= mq["published"], 10)
        got = sub.on("results")
        assert 0 < mq["too_large"] < 60 and mq["dropped"] == mq["too_large"] and mq["published"] + mq["too_large"] == 60
        assert len(got) == mq["published"]
        topic = "edge/small/results"
        for msg, _, _ in got:
            assert spec_packet_size(topic, json.dumps(msg, separators=(",", ":")).encode(), qos, True) <= 400
        # which frames fit, from the JSONL records (t_wall's digits vary: 6 bytes of slack either side)
        sizes = {
            rec["frame"]: spec_packet_size(
                topic, json.dumps({**rec, "t_wall": 1796227565.123}, separators=(",", ":")).encode(), qos, True
            )
            for rec in lines(tmp_path / "r.jsonl")
        }
        arrived = {m["frame"] for m, _, _ in got}
        assert {f for f, n in sizes.items() if n < 394} <= arrived and not {f for f, n in sizes.items() if n > 406} & arrived
        assert r.stderr.count("over the packet limit of 400 bytes (the broker's)") == 1
        assert f"{mq['too_large']} over the 400-byte packet limit, dropped before sending" in r.stdout
        assert "oversize packet" not in b.log() and "lost the broker" not in r.stderr
    finally:
        sub.close()
        b.stop()


def test_max_packet_bytes_guards_a_3_1_1_broker_that_cannot_say_its_limit(broker, tmp_path, demo_model, megamind):
    url = f"mqtt://127.0.0.1:{broker.port}/edge/v3"
    r = run_cli(
        "-c", str(DEMO_CONFIG), "--frames", "30", "--mqtt", url, "--set", "sinks.mqtt.protocol=3.1.1",
        "--set", "sinks.mqtt.max_packet_bytes=300", "--summary-json", str(tmp_path / "s.json"), "-q",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    mq = json.loads((tmp_path / "s.json").read_text())["mqtt"]
    assert mq["protocol"] == "3.1.1" and mq["packet_limit"] == 300 and mq["too_large"] > 0
    assert "over the packet limit of 300 bytes (sinks.mqtt.max_packet_bytes)" in r.stderr
    assert "(p2, " in broker.log()  # mosquitto logs the protocol level: MQTT 3.1.1


def test_tls_against_a_plain_port_and_plain_against_a_tls_port_are_configuration_errors(tmp_path, demo_model):
    tls = make_tls(tmp_path)
    (tmp_path / "p").mkdir()
    (tmp_path / "t").mkdir()
    plain, secure = Mosquitto(tmp_path / "p").start(), Mosquitto(tmp_path / "t", tls=tls).start()
    try:
        r = run_cli("-c", str(DEMO_CONFIG), "--frames", "2", "--mqtt", f"mqtts://127.0.0.1:{plain.port}/edge/x", "-q")
        assert r.returncode == 2 and f"the broker at 127.0.0.1:{plain.port} does not speak TLS on this port" in r.stderr
        r = run_cli("-c", str(DEMO_CONFIG), "--frames", "2", "--mqtt", f"mqtt://127.0.0.1:{secure.port}/edge/x", "-q")
        assert r.returncode == 2 and f"the broker at 127.0.0.1:{secure.port} answers like a TLS port: use mqtts://" in r.stderr
        assert "Traceback" not in r.stderr
    finally:
        plain.stop()
        secure.stop()


@pytest.mark.parametrize(
    "prefix, why",
    [
        ("a/%C0%AF", "not valid UTF-8"),  # was published to a/\ufffd\ufffd/results
        ("a%0Aedge-run: error: fake", "control characters"),  # a forged log line
        ("a%1b[2J%1b[31mRED", "control characters"),  # a cleared, recoloured terminal
        ("a%7F", "control characters"),  # DEL
        ("a%C2%9F", "control characters"),  # U+009F, the last C1 control
    ],
)
def test_a_prefix_that_would_change_or_forge_what_is_shown_is_refused(prefix, why):
    with pytest.raises(EdgeError, match=why) as info:
        parse_url(f"mqtt://localhost:1883/{prefix}")
    assert "\n" not in str(info.value) and "\x1b" not in str(info.value)


def test_printable_unicode_in_a_prefix_is_kept():
    assert parse_url("mqtt://localhost:1883/caf%C3%A9/%C2%A0x").prefix == "café/\u00a0x"  # U+00A0 is printable


def test_a_password_in_any_string_of_a_message_is_masked(broker):
    """The status carries run facts and the results carry records; a URI with a password in either is masked as in
    the logs (no field carries one today: this holds the line for fields to come)."""
    from edge.config import MqttConfig
    from edge.runtime.outputs.mqtt import MqttSink
    from edge.runtime.postprocess import Result

    sub = Subscriber(broker.port, "edge/mask")
    try:
        assert wait_until(lambda: sub.client.is_connected(), 10)
        info = {"model": "rtsp://admin:hunter2hunter2@cam.lan/a"}
        sink = MqttSink(MqttConfig(url=f"mqtt://127.0.0.1:{broker.port}/edge/mask"), info)
        sink.write(None, Result(), {"frame": 0, "origin": "http://u:hunter2hunter2@x/y?token=abc"}, None)
        sink.close()
        assert wait_until(lambda: sub.on("results") and len(sub.on("status")) >= 2, 10)
        raw_bytes = b"".join(p for _, p, _, _ in sub.messages)
        assert b"hunter2" not in raw_bytes and b"token=abc" not in raw_bytes
        assert sub.on("results")[0][0]["origin"] == "http://u:***@x/y?token=***"
        assert sub.on("status")[0][0]["model"] == "rtsp://admin:***@cam.lan/a"
    finally:
        sub.close()


@pytest.mark.parametrize(
    "remaining, length_bytes",
    # MQTT 3.1.1 and 5, table 2.4 / 1.5.5: the remaining length takes 1 byte to 127, 2 to 16 383, 3 to 2 097 151, then 4
    [(127, 1), (128, 2), (16_383, 2), (16_384, 3), (2_097_151, 3), (2_097_152, 4)],
)
def test_packet_size_at_the_remaining_length_steps(remaining, length_bytes):
    from edge.runtime.outputs.mqtt import packet_size

    topic = "a/results"
    for qos, v5 in ((0, True), (1, True), (0, False), (1, False)):
        payload = b"x" * (remaining - 2 - len(topic) - (2 if qos else 0) - (1 if v5 else 0))
        assert packet_size(topic, payload, qos, v5) == 1 + length_bytes + remaining == spec_packet_size(topic, payload, qos, v5)
