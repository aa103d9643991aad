"""The manifest gate: decide from ``MODEL.engine.json`` whether an engine can run here, before TensorRT sees it.

A TensorRT plan only loads on the TensorRT build, GPU and JetPack it was made for, and a DLA engine only on a
core the module has. TensorRT's own errors for these cases are vague ("Version tag does not match") or absent
(a missing DLA core), so every mismatch is refused here with one line that says what to do instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional

from edge.errors import EdgeError
from edge.inputs import missing
from edge.manifest import read_manifest, sha256_file


@dataclass(frozen=True)
class DeviceFacts:
    """What this machine offers an engine; read once by the backend, passed in so the checks stay pure."""

    tensorrt_version: str
    compute_capability: str  # "8.7"
    dla_cores: int
    l4t: Optional[str] = None  # None off a Jetson
    jetpack: Optional[str] = None


def normalise_cc(value: Any) -> Optional[str]:
    """A compute capability as "major.minor", from "8.7", 8.7, [8, 7] or (8, 7); None stays None."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return f"{int(value[0])}.{int(value[1])}"
    text = str(value).strip().lower().replace("sm_", "").replace("sm", "")
    if len(text) >= 2 and text.isdigit():  # "87" as in sm_87 (a dot is not a digit)
        return f"{text[:-1]}.{text[-1]}"
    return text


def check_file(engine: Path, manifest: Dict[str, Any]) -> None:
    """The engine bytes are the ones the manifest describes (a half-copied or swapped file is refused)."""
    want = manifest["engine"]
    size = engine.stat().st_size
    if want.get("size") is not None and size != want["size"]:
        raise EdgeError(
            f"engine '{engine}': {size} bytes but its manifest says {want['size']}; the file changed after the build: "
            "copy the engine and its .json again, or rebuild with edge-build"
        )
    digest = sha256_file(engine)
    if digest != want.get("sha256"):
        raise EdgeError(
            f"engine '{engine}': sha256 {digest[:12]}… does not match its manifest ({str(want.get('sha256'))[:12]}…); "
            "the file changed after the build: copy the engine and its .json again, or rebuild with edge-build"
        )


def check_platform(engine: Path, manifest: Dict[str, Any], here: DeviceFacts) -> None:
    """Same TensorRT, same compute capability, same JetPack as the build."""
    built_trt = str(manifest["tensorrt"].get("version") or "")
    if built_trt != here.tensorrt_version:
        raise EdgeError(
            f"engine '{engine}': built with TensorRT {built_trt or 'unknown'} but this machine has TensorRT "
            f"{here.tensorrt_version}; an engine only loads on the TensorRT that built it: rebuild it here with edge-build"
        )
    dev = manifest["device"]
    built_cc = normalise_cc(dev.get("compute_capability"))
    if built_cc is not None and built_cc != here.compute_capability:
        raise EdgeError(
            f"engine '{engine}': built for compute capability {built_cc} ({dev.get('gpu_name') or 'unknown GPU'}) but this "
            f"GPU is {here.compute_capability}; rebuild it on this kind of module"
        )
    built_jp = dev.get("jetpack")
    if built_jp is not None and built_jp != here.jetpack:
        where = (
            f"this machine runs JetPack {here.jetpack} (L4T {here.l4t})"
            if here.l4t
            else "this machine is not a Jetson (no /etc/nv_tegra_release)"
        )
        raise EdgeError(
            f"engine '{engine}': built on JetPack {built_jp} (L4T {dev.get('l4t')}) but {where}; rebuild it on this JetPack"
        )


def built_dla_core(engine: Path, manifest: Dict[str, Any], requested: Optional[int]) -> Optional[int]:
    """The DLA core the manifest says the engine was built for (None: GPU only); a --dla asked of a GPU-only engine
    is refused here, before any device is looked at (edge-run --check on a deploy host runs this too)."""
    built = manifest["dla"].get("core")
    if built is not None and built < 0:
        built = None  # TensorRT's "no DLA" is -1
    if built is None and requested is not None:
        raise EdgeError(
            f"engine '{engine}' was built for the GPU only (manifest dla.core is null), so --dla {requested} cannot "
            f"put it on the DLA: drop --dla, or rebuild with edge-build --dla {requested}"
        )
    return built


def choose_dla_core(engine: Path, manifest: Dict[str, Any], requested: Optional[int], here: DeviceFacts) -> Optional[int]:
    """The DLA core to load the engine on, or None for a GPU-only engine.

    ``requested`` is ``dla_core`` (--dla); without it a DLA engine runs on the core it was built for. A core this
    module does not have is refused: TensorRT would otherwise fail late or fall back to core 0 without a word.
    """
    built = built_dla_core(engine, manifest, requested)
    if built is None:
        return None
    core = built if requested is None else requested
    if core >= here.dla_cores:
        have = {0: "no DLA", 1: "only DLA core 0"}.get(here.dla_cores, f"DLA cores 0..{here.dla_cores - 1}")
        asked = f"--dla {core} asks for DLA core {core}" if requested is not None else f"it was built for DLA core {core}"
        how = "--dla 0" if here.dla_cores else "an engine built for the GPU (edge-build without --dla)"
        raise EdgeError(f"engine '{engine}': {asked}, but this module has {have}; use {how}")
    return core


def verify_manifest(engine: Path) -> Dict[str, Any]:
    """The checks that need neither TensorRT nor CUDA: the manifest is well formed and the engine file is the one it
    describes (size, sha256). A build host, CI or a deploy machine can run them on an artefact."""
    manifest = read_manifest(engine)
    if not engine.is_file():
        raise EdgeError(f"engine '{engine}': {missing(engine)} beside its manifest; copy the engine and its .json together")
    check_file(engine, manifest)
    return manifest


def gate(engine: Path, manifest: Dict[str, Any], here: DeviceFacts, requested_core: Optional[int]) -> Optional[int]:
    """Every check in order, cheapest first; returns the DLA core to set on the runtime (None: GPU only)."""
    check_platform(engine, manifest, here)
    core = choose_dla_core(engine, manifest, requested_core, here)
    check_file(engine, manifest)
    return core
