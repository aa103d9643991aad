"""`edge-run` with ``sources:``: many sources in one process over the engines of ``pool.engines``.

One process, one CUDA context (TensorRT's backends share the GPU's primary context) and one copy of each plan per
engine: ``gpu`` loads model.engine, ``dla0``/``dla1`` load the DLA plan on that core. Everything else is the single
source run's: the same model checks, trial frame, sinks, exporters, signals, watchdog and summary, per source.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

from edge.config import SinksConfig
from edge.errors import EdgeError, RunFailed, emit
from edge.redact import redact
from edge.runtime.engines import create_backend
from edge.runtime.engines.preprocess import Preprocessor
from edge.runtime.outputs import open_sinks
from edge.runtime.outputs.serve import Servers
from edge.runtime.postprocess import create_postprocessor
from edge.runtime.runner import (
    Runner,
    _open_sampler,
    _source_fps,
    _trial_frame,
    check_run_outputs,
    fit_model,
    log_metadata,
)
from edge.runtime.schedule.pool import Engine, Lane, Pool
from edge.runtime.sources import open_source
from edge.runtime.sources.frames import FrameRing
from edge.runtime.status.live import Live, run_info
from edge.runtime.status.metrics import format_summary

log = logging.getLogger("edge.run")

# NVIDIA's advice for GPU and DLA engines in one process (DeepStream quickstart, "Using DLA for inference"): more
# hardware work queues, so the engines' streams do not serialise behind each other. Read when CUDA starts.
CUDA_CONNECTIONS = "32"


def engine_names(cfg: Any) -> List[str]:
    """The pool's engines: pool.engines, else the one engine the single-source keys describe."""
    if cfg.pool.engines:
        return list(cfg.pool.engines)
    if cfg.backend == "tensorrt":
        return [f"dla{cfg.dla_core}" if cfg.dla_core is not None else "gpu"]
    return ["cpu" if cfg.device != "cuda" else "cuda"]


def engine_config(cfg: Any, name: str) -> Any:
    """The run config one engine's backend is created from: which plan, which DLA core, which device."""
    if cfg.backend == "tensorrt":
        if name == "gpu":
            return dataclasses.replace(cfg, dla_core=None)
        from edge.manifest import dla_engine_path

        plan = cfg.pool.dla_engine or str(dla_engine_path(cfg.resolve_path(cfg.model.engine)))
        if cfg.pool.engines:
            return dataclasses.replace(cfg, dla_core=int(name[3:]), model=dataclasses.replace(cfg.model, engine=plan))
        return cfg  # one engine: model.engine on dla_core, as a single-source run
    if not cfg.pool.engines:
        return cfg  # one session, on the device the run's keys say
    return dataclasses.replace(cfg, device="cuda" if name.startswith("cuda") else "cpu")


def source_task(cfg: Any, src: Any) -> Any:
    """The run config with a source's task keys over the run's ``task``."""
    overrides = {k: v for k, v in dataclasses.asdict(src.task).items() if v is not None}
    if not overrides:
        return cfg
    return dataclasses.replace(cfg, task=dataclasses.replace(cfg.task, **overrides))


def _same_tensors(name: str, backend: Any, first_name: str, first: Any) -> None:
    def sig(tensors: list) -> list:
        return [(t.name, tuple(t.shape), str(t.dtype)) for t in tensors]

    for what in ("inputs", "outputs"):
        if sig(getattr(backend, what)) != sig(getattr(first, what)):
            raise EdgeError(
                f"pool.engines: engine {name} has other {what} than {first_name} ({sig(getattr(backend, what))} against "
                f"{sig(getattr(first, what))}); build every plan from the same ONNX with edge-build --engines gpu,dla"
            )


class PoolRunner(Runner):
    """Owns the engines, sources and sinks of a pool run, and closes them whatever happens."""

    def __init__(self, cfg: Any) -> None:
        self.backends: Dict[str, Any] = {}
        self.lanes: List[Lane] = []
        self.shared_sinks: list = []
        self.pool: Optional[Pool] = None
        super().__init__(cfg)

    def _open(self) -> None:
        cfg = self.cfg
        check_run_outputs(cfg)
        self.servers = Servers(cfg)
        names = engine_names(cfg)
        if cfg.backend == "tensorrt" and len(names) > 1 and "CUDA_DEVICE_MAX_CONNECTIONS" not in os.environ:
            os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = CUDA_CONNECTIONS
        for name in names:
            self.backends[name] = create_backend(engine_config(cfg, name))
        first = self.backends[names[0]]
        self.backend = first
        tensor, self.spec, self.post = fit_model(cfg, first)
        for name, backend in self.backends.items():
            _same_tensors(name, backend, names[0], first)
            _trial_frame(backend, self.spec, tensor.name, self.post)
        meta = getattr(first, "model_metadata", None)
        info = run_info(cfg, first)
        info["engines"] = ",".join(names)
        shared = dataclasses.replace(cfg.sinks, video=None, display=False)
        if shared.results:
            shared.results = str(cfg.resolve_path(shared.results))
        for key in ("ca_file", "cert_file", "key_file"):
            if getattr(shared.mqtt, key):
                setattr(shared.mqtt, key, str(cfg.resolve_path(getattr(shared.mqtt, key))))
        self.shared_sinks = open_sinks(shared, 30.0, on_quit=self.stop_event.set, info=info)
        self.sinks = list(self.shared_sinks)  # from here on _close closes every sink opened so far
        ring_size = cfg.pool.queue_size + len(names) + 4  # waiting, on the engines, being delivered
        for i, src in enumerate(cfg.sources):
            # A network camera that is down at start must not keep the site's others from starting.
            source = open_source(src, self.stop_event, base_dir=cfg.base_dir, late=True)
            source.ring = FrameRing(ring_size, stop=self.stop_event)
            lane = Lane(src.name, source, _cpu_preprocess(self.spec), self.post, [], cfg.pool.queue_size, src.spread)
            self.lanes.append(lane)  # from here on _close closes its source and sinks
            lane.max_frames = cfg.pipeline.frames
            task_cfg = source_task(cfg, src)
            if task_cfg is not cfg:
                lane.decode = create_postprocessor(task_cfg, first.outputs, self.spec, meta)
            own = SinksConfig(
                results=str(cfg.resolve_path(src.sinks.results)) if src.sinks.results else None,
                video=str(cfg.resolve_path(src.sinks.video)) if src.sinks.video else None,
            )
            lane.sinks = open_sinks(own, _source_fps(source), on_quit=self.stop_event.set)
            self.sinks += lane.sinks
            lane.sinks += self.shared_sinks
            if i == 0:
                lane.sinks += self.servers.sinks  # the live view shows the first source
        self.sinks += self.servers.sinks
        engines = [Engine(n, _infer(b), tensor.name) for n, b in self.backends.items()]
        self.pool = self.pipeline = Pool(self.lanes, engines, stop_event=self.stop_event)
        grey = Preprocessor(self.spec)(_grey())[0]
        measured = self.pool.measure({tensor.name: grey})
        log.info("engines measured alone: %s", ", ".join(f"{n} {s * 1e3:.1f} ms/frame" for n, s in measured.items()))
        self.pool.seed_rates({ln.name: _source_fps(ln.source) for ln in self.lanes if ln.live})
        self.sampler = _open_sampler(cfg)
        self.source = self.lanes[0].source
        live = Live(self.pool.metrics, self.sampler, self.source, self.sinks, info)
        live.pool = self.pool
        self.servers.attach(live)

    def _close(self, failed: bool) -> list:
        notes = self._close_outputs(failed)
        stuck = {t.name[len("capture-") :] for t in getattr(self.pool, "_capture_threads", []) if t.is_alive()}
        for lane in self.lanes:
            if lane.name in stuck:
                log.warning("source %s: left open, its read is stalled (the process exits anyway)", lane.source.description)
                lane.source.ring.abandon()
            else:
                lane.source.close()
        for backend in self.backends.values():
            backend.close()
        for lane in self.lanes:
            if lane.name not in stuck:
                lane.source.ring.close()
        return notes

    def _finish(self, idle_w: Optional[float]) -> Tuple[dict, Optional[EdgeError]]:
        cfg, pool = self.cfg, self.pool
        engine_info = {n: b.info() for n, b in self.backends.items() if hasattr(b, "info")}
        sources_info = {ln.name: ln.source.info() for ln in self.lanes}
        frames_info = {ln.name: ln.source.ring.info() for ln in self.lanes}
        pool_summary = pool.summary()
        notes = self._close(failed=pool.error is not None)
        telemetry, files = self._telemetry_summary(idle_w)
        for name, src in pool_summary["sources"].items():
            src["source"], src["frame_buffers"] = sources_info[name], frames_info[name]
        failed = [str(ln.error) for ln in self.lanes if ln.error is not None]
        error = pool.error or self.close_error or (RunFailed("; ".join(failed)) if failed else None)
        summary = {
            **pool.metrics.summary(),
            **pool_summary,
            "backend": self.backend.name,
            "device": ", ".join(f"{n} {b.device}" for n, b in self.backends.items()),
            "dla_core": None,
            "preprocess": cfg.preprocess,
            "engine": engine_info or None,
            "model_input": {"shape": list(self.spec.input_shape), **self.spec.to_dict()},
            "telemetry": telemetry,
            "outputs": notes + files,
            "mqtt": next((s.stats() for s in self.shared_sinks if s.name == "mqtt"), None),
            "error": str(error) if error else None,
        }
        return summary, error


def _cpu_preprocess(spec: Any) -> Any:
    cpu = Preprocessor(spec)

    def preprocess(frame: Any) -> Any:
        return cpu(frame.bgr())

    return preprocess


def _infer(backend: Any) -> Any:
    if hasattr(backend, "submit"):  # TensorRT: one frame at a time per engine; the engines overlap each other
        return lambda feeds: backend.collect(backend.submit(feeds))
    return backend.infer


def _grey() -> Any:
    import numpy as np

    return np.full((480, 640, 3), 114, np.uint8)


def format_pool(summary: dict) -> str:
    """Per source and per engine tables after the whole pool's."""
    lines = [
        "",
        f"{'source':<16}{'engine':<8}{'frames':>8}{'dropped':>8}{'fps':>8}{'p50 ms':>9}{'p99 ms':>9}  capture to result",
    ]
    for name, s in summary["sources"].items():
        lat = s["latency_ms"].get("end_to_end", {})
        lines.append(
            f"{name:<16}{s['engine'] or '-':<8}{s['frames']:>8}{s['dropped']:>8}{s['fps']:>8.1f}"
            f"{lat.get('p50', 0.0):>9.1f}{lat.get('p99', 0.0):>9.1f}" + (f"  error: {s['error']}" if s["error"] else "")
        )
    lines.append(f"{'engine':<8}{'frames':>8}{'fps':>8}{'busy':>7}{'ms/frame':>10}  sources")
    for name, e in summary["engines"].items():
        ms = f"{e['service_ms']:.1f}" if e["service_ms"] else "-"
        lines.append(
            f"{name:<8}{e['frames']:>8}{e['fps']:>8.1f}{e['busy'] * 100:>6.0f}%{ms:>10}  {', '.join(e['sources']) or '-'}"
        )
    for m in summary["moves"]:
        lines.append(f"moved {m['source']} {m['from']} -> {m['to']} at {m['t']:.1f} s: {m['why']}")
    if summary.get("cpu_ms_per_frame") is not None:
        lines.append(f"CPU {summary['cpu_ms_per_frame']:.2f} ms per frame (the whole process, every source)")
    return "\n".join(lines)


def run(cfg: Any) -> int:
    """A pool run end to end: summary on stdout (and --summary-json), exit status."""
    runner = PoolRunner(cfg)
    log.info(
        "pool: %d sources over %s (%s); input %s; decoder %s",
        len(runner.lanes),
        ", ".join(runner.backends),
        runner.backend.name,
        runner.spec.input_shape,
        runner.post.head_info,
    )
    log_metadata(runner.backend)
    summary, error = runner.run()  # --summary-json is written: a stdout that fails must not cost the summary file
    emit(format_summary(summary))
    emit(redact(format_pool(summary)))  # a lane's error may quote a camera URI
    emit(redact(f"backend {summary['backend']} ({summary['device']}); " + "; ".join(summary["outputs"] or ["no sinks"])))
    if error is not None:
        raise error
    return 0


def check(cfg: Any) -> int:
    """`edge-run --check` with sources: every engine loads and fits the config; the sources are not opened."""
    backends: Dict[str, Any] = {}
    try:
        names = engine_names(cfg)
        for name in names:
            backends[name] = create_backend(engine_config(cfg, name))
        first = backends[names[0]]
        tensor, spec, post = fit_model(cfg, first)
        for name, backend in backends.items():
            _same_tensors(name, backend, names[0], first)
            _trial_frame(backend, spec, tensor.name, post)
        where = ", ".join(f"{n} ({b.device})" for n, b in backends.items())
        print(
            f"edge-run: check ok: pool of {len(backends)} engine(s) {where}; {len(cfg.sources)} source(s) "
            f"{', '.join(s.name for s in cfg.sources)}; input {tensor.name} {list(spec.input_shape)} {spec.dtype}; "
            f"decoder {post.head_info}",
            file=sys.stdout,
        )
    finally:
        for backend in backends.values():
            backend.close()
    return 0
