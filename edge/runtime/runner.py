"""Assemble a run from its config (backend, preprocessing, postprocessing, source, sinks), drive it, summarise it."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional, Tuple

from edge.errors import STOP_SIGNALS, EdgeError, RunFailed, emit, one_line, stop_exception
from edge.lazy import available
from edge.manifest import read_l4t
from edge.metadata import NONE, describe
from edge.outputs import check_outputs, write_json
from edge.redact import redact, redact_data
from edge.runtime.engines import create_backend
from edge.runtime.engines.model import pick_input, preprocess_spec
from edge.runtime.engines.preprocess import Preprocessor
from edge.runtime.outputs import open_sinks
from edge.runtime.outputs.notify import Notifier, Watchdog
from edge.runtime.outputs.serve import Servers
from edge.runtime.postprocess import create_postprocessor
from edge.runtime.schedule.pipeline import Pipeline, frames_in_flight
from edge.runtime.sources import open_source
from edge.runtime.sources.frames import FrameRing
from edge.runtime.status.live import Live, run_info
from edge.runtime.status.metrics import format_summary
from edge.telemetry import format_status

log = logging.getLogger("edge.run")

# After SIGTERM the frames in flight get this long to reach the sinks; then the run aborts. It keeps a stalled
# source or sink well inside the camera unit's TimeoutStopSec (20 s).
DRAIN_TIMEOUT_S = 8.0


def _source_fps(source: Any) -> float:
    cap = getattr(source, "cap", None)
    if cap is not None:
        import cv2

        fps = cap.get(cv2.CAP_PROP_FPS)
        if fps and 1 <= fps <= 240:
            return float(fps)
    return 30.0


def _local_file(uri: str, cfg: Any) -> Optional[Path]:
    """The source as a file path when it is one (not a stream, camera or asset)."""
    if "://" in uri or uri.startswith("/dev/"):
        return None
    return cfg.resolve_path(uri)


def check_run_outputs(cfg: Any) -> None:
    """Every file the run will write, checked against the folders and against every input, before the work."""
    s, t = cfg.sinks, cfg.telemetry
    outputs = {cfg.name_of(f"sinks.{k}"): cfg.optional_path(getattr(s, k)) for k in ("results", "video", "summary_json")}
    folder = t.dir or (str(Path(s.results).parent) if s.results else None)
    if folder is not None and t.backend != "none":
        from edge.telemetry.files import CSV_NAME, JSONL_NAME, META_NAME

        base = cfg.resolve_path(folder)
        if t.dir and not base.is_dir():
            what = "is not a folder" if base.exists() else "does not exist; create it"
            raise EdgeError(f"{cfg.name_of('telemetry.dir')} {base}: {what} (or choose another telemetry.dir)")
        outputs.update({f"telemetry file {name}": base / name for name in (JSONL_NAME, CSV_NAME, META_NAME)})
    inputs = {
        "--config": cfg.config_file,
        cfg.name_of("model.path"): cfg.optional_path(cfg.model.path),
        cfg.name_of("model.engine"): cfg.optional_path(cfg.model.engine),
        cfg.name_of("source.uri"): _local_file(cfg.source.uri, cfg),
        cfg.name_of("task.labels"): cfg.optional_path(cfg.task.labels) if isinstance(cfg.task.labels, str) else None,
        cfg.name_of("telemetry.replay_path"): cfg.optional_path(t.replay_path),
    }
    if cfg.model.engine:
        from edge.manifest import manifest_path

        inputs["the engine's manifest"] = manifest_path(cfg.resolve_path(cfg.model.engine))
    for i, src in enumerate(cfg.sources):
        for k in ("results", "video"):
            outputs[cfg.name_of(f"sources[{i}].sinks.{k}")] = cfg.optional_path(getattr(src.sinks, k))
        inputs[cfg.name_of(f"sources[{i}].uri")] = _local_file(src.uri, cfg)
    if cfg.pool.dla_engine:
        inputs[cfg.name_of("pool.dla_engine")] = cfg.resolve_path(cfg.pool.dla_engine)
    check_outputs(outputs, inputs)


class Runner:
    """Owns everything a run opens, and closes it whatever happens."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.stop_event = threading.Event()
        self.backend = self.source = self.sampler = self.servers = self.ring = None
        self.sinks: list = []
        self.close_error: Optional[EdgeError] = None
        try:
            self._open()
        except BaseException:
            self._close(failed=True)
            raise

    def _open(self) -> None:
        cfg = self.cfg
        check_run_outputs(cfg)  # before anything slow: a bad output path must not cost a model load
        self.servers = Servers(cfg)  # metrics and live-view ports: a taken one fails before the engine loads
        self.backend = create_backend(cfg)
        tensor, self.spec, post = fit_model(cfg, self.backend)
        self.post = post
        _trial_frame(self.backend, self.spec, tensor.name, post)  # a config that does not fit fails here, exit 2
        gpu = cfg.preprocess == "gpu"
        self.source = open_source(cfg.source, self.stop_event, base_dir=cfg.base_dir, gpu=gpu)
        # Frames are decoded into buffers allocated once: page-locked (or mapped) memory when the GPU preprocesses.
        memory = self.backend.frame_memory(cfg.frame_memory) if gpu else None
        self.ring = FrameRing(frames_in_flight(cfg.pipeline.queue_size), memory, stop=self.stop_event)
        self.source.ring = self.ring
        sinks_cfg = cfg.sinks
        for owner, key in (
            (sinks_cfg, "results"),
            (sinks_cfg, "video"),
            (sinks_cfg.mqtt, "ca_file"),
            (sinks_cfg.mqtt, "cert_file"),
            (sinks_cfg.mqtt, "key_file"),
        ):
            if getattr(owner, key):
                setattr(owner, key, str(cfg.resolve_path(getattr(owner, key))))
        info = run_info(cfg, self.backend)
        self.sinks = open_sinks(sinks_cfg, _source_fps(self.source), on_quit=self.stop_event.set, info=info)
        self.sinks += self.servers.sinks
        self.sampler = _open_sampler(cfg)
        preprocess, infer, post = self._stages(tensor.name, post)
        self.pipeline = Pipeline(
            self.source,
            preprocess,
            infer,
            tensor.name,
            post,
            self.sinks,
            queue_size=cfg.pipeline.queue_size,
            max_frames=cfg.pipeline.frames,
            stop_event=self.stop_event,
        )
        self.servers.attach(Live(self.pipeline.metrics, self.sampler, self.source, self.sinks, info))

    def _stages(self, input_name: str, post: Any) -> Tuple[Any, Any, Any]:
        """The pipeline's preprocess, infer and postprocess callables.

        A backend with submit/collect (TensorRT) keeps several frames on the GPU: the infer stage only enqueues a
        frame, and the postprocess stage waits for that frame's outputs before decoding them.
        """
        b = self.backend
        if self.cfg.preprocess == "gpu":
            preprocess = b.use_gpu_preprocess(self.spec, input_name)
        else:
            cpu = Preprocessor(self.spec)

            def preprocess(frame: Any) -> Any:
                return cpu(frame.bgr())  # a camera's YUV or BGRx through OpenCV's converters first

        if not hasattr(b, "submit"):
            return preprocess, b.infer, post
        return preprocess, b.submit, lambda job, transform: post(b.collect(job), transform)

    def _close_outputs(self, failed: bool) -> list:
        """Close every sink (each note for the summary), the HTTP servers and the sampler."""
        notes = []
        for sink in self.sinks:
            try:
                note = sink.close(failed=failed)
            except EdgeError as exc:  # e.g. the video read back short: the run failed, the old file is kept
                note = str(exc)
                self.close_error = self.close_error or exc
            except OSError as exc:
                note = f"{sink.name}: close failed: {exc}"
                self.close_error = self.close_error or RunFailed(f"sink '{sink.name}': close failed: {exc}")
            if note:
                notes.append(note)
        if self.servers is not None:
            self.servers.close()
        if self.sampler is not None:
            self.sampler.stop()
        return notes

    def _close(self, failed: bool) -> list:
        notes = self._close_outputs(failed)
        capture = getattr(getattr(self, "pipeline", None), "_threads", [None])[:1]
        if capture and capture[0] is not None and capture[0].is_alive():
            log.warning("source %s: left open, its read is stalled (the process exits anyway)", self.source.description)
            if self.ring is not None:
                self.ring.abandon()  # the stalled read may still write into a frame buffer: never free them
        elif self.source is not None:
            self.source.close()  # never while the capture thread is inside a read: OpenCV would crash
        if self.backend is not None:
            self.backend.close()  # waits for frames on the GPU, then frees its page-locked frame buffers
        if self.ring is not None:
            self.ring.close()
        return notes

    def run(self) -> Tuple[dict, Optional[EdgeError]]:
        """Run to the end of the source, the frame/duration limit or a signal; write --summary-json. Returns (summary,
        error or None). The run's signal handlers stay until the summary file is written: a stop that came while the
        outputs were being closed raised out of the guard's handler and lost this run's results and summary."""
        restore = _install_signal_handlers(self.pipeline) if threading.current_thread() is threading.main_thread() else {}
        try:
            idle_w = self._start_telemetry()
            self._loop()
            summary, error = self._finish(idle_w)
            write_summary(self.cfg, summary)
            return summary, error
        except BaseException:
            for sink in self.sinks:
                sink.discard()  # committed ones have no temp left; the previous file of every other stays
            raise
        finally:
            for sig, handler in restore.items():
                signal.signal(sig, handler)

    def _loop(self) -> None:
        """Frames until the pipeline is done, a drain runs past DRAIN_TIMEOUT_S or an abort leaves only capture."""
        cfg, p = self.cfg, self.pipeline
        # systemd (Type=notify): READY after the first frame, WATCHDOG only while frames flow, STATUS, STOPPING.
        notifier = Notifier.from_env()
        watchdog = Watchdog.from_env(notifier)

        def frame_done(packet: Any) -> None:
            if notifier.enabled:
                notifier.ready()
                watchdog.frame_done()
            self.servers.frame_done(packet)

        p.on_frame = frame_done if notifier.enabled or self.servers.observing else None
        t0 = time.monotonic()
        interval = cfg.pipeline.status_interval_s
        next_status = t0 + interval
        stopping_sent = False
        stopped_at: Optional[float] = None
        try:
            if not self.stop_event.is_set():  # a signal during the idle baseline: no frames at all
                p.start()
            else:
                p.done.set()
            while not p.wait(0.1):
                now = time.monotonic()
                if cfg.pipeline.duration_s is not None and now - t0 >= cfg.pipeline.duration_s:
                    p.stop()
                if p.stop_event.is_set() and stopped_at is None:
                    stopped_at = now
                if stopped_at is not None and now - stopped_at > DRAIN_TIMEOUT_S and not p.abort_event.is_set():
                    log.warning("the pipeline did not drain in %.0f s (a stalled source or sink); aborting", DRAIN_TIMEOUT_S)
                    p.abort()
                if p.abort_event.is_set() and p.stages_done():
                    break  # only capture is left, stuck in a read: leave it (a daemon thread)
                if now >= next_status:
                    power = format_status(self.sampler.latest()) if self.sampler.backend_name != "none" else ""
                    line = p.status_line(power)
                    notifier.status(line)
                    if cfg.logging.status:
                        print(f"edge-run: {line}", file=sys.stderr, flush=True)
                    next_status = now + interval
                if p.stop_event.is_set() and not stopping_sent:
                    notifier.stopping()
                    stopping_sent = True
        finally:
            if not stopping_sent:
                notifier.stopping()
            notifier.close()
        if p.abort_event.is_set():
            p.count_abandoned()

    def _finish(self, idle_w: Optional[float]) -> Tuple[dict, Optional[EdgeError]]:
        """Close everything and put the summary together."""
        cfg, p = self.cfg, self.pipeline
        engine_info = self.backend.info() if hasattr(self.backend, "info") else None  # read before close frees it
        frames_info = self.ring.info()
        notes = self._close(failed=p.error is not None)
        telemetry, files = self._telemetry_summary(idle_w)
        notes += files
        summary = {
            **p.metrics.summary(),
            "backend": self.backend.name,
            "device": self.backend.device,
            "dla_core": getattr(self.backend, "dla_core", None),
            "preprocess": cfg.preprocess,
            "engine": engine_info,
            "model_input": {"shape": list(self.spec.input_shape), **self.spec.to_dict()},
            "source": self.source.info(),
            "frame_buffers": frames_info,
            "telemetry": telemetry,
            "outputs": notes,
            "mqtt": next((s.stats() for s in self.sinks if s.name == "mqtt"), None),
            "error": str(p.error or self.close_error) if (p.error or self.close_error) else None,
        }
        if self.source.live and "end_to_end" in summary["latency_ms"]:
            summary["capture_to_result_ms"] = summary["latency_ms"]["end_to_end"]  # a camera's: what a viewer waits
        return summary, p.error or self.close_error

    def _start_telemetry(self) -> Optional[float]:
        """Start sampling; with an idle baseline, measure idle power before the first frame."""
        tel = self.cfg.telemetry
        self.sampler.start()
        sampler = self.sampler
        # One short line; why each backend was skipped can run to hundreds of characters, so it goes to debug.
        tried = f" ({', '.join(sampler.skipped)} not available here)" if sampler.skipped else ""
        log.info("telemetry: %s%s", sampler.backend_name, tried)
        log.debug("telemetry: %s", sampler.choice_reason)
        if tel.idle_baseline_s <= 0:
            return None
        print(f"edge-run: measuring idle power for {tel.idle_baseline_s:g} s", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        if self.stop_event.wait(tel.idle_baseline_s):  # SIGTERM ends the baseline at once
            return None
        from edge.telemetry import mean_power_w

        return mean_power_w(self.sampler.samples(), t0, time.monotonic())

    def _telemetry_summary(self, idle_w: Optional[float]) -> Tuple[dict, list]:
        from edge.telemetry import energy_summary

        sampler, cfg = self.sampler, self.cfg
        summary = energy_summary(sampler.samples(), list(self.pipeline.metrics.intervals), idle_w)
        summary["backend"] = sampler.backend_name
        summary["choice"] = sampler.choice_reason
        folder = cfg.telemetry.dir or (str(Path(cfg.sinks.results).parent) if cfg.sinks.results else None)
        if folder is None or sampler.backend_name == "none":
            return summary, []
        written = sampler.write(cfg.resolve_path(folder), extra_meta={"idle_baseline_w": idle_w})
        return summary, [f"telemetry: {len(sampler.samples())} samples -> {written['jsonl']}"]


def _open_sampler(cfg: Any) -> Any:
    from edge.telemetry import open_sampler

    tel = cfg.telemetry
    return open_sampler(
        tel.backend,
        tel.interval_s,
        sysfs_root=tel.sysfs_root,
        tegrastats_cmd=tel.tegrastats_cmd,
        gpu_index=tel.gpu_index,
        replay_path=str(cfg.resolve_path(tel.replay_path)) if tel.replay_path else None,
    )


def _install_signal_handlers(p: Any) -> dict:
    """First SIGINT/SIGTERM drains and stops; a second one aborts; once every frame is through (the outputs are being
    written) one more ends the command at once, as the guard's handlers do: the outputs not yet written are given
    up and the previous ones stay."""

    def handler(signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if p.abort_event.is_set():
            raise stop_exception(signum)
        if p.done.is_set():
            p.abort()  # nothing is in flight: what is left is writing the outputs, which the next signal gives up
            _tell(f"edge-run: {name}: every frame is through, writing the outputs (another signal ends at once)")
        elif not p.stop_event.is_set():
            _tell(f"edge-run: {name}: stopping capture, draining the pipeline")
            p.stop()
        else:
            _tell("edge-run: second signal, aborting without draining")
            p.abort()

    return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, *STOP_SIGNALS)}


def _tell(line: str) -> None:
    """A line on stderr that may be gone (SIGHUP: the terminal closed): the drain must go on without it."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def fit_model(cfg: Any, backend: Any) -> Tuple[Any, Any, Any]:
    """(image input, preprocessing, decoder) for the model a backend loaded: the config's keys, the rest from the
    model's tensors and metadata."""
    meta = getattr(backend, "model_metadata", None)
    tensor = pick_input(cfg, backend.inputs)
    spec = preprocess_spec(cfg, tensor, meta)
    return tensor, spec, create_postprocessor(cfg, backend.outputs, spec, meta)


def _trial_frame(backend: Any, spec: Any, input_name: str, post: Any) -> None:
    """One grey frame through preprocess, infer and postprocess, as frame one of a run would go: a dtype, layout
    or task that does not fit the model fails here, at check time, instead of on the camera."""
    import numpy as np

    frame = np.full((480, 640, 3), 114, np.uint8)
    stage = "preprocess"
    try:
        tensor, transform = Preprocessor(spec)(frame)
        stage = "infer"
        if hasattr(backend, "submit"):
            outputs = backend.collect(backend.submit({input_name: tensor}))
        else:
            outputs = backend.infer({input_name: tensor})
        stage = "postprocess"
        post(outputs, transform)
    except EdgeError as exc:
        raise EdgeError(f"the config does not fit the model: a test frame fails in {stage}: {exc}") from None
    except Exception as exc:  # whatever the runtime raises for a wrong dtype, shape or task
        keys = {"preprocess": "input.size, input.layout and input.dtype", "infer": "input.dtype, input.layout and input.size"}
        raise EdgeError(
            f"the config does not fit the model: a test frame fails in {stage}: {type(exc).__name__}: "
            f"{one_line(exc, 300)}; check {keys.get(stage, 'task.type and its keys')} against the model"
        ) from None


def check(cfg: Any) -> int:
    """`edge-run --check`: open the model or engine as a run would (for TensorRT: the manifest gate, then
    deserialisation on the chosen DLA core) and check the config against its tensors; no source, no sinks.

    Where no TensorRT exists and the machine is not a Jetson (a build host, CI, a deploy machine), an engine is
    checked as an artefact: manifest, size and sha256, and the config against the tensors the manifest lists."""
    if cfg.backend == "tensorrt" and not available("tensorrt") and read_l4t() is None:
        return _check_artefact(cfg)
    backend = create_backend(cfg)
    try:
        tensor, spec, post = fit_model(cfg, backend)
        _trial_frame(backend, spec, tensor.name, post)
        dla = getattr(backend, "dla_core", None)
        where = f"{backend.name} on {backend.device}" + (f", DLA core {dla}" if dla is not None else "")
        outputs = ", ".join(f"{t.name} {list(t.shape)}" for t in backend.outputs)
        print(
            f"edge-run: check ok: {where}; input {tensor.name} {list(spec.input_shape)} {spec.dtype}; outputs {outputs}; "
            f"decoder {post.head_info}"
        )
    finally:
        backend.close()
    return 0


def _check_artefact(cfg: Any) -> int:
    import numpy as np

    from edge.manifest import manifest_path
    from edge.metadata import read as read_metadata
    from edge.runtime.engines import TensorInfo
    from edge.runtime.engines.engine_file import split
    from edge.runtime.engines.gate import built_dla_core, verify_manifest
    from edge.runtime.engines.model import engine_path

    path = engine_path(cfg)
    offset, header = split(path)
    if header is not None and not manifest_path(path).is_file():
        meta = read_metadata(f"engine '{path}'", header)
        print(
            f"edge-run: check ok (artefact only): engine {path} is an Ultralytics export "
            f"({', '.join(describe(meta)) or 'no metadata edge reads'}; the plan starts at byte {offset}); it has no edge "
            "manifest, so its build (TensorRT, GPU, JetPack, DLA core) and its tensors can only be checked where TensorRT "
            "deserialises it: run edge-run --check on the Jetson"
        )
        return 0
    manifest = verify_manifest(path)
    dla = built_dla_core(path, manifest, cfg.dla_core)
    io = manifest["io"]
    try:
        inputs = [TensorInfo(t["name"], tuple(t["shape"]), np.dtype(t["dtype"])) for t in io if t["mode"] == "input"]
        outputs = [TensorInfo(t["name"], tuple(t["shape"]), np.dtype(t["dtype"])) for t in io if t["mode"] == "output"]
    except (KeyError, TypeError, ValueError) as exc:
        raise EdgeError(
            f"manifest of '{path}': key 'io' lists a tensor edge cannot read ({exc}); rebuild with edge-build"
        ) from None
    tensors = ""
    if inputs:
        tensor = pick_input(cfg, inputs)
        raw = manifest.get("model_metadata")
        meta = read_metadata(f"manifest of '{path}'", raw) if isinstance(raw, dict) else None
        spec = preprocess_spec(cfg, tensor, meta)
        create_postprocessor(cfg, outputs, spec, meta)
        tensors = f"; the config fits its tensors (input {tensor.name} {list(spec.input_shape)} {spec.dtype})"
    dev = manifest["device"]
    built = f"TensorRT {manifest['tensorrt'].get('version')}"
    built += f", compute capability {dev['compute_capability']}" if dev.get("compute_capability") else ""
    built += f", JetPack {dev['jetpack']}" if dev.get("jetpack") else ""
    built += f", DLA core {dla}" if dla is not None else ""
    print(
        f"edge-run: check ok (artefact only): engine {path} matches its manifest ({manifest['engine'].get('size')} bytes, "
        f"sha256 {manifest['engine']['sha256'][:12]}…), built for {built}{tensors}; not deserialised: this machine has no "
        "TensorRT and is not a Jetson"
    )
    return 0


def log_metadata(backend: Any) -> None:
    """Which settings came from the model's own (Ultralytics) metadata, in one log line."""
    taken = describe(getattr(backend, "model_metadata", None) or NONE)
    if taken:
        log.info("from the model's Ultralytics metadata: %s", ", ".join(taken))


def write_summary(cfg: Any, summary: dict) -> None:
    """--summary-json, once the run is over: a folder that went away meanwhile is a run that failed (exit 1), not
    bad input (exit 2), which was checked before the first frame."""
    if not cfg.sinks.summary_json:
        return
    try:
        write_json(cfg.resolve_path(cfg.sinks.summary_json), redact_data(summary))
    except RunFailed:
        raise
    except EdgeError as exc:
        raise RunFailed(str(exc)) from None


def run(cfg: Any) -> int:
    """Run a config end to end: summary on stdout (and --summary-json), exit status."""
    runner = Runner(cfg)
    log.info(
        "backend %s on %s; input %s; decoder %s; source %s",
        runner.backend.name,
        runner.backend.device,
        runner.spec.input_shape,
        runner.post.head_info,
        runner.source.description,
    )
    log_metadata(runner.backend)
    summary, error = runner.run()  # --summary-json is written: a stdout that fails must not cost the summary file
    emit(format_summary(summary))
    ran = f"backend {summary['backend']} ({summary['device']})"
    if summary["dla_core"] is not None:
        ran += f"; DLA core {summary['dla_core']}"
    if summary["preprocess"] == "gpu":
        ran += "; preprocess on the GPU"
    emit(redact(f"{ran}; " + "; ".join(summary["outputs"] or ["no sinks"])))  # outputs name URLs and paths
    engine = summary["engine"]
    if engine is not None:
        ms = engine["gpu_ms_mean"]
        per_frame = ", ".join(f"{k} {v:.2f}" for k, v in ms.items() if v is not None)
        emit(
            f"engine {engine['engine']}: TensorRT {engine['tensorrt']} on {engine['gpu']}, {engine['buffer_sets']} buffer sets"
            + (f"; GPU ms per frame: {per_frame}" if per_frame else "")
        )
    tel = summary["telemetry"]
    if tel["power_w"]["mean"] is not None:
        per_frame = tel["energy_mj_per_frame"]
        emit(
            f"power {tel['power_w']['mean']:.2f} W mean, {tel['power_w']['max']:.2f} W max"
            + (f", {per_frame:.1f} mJ/frame" if per_frame is not None else "")
            + f" ({tel['backend']}, {tel['total_rule']})"
        )
    else:
        emit(f"telemetry: {tel['backend']} (no power readings)")
    if error is not None:
        raise error
    return 0
