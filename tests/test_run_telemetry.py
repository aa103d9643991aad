"""The demo run with telemetry on: real sysfs reader over a fake Orin tree, files beside the results, the report."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

from .conftest import DEMO_CONFIG, run_cli
from .test_telemetry_sysfs import agx_orin_tree


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_demo_with_sysfs_telemetry_writes_samples_summary_and_report(tmp_path, demo_model, megamind):
    root = tmp_path / "sys"
    agx_orin_tree(root)
    run = tmp_path / "run"
    run.mkdir()
    r = run_cli(
        "-c", str(DEMO_CONFIG), "--frames", "150", "--telemetry", "sysfs", "--set", f"telemetry.sysfs_root={root}",
        "--set", "telemetry.interval_s=0.02", "--results", str(run / "results.jsonl"), "--summary-json", str(run / "summary.json"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    s = json.loads((run / "summary.json").read_text())
    tel = s["telemetry"]
    assert tel["backend"] == "sysfs" and tel["samples"] >= 5
    assert tel["power_w"]["mean"] > 0 and tel["energy_mj_per_frame"] > 0
    # Energy per frame is average power times the frames' window divided by the frame count.
    expected = tel["power_w"]["mean"] * tel["window_s"] / s["frames"] * 1e3
    assert abs(tel["energy_mj_per_frame"] - expected) / expected < 0.05
    assert "W mean" in r.stdout
    samples = [json.loads(line) for line in (run / "telemetry.jsonl").read_text().splitlines()]
    assert len(samples) >= tel["samples"] and (run / "telemetry.csv").is_file()

    out = subprocess.run([sys.executable, "-m", "edge", "report", str(run)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    html = (run / "report.html").read_text()
    pngs = sorted(run.glob("report_*.png"))
    assert len(pngs) >= 3 and all(p.name in html for p in pngs)
    assert all(min(png_size(p)) > 100 for p in pngs)


def test_the_shipped_tegrastats_log_replays_through_the_demo(tmp_path, demo_model, megamind):
    """configs/tegrastats-agx-orin.log, the sample docs/telemetry.md points new users at: two real AGX Orin lines
    whose rails add up to 4788 + 798 + 3842 + 0 + 707 + 0 mW (the published numbers, not edge's parser)."""
    r = run_cli(
        "-c", str(DEMO_CONFIG), "--frames", "10", "--telemetry", "replay",
        "--set", "telemetry.replay_path=tegrastats-agx-orin.log",  # relative to the config, as every key in it
        "--results", str(tmp_path / "results.jsonl"), "--summary-json", str(tmp_path / "summary.json"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    tel = json.loads((tmp_path / "summary.json").read_text())["telemetry"]
    assert tel["backend"] == "replay" and tel["power_w"]["max"] == 10.135
    assert tel["rails_w_mean"]["VDD_GPU_SOC"] == 4.788 and tel["rails_w_mean"]["VIN_SYS_5V0"] == 3.842
    recorded = [json.loads(line)["extras"]["t_recorded"] for line in (tmp_path / "telemetry.jsonl").read_text().splitlines()]
    assert recorded and set(recorded) <= {0.0, 1.0}  # the log's two lines, 1 s apart
