"""`edge report RUN_DIR` on a small synthetic run: HTML and valid PNGs, tolerant of missing per-frame keys."""

from __future__ import annotations

import argparse
import json

import pytest

from edge.errors import EdgeError
from edge.telemetry import report_cli
from edge.telemetry.files import write_jsonl, write_meta
from edge.telemetry.sample import Sample

pytest.importorskip("matplotlib", reason="edge report needs matplotlib (pip install matplotlib)")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run_dir(tmp_path):
    t0 = 1000.0
    frames = []
    for i in range(60):
        start = t0 + i / 30
        frames.append(
            json.dumps(
                {"frame": i, "t_capture": start, "t_done": start + 0.02, "latency_ms": {"preprocess": 2.0, "infer": 12.0 + i % 3}}
            )
        )
    frames[5] = json.dumps({"frame": 5, "t_capture": t0 + 5 / 30, "t_done": t0 + 5 / 30 + 0.02})  # no latency_ms
    frames[6] = json.dumps({"frame": 6})  # no times at all: skipped
    frames.append("{truncated")  # the last line of a killed run
    (tmp_path / "results.jsonl").write_text("\n".join(frames) + "\n")
    (tmp_path / "summary.json").write_text(json.dumps({"frames": 59, "fps": 29.9, "latency_ms": {"infer": {"p50": 13.0}}}))
    samples = [
        Sample(
            t_mono=t0 - 0.05 + 0.1 * i,
            t_wall=0.0,
            backend="tegrastats",
            power_mw={"VDD_IN": 6000.0 + 10 * i, "VDD_SOC": 1500.0},
            total_mw=6000.0 + 10 * i,
            total_rule="VDD_IN",
            gpu_util_pct=float(40 + i),
            temps_c={"gpu": 50.0 + 0.1 * i, "cv0": None},
            dla={"DLA0": {"online": i % 2 == 0, "freq_mhz": None}},
        )
        for i in range(22)
    ]
    write_jsonl(samples, tmp_path / "telemetry.jsonl")
    write_meta(
        {"backend": "tegrastats", "choice_reason": "auto picked tegrastats", "idle_baseline_w": 4.0},
        tmp_path / "telemetry_meta.json",
    )
    return tmp_path


def _main(argv):
    parser = argparse.ArgumentParser()
    report_cli.add_arguments(parser)
    return report_cli.main(parser.parse_args(argv))


def test_report_writes_html_and_valid_pngs(tmp_path, capsys):
    run = _run_dir(tmp_path)
    assert _main([str(run)]) == 0
    html_path = run / "report.html"
    assert capsys.readouterr().out.strip() == str(html_path)
    page = html_path.read_text()
    for name in ("report_fps.png", "report_latency.png", "report_power.png", "report_gpu.png"):
        data = (run / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000
        assert f'src="{name}"' in page
    assert "59 frames, 22 telemetry samples" in page
    assert "energy_mj_per_frame" in page and "VDD_IN" in page and "auto picked tegrastats" in page
    assert "latency_ms.infer.p50" in page  # the run's summary.json, flattened
    assert not list(run.glob(".*"))  # written through temp files


def test_report_without_telemetry_still_plots_frames(tmp_path):
    (tmp_path / "results.jsonl").write_text(
        "\n".join(json.dumps({"frame": i, "t_capture": i / 10, "t_done": i / 10 + 0.05, "latency_ms": 5}) for i in range(30))
    )
    _main([str(tmp_path)])
    page = (tmp_path / "report.html").read_text()
    assert "No telemetry was recorded" in page
    assert (tmp_path / "report_fps.png").exists() and not (tmp_path / "report_power.png").exists()


def test_report_errors_name_the_folder(tmp_path):
    with pytest.raises(EdgeError, match="does not exist"):
        _main([str(tmp_path / "nope")])
    with pytest.raises(EdgeError, match="nothing to report in"):
        _main([str(tmp_path)])
