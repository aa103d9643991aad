"""`edge-run` / `edge run`: flags, each of which overrides one config key."""

from __future__ import annotations

import argparse
import os
from typing import Optional

from edge import argtypes


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", metavar="FILE", help="camera-service YAML (e.g. configs/demo.yaml)")
    p.add_argument(
        "--source",
        "-s",
        metavar="URI",
        help="video file, image folder/glob, /dev/videoN, v4l2://, csi://N, rtsp://, http(s)://, asset://NAME",
    )
    p.add_argument("--model", "-m", metavar="ONNX", help="model file (model.path)")
    p.add_argument("--engine", metavar="ENGINE", help="TensorRT engine; selects backend tensorrt (model.engine)")
    p.add_argument("--dla", type=argtypes.non_negative_int, metavar="N", help="run the engine on DLA core N (dla_core)")
    p.add_argument(
        "--engines",
        type=argtypes.name_list,
        metavar="LIST",
        help="spread the config's sources over these engines, e.g. gpu,dla0,dla1 or cpu,cpu1 (pool.engines)",
    )
    p.add_argument("--preprocess", choices=["cpu", "gpu"], help="where preprocessing runs; gpu needs --engine (preprocess)")
    p.add_argument("--loop", action="store_true", default=None, help="restart file sources at the end (source.loop)")
    p.add_argument("--frames", type=argtypes.positive_int, metavar="N", help="stop after reading N frames (pipeline.frames)")
    p.add_argument("--duration", type=argtypes.positive_float, metavar="S", help="stop after S seconds (pipeline.duration_s)")
    p.add_argument("--results", type=argtypes.output_file, metavar="FILE", help="write one JSON line per frame (sinks.results)")
    p.add_argument(
        "--video",
        type=argtypes.output_file,
        metavar="FILE",
        help="write the annotated video: .mp4, .avi, .mkv or .mov (sinks.video)",
    )
    p.add_argument("--display", action="store_true", default=None, help="show the annotated frames in a window (sinks.display)")
    p.add_argument(
        "--summary-json", type=argtypes.output_file, metavar="FILE", help="write the final summary as JSON (sinks.summary_json)"
    )
    p.add_argument(
        "--mqtt",
        metavar="URL",
        help="publish each frame's results: mqtt://[user:pass@]host[:port]/topic/prefix or mqtts:// (sinks.mqtt.url)",
    )
    p.add_argument(
        "--metrics-port", type=argtypes.port, metavar="N", help="serve Prometheus /metrics on 127.0.0.1:N (metrics.port)"
    )
    p.add_argument("--view-port", type=argtypes.port, metavar="N", help="serve the live view on http://127.0.0.1:N/ (view.port)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], help="ONNX Runtime provider (device)")
    p.add_argument(
        "--threads", type=argtypes.threads, metavar="N", help="ONNX Runtime intra-op threads, 0 = all cores but one (threads)"
    )
    p.add_argument(
        "--score-threshold",
        "--conf",
        type=argtypes.finite_float,
        metavar="X",
        help="keep detections above X (task.score_threshold)",
    )
    p.add_argument("--iou", type=argtypes.finite_float, metavar="X", help="NMS overlap (task.iou_threshold)")
    p.add_argument("--max-det", type=argtypes.positive_int, metavar="N", help="detections per frame (task.max_detections)")
    p.add_argument(
        "--agnostic-nms",
        action="store_true",
        default=None,
        help="boxes of different classes suppress each other (task.agnostic_nms)",
    )
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override any config key, e.g. --set input.resize=stretch"
    )
    p.add_argument(
        "--telemetry",
        choices=["auto", "jtop", "tegrastats", "sysfs", "nvml", "none", "replay"],
        help="power/utilisation sampler (telemetry.backend)",
    )
    p.add_argument(
        "--idle-baseline",
        type=argtypes.non_negative_float,
        metavar="S",
        help="measure idle power for S seconds first (telemetry.idle_baseline_s)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="check that the model/engine loads here and fits the config, then exit (deploys use it)",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no periodic status line (logging.status: false)")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"], help="logging.level")


# flag attribute -> config key; file paths given on the command line are relative to the current folder.
_FLAG_KEYS = {
    "source": "source.uri",
    "model": "model.path",
    "engine": "model.engine",
    "dla": "dla_core",
    "engines": "pool.engines",
    "preprocess": "preprocess",
    "loop": "source.loop",
    "frames": "pipeline.frames",
    "duration": "pipeline.duration_s",
    "results": "sinks.results",
    "video": "sinks.video",
    "display": "sinks.display",
    "summary_json": "sinks.summary_json",
    "mqtt": "sinks.mqtt.url",
    "metrics_port": "metrics.port",
    "view_port": "view.port",
    "device": "device",
    "threads": "threads",
    "score_threshold": "task.score_threshold",
    "iou": "task.iou_threshold",
    "max_det": "task.max_detections",
    "agnostic_nms": "task.agnostic_nms",
    "log_level": "logging.level",
    "telemetry": "telemetry.backend",
    "idle_baseline": "telemetry.idle_baseline_s",
}
_PATH_FLAGS = {"model", "engine", "results", "video", "summary_json"}


def flag_names(flag_keys: dict, positional: Optional[dict] = None) -> dict:
    """config key -> the flag that sets it, for error messages ({"pipeline.frames": "--frames"}); ``positional``
    names the attributes that are positional arguments ({"model": "MODEL.onnx"})."""
    return {key: (positional or {}).get(attr, "--" + attr.replace("_", "-")) for attr, key in flag_keys.items()}


def main(args: argparse.Namespace) -> int:
    from edge.config import load_config
    from edge.errors import ConfigError, setup_logging
    from edge.runtime.runner import check, run

    if not args.config and not args.model and not args.engine:
        raise ConfigError("no model: pass --config FILE (e.g. configs/demo.yaml), --model MODEL.onnx or --engine MODEL.engine")
    values = {}
    for attr, key in _FLAG_KEYS.items():
        value = getattr(args, attr)
        if value is None:
            continue
        if attr in _PATH_FLAGS or (attr == "source" and "://" not in value):
            value = os.path.abspath(value)
        values[key] = value
    if args.quiet:
        values["logging.status"] = False
    if args.model:
        values["model.asset"] = None
    if args.engine:
        values["backend"] = "tensorrt"
    cfg = load_config(args.config, args.set, values, flags=flag_names(_FLAG_KEYS))
    if cfg.logging.level != "debug":
        # FFmpeg inside OpenCV prints its own lines for every failed connection; our error says it once.
        os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "8")
        os.environ.setdefault("OPENCV_LOG_LEVEL", "ERROR")
    setup_logging("edge-run", cfg.logging.level)
    if cfg.sources:
        from edge.runtime import pool_runner

        return pool_runner.check(cfg) if args.check else pool_runner.run(cfg)
    return check(cfg) if args.check else run(cfg)
