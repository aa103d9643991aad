"""One telemetry reading (`Sample`) and the rule for what "total power" means on each board.

Units are part of the field names. A value a backend cannot measure is ``None`` (never 0), so a mean or a plot
never mixes "not measured" with "idle".
"""

from __future__ import annotations

import dataclasses
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
        """Build from ``to_dict()`` output; keys this version does not know are ignored (newer recordings)."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def flat(self) -> Dict[str, Any]:
        """One level of keys (``power_mw.VDD_IN``, ``dla.DLA0.online``, ``cpu_util_pct.0`` ...) for CSV."""
        out: Dict[str, Any] = {}
        for key, value in self.to_dict().items():
            _flatten(key, value, out)
        return out


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
