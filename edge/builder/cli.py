"""`edge-build` / `edge build`: flags, each of which overrides one build-config key."""

from __future__ import annotations

import argparse
import os
from typing import Any

from edge import argtypes
from edge.errors import printable


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model", nargs="?", metavar="MODEL.onnx", help="the ONNX model (model.path), or asset://NAME for a pinned asset"
    )
    p.add_argument(
        "--output",
        "-o",
        type=argtypes.output_file,
        metavar="ENGINE",
        help="the engine to write (model.engine; default MODEL.engine here)",
    )
    p.add_argument("--config", "-c", metavar="FILE", help="build YAML (see configs/build.example.yaml)")
    p.add_argument("--int8", action="store_true", default=None, help="INT8 with calibration (int8)")
    p.add_argument("--fp16", action="store_true", default=None, help="allow FP16 kernels (fp16)")
    p.add_argument("--calib-images", metavar="DIR", help="calibration images, preprocessed like the runner (calib.images)")
    p.add_argument("--calib-cache", metavar="FILE", help="read when present, written after calibrating (calib.cache)")
    p.add_argument("--calib-method", choices=["entropy", "minmax"], help="calibrator, default entropy (calib.method)")
    p.add_argument("--dla", type=argtypes.non_negative_int, metavar="N", help="put layers on DLA core N (dla.core)")
    fallback = p.add_mutually_exclusive_group()
    fallback.add_argument(
        "--gpu-fallback",
        dest="gpu_fallback",
        action="store_true",
        default=None,
        help="layers the DLA cannot run go to the GPU (default)",
    )
    fallback.add_argument(
        "--no-gpu-fallback", dest="gpu_fallback", action="store_false", help="fail the build instead (dla.gpu_fallback: false)"
    )
    p.add_argument(
        "--engines",
        type=argtypes.name_list,
        metavar="gpu,dla",
        help="write a GPU engine (at ENGINE) and a DLA plan (at STEM.dla.engine) from one calibration (engines)",
    )
    p.add_argument("--dla-target", choices=["orin", "xavier"], help="rules for the pre-build prediction (dla.target)")
    p.add_argument(
        "--dla-sram",
        type=argtypes.positive_float,
        metavar="MiB",
        help="DLA managed SRAM per subgraph, a power of two (dla.sram_mib)",
    )
    p.add_argument("--workspace", type=argtypes.positive_int, metavar="MiB", help="builder workspace limit (workspace_mib)")
    p.add_argument(
        "--timing-cache", type=argtypes.output_file, metavar="FILE", help="reuse and update a timing cache (timing_cache)"
    )
    p.add_argument(
        "--shape",
        action="append",
        default=None,
        metavar="NAME=1x3x256x256",
        help="build shape of a dynamic input, repeatable (shapes)",
    )
    p.add_argument("--target-cc", metavar="X.Y", help="build for this GPU compute capability where the API allows (target_cc)")
    p.add_argument("--log", type=argtypes.output_file, metavar="FILE", help="write TensorRT's verbose log (log)")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override any config key, e.g. --set calib.max_images=200"
    )


# flag attribute -> config key; file paths given on the command line are relative to the current folder.
_FLAG_KEYS = {
    "model": "model.path",
    "output": "model.engine",
    "int8": "int8",
    "fp16": "fp16",
    "calib_images": "calib.images",
    "calib_cache": "calib.cache",
    "calib_method": "calib.method",
    "dla": "dla.core",
    "gpu_fallback": "dla.gpu_fallback",
    "engines": "engines",
    "dla_target": "dla.target",
    "dla_sram": "dla.sram_mib",
    "workspace": "workspace_mib",
    "timing_cache": "timing_cache",
    "shape": "shapes",
    "target_cc": "target_cc",
    "log": "log",
}
_PATH_FLAGS = {"model", "output", "calib_images", "calib_cache", "timing_cache", "log"}


def main(args: argparse.Namespace) -> int:
    from edge.builder.config import load_build_config
    from edge.builder.engine import build
    from edge.builder.engines import build_engines
    from edge.runtime.cli import flag_names

    values = {}
    for attr, key in _FLAG_KEYS.items():
        value = getattr(args, attr)
        if value is None:
            continue
        values[key] = os.path.abspath(value) if attr in _PATH_FLAGS else value
    if args.model and args.model.startswith("asset://"):  # as edge dla and edge calib take it
        values["model.path"], values["model.asset"] = None, args.model[len("asset://") :]
    elif args.model:
        values["model.asset"] = None
    cfg = load_build_config(args.config, args.set, values, flags=flag_names(_FLAG_KEYS, {"model": "MODEL.onnx"}))
    if cfg.engines is None:
        summary(cfg, build(cfg))
        return 0
    built = build_engines(cfg, done=summary)
    if len(built) > 1:
        print(
            "\n"
            + printable(
                f"wrote {len(built)} engines from one build: "
                + ", ".join(
                    f"{r.engine} ({'GPU' if c.dla.core is None else f'DLA, built for core {c.dla.core}'})" for c, r in built
                )
                + "; a DLA plan runs on either DLA core"
            )
        )
    return 0


def summary(cfg: Any, result: Any) -> None:
    """The placement table and the closing lines of one engine."""
    from edge.builder import placement

    print("\n".join(placement.render(result.placement, result.report.name)))
    where = (
        f"DLA core {cfg.dla.core} ({'with' if cfg.dla.gpu_fallback else 'without'} GPU fallback)"
        if cfg.dla.core is not None
        else "GPU"
    )
    target = f"compute capability {result.compute_capability}" if result.compute_capability else "compute capability unknown"
    print(
        "\n"
        + printable(
            f"wrote {result.engine} ({result.size / 1e6:.1f} MB, sha256 {result.sha256[:12]}…), "
            f"{result.manifest.name}, {result.report.name} in {result.seconds:.1f} s"
        )
    )
    print(
        f"TensorRT {result.caps.version} ({result.caps.module}); {where}; {target}; "
        f"precisions {', '.join(result.plan.precisions)}{' (strongly typed: from the ONNX)' if not result.caps.weakly_typed else ''}; "
        f"{result.warnings} TensorRT warning(s){' (all in ' + cfg.log + ')' if cfg.log else ''}"
    )
    for note in result.notes:
        print(printable(f"note: {note}"))
