"""NVML (``nvidia-ml-py``, import name ``pynvml``) for discrete NVIDIA GPUs.

Power is ``nvmlDeviceGetPowerUsage`` in mW; on Ampere and newer it is averaged over about 1 s, so the energy
summary prefers the ``nvmlDeviceGetTotalEnergyConsumption`` counter (mJ, Volta and newer) stored as
``Sample.energy_mj``. NVML initialises on Jetson Orin but answers NotSupported to every query, so ``open()``
only succeeds when a power reading really works. ``nvml`` is injectable for tests (a module-like object).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Optional

from edge.lazy import require
from edge.telemetry.backend import Backend, TelemetryUnavailable
from edge.telemetry.sample import Sample


class NvmlBackend(Backend):
    name = "nvml"

    def __init__(self, index: int = 0, nvml: Any = None) -> None:
        self.index = index
        self._nvml = nvml
        self._handle: Any = None
        self._device_name: Optional[str] = None

    def open(self) -> None:
        nv = self._nvml if self._nvml is not None else require("pynvml", "NVML telemetry")
        self._nvml = nv
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise TelemetryUnavailable(f"nvml: cannot initialise ({exc}); no NVIDIA driver here") from None
        try:
            self._handle = nv.nvmlDeviceGetHandleByIndex(self.index)
            name = nv.nvmlDeviceGetName(self._handle)
            self._device_name = name.decode() if isinstance(name, bytes) else str(name)
            nv.nvmlDeviceGetPowerUsage(self._handle)
        except nv.NVMLError as exc:
            nv.nvmlShutdown()
            raise TelemetryUnavailable(
                f"nvml: GPU {self.index} gives no power reading ({exc}); on a Jetson use jtop, tegrastats or sysfs"
            ) from None

    def _query(self, fn: Callable[..., Any], *args: Any) -> Any:
        """One NVML query; None when this GPU does not support it (each field is optional)."""
        try:
            return fn(self._handle, *args)
        except self._nvml.NVMLError:
            return None

    def read(self) -> Optional[Sample]:
        nv = self._nvml
        s = Sample(t_mono=time.monotonic(), t_wall=time.time(), backend=self.name)
        power = self._query(nv.nvmlDeviceGetPowerUsage)
        if power is not None:
            s.power_mw["GPU"] = float(power)
            s.total_mw, s.total_rule = float(power), "nvml:GPU"
        energy = self._query(nv.nvmlDeviceGetTotalEnergyConsumption)
        s.energy_mj = float(energy) if energy is not None else None
        util = self._query(nv.nvmlDeviceGetUtilizationRates)
        if util is not None:
            s.gpu_util_pct = float(util.gpu)
            s.extras["mem_util_pct"] = float(util.memory)
        clock = self._query(nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_GRAPHICS)
        s.gpu_freq_mhz = float(clock) if clock is not None else None
        mem_clock = self._query(nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_MEM)
        if mem_clock is not None:
            s.extras["mem_freq_mhz"] = float(mem_clock)
        temp = self._query(nv.nvmlDeviceGetTemperature, nv.NVML_TEMPERATURE_GPU)
        if temp is not None:
            s.temps_c["gpu"] = float(temp)
        mem = self._query(nv.nvmlDeviceGetMemoryInfo)
        if mem is not None:
            s.extras["gpu_mem_used_mb"] = mem.used / 2**20
            s.extras["gpu_mem_total_mb"] = mem.total / 2**20
        return s

    def close(self) -> None:
        if self._handle is not None:
            self._handle = None
            self._nvml.nvmlShutdown()

    def meta(self) -> Dict[str, Any]:
        return {"gpu_index": self.index, "gpu_name": self._device_name}
