"""Assemble a run from its config (backend, preprocessing, postprocessing, source, sinks), drive it, summarise it."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional, Tuple

from edge.errors import EdgeError
from edge.runtime.backends import create_backend
from edge.runtime.metrics import format_summary
from edge.runtime.model import pick_input, preprocess_spec
from edge.runtime.pipeline import Pipeline
from edge.runtime.postprocess import create_postprocessor
from edge.runtime.preprocess import Preprocessor
from edge.runtime.sinks import open_sinks
from edge.runtime.sources import open_source

log = logging.getLogger("edge.run")


def _source_fps(source: Any) -> float:
    cap = getattr(source, "cap", None)
    if cap is not None:
        import cv2

        fps = cap.get(cv2.CAP_PROP_FPS)
        if fps and 1 <= fps <= 240:
            return float(fps)
    return 30.0


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


class Runner:
    """Owns everything a run opens, and closes it whatever happens."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.stop_event = threading.Event()
        self.backend = self.source = None
        self.sinks: list = []
        try:
            self._open()
        except BaseException:
            self._close(failed=True)
            raise

    def _open(self) -> None:
        cfg = self.cfg
        self.backend = create_backend(cfg)
        tensor = pick_input(cfg, self.backend.inputs)
        self.spec = preprocess_spec(cfg, tensor)
        post = create_postprocessor(cfg, self.backend.outputs, self.spec)
        self.source = open_source(cfg.source, self.stop_event, base_dir=cfg.base_dir)
        sinks_cfg = cfg.sinks
        for key in ("results", "video"):
            if getattr(sinks_cfg, key):
                setattr(sinks_cfg, key, str(cfg.resolve_path(getattr(sinks_cfg, key))))
        self.sinks = open_sinks(sinks_cfg, _source_fps(self.source), on_quit=self.stop_event.set)
        self.pipeline = Pipeline(
            self.source,
            Preprocessor(self.spec),
            self.backend.infer,
            tensor.name,
            post,
            self.sinks,
            queue_size=cfg.pipeline.queue_size,
            max_frames=cfg.pipeline.frames,
            stop_event=self.stop_event,
        )

    def _close(self, failed: bool) -> list:
        notes = []
        for sink in self.sinks:
            try:
                note = sink.close(failed=failed)
            except OSError as exc:
                note = f"{sink.name}: close failed: {exc}"
            if note:
                notes.append(note)
        if self.source is not None:
            self.source.close()
        if self.backend is not None:
            self.backend.close()
        return notes

    def run(self) -> Tuple[dict, Optional[EdgeError]]:
        """Run to the end of the source, the frame/duration limit or a signal. Returns (summary, error or None)."""
        cfg, p = self.cfg, self.pipeline
        restore = _install_signal_handlers(p) if threading.current_thread() is threading.main_thread() else {}
        t0 = time.monotonic()
        interval = cfg.pipeline.status_interval_s
        next_status = t0 + interval
        try:
            p.start()
            while not p.wait(0.1):
                now = time.monotonic()
                if cfg.pipeline.duration_s is not None and now - t0 >= cfg.pipeline.duration_s:
                    p.stop()
                if cfg.logging.status and now >= next_status:
                    print(f"edge-run: {p.metrics.status_line()}", file=sys.stderr, flush=True)
                    next_status = now + interval
        finally:
            for sig, handler in restore.items():
                signal.signal(sig, handler)
        notes = self._close(failed=p.error is not None)
        summary = {
            **p.metrics.summary(),
            "backend": self.backend.name,
            "device": self.backend.device,
            "model_input": {"shape": list(self.spec.input_shape), **self.spec.to_dict()},
            "source": self.source.info(),
            "outputs": notes,
            "error": str(p.error) if p.error else None,
        }
        return summary, p.error


def _install_signal_handlers(p: Pipeline) -> dict:
    """First SIGINT/SIGTERM drains and stops; a second one aborts."""

    def handler(signum: int, _frame: Any) -> None:
        if p.stop_event.is_set():
            print("edge-run: second signal, aborting without draining", file=sys.stderr, flush=True)
            p.abort()
        else:
            print(
                f"edge-run: {signal.Signals(signum).name}: stopping capture, draining the pipeline", file=sys.stderr, flush=True
            )
            p.stop()

    return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}


def run(cfg: Any) -> int:
    """Run a config end to end: summary on stdout (and --summary-json), exit status."""
    runner = Runner(cfg)
    log.info(
        "backend %s on %s; input %s; source %s",
        runner.backend.name,
        runner.backend.device,
        runner.spec.input_shape,
        runner.source.description,
    )
    summary, error = runner.run()
    print(format_summary(summary))
    print(f"backend {summary['backend']} ({summary['device']}); " + "; ".join(summary["outputs"] or ["no sinks"]))
    if cfg.sinks.summary_json:
        write_json_atomic(cfg.resolve_path(cfg.sinks.summary_json), summary)
    if error is not None:
        raise error
    return 0
