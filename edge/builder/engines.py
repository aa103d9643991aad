"""`edge-build --engines gpu,dla`: a GPU engine and a DLA plan from one command, with one calibration.

``gpu`` is written at model.engine (``--output``, default ``MODEL.engine``) with no DLA; ``dla`` beside it at
``edge.manifest.dla_engine_path`` (``yolo.engine`` -> ``yolo.dla.engine``), built for DLA core ``dla.core`` (0 when
it is not set) with ``dla.gpu_fallback``. Each is one ordinary ``engine.build``, so each gets its own manifest and
placement report, committed through the atomic-write path. Everything that can be refused (outputs, the engines
this TensorRT and machine can build) is refused before the first build starts. An INT8 build calibrates (or reads
calib.cache) once: the scales the first build used are handed to the next, so every engine has the same scales.
"""

from __future__ import annotations

import dataclasses
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, List, Optional, Tuple

from edge.builder import trt as trt_api
from edge.builder.config import BuildConfig
from edge.builder.engine import BuildResult, Scales, build, check_engine_outputs, default_engine, model_path, plan
from edge.errors import EdgeError
from edge.manifest import dla_engine_path
from edge.outputs import atomic_open
from edge.progress import say

Built = Tuple[BuildConfig, BuildResult]


def dla_core(cfg: BuildConfig) -> int:
    """The core the DLA plan is built for: dla.core, or 0 (the plan loads on either core)."""
    return cfg.dla.core if cfg.dla.core is not None else 0


def engine_jobs(cfg: BuildConfig, onnx: Path) -> List[Tuple[str, BuildConfig]]:
    """(label, the config of a single build of that engine) for each of cfg.engines, in the order given."""
    base = default_engine(cfg, onnx)
    jobs = []
    for kind in cfg.engines or []:
        engine, core = (base, None) if kind == "gpu" else (dla_engine_path(base), dla_core(cfg))
        one = dataclasses.replace(
            cfg, model=dataclasses.replace(cfg.model, engine=str(engine)), dla=dataclasses.replace(cfg.dla, core=core)
        )
        jobs.append(("gpu" if core is None else f"dla (core {core})", one))
    return jobs


def build_engines(cfg: BuildConfig, done: Optional[Callable[[BuildConfig, BuildResult], None]] = None) -> List[Built]:
    """Build every engine of ``cfg.engines``; ``done`` is called after each one is written. A build that fails
    raises its error, saying which build it was; the engines written before it stay as they are."""
    onnx = model_path(cfg)
    jobs = engine_jobs(cfg, onnx)
    engines = {
        cfg.name_of("model.engine") if one.dla.core is None else "the DLA engine": Path(one.model.engine or "") for _, one in jobs
    }
    check_engine_outputs(cfg, onnx, engines)
    trt = trt_api.load()
    caps = trt_api.detect(trt, trt.Builder(trt_api.logger()))
    asked = f"{cfg.name_of('engines')} {','.join(cfg.engines or [])} (DLA core {dla_core(cfg)})"
    for _, one in jobs:
        plan(one, caps, dla_flag=asked)  # refuse an engine this TensorRT or machine cannot build, before any build
    results: List[Built] = []
    scales: Optional[Scales] = None
    with ExitStack() as stack:
        log = stack.enter_context(atomic_open(cfg.resolve_path(cfg.log), text=True)) if cfg.log else None
        for index, (label, one) in enumerate(jobs, 1):
            which = f"build {index}/{len(jobs)}: {label}"
            say(which)
            if log is not None:
                log.write(f"[edge-build] {which}\n")
            try:
                result = build(one, scales=scales, log_file=log)
            except EdgeError as exc:
                kept = "".join(f"; {r.engine} (build {i}) is written and unchanged" for i, (_, r) in enumerate(results, 1))
                exc.args = (f"{which} failed: {exc}{kept}",)
                raise
            scales = scales or result.scales
            results.append((one, result))
            if done is not None:
                done(one, result)
    return results
