"""Layers kept in FP16 by `edge calib`: read from the sidecar beside the calibration cache, applied as per-layer
precision with precision constraints obeyed.

``ILayer.precision = HALF`` asks for an FP16 kernel; ``BuilderFlag.OBEY_PRECISION_CONSTRAINTS`` makes the build fail
rather than fall back to another precision (TensorRT 8.5/10.3 ``NvInfer.h``, ``ILayer::setPrecision``). The DLA runs
FP16 and INT8 side by side, so on a DLA build such layers stay on the DLA, in FP16. This is trtexec's
``--precisionConstraints=obey --layerPrecisions=NAME:fp16``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, List

from edge.calib.sidecar import read_sidecar, sidecar_path
from edge.config import short
from edge.errors import EdgeError


def check_equalized(cache: Path, model: Path) -> None:
    """Refuse a cache that `edge calib` made for an equalized model when another model is built with it: its scales fit
    the rescaled weights only, and with the original ones INT8 would clip channels without a word."""
    from edge.manifest import sha256_file

    sidecar = read_sidecar(cache)
    eq = sidecar.info.get("equalized") if sidecar is not None else None
    if not isinstance(eq, dict):
        return
    want = sidecar.info.get("model_sha256")
    if isinstance(want, str) and sha256_file(model) != want:
        name, origin = (short(v, 100) for v in (sidecar.info.get("model", "?"), eq.get("from", "?")))
        raise EdgeError(
            f"--calib-cache {cache}: its scales are for {name}, the model edge calib equalized from {origin}, not for "
            f"{model.name}; build {name} with it (or calibrate {model.name} with --equalize 0)"
        )


def apply_fp16_layers(trt: Any, config: Any, network: Any, names: List[str], origin: str) -> None:
    """Set every named layer to FP16 and turn on FP16 with obeyed precision constraints."""
    layers = {network.get_layer(i).name: network.get_layer(i) for i in range(network.num_layers)}
    missing = [n for n in names if n not in layers]
    if missing:
        examples = ", ".join(list(layers)[:3])
        raise EdgeError(
            f"{origin}: layer '{missing[0]}'{f' and {len(missing) - 1} more' if len(missing) > 1 else ''} is not in the parsed "
            f"network (its layers look like: {examples}); the list was made for another model: run edge calib for this one"
        )
    for name in names:
        layers[name].precision = trt.DataType.HALF
    config.set_flag(trt.BuilderFlag.FP16)
    config.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)


def fp16_from_sidecar(trt: Any, config: Any, network: Any, feed: Any, plan: Any) -> None:
    """The builder's hook: when the build reads the cache ``feed`` holds, apply its sidecar's FP16 list."""
    if feed is None or feed.cache_path is None:
        return
    sidecar = read_sidecar(feed.cache_path)
    if sidecar is None:
        return
    name = sidecar_path(feed.cache_path).name
    if feed.cached is None:
        plan.notes.append(f"{name} not applied: the cache was calibrated again here, and its FP16 list belongs to the old scales")
        return
    if not sidecar.layers:
        return
    apply_fp16_layers(trt, config, network, sidecar.layers, f"FP16-layer sidecar {sidecar_path(feed.cache_path)}")
    if "fp16" not in plan.precisions:
        plan.precisions.append("fp16")
    plan.notes.append(f"{len(sidecar.layers)} layer(s) in FP16 from {name} (precision constraints obeyed)")
