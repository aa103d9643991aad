"""jtop (jetson-stats) as a backend: a client of the root ``jtop.service`` over ``/run/jtop.sock``.

Quirks handled here:
- ``start()`` raises ``JtopException`` when the service is not running or the user is not in group ``jtop``
  (every non-Jetson machine); ``open()`` turns that into ``TelemetryUnavailable`` so ``auto`` moves on. Its
  advice (``sudo jtop --install-service``) is passed on only on a Jetson: the service cannot run anywhere else.
- The service period is shared: the first client sets it. ``meta()`` records both ``interval`` (real) and the
  interval asked for, since an open jtop GUI can leave us at 0.5-1 s.
- 4.x's context manager does not call ``close()``, so this backend never uses ``with`` and always closes.
- Power is read from ``power`` (instantaneous ``power`` field, never the α=½-smoothed ``avg``), not from
  ``stats``, whose rail keys collided before 4.2.10. ``power['tot']`` is jtop's input rail when it names one,
  else we apply our own total rule to the rails.
- ``engine`` holds DLA clocks and on/off only; there is no DLA utilisation.

Updates arrive on jtop's own thread through ``attach()``; ``read()`` returns the newest one.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable, Dict, Optional

from edge.errors import RunFailed
from edge.lazy import require
from edge.manifest import read_l4t
from edge.telemetry.backend import Backend, TelemetryUnavailable
from edge.telemetry.sample import Sample, total_power

_OFFLINE_C = -256.0


def _default_factory(interval_s: float) -> Any:
    return require("jtop", "jtop telemetry").jtop(interval=interval_s)


def sample_from_jtop(jetson: Any, backend: str = "jtop") -> Sample:
    """Map a jtop client's properties (4.x/7.x shapes) onto a Sample."""
    s = Sample(t_mono=time.monotonic(), t_wall=time.time(), backend=backend)
    power = jetson.power or {}
    for name, rail in (power.get("rail") or {}).items():
        if not rail.get("online", True):
            continue
        s.power_mw[name] = float(rail["power"])
        if "volt" in rail:
            s.volt_mv[name] = float(rail["volt"])
        if "curr" in rail:
            s.curr_ma[name] = float(rail["curr"])
    tot = power.get("tot") or {}
    if "name" in tot:  # jtop took an input rail out of 'rail' and made it the total
        s.power_mw[tot["name"]] = float(tot["power"])
        s.total_mw, s.total_rule = float(tot["power"]), tot["name"]
    else:
        s.total_mw, s.total_rule = total_power(s.power_mw)

    loads = [gpu["status"]["load"] for gpu in (jetson.gpu or {}).values() if "load" in gpu.get("status", {})]
    freqs = [gpu["freq"]["cur"] for gpu in (jetson.gpu or {}).values() if "cur" in gpu.get("freq", {})]
    s.gpu_util_pct = float(loads[0]) if loads else None
    s.gpu_freq_mhz = freqs[0] / 1000.0 if freqs else None  # kHz

    for group, clocks in (jetson.engine or {}).items():
        if group.startswith("DLA"):
            online = any(c.get("online") for c in clocks.values())
            cur = [c["cur"] for c in clocks.values() if c.get("online") and "cur" in c]
            s.dla[group] = {"online": online, "freq_mhz": max(cur) / 1000.0 if cur else None}

    for name, sensor in (jetson.temperature or {}).items():
        temp = sensor.get("temp")
        usable = sensor.get("online", True) and temp is not None and temp > _OFFLINE_C
        s.temps_c[name] = float(temp) if usable else None

    memory = jetson.memory or {}
    ram = memory.get("RAM") or {}
    if "tot" in ram:
        s.ram_total_mb = ram["tot"] / 1024.0  # KB
        s.ram_used_mb = ram.get("used", 0) / 1024.0
    emc = memory.get("EMC") or {}
    if emc.get("online", True) and "val" in emc:
        s.emc_util_pct = float(emc["val"])
        s.emc_freq_mhz = emc["cur"] / 1000.0 if "cur" in emc else None

    for core in (jetson.cpu or {}).get("cpu", []):
        busy = None
        if core.get("online") and "idle" in core:
            busy = 100.0 - float(core["idle"])
        s.cpu_util_pct.append(busy)
        cur = (core.get("freq") or {}).get("cur")
        s.cpu_freq_mhz.append(cur / 1000.0 if core.get("online") and cur else None)
    return s


class JtopBackend(Backend):
    name = "jtop"

    def __init__(
        self,
        interval_s: float = 0.1,
        factory: Optional[Callable[[float], Any]] = None,
        l4t_file: str = "/etc/nv_tegra_release",
    ) -> None:
        self.interval_s = interval_s
        self._factory = factory or _default_factory
        self._l4t_file = l4t_file
        self._jetson: Any = None
        self._latest: Optional[Sample] = None
        self._lock = threading.Lock()

    def open(self) -> None:
        jetson = self._factory(self.interval_s)
        jetson.attach(self._on_update)
        try:
            jetson.start()
        except Exception as exc:  # JtopException and the socket errors it does not wrap
            message = " ".join(str(getattr(exc, "message", exc)).split())
            if read_l4t(self._l4t_file) is None:
                message = f"not a Jetson (no {self._l4t_file}): jtop's service runs on a Jetson with JetPack"
            raise TelemetryUnavailable(f"jtop: {message}") from None
        self._jetson = jetson

    def _on_update(self, jetson: Any) -> None:
        sample = sample_from_jtop(jetson, self.name)
        with self._lock:
            self._latest = sample

    def read(self) -> Optional[Sample]:
        # spin=True: do not wait for the next update; raises what jtop's reader thread stored (lost connection).
        if not self._jetson.ok(spin=True):
            raise RunFailed("jtop stopped delivering samples (the service closed the connection)")
        with self._lock:
            sample, self._latest = self._latest, None
        return sample

    def close(self) -> None:
        if self._jetson is not None:
            self._jetson.close()
            self._jetson = None

    def meta(self) -> Dict[str, Any]:
        if self._jetson is None:
            return {"interval_requested_s": self.interval_s}
        jtop = sys.modules.get("jtop")  # already imported by the factory when it is the real client
        return {
            "jetson_stats_version": getattr(jtop, "__version__", None),
            "interval_requested_s": self.interval_s,
            "interval_service_s": getattr(self._jetson, "interval", None),
        }
