"""Where results go: files, video, a window, MQTT, Prometheus metrics, the live view and the systemd notifier.

``open_sinks`` sits here, above ``sinks`` and ``mqtt``, so the MQTT sink can be a ``Sink`` without a circle.
"""

from __future__ import annotations

from typing import Any, List, Optional

from edge.errors import EdgeError
from edge.runtime.outputs.mqtt import MqttSink
from edge.runtime.outputs.sinks import DisplaySink, JsonlSink, Sink, VideoSink


def open_sinks(cfg: Any, fps: float, on_quit: Any, info: Optional[dict] = None) -> List[Sink]:
    """The sinks a SinksConfig asks for; none at all is the null sink (results are computed and dropped).
    ``info`` (``edge.runtime.status.live.run_info``) goes into the MQTT status message."""
    sinks: List[Sink] = []
    try:
        if cfg.mqtt.url:  # first: a refused broker fails before any file is started
            sinks.append(MqttSink(cfg.mqtt, info or {}))
        if cfg.results:
            sinks.append(JsonlSink(cfg.results))
        if cfg.video:
            sinks.append(VideoSink(cfg.video, fps))
        if cfg.display:
            sinks.append(DisplaySink("edge", on_quit))
    except EdgeError:
        for s in sinks:
            s.close(failed=True)
        raise
    return sinks
