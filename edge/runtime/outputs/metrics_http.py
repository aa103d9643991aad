"""Prometheus metrics for a running camera (the official ``prometheus_client``): ``/metrics`` over HTTP and/or a
node_exporter textfile.

Every series carries a ``camera`` label (``metrics.camera``, else ``$EDGE_INSTANCE``, which the systemd unit sets to
the instance name, else ``default``), so two cameras on one Jetson stay apart in one textfile folder. Counters and
gauges are read from the pipeline, the telemetry sampler and the sinks when Prometheus scrapes (nothing is copied
per frame); only the per-stage latency histograms are fed per frame. A value that is not measured here (no power
rails off a Jetson, no DLA) is left out rather than reported as 0.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Iterator, Optional

from edge.errors import EdgeError
from edge.lazy import require
from edge.outputs import write_atomic
from edge.runtime.outputs.httpserve import Handler
from edge.runtime.status.live import Live
from edge.runtime.status.metrics import STAGES

log = logging.getLogger("edge.metrics")

# Seconds: from sub-millisecond stages on an Orin up to a stalled multi-second frame.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.033, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
INFO_LABELS = (
    "model", "model_sha256", "engine_sha256", "backend", "device", "dla_core",
    "runtime_version", "edge_version", "python_version", "l4t", "jetpack",
)  # fmt: skip
FPS_WINDOW_S = 5.0
TEXTFILE_MODE = 0o644  # node_exporter runs as its own user and must read the file


class MetricsExporter:
    """The registry, the per-frame histogram and the scrape-time collector; ``attach`` gives it the run to read."""

    def __init__(self, cfg: Any, textfile: Optional[str]) -> None:
        pc = require("prometheus_client", "Prometheus metrics (metrics.port, metrics.textfile)")
        pc.disable_created_metrics()  # *_created series only add noise to a dashboard
        self._pc = pc
        self.camera = cfg.camera or os.environ.get("EDGE_INSTANCE") or "default"
        self.registry = pc.CollectorRegistry(auto_describe=True)
        hist = pc.Histogram(
            "edge_stage_latency_seconds",
            "Seconds per frame in each pipeline stage, and from capture to the sinks (end_to_end)",
            ["camera", "stage"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self._stages = {s: hist.labels(self.camera, s) for s in (*STAGES, "end_to_end")}
        self.registry.register(_Collector(self))
        self.live: Optional[Live] = None
        self.textfile = textfile
        self._stop = threading.Event()
        self._textfile_thread: Optional[threading.Thread] = None
        self._interval = cfg.textfile_interval_s
        self._last_error: Optional[str] = None

    def attach(self, live: Live) -> None:
        self.live = live
        if self.textfile:
            self.write_textfile()  # the file exists from the start, not one interval later
            self._textfile_thread = threading.Thread(target=self._textfile_loop, name="metrics-textfile", daemon=True)
            self._textfile_thread.start()

    def frame_done(self, timings: dict, end_to_end_s: float) -> None:
        for stage, seconds in timings.items():
            child = self._stages.get(stage)
            if child is not None:
                child.observe(seconds)
        self._stages["end_to_end"].observe(end_to_end_s)

    # -- HTTP ---------------------------------------------------------------
    def serve_metrics(self, h: Handler) -> None:
        """GET /metrics: the text format Prometheus asked for (Accept header), as prometheus_client encodes it."""
        encoder, content_type = self._pc.exposition.choose_encoder(h.headers.get("Accept"))
        h.reply(200, encoder(self.registry), content_type)

    # -- node_exporter textfile ---------------------------------------------
    def write_textfile(self) -> None:
        try:
            write_atomic(self.textfile, self._pc.generate_latest(self.registry), mode=TEXTFILE_MODE)
            self._last_error = None
        except (EdgeError, OSError) as exc:  # a full disk costs the textfile, never the camera
            if str(exc) != self._last_error:
                log.warning("metrics.textfile %s: %s; retrying every %g s", self.textfile, exc, self._interval)
            self._last_error = str(exc)

    def _textfile_loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.write_textfile()

    def close(self) -> None:
        self._stop.set()
        if self._textfile_thread is not None:
            self._textfile_thread.join(timeout=5.0)
            self.write_textfile()  # the final counts


class _Collector:
    """The series read at scrape time."""

    def __init__(self, exporter: MetricsExporter) -> None:
        self.x = exporter

    def describe(self) -> list:
        return []  # families vary with the hardware (rails, sensors); nothing to check at registration

    def collect(self) -> Iterator[Any]:
        live = self.x.live
        if live is None:
            return
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        cam = self.x.camera

        def gauge(name: str, doc: str, value: Optional[float]) -> Optional[Any]:
            if value is None:
                return None
            g = GaugeMetricFamily(name, doc, labels=["camera"])
            g.add_metric([cam], float(value))
            return g

        def labelled(name: str, doc: str, label: str, values: dict, scale: float = 1.0) -> Optional[Any]:
            known = {k: v for k, v in values.items() if v is not None}
            if not known:
                return None
            g = GaugeMetricFamily(name, doc, labels=["camera", label])
            for k, v in sorted(known.items()):
                g.add_metric([cam, str(k)], float(v) * scale)
            return g

        def counter(name: str, doc: str, value: float) -> Any:
            c = CounterMetricFamily(name, doc, labels=["camera"])
            c.add_metric([cam], float(value))
            return c

        info = GaugeMetricFamily(
            "edge_info", "What runs here (always 1): model, hashes, backend, versions", labels=["camera", *INFO_LABELS]
        )
        info.add_metric([cam, *(live.info.get(k, "") for k in INFO_LABELS)], 1.0)
        m = live.metrics
        fps, _ = m.recent(FPS_WINDOW_S)
        sample = live.sampler.latest() if live.sampler is not None else None
        power_w = sample.total_mw / 1e3 if sample is not None and sample.total_mw is not None else None
        families = [
            info,
            counter("edge_frames_total", "Frames that went through every stage to the sinks", m.frames),
            counter("edge_dropped_frames_total", "Frames a live source dropped because the pipeline was behind", m.dropped),
            gauge("edge_fps", f"Frames per second over the last {FPS_WINDOW_S:g} s", fps),
            counter(
                "edge_source_reconnects_total",
                "Times the source (an RTSP/HTTP stream) was reconnected",
                getattr(live.source, "reconnects", 0),
            ),
        ]
        if sample is not None:
            dla = sample.dla or {}
            families += [
                labelled("edge_power_watts", "Power per rail (W), from the telemetry sampler", "rail", sample.power_mw, 1e-3),
                gauge("edge_power_total_watts", "Board power (W): the input rail where there is one, else the rails' sum", power_w),
                gauge("edge_energy_per_frame_joules", "Total power divided by FPS (J per frame)", power_w / fps if power_w is not None and fps > 0 else None),
                gauge("edge_gpu_utilization_ratio", "GPU load 0..1", sample.gpu_util_pct / 100 if sample.gpu_util_pct is not None else None),
                labelled("edge_dla_utilization_ratio", "DLA activity 0..1 (where the telemetry backend measures it)", "dla", {k: v.get("active_frac") for k, v in dla.items()}),
                labelled("edge_dla_online", "1 while the DLA core is powered", "dla", {k: (None if v.get("online") is None else int(bool(v["online"]))) for k, v in dla.items()}),
                labelled("edge_temperature_celsius", "Temperatures (degrees C)", "sensor", sample.temps_c),
            ]  # fmt: skip
        if live.pool is not None:
            families += _pool_families(cam, live.pool)
        mqtt = live.sink("mqtt")
        if mqtt is not None:
            st = mqtt.stats()
            families += [
                counter("edge_mqtt_messages_published_total", "MQTT results the broker took (QoS 1) or that were sent (QoS 0)", st["published"]),
                counter("edge_mqtt_messages_dropped_total", "MQTT results dropped: queue full while the broker was away, lost in flight", st["dropped"]),
                gauge("edge_mqtt_connected", "1 while connected to the MQTT broker", int(st["connected"])),
            ]  # fmt: skip
        yield from (f for f in families if f is not None)


def _pool_families(cam: str, pool: Any) -> list:
    """A pool run's series per source (label ``source``) and per engine (label ``engine``)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    def family(kind: Any, name: str, doc: str, label: str, values: dict) -> Any:
        f = kind(name, doc, labels=["camera", label])
        for key, value in values.items():
            if value is not None:
                f.add_metric([cam, key], float(value))
        return f

    lanes = {ln.name: ln.metrics for ln in pool.lanes}
    latency = {n: m.recent(FPS_WINDOW_S) for n, m in lanes.items()}
    with pool.lock():
        serves = dict(pool.assigner.assignment)
        service = dict(pool.assigner.service_s)
    engines = {e.name: e for e in pool.engines}
    where = GaugeMetricFamily(
        "edge_source_engine_info",
        "Which engine serves a source (always 1; spread sources say spread)",
        labels=["camera", "source", "engine"],
    )
    for ln in pool.lanes:
        where.add_metric([cam, ln.name, "spread" if ln.spread else serves.get(ln.name, "")], 1.0)
    return [
        family(CounterMetricFamily, "edge_source_frames_total", "Frames of a source delivered to its sinks", "source", {n: m.frames for n, m in lanes.items()}),
        family(CounterMetricFamily, "edge_source_dropped_frames_total", "Frames a live source dropped because its engine was behind", "source", {n: m.dropped for n, m in lanes.items()}),
        family(GaugeMetricFamily, "edge_source_fps", f"Frames per second of a source over the last {FPS_WINDOW_S:g} s", "source", {n: v[0] for n, v in latency.items()}),
        family(GaugeMetricFamily, "edge_source_latency_seconds", f"Mean capture-to-result seconds of a source over the last {FPS_WINDOW_S:g} s", "source", {n: v[1] for n, v in latency.items()}),
        family(CounterMetricFamily, "edge_engine_frames_total", "Frames an engine inferred", "engine", {n: e.frames for n, e in engines.items()}),
        family(CounterMetricFamily, "edge_engine_busy_seconds_total", "Seconds an engine spent inferring", "engine", {n: e.busy_s for n, e in engines.items()}),
        family(GaugeMetricFamily, "edge_engine_service_seconds", "An engine's recent seconds per frame (what the assignment uses)", "engine", service),
        where,
    ]  # fmt: skip
