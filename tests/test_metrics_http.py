"""Prometheus metrics: a real Prometheus (Debian's) scraping a running edge-run through the target file the Ansible
playbook writes, its query API answering the documented dashboard queries; the node_exporter textfile checked by
promtool; ports that cannot be had refused in one line before the run starts.

Power and utilisation come from the real sysfs reader over a fake AGX Orin tree (tests/test_telemetry_sysfs.py), so
the expected watts are the tree's own volts x amps, not anything edge computed.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from unittest import mock

import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from edge import assets
from edge.config import load_config
from edge.errors import ConfigError, EdgeError
from edge.runtime.outputs.httpserve import HttpServer

from ._deploytools import free_port
from ._fleettools import EdgeRun, Prometheus, http_get, wait_until
from .conftest import DEMO_CONFIG, PROMPT_S, ROOT, require_or_skip, run_cli
from .test_telemetry_sysfs import agx_orin_tree

PLAYBOOK = ROOT / "scripts" / "ansible" / "prometheus.yml"


def value(prom: Prometheus, expr: str) -> dict:
    """{frozenset of labels: float} for an instant query, once Prometheus has it."""
    result = wait_until(lambda: prom.query(expr), 30, 0.5)
    assert result, f"{expr}: no data; targets: {prom.targets()}"
    return {frozenset(r["metric"].items()): float(r["value"][1]) for r in result}


def only(prom: Prometheus, expr: str) -> float:
    (v,) = value(prom, expr).values()
    return v


def write_targets(tmp_path, metrics_port: int):
    """The Ansible playbook, run locally, writes the file_sd targets for an inventory of two cameras."""
    exe = shutil.which("ansible-playbook")
    require_or_skip(exe is not None, "ansible-playbook is not installed (pip install ansible-core)")
    targets = tmp_path / "file_sd" / "edge.yml"
    targets.parent.mkdir()
    inventory = {
        "prometheus": {"hosts": {"monitor": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "edge_prometheus_file_sd": str(targets)}}},
        "jetsons": {
            "hosts": {
                "cam-a": {"ansible_host": "127.0.0.1", "edge_metrics_port": metrics_port, "edge_device": "orin-nano", "edge_jetpack": "6.1"},
                "cam-b": {"ansible_host": "127.0.0.2", "edge_device": "xavier-nx", "edge_jetpack": "5.1"},  # serves no metrics
            }
        },
    }  # fmt: skip
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp")}
    run = subprocess.run(
        [exe, "-i", str(tmp_path / "inventory.yml"), str(PLAYBOOK)], capture_output=True, text=True, env=env, timeout=180
    )
    assert run.returncode == 0, run.stdout + run.stderr
    data = yaml.safe_load(targets.read_text())
    assert data == [
        {
            "targets": [f"127.0.0.1:{metrics_port}"],
            "labels": {"edge_host": "cam-a", "edge_device": "orin-nano", "edge_jetpack": "6.1"},
        }
    ]
    return targets


@pytest.mark.slow
def test_prometheus_scrapes_the_service_through_the_playbooks_targets(tmp_path, demo_model, megamind):
    port = free_port()
    targets = write_targets(tmp_path, port)
    sys_root = tmp_path / "sys"
    agx_orin_tree(sys_root)
    run = EdgeRun(
        tmp_path, "-c", str(DEMO_CONFIG), "--loop", "--duration", "120", "--metrics-port", str(port), "--telemetry", "sysfs",
        "--set", f"telemetry.sysfs_root={sys_root}", "-q", env={"EDGE_INSTANCE": "front"},
    )  # fmt: skip
    prom = None
    try:
        assert wait_until(lambda: run.proc.poll() is not None or http_get(f"http://127.0.0.1:{port}/metrics")[0] == 200, 60), (
            run.stderr
        )
        prom = Prometheus(tmp_path, [{"job_name": "edge", "file_sd_configs": [{"files": [str(targets)]}]}])
        (info_labels,) = value(prom, "edge_info")
        info = dict(info_labels)
        assert info["camera"] == "front" and info["edge_host"] == "cam-a" and info["edge_device"] == "orin-nano"
        assert info["model"] == "blazeface-back-256" and info["backend"] == "onnxruntime" and info["device"] == "cpu"
        assert info["model_sha256"] == assets.lookup("blazeface-back-256").sha256[:12]  # the pinned published file
        assert only(prom, 'edge_frames_total{camera="front"}') > 0
        assert only(prom, "edge_dropped_frames_total") == 0  # a file source waits instead of dropping
        assert only(prom, "edge_source_reconnects_total") == 0
        # The fake tree's rails: 5.000 V x 1.200 A, 5 V x 0.4 A, 5 V x 0.6 A, 5 V x 0.1 A; no input rail, so the sum.
        rails = {dict(k)["rail"]: v for k, v in value(prom, "edge_power_watts").items()}
        assert rails == {"VDD_GPU_SOC": 6.0, "VDD_CPU_CV": 2.0, "VIN_SYS_5V0": 3.0, "VDDQ_VDD2_1V8AO": 0.5}
        assert only(prom, "edge_power_total_watts") == 11.5
        assert only(prom, "edge_gpu_utilization_ratio") == pytest.approx(0.437)  # load 437 of 1000
        temps = {dict(k)["sensor"]: v for k, v in value(prom, "edge_temperature_celsius").items()}
        assert temps == {"cpu": 48.5, "gpu": 47.25}  # cv0 reads -256 C: an offline sensor, left out
        assert {dict(k)["dla"]: v for k, v in value(prom, "edge_dla_online").items()} == {"DLA0": 1.0, "DLA1": 0.0}
        # DLA0's runtime_active_time stands still in the tree: no activity; DLA1 has no counter, so no series.
        assert {dict(k)["dla"]: v for k, v in value(prom, "edge_dla_utilization_ratio").items()} == {"DLA0": 0.0}
        # The dashboard queries of docs/fleet.md.
        assert only(prom, "sum by (camera) (rate(edge_frames_total[15s]))") > 0
        p50 = value(prom, "histogram_quantile(0.5, sum by (stage, le) (rate(edge_stage_latency_seconds_bucket[15s])))")
        stages = {dict(k)["stage"]: v for k, v in p50.items()}
        assert set(stages) == {"capture", "preprocess", "infer", "postprocess", "sink", "end_to_end"}
        assert 0 < stages["infer"] < 5 and stages["end_to_end"] >= stages["infer"]
        fps = only(prom, "edge_fps")
        assert only(prom, "edge_energy_per_frame_joules") == pytest.approx(11.5 / fps, rel=0.5)
        assert only(prom, "edge_power_total_watts / edge_fps") == pytest.approx(11.5 / fps, rel=0.5)
        assert value(prom, "count by (model, engine_sha256) (edge_info)") == {
            frozenset({("model", "blazeface-back-256")}): 1.0
        }  # empty labels are absent
        (target,) = prom.targets()
        assert target["health"] == "up" and target["lastError"] == ""
        t0 = time.monotonic()
        run.stop()
        assert run.proc.returncode == 0 and time.monotonic() - t0 < 20, run.stderr
    finally:
        run.stop()
        if prom:
            prom.stop()


def test_node_exporter_textfile_holds_the_final_counts_and_passes_promtool(tmp_path, demo_model, megamind):
    prom_file = tmp_path / "textfile" / "edge_front.prom"
    prom_file.parent.mkdir()
    r = run_cli(
        "-c", str(DEMO_CONFIG), "--frames", "30", "--set", f"metrics.textfile={prom_file}", "--set", "metrics.textfile_interval_s=0.2",
        "--set", "metrics.camera=front", "--summary-json", str(tmp_path / "s.json"), "-q",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(prom_file.stat().st_mode) == 0o644  # node_exporter runs as another user
    assert [p.name for p in prom_file.parent.iterdir()] == ["edge_front.prom"]  # no temporary files left behind
    text = prom_file.read_text()
    promtool = shutil.which("promtool")
    require_or_skip(promtool is not None, "promtool is not installed (apt-get install -y prometheus)")
    lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    from prometheus_client.parser import text_string_to_metric_families

    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text) for s in f.samples
    }
    assert samples[("edge_frames_total", (("camera", "front"),))] == 30 == json.loads((tmp_path / "s.json").read_text())["frames"]
    count = samples[("edge_stage_latency_seconds_count", (("camera", "front"), ("stage", "end_to_end")))]
    assert count == 30


@pytest.mark.parametrize("flag, key", [("--metrics-port", "metrics.port"), ("--view-port", "view.port")])
def test_a_taken_port_is_one_line_and_exit_2_before_the_model_loads(flag, key, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        # A model file that is not ONNX: had the run got as far as loading it, the error would say so instead.
        bogus = tmp_path / "model.onnx"
        bogus.write_bytes(b"not a model")
        r = run_cli("--model", str(bogus), "--frames", "1", flag, str(port))
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"{key} {port}: 127.0.0.1:{port} is already in use" in err[0]


@pytest.mark.parametrize(
    "sets, message",
    [
        (["metrics.port=80"], "--set metrics.port: expected a port 1024..65535"),  # named by the flag that set it
        (["view.port=70000"], "--set view.port: expected a port 1024..65535"),
        (["metrics.port=9101", "view.port=9101"], "keys 'metrics.port' and 'view.port' are both port 9101"),
        (["metrics.port=9101", "metrics.address=192.0.2.77"], "192.0.2.77 is not an address of this machine"),
        (["view.port=9102", "view.address=no-such-host.invalid"], "view.address 'no-such-host.invalid': not an IP address"),
        (["metrics.textfile=/nonexistent-dir/edge.prom"], "folder /nonexistent-dir does not exist"),
        (["metrics.textfile=edge.txt"], "ending in .prom"),
        (["view.quality=0"], "--set view.quality"),
        (["sinks.mqtt.qos=2"], "--set sinks.mqtt.qos: expected 0 or 1"),
        (["sinks.mqtt.qos=true"], "--set sinks.mqtt.qos"),
    ],
)
def test_bad_fleet_settings_are_one_line_and_exit_2(sets, message, demo_model):
    args = [a for s in sets for a in ("--set", s)]
    r = run_cli("-c", str(DEMO_CONFIG), "--frames", "1", *args)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and "Traceback" not in r.stderr and message in err[0], r.stderr


_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=200, deadline=None)
@given(metrics_port=_values, view_port=_values, address=_values, fps=_values, textfile=_values, qos=_values, queue=_values)
def test_any_fleet_values_load_or_are_a_config_error(metrics_port, view_port, address, fps, textfile, qos, queue):
    values = {
        "model.asset": "blazeface-back-256", "metrics.port": metrics_port, "view.port": view_port, "metrics.address": address,
        "view.max_fps": fps, "metrics.textfile": textfile, "sinks.mqtt.qos": qos, "sinks.mqtt.queue_size": queue,
    }  # fmt: skip
    try:
        cfg = load_config(None, values=values)
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return
    for port in (cfg.metrics.port, cfg.view.port):
        assert port is None or 1024 <= port <= 65535
    assert cfg.sinks.mqtt.qos in (0, 1) and cfg.view.max_fps > 0 and cfg.sinks.mqtt.queue_size >= 1


_getaddrinfo = socket.getaddrinfo


def _no_dns(host, *args, flags=0, **kwargs):
    """getaddrinfo for literal addresses (and localhost, from /etc/hosts) only: the test asks no name server."""
    return _getaddrinfo(host, *args, flags=flags | (0 if host == "localhost" else socket.AI_NUMERICHOST), **kwargs)


@settings(max_examples=100, deadline=None)
@given(
    address=st.one_of(
        st.text(max_size=30), st.sampled_from(["127.0.0.1", "::1", "localhost", "256.1.1.1", "127.0.0.1\x00", "", "192.0.2.1"])
    )
)
def test_any_listen_address_binds_or_is_one_line(address):
    try:
        resolved = _no_dns(address, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][4][0]
    except (socket.gaierror, UnicodeError, ValueError):
        resolved = None
    assume(resolved not in ("0.0.0.0", "::"))  # loopback only: never listen on every interface in a test
    with mock.patch("socket.getaddrinfo", _no_dns):
        try:
            server = HttpServer("metrics.port", address, free_port(), {})
        except EdgeError as exc:
            assert "\n" not in str(exc) and ("metrics.address" in str(exc) or "metrics.port" in str(exc))
            return
    assert resolved is not None and ipaddress.ip_address(resolved.split("%")[0]).is_loopback
    server.close()


def test_the_server_is_bounded_and_drops_silent_clients(tmp_path):
    """More requests than slots get 503 at once; a client that sends nothing loses its slot after the timeout, and
    sooner when a new connection needs it (tests/test_http_access.py has the slowloris cases)."""
    port = free_port()
    release = threading.Event()

    def hold(h) -> None:  # a request being answered (a stream, a slow scrape) keeps its slot
        release.wait(10)
        h.reply(200, b"held\n", "text/plain")

    routes = {"/x": lambda h: h.reply(200, b"ok\n", "text/plain"), "/hold": hold}
    server = HttpServer("metrics.port", "127.0.0.1", port, routes, max_connections=2, timeout_s=1.0)
    try:
        holders = [threading.Thread(target=http_get, args=(f"http://127.0.0.1:{port}/hold",)) for _ in range(2)]
        for t in holders:
            t.start()
        time.sleep(0.3)
        assert http_get(f"http://127.0.0.1:{port}/x", timeout=5)[0] == 503
        release.set()
        for t in holders:
            t.join(10)
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
        for s in silent:
            s.settimeout(5)
            assert s.recv(100) is not None  # the server hangs up (an empty read, or a 408 reply) before our 5 s timeout
            s.close()
        assert wait_until(lambda: http_get(f"http://127.0.0.1:{port}/x", timeout=5)[0] == 200, 5)
        assert wait_until(lambda: http_get(f"http://127.0.0.1:{port}/nothing-here")[0] == 404, PROMPT_S)  # or 503 while busy
        replies = []

        def garbage() -> bool:  # garbage instead of HTTP; False while the last two requests' threads still hold both slots
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(b"\x00\xff garbage \r\n\r\n")
                s.settimeout(5)
                replies.append(b"".join(iter(lambda: s.recv(4096), b"")))  # answered, then closed
            return not replies[-1].startswith(b"HTTP/1.0 503")  # a reply reaches the client before its slot is free

        assert wait_until(garbage, PROMPT_S)
        assert b"400" in replies[-1] and b"Bad request" in replies[-1]
    finally:
        t0 = time.monotonic()
        server.close()
        assert time.monotonic() - t0 < PROMPT_S  # close() does not wait for a client
