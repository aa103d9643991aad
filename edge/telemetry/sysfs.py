"""Reads the kernel's files directly: INA3221 power rails, GPU load and clock, thermal zones, DLA power state.

- JetPack 5+ (mainline ``ina3221`` hwmon): every hwmon folder whose ``name`` is ``ina3221``; channel k = 1..3 has
  ``in{k}_label`` (rail), ``in{k}_input`` (mV) and ``curr{k}_input`` (mA), and P = V x I. The hwmon number changes
  between boots, so folders are found by ``name`` and rails by label, never by number. ``NC`` channels and the
  ``in7`` shunt-sum channel are not rails.
- JetPack 4 (``ina3221x`` IIO): ``rail_name_{n}``, ``in_voltage{n}_input``, ``in_current{n}_input``,
  ``in_power{n}_input`` (mW), n = 0..2.
- GPU: the devfreq node whose ``device/of_node/name`` names the integrated GPU: ``ga10b`` (Orin,
  ``17000000.ga10b``), ``gv11b`` (Xavier), ``gp10b`` (TX2), ``gb10b``, or one containing ``gpu`` (Nano's
  ``57000000.gpu``) (jetson-stats ``jtop/core/gpu.py``, KNOWN_GPU_DEVICE_NAMES); its ``cur_freq`` is the clock (Hz).
  The load is per-mille in ``devices/gpu.0/load``, ``devices/platform/gpu.0/load`` or that devfreq device's ``load``.
  Thermal zones give m°C; -256 °C means offline.
- DLA: the ``*.nvdla0``/``*.nvdla1`` devices under the host1x node, which NVIDIA's ``jetson_clocks`` looks for at
  ``platform/13e10000.host1x`` (T194, Xavier), ``platform/13e40000.host1x`` (T234, Orin on JetPack 5) and
  ``platform/bus@0/13e00000.host1x`` (the JetPack 6 kernel). No interface gives utilisation: ``power/runtime_status``
  (``active``/``suspended``) gives on/off, and the change of ``runtime_active_time`` (ms) over the read interval gives
  ``active_frac``, a proxy (unverified on a device).

``root`` is the sysfs mount point (``/sys``); tests point it at a fake tree.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from edge.telemetry.backend import Backend, TelemetryUnavailable
from edge.telemetry.sample import Sample, total_power

_HWMON_GLOBS = ("class/hwmon/hwmon*", "bus/i2c/drivers/ina3221/*/hwmon/hwmon*")
_IIO_GLOB = "bus/i2c/drivers/ina3221x/*/iio:device*"
_GPU_LOAD = ("devices/gpu.0/load", "devices/platform/gpu.0/load")
_GPU_NODE_NAMES = {"ga10b", "gv11b", "gp10b", "gb10b", "gpu"}
_HOST1X = ("devices/platform/13e10000.host1x", "devices/platform/13e40000.host1x", "devices/platform/bus@0/13e00000.host1x")
_NOT_RAILS = {"NC", ""}


def _read(path: Path) -> Optional[str]:
    """A sysfs value, or None when the file is missing or unreadable (a value this board does not have)."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _read_float(path: Path) -> Optional[float]:
    text = _read(path)
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


# A rail is (name, voltage file, current file, power file or None).
Rail = Tuple[str, Path, Path, Optional[Path]]


class SysfsBackend(Backend):
    name = "sysfs"

    def __init__(self, root: str | Path = "/sys") -> None:
        self.root = Path(root)
        self._rails: List[Rail] = []
        self._gpu_load: Optional[Path] = None
        self._gpu_freq: Optional[Path] = None
        self._zones: List[Tuple[str, Path]] = []
        self._dlas: List[Tuple[str, Path]] = []
        self._dla_prev: Dict[str, Tuple[float, float]] = {}  # name -> (t_mono, runtime_active_time ms)

    def open(self) -> None:
        self._rails = self._find_hwmon_rails() or self._find_iio_rails()
        if not self._rails:
            raise TelemetryUnavailable(
                f"no INA3221 power monitor under {self.root} (no hwmon named ina3221, no ina3221x device); "
                "this is not a Jetson module with power monitors"
            )
        unreadable = [name for name, volt, _, _ in self._rails if _read(volt) is None]
        if len(unreadable) == len(self._rails):
            raise TelemetryUnavailable(
                f"INA3221 rails found under {self.root} but none is readable ({', '.join(unreadable)}); check permissions"
            )
        gpu = self._find_gpu_devfreq()
        self._gpu_freq = gpu / "cur_freq" if gpu is not None else None
        loads = [self.root / g for g in _GPU_LOAD] + ([gpu / "device" / "load"] if gpu is not None else [])
        self._gpu_load = next((p for p in loads if p.exists()), None)
        for zone in sorted(self.root.glob("devices/virtual/thermal/thermal_zone*")):
            kind = _read(zone / "type")
            if kind:
                self._zones.append((kind.replace("_", "-").split("-")[0], zone / "temp"))
        seen_dla = set()
        for host1x in _HOST1X:
            for dev in sorted(self.root.glob(f"{host1x}/*.nvdla[0-9]")):
                name = "DLA" + dev.name[-1]
                if name not in seen_dla:
                    seen_dla.add(name)
                    self._dlas.append((name, dev / "power"))

    def _find_hwmon_rails(self) -> List[Rail]:
        seen = set()
        rails: List[Rail] = []
        for pattern in _HWMON_GLOBS:
            for hwmon in sorted(self.root.glob(pattern)):
                real = hwmon.resolve()
                if real in seen or _read(hwmon / "name") != "ina3221":
                    continue
                seen.add(real)
                for k in (1, 2, 3):
                    label = _read(hwmon / f"in{k}_label")
                    if label is not None and label not in _NOT_RAILS:
                        rails.append((label, hwmon / f"in{k}_input", hwmon / f"curr{k}_input", None))
        return rails

    def _find_iio_rails(self) -> List[Rail]:
        rails: List[Rail] = []
        for dev in sorted(self.root.glob(_IIO_GLOB)):
            for n in (0, 1, 2):
                label = _read(dev / f"rail_name_{n}")
                if label is not None and label not in _NOT_RAILS:
                    rails.append((label, dev / f"in_voltage{n}_input", dev / f"in_current{n}_input", dev / f"in_power{n}_input"))
        return rails

    def _find_gpu_devfreq(self) -> Optional[Path]:
        """The integrated GPU's devfreq node, by its device-tree node name (never by number or path)."""
        for node in sorted(self.root.glob("class/devfreq/*")):
            name = (_read(node / "device/of_node/name") or "").strip("\x00").lower()
            if name in _GPU_NODE_NAMES or "gpu" in name:
                return node
        return None

    def read(self) -> Optional[Sample]:
        now = time.monotonic()
        s = Sample(t_mono=now, t_wall=time.time(), backend=self.name)
        for name, volt_file, curr_file, power_file in self._rails:
            volt, curr = _read_float(volt_file), _read_float(curr_file)
            power = _read_float(power_file) if power_file is not None else None
            if volt is not None:
                s.volt_mv[name] = volt
            if curr is not None:
                s.curr_ma[name] = curr
            if power is None and volt is not None and curr is not None:
                power = volt * curr / 1000.0  # mV x mA = µW; /1000 -> mW
            if power is not None:
                s.power_mw[name] = power
        s.total_mw, s.total_rule = total_power(s.power_mw)
        if self._gpu_load is not None:
            load = _read_float(self._gpu_load)
            s.gpu_util_pct = load / 10.0 if load is not None else None
        if self._gpu_freq is not None:
            hz = _read_float(self._gpu_freq)
            s.gpu_freq_mhz = hz / 1e6 if hz is not None else None
        for name, temp_file in self._zones:
            milli = _read_float(temp_file)
            s.temps_c[name] = milli / 1000.0 if milli is not None and milli > -256000 else None
        for name, power_dir in self._dlas:
            s.dla[name] = self._dla_state(name, power_dir, now)
        return s

    def _dla_state(self, name: str, power_dir: Path, now: float) -> Dict[str, Any]:
        status = _read(power_dir / "runtime_status")
        state: Dict[str, Any] = {"online": None if status is None else status == "active", "freq_mhz": None}
        active_ms = _read_float(power_dir / "runtime_active_time")
        if active_ms is not None:
            prev = self._dla_prev.get(name)
            if prev is not None and now > prev[0]:
                state["active_frac"] = min(1.0, max(0.0, (active_ms - prev[1]) / 1000.0 / (now - prev[0])))
            self._dla_prev[name] = (now, active_ms)
        return state

    def meta(self) -> Dict[str, Any]:
        return {
            "root": str(self.root),
            "rails": {name: str(volt.parent) for name, volt, _, _ in self._rails},
            "gpu_load": str(self._gpu_load) if self._gpu_load else None,
            "gpu_freq": str(self._gpu_freq) if self._gpu_freq else None,
        }
