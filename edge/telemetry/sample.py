"""One telemetry reading (`Sample`) and the rule for what "total power" means on each board.

Units are part of the field names. A value a backend cannot measure is ``None`` (never 0), so a mean or a plot
never mixes "not measured" with "idle".
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

# Rails that measure the module's input: where one exists it *is* the total, and the other rails are inside it.
INPUT_RAILS = ("VDD_IN", "POM_5V_IN")


@dataclass
class Sample:
    t_mono: float  # time.monotonic() seconds, the clock the pipeline stamps frames with
    t_wall: float  # time.time() seconds, for humans
    backend: str
    power_mw: Dict[str, float] = field(default_factory=dict)  # rail -> instantaneous mW
    total_mw: Optional[float] = None
    total_rule: Optional[str] = None  # "VDD_IN", or "sum:A+B+C" when the board has no input rail
    volt_mv: Dict[str, float] = field(default_factory=dict)
    curr_ma: Dict[str, float] = field(default_factory=dict)
    gpu_util_pct: Optional[float] = None
    gpu_freq_mhz: Optional[float] = None
    # "DLA0"/"DLA1" -> {"online": bool|None, "freq_mhz": float|None, optionally "active_frac": float (a proxy) or
    # "util_pct": float (tegrastats' NVDLAn X%@MHz, L4T R36.4)}
    dla: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    cpu_util_pct: List[Optional[float]] = field(default_factory=list)  # per core; None = core off
    cpu_freq_mhz: List[Optional[float]] = field(default_factory=list)
    emc_util_pct: Optional[float] = None
    emc_freq_mhz: Optional[float] = None
    temps_c: Dict[str, Optional[float]] = field(default_factory=dict)  # None = sensor offline
    ram_used_mb: Optional[float] = None
    ram_total_mb: Optional[float] = None
    energy_mj: Optional[float] = None  # a hardware energy counter (NVML), when the backend has one
    extras: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> Sample:
        """Build from ``to_dict()`` output, checking each field's type (a recording is outside input: the report and
        the replay backend do arithmetic on it); keys this version does not know are ignored (newer recordings).
        Raises ValueError naming the first field that is wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for key in ("t_mono", "t_wall"):
            if not _number(values.get(key)):
                raise ValueError(f"field '{key}' must be a finite number")
        if not isinstance(values.get("backend"), str):
            raise ValueError("field 'backend' must be a string")
        for key in (
            "total_mw",
            "gpu_util_pct",
            "gpu_freq_mhz",
            "emc_util_pct",
            "emc_freq_mhz",
            "ram_used_mb",
            "ram_total_mb",
            "energy_mj",
        ):
            if values.get(key) is not None and not _number(values[key]):
                raise ValueError(f"field '{key}' must be a finite number or null")
        for key in ("power_mw", "volt_mv", "curr_ma", "temps_c"):
            value = values.get(key, {})
            if not isinstance(value, dict) or not all(v is None or _number(v) for v in value.values()):
                raise ValueError(f"field '{key}' must map names to finite numbers")
        for key in ("cpu_util_pct", "cpu_freq_mhz"):
            value = values.get(key, [])
            if not isinstance(value, list) or not all(v is None or _number(v) for v in value):
                raise ValueError(f"field '{key}' must be a list of finite numbers")
        for key in ("dla", "extras"):
            if not isinstance(values.get(key, {}), dict):
                raise ValueError(f"field '{key}' must be an object")
        if values.get("total_rule") is not None and not isinstance(values["total_rule"], str):
            raise ValueError("field 'total_rule' must be a string or null")
        return cls(**values)

    def flat(self) -> Dict[str, Any]:
        """One level of keys (``power_mw.VDD_IN``, ``dla.DLA0.online``, ``cpu_util_pct.0`` ...) for CSV."""
        out: Dict[str, Any] = {}
        for key, value in self.to_dict().items():
            _flatten(key, value, out)
        return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _flatten(prefix: str, value: Any, out: Dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}", v, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _flatten(f"{prefix}.{i}", v, out)
    else:
        out[prefix] = value


def total_power(power_mw: Dict[str, float]) -> Tuple[Optional[float], Optional[str]]:
    """The board's total power and the rule used: the input rail where one exists, else the sum of all rails.

    Summing on a board that has an input rail would count the GPU/CPU rails twice (they are inside it).
    """
    for name in INPUT_RAILS:
        if name in power_mw:
            return power_mw[name], name
    if not power_mw:
        return None, None
    return float(sum(power_mw.values())), "sum:" + "+".join(power_mw)
