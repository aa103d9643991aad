"""What a running pipeline shows the outside while it runs: who it is (``run_info``) and how it is doing (``Live``).

The MQTT status message, Prometheus' ``edge_info`` and the live view's numbers all come from here, so they agree.
Every read returns at once: nothing here waits for the pipeline, the sampler or the network.
"""

from __future__ import annotations

import platform
import socket
from typing import Any, Dict, Optional

import edge
from edge.lazy import require
from edge.manifest import read_l4t, read_manifest, sha256_file

SHORT_SHA = 12  # hex digits of a sha256 in labels and status messages


def run_info(cfg: Any, backend: Any) -> Dict[str, str]:
    """Model, hashes, backend, device and versions as strings (they become Prometheus labels and MQTT fields)."""
    from edge.runtime.engines.model import engine_path, model_path

    info = {"model": "", "model_sha256": "", "engine_sha256": "", "backend": backend.name, "device": str(backend.device)}
    dla = getattr(backend, "dla_core", None)
    info["dla_core"] = "" if dla is None else str(dla)
    if backend.name == "tensorrt":
        engine = engine_path(cfg)
        info["model"] = engine.name
        # The manifest already holds the engine's hash; hashing a 100 MB engine again would slow every start.
        manifest = read_manifest(engine)
        info["engine_sha256"] = str(manifest["engine"].get("sha256", ""))[:SHORT_SHA]
        info["model_sha256"] = str((manifest.get("source") or {}).get("sha256") or "")[:SHORT_SHA]
        info["runtime_version"] = str(backend.info()["tensorrt"])
    else:
        path = model_path(cfg)
        info["model"] = cfg.model.asset or path.name
        info["model_sha256"] = sha256_file(path)[:SHORT_SHA]
        info["runtime_version"] = require("onnxruntime", "the ONNX Runtime backend").__version__
    l4t = read_l4t() or {}
    info.update(
        edge_version=edge.__version__,
        python_version=platform.python_version(),
        l4t=l4t.get("l4t", ""),
        jetpack=l4t.get("jetpack", ""),
        host=socket.gethostname(),
    )
    return info


class Live:
    """Read-only access to a running pipeline's numbers for the exporters (metrics, live view, MQTT status)."""

    def __init__(self, metrics: Any, sampler: Any, source: Any, sinks: list, info: Dict[str, str]) -> None:
        self.metrics, self.sampler, self.source, self.sinks, self.info = metrics, sampler, source, sinks, info
        self.pool: Any = None  # a pool run's Pool: per source and per engine numbers

    def sink(self, name: str) -> Optional[Any]:
        return next((s for s in self.sinks if s.name == name), None)

    def stats(self, window_s: float = 5.0) -> Dict[str, Any]:
        """FPS and latency over the last ``window_s`` seconds, the newest power reading, counters; None = not known."""
        fps, latency_s = self.metrics.recent(window_s)
        sample = self.sampler.latest() if self.sampler is not None else None
        power_w = sample.total_mw / 1000.0 if sample is not None and sample.total_mw is not None else None
        mqtt = self.sink("mqtt")
        return {
            "fps": round(fps, 2),
            "latency_ms": round(latency_s * 1e3, 2) if latency_s is not None else None,
            "power_w": round(power_w, 3) if power_w is not None else None,
            "energy_j_per_frame": round(power_w / fps, 4) if power_w is not None and fps > 0 else None,
            "frames": self.metrics.frames,
            "dropped": self.metrics.dropped,
            "reconnects": getattr(self.source, "reconnects", 0),
            "mqtt_dropped": mqtt.dropped if mqtt is not None else None,
            "model": self.info.get("model", ""),
            "backend": self.info.get("backend", ""),
        }
