"""The run's servers: Prometheus metrics (``/metrics`` and/or a node_exporter textfile) and the live view.

servers = Servers(cfg)        # binds the ports first: a taken port fails in one line before the engine loads
sinks += servers.sinks        # the live view's sink
servers.attach(Live(...))     # once the pipeline exists; the endpoints read it from then on
pipeline.on_frame             # -> servers.frame_done(packet): the latency histograms
servers.close()               # stops every server thread (about a second at most), writes the final textfile
"""

from __future__ import annotations

import logging
import time
from typing import Any, List

from edge.outputs import check_outputs
from edge.runtime.outputs.access import Access, read_secret
from edge.runtime.outputs.httpserve import Handler, HttpServer
from edge.runtime.status.live import Live

log = logging.getLogger("edge.serve")


class Servers:
    def __init__(self, cfg: Any) -> None:
        self.metrics: Any = None
        self.view: Any = None
        self.sinks: List[Any] = []
        self.urls: List[str] = []
        self._http: List[HttpServer] = []
        try:
            self._open(cfg)
        except BaseException:
            self.close()
            raise

    def _open(self, cfg: Any) -> None:
        m, v = cfg.metrics, cfg.view
        if m.port is not None or m.textfile:
            from edge.runtime.outputs.metrics_http import MetricsExporter

            textfile = str(cfg.resolve_path(m.textfile)) if m.textfile else None
            check_outputs({"metrics.textfile": textfile})
            self.metrics = MetricsExporter(m, textfile)
            if m.port is not None:
                routes = {"/metrics": self.metrics.serve_metrics, "/": _index("/metrics")}
                access = _access(cfg, "metrics", m)
                # Prometheus scrapes every 15 s or so: a flood beyond 10 a second gets 429 before any encoding
                self._http.append(HttpServer("metrics.port", m.address, m.port, routes, access=access, rate_per_s=10.0))
                _say_if_open("metrics", m, access)
                self.urls.append(f"metrics on {self._http[-1].url}/metrics")
            if textfile:
                self.urls.append(f"metrics -> {textfile} every {m.textfile_interval_s:g} s")
        if v.port is not None:
            from edge.runtime.outputs.view import LiveView, ViewSink

            self.view = LiveView(v)
            routes = {
                "/": self.view.page,
                "/stream.mjpg": self.view.stream,
                "/frame.jpg": self.view.snapshot,
                "/stats.json": self.view.stats,
            }
            access = _access(cfg, "view", v)
            server = HttpServer("view.port", v.address, v.port, routes, max_connections=v.max_viewers + 4, access=access)
            _say_if_open("view", v, access)
            self._http.append(server)
            self.sinks.append(ViewSink(self.view, server.url))
            self.urls.append(f"live view on {server.url}/")

    @property
    def observing(self) -> bool:
        """True when frame_done needs every frame (the latency histograms)."""
        return self.metrics is not None

    def attach(self, live: Live) -> None:
        if self.view is not None:
            self.view.live = live
        if self.metrics is not None:
            self.metrics.attach(live)
        if self.urls:
            log.info("%s", "; ".join(self.urls))

    def frame_done(self, packet: Any) -> None:
        if self.metrics is not None:
            self.metrics.frame_done(packet.timings, time.monotonic() - packet.frame.t_capture)

    def close(self) -> None:
        if self.view is not None:
            self.view.close()  # wakes the open streams at once
        for server in self._http:
            server.close()
        if self.metrics is not None:
            self.metrics.close()  # after the HTTP side: the final textfile holds the final counts
        self._http, self.view, self.metrics = [], None, None


def _access(cfg: Any, section: str, keys: Any) -> Access:
    secret = read_secret(f"{section}.auth_file", cfg.resolve_path(keys.auth_file)) if keys.auth_file else None
    return Access(keys.allowed_hosts, secret)


def _say_if_open(section: str, keys: Any, access: Access) -> None:
    """Once the port is bound: a server without a secret on more than loopback is worth a line."""
    if not access.needs_secret and keys.address not in ("127.0.0.1", "::1", "localhost"):
        what = "camera's frames" if section == "view" else "metrics"
        log.warning(
            "%s.address %s: anyone who can reach this machine can read the %s; set %s.auth_file (docs/fleet.md#threat-model)",
            section,
            keys.address,
            what,
            section,
        )


def _index(target: str) -> Any:
    def route(h: Handler) -> None:
        h.reply(200, f'<a href="{target}">{target}</a>\n'.encode(), "text/html")

    return route
