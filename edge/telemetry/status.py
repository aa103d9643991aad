"""The short telemetry text for the pipeline's status line, e.g. ``5.1 W GPU 43% DLA0 on``."""

from __future__ import annotations

from typing import List, Optional

from edge.telemetry.sample import Sample


def format_status(sample: Optional[Sample]) -> str:
    """Total power, GPU load (or clock when load is unknown) and each DLA's state; parts without data are left out."""
    if sample is None:
        return "telemetry: no sample yet"
    parts: List[str] = []
    if sample.total_mw is not None:
        parts.append(f"{sample.total_mw / 1000.0:.1f} W")
    if sample.gpu_util_pct is not None:
        parts.append(f"GPU {sample.gpu_util_pct:.0f}%")
    elif sample.gpu_freq_mhz is not None:
        parts.append(f"GPU {sample.gpu_freq_mhz:.0f} MHz")
    for name in sorted(sample.dla):
        online = sample.dla[name].get("online")
        if online is not None:
            parts.append(f"{name} {'on' if online else 'off'}")
    return " ".join(parts) if parts else f"telemetry: {sample.backend} (no readings)"
