"""A real RTSP camera on 127.0.0.1 (GStreamer's RTSP server) that stops and comes back, read by edge-run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from .conftest import DEMO_CONFIG, edge_run_cmd, require_or_skip

pytestmark = pytest.mark.slow
SYSTEM_PYTHON = "/usr/bin/python3"


def _has_rtsp_server() -> bool:
    probe = "import gi; gi.require_version('GstRtspServer', '1.0'); from gi.repository import GstRtspServer"
    return Path(SYSTEM_PYTHON).exists() and subprocess.run([SYSTEM_PYTHON, "-c", probe], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def h264_clip(megamind, tmp_path_factory) -> Path:
    require_or_skip(shutil.which("ffmpeg") is not None, "ffmpeg is not installed (apt-get install ffmpeg)")
    require_or_skip(
        _has_rtsp_server(), "GStreamer's RTSP server is not installed (apt-get install gir1.2-gst-rtsp-server-1.0 python3-gi)"
    )
    out = tmp_path_factory.mktemp("rtsp") / "megamind.mp4"
    cmd = [
        "ffmpeg",
        "-v",
        "error",
        "-y",
        "-i",
        str(megamind),
        "-c:v",
        "libx264",
        "-g",
        "12",
        "-pix_fmt",
        "yuv420p",
        "-an",
        str(out),
    ]
    subprocess.run(cmd, check=True, timeout=120)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Camera:
    def __init__(self, clip: Path, port: int) -> None:
        self.clip, self.port, self.proc = clip, port, None

    def start(self) -> None:
        server = Path(__file__).with_name("rtsp_server.py")
        self.proc = subprocess.Popen(
            [SYSTEM_PYTHON, str(server), str(self.clip), str(self.port)], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout.readline().strip() == "ready"

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def wait_for_lines(path_glob, at_least: int, timeout: float, folder: Path) -> int:
    deadline = time.monotonic() + timeout
    n = 0
    while time.monotonic() < deadline:
        files = list(folder.glob(path_glob))
        n = sum(f.read_text().count("\n") for f in files)
        if n >= at_least:
            return n
        time.sleep(0.1)
    return n


def test_stream_that_stops_and_restarts_is_reconnected(h264_clip, tmp_path):
    cam = Camera(h264_clip, free_port())
    cam.start()
    out, summary = tmp_path / "out.jsonl", tmp_path / "summary.json"
    uri = f"rtsp://127.0.0.1:{cam.port}/cam"
    cmd = [*edge_run_cmd(), "-c", str(DEMO_CONFIG), "-s", uri, "--frames", "400", "--duration", "60", "-q"]
    cmd += ["--results", str(out), "--summary-json", str(summary), "--set", "source.reconnect.initial_delay_s=0.2"]
    run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        before = wait_for_lines(".out.*.partial.jsonl", 30, 30, tmp_path)
        assert before >= 30, "no frames from the RTSP camera"
        cam.stop()  # the camera drops off the network
        time.sleep(1.5)
        cam.start()  # and comes back, replaying from the start
        stdout, stderr = run.communicate(timeout=90)
    finally:
        cam.stop()
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, stderr
    s = json.loads(summary.read_text())
    assert s["source"]["reconnects"] >= 1 and "reconnected after" in stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == s["frames"] > before
    # Frames after the reconnect carry on the same index sequence and still contain faces.
    assert [r["frame"] for r in records] == sorted(r["frame"] for r in records)
    assert sum(1 for r in records[before + 5 :] if r["detections"]) > 20
    # a camera's end_to_end is its capture-to-result latency, reported apart from the stage table
    assert s["source"]["live"] is True and s["capture_to_result_ms"] == s["latency_ms"]["end_to_end"]
    p50 = s["capture_to_result_ms"]["p50"]
    assert f"capture to result (live source): p50 {p50:.1f} ms" in stdout and "read ahead" not in stdout


def test_stream_that_vanishes_ends_the_run_with_a_clear_error(h264_clip, tmp_path):
    cam = Camera(h264_clip, free_port())
    cam.start()
    out, summary = tmp_path / "out.jsonl", tmp_path / "summary.json"
    cmd = [*edge_run_cmd(), "-c", str(DEMO_CONFIG), "-s", f"rtsp://127.0.0.1:{cam.port}/cam", "-q", "--results", str(out)]
    cmd += [
        "--summary-json",
        str(summary),
        "--set",
        "source.reconnect.initial_delay_s=0.1",
        "--set",
        "source.reconnect.max_attempts=3",
    ]
    run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for_lines(".out.*.partial.jsonl", 20, 30, tmp_path) >= 20
        cam.stop()
        stdout, stderr = run.communicate(timeout=60)
    finally:
        cam.stop()
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1
    assert stderr.strip().splitlines()[-1].startswith("edge-run: error: source 'rtsp://127.0.0.1")
    assert "3 reconnect attempts failed" in stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]  # whole lines, renamed into place
    assert len(records) == json.loads(summary.read_text())["frames"] >= 20


def test_systemd_notify_ready_then_watchdog_pings_stop_when_the_camera_stalls(h264_clip, tmp_path):
    """edge-run under a real notify socket, as systemd runs it: pings flow with frames and stop when the camera does."""
    import socket as sk

    notify = sk.socket(sk.AF_UNIX, sk.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify"))
    notify.settimeout(0.2)
    cam = Camera(h264_clip, free_port())
    cam.start()
    env = {**os.environ, "NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": "400000"}
    cmd = [*edge_run_cmd(), "-c", str(DEMO_CONFIG), "-s", f"rtsp://127.0.0.1:{cam.port}/cam", "-q", "--duration", "40"]
    cmd += ["--set", "source.reconnect.initial_delay_s=5", "--set", "pipeline.status_interval_s=0.5"]
    run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    messages = []  # (time, text)

    def collect(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                messages.append((time.monotonic(), notify.recv(4096).decode()))
            except TimeoutError:
                pass

    try:
        collect(8)
        texts = [m for _, m in messages]
        assert texts and texts[0].startswith("READY=1"), texts[:3]
        assert sum("WATCHDOG=1" in m for m in texts) >= 5 and any(m.startswith("STATUS=") and "fps" in m for m in texts)
        cam.stop()  # the camera stalls: no frames, edge-run waits to reconnect
        t_stall = time.monotonic()
        collect(4)
        late = [m for t, m in messages if t > t_stall + 1.5 and "WATCHDOG=1" in m]
        assert late == [], "watchdog pings went on while no frame flowed"
        run.send_signal(signal.SIGTERM)
        run.communicate(timeout=30)
        collect(0.5)
        assert any("STOPPING=1" in m for _, m in messages)
    finally:
        cam.stop()
        notify.close()
        if run.poll() is None:
            run.kill()
