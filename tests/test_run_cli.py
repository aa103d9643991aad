"""edge-run end to end as a user runs it, on the demo (real model, real clip, ONNX Runtime on the CPU)."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import time

import pytest

from .conftest import DEMO_CONFIG, PROMPT_S, edge_run_cmd, run_cli


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_cli_contract_on_the_demo(tmp_path, demo_model, megamind):
    out, summary = tmp_path / "out.jsonl", tmp_path / "summary.json"
    r = run_cli("--config", str(DEMO_CONFIG), "--frames", "120", "--results", str(out), "--summary-json", str(summary))
    assert r.returncode == 0, r.stderr
    records = lines(out)
    assert [rec["frame"] for rec in records] == list(range(120))
    assert sum(1 for rec in records if rec["detections"]) >= 100  # the clip shows faces in almost every frame
    s = json.loads(summary.read_text())
    assert s["frames"] == 120 and s["fps"] > 0 and s["backend"] == "onnxruntime" and s["device"] == "cpu"
    for stage in ("capture", "preprocess", "infer", "postprocess", "sink", "end_to_end"):
        assert set(s["latency_ms"][stage]) >= {"p50", "p90", "p99"}
    assert "p99" in r.stdout and "end_to_end" in r.stdout  # the summary table
    # queued is end_to_end less the work after capture: exact on the means (each rounded to 0.001 ms)
    mean = {stage: v["mean"] for stage, v in s["latency_ms"].items()}
    work = sum(mean[stage] for stage in ("preprocess", "infer", "postprocess", "sink"))
    assert abs(mean["queued"] - (mean["end_to_end"] - work)) < 0.01, mean
    assert s["source"]["live"] is False and "capture_to_result_ms" not in s
    assert f"so p50 {s['latency_ms']['queued']['p50']:.1f} ms of it is waiting between stages (queued)" in r.stdout


def test_help_is_instant_and_imports_nothing_heavy():
    t0 = time.perf_counter()
    r = subprocess.run(
        [*edge_run_cmd(), "--help"], capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"}, timeout=30
    )
    assert r.returncode == 0 and "--source" in r.stdout
    assert time.perf_counter() - t0 < PROMPT_S  # and the probe below: nothing heavy is imported
    probe = "import sys, edge.cli, edge.runtime.cli; print(sorted(m for m in ('cv2','onnxruntime','numpy','tensorrt','pycuda') if m in sys.modules))"
    r = subprocess.run([os.sys.executable, "-c", probe], capture_output=True, text=True, timeout=30)
    assert r.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--model", "/nonexistent/model.onnx"], "--model: file not found: /nonexistent/model.onnx"),  # named by its flag
        # named by the --set that brought it, not the config file (a docs walk found the file blamed)
        (["--set", "pipline.frames=3"], "--set pipline.frames '3': unknown key 'pipline'; did you mean 'pipeline'"),
        (["--set", "model.nosuch=1"], "--set model.nosuch '1': unknown key 'model.nosuch'; known keys here: path"),
        (["--set", "model=1"], "--set model: expected a mapping of keys, got 1"),
        # a key --set gave is named by it, not by a file it is not in; a missing replay log says what it looked for
        (["--set", "telemetry.dir=/nonexistent/t"], "--set telemetry.dir /nonexistent/t: does not exist"),
        (["--telemetry", "replay"], "key 'telemetry.replay_path': the replay backend needs an existing"),
        (
            ["--telemetry", "replay", "--set", "telemetry.replay_path=none.log"],
            f"--set telemetry.replay_path: the replay backend needs an existing telemetry.jsonl or tegrastats log; "
            f"{DEMO_CONFIG.parent / 'none.log'} does not exist",
        ),
        (["--set", "sinks.results=/nonexistent/r.jsonl"], "--set sinks.results /nonexistent/r.jsonl: folder /nonexistent"),
        (["--source", "/nonexistent/clip.mp4"], "no such file or folder"),
        (
            ["--set", "source.uri=rtsp://127.0.0.1:9/none", "--set", "source.reconnect.max_attempts=1"],
            "cannot be opened by OpenCV",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(extra, message, demo_model):
    r = run_cli("--config", str(DEMO_CONFIG), *extra)
    assert r.returncode == 2, r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in r.stderr and message in err[0]


def test_not_an_onnx_file_exits_2(tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"\x00garbage")
    r = run_cli("--model", str(bad), "--source", str(tmp_path))
    assert r.returncode == 2 and "ONNX Runtime cannot load it" in r.stderr and "Traceback" not in r.stderr


def test_sigterm_drains_and_leaves_whole_lines_and_a_summary(tmp_path, demo_model, megamind):
    out, summary = tmp_path / "out.jsonl", tmp_path / "summary.json"
    proc = subprocess.Popen(
        [*edge_run_cmd(), "-c", str(DEMO_CONFIG), "--loop", "-q", "--results", str(out), "--summary-json", str(summary)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Wait until frames are flowing (the staging file grows), then ask it to stop as systemd would.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(p.stat().st_size > 5000 for p in tmp_path.glob(".out.*.partial.jsonl")):
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert "SIGTERM: stopping capture" in stderr
    records = lines(out)  # every line parses: no torn line at the end
    s = json.loads(summary.read_text())
    assert s["frames"] == len(records) > 0
    assert [r["frame"] for r in records] == list(range(len(records)))
    assert not list(tmp_path.glob(".out.*"))  # the staging file became out.jsonl


def _limit_file_size():
    # A real write failure: past 20 kB the kernel refuses to grow any file (EFBIG), like a full disk.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))


def test_a_failing_sink_stops_the_run_and_keeps_what_was_written(tmp_path, demo_model, megamind):
    out = tmp_path / "out.jsonl"
    out.write_text('{"frame": 0, "from": "an earlier good run"}\n')
    r = run_cli("-c", str(DEMO_CONFIG), "-q", "--results", str(out), preexec_fn=_limit_file_size)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].startswith("edge-run: error: sink 'results'")
    assert "File too large" in r.stderr
    assert "an earlier good run" in out.read_text()  # the good file was not replaced
    kept = lines(tmp_path / "out.jsonl.partial")
    assert len(kept) > 10 and [k["frame"] for k in kept] == list(range(len(kept)))
    assert "frames" in r.stdout  # the summary was still printed


def test_annotated_video_has_every_frame_with_boxes_drawn(tmp_path, demo_model, megamind, megamind_frames):
    import cv2
    import numpy as np

    video = tmp_path / "out.avi"
    r = run_cli("-c", str(DEMO_CONFIG), "--frames", "3", "-q", "--video", str(video))
    assert r.returncode == 0, r.stderr
    cap = cv2.VideoCapture(str(video))
    frames = []
    while True:
        ok, f = cap.read()
        if not ok:
            break
        frames.append(f)
    assert len(frames) == 3 and frames[1].shape == megamind_frames[1].shape
    # Frame 1's woman's face (x 200-338, y 180-320): the drawn box edge is pure green where the clip is not.
    green = (frames[1][:, :, 1] > 200) & (frames[1][:, :, 0] < 80) & (frames[1][:, :, 2] < 80)
    source_green = (megamind_frames[1][:, :, 1] > 200) & (megamind_frames[1][:, :, 0] < 80) & (megamind_frames[1][:, :, 2] < 80)
    assert green[170:330, 190:350].sum() > 300 and source_green[170:330, 190:350].sum() == 0
    assert np.count_nonzero(green) > np.count_nonzero(source_green)


def test_duration_stops_a_looping_run(tmp_path, demo_model, megamind):
    t0 = time.monotonic()
    r = run_cli("-c", str(DEMO_CONFIG), "--loop", "--duration", "2", "-q", "--summary-json", str(tmp_path / "s.json"))
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 30
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["frames"] > 0 and s["duration_s"] <= 3.0


def test_check_loads_the_model_and_exits_without_running(tmp_path, demo_model):
    r = run_cli("-c", str(DEMO_CONFIG), "--check", "--results", str(tmp_path / "out.jsonl"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("edge-run: check ok: onnxruntime on cpu; input input:0 [1, 256, 256, 3] float32")
    assert not (tmp_path / "out.jsonl").exists()  # nothing ran
    r = run_cli("-c", str(DEMO_CONFIG), "--check", "--set", "input.size=[320, 320]")
    assert r.returncode == 2 and "input.size': width 320 but the model input" in r.stderr
