"""The engine manifest: ``MODEL.engine.json`` beside ``MODEL.engine``, what the engine needs to run.

The build side writes it; the run side reads it before deserialising and refuses an engine that cannot work
here. The engine file itself stays byte for byte what TensorRT wrote, so trtexec and DeepStream still load it.

Keys (``MANIFEST_VERSION`` 1):
    manifest_version, engine {file, sha256, size}, tensorrt {version, api}, cuda {version},
    device {gpu_name, compute_capability, l4t, jetpack}, dla {core, gpu_fallback},
    precisions [..], io [{name, mode, shape, dtype, format}], preprocess {PreprocessSpec fields},
    source {onnx, sha256}, plugins [TensorRT plugin names], model_metadata {the ONNX file's Ultralytics metadata},
    build {options.., started, seconds}
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

from edge.config import short
from edge.errors import EdgeError
from edge.outputs import settle, strict_json, write_atomic

MANIFEST_VERSION = 1
MAX_MANIFEST_BYTES = 1 << 20  # edge-build writes a few kB
REQUIRED = ("manifest_version", "engine", "tensorrt", "device", "dla", "io")

# L4T (the BSP) release -> JetPack, for the releases with DLA-capable modules.
L4T_TO_JETPACK = {
    "32.7": "4.6",
    "35.1": "5.0.2",
    "35.2": "5.1",
    "35.3": "5.1.1",
    "35.4": "5.1.2",
    "35.5": "5.1.3",
    "35.6": "5.1.4",
    "36.2": "6.0 DP",
    "36.3": "6.0",
    "36.4": "6.1/6.2",
}


def plugin_ops(op_types: Iterable[str]) -> List[str]:
    """The ONNX ops that TensorRT's parser turns into plugin layers of TensorRT's own library (EfficientNMS_TRT,
    BatchedNMS_TRT, ...: the ``_TRT`` names of onnx-tensorrt's plugin fallback), each once."""
    return sorted({op for op in op_types if op.endswith("_TRT")})


def manifest_path(engine: str | Path) -> Path:
    p = Path(engine)
    return p.with_name(p.name + ".json")


def refuse_rtx(engine: Any, manifest: Dict[str, Any]) -> None:
    """An engine built with TensorRT-RTX (what edge-build makes off a Jetson, for its tests) runs nowhere edge-run
    does: refused the same way by edge-run and by edge deploy before anything is uploaded."""
    if isinstance(manifest.get("tensorrt"), dict) and manifest["tensorrt"].get("api") == "tensorrt_rtx":
        raise EdgeError(
            f"engine '{engine}' was built with TensorRT-RTX (its manifest's tensorrt.api), which edge-run does not "
            "run; build the engine on the Jetson with edge-build"
        )


def dla_engine_path(engine: Path) -> Path:
    """The DLA plan that ``edge-build --engines gpu,dla`` writes beside the GPU engine: ``yolo.engine`` ->
    ``yolo.dla.engine`` (``<stem>.dla.engine``, in the same folder). The one naming rule for both sides: edge-build
    writes it, the runtime looks for it. A DLA plan runs on either DLA core (the core is chosen when it is
    deserialised). Pure: the file system is not touched."""
    engine = Path(engine)
    return engine.with_name(f"{engine.stem}.dla.engine")


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_l4t(path: str | Path = "/etc/nv_tegra_release") -> Optional[Dict[str, str]]:
    """The Jetson BSP release from /etc/nv_tegra_release ('# R36 (release), REVISION: 4.3, ...'), or None off a Jetson."""
    p = Path(path)
    if not p.is_file():
        return None
    m = re.search(r"R(\d+)\s*\(release\),\s*REVISION:\s*(\d+)\.(\d+)", p.read_text(errors="replace"))
    if m is None:
        return None
    major, rev, minor = m.groups()
    l4t = f"{major}.{rev}.{minor}"
    return {"l4t": l4t, "jetpack": L4T_TO_JETPACK.get(f"{major}.{rev}", "unknown")}


def manifest_text(data: Dict[str, Any]) -> str:
    """The sidecar's content; ``data`` must hold the required sections."""
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ValueError(f"manifest lacks {', '.join(missing)}")  # a bug in the writer, not user input
    return json.dumps(strict_json(data), indent=2, sort_keys=False) + "\n"


def write_manifest(engine: str | Path, data: Dict[str, Any]) -> Path:
    """Write the sidecar alone, atomically (edge-build commits it together with the engine instead)."""
    return write_atomic(manifest_path(engine), manifest_text(data))


def read_manifest(engine: str | Path) -> Dict[str, Any]:
    """The manifest of an engine, checked for shape; a missing or damaged one is an EdgeError naming the file."""
    settle(engine)  # a build killed while committing the pair: finish it first
    from edge.inputs import read_small

    path = manifest_path(engine)
    if not path.exists():
        raise EdgeError(f"engine '{engine}': no manifest {path.name} beside it; rebuild with edge-build, which writes it")
    raw = read_small(path, MAX_MANIFEST_BYTES, "manifest", "rebuild the engine with edge-build")
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise EdgeError(f"manifest '{path}': not valid JSON ({exc})") from None
    version = data.get("manifest_version") if isinstance(data, dict) else None
    if _is_int(version) and version > MANIFEST_VERSION:  # before the keys: a newer edge may lay them out otherwise
        raise EdgeError(f"manifest '{path}': version {version} is newer than this edge reads ({MANIFEST_VERSION}); upgrade edge")
    missing = [k for k in REQUIRED if k not in data] if isinstance(data, dict) else list(REQUIRED)
    if missing:
        raise EdgeError(f"manifest '{path}': missing keys {', '.join(missing)}; rebuild the engine with edge-build")
    check_types(data, path)
    return data


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_cc(value: Any) -> bool:
    """A compute capability as edge-build writes it ("8.7") or as a person might ("87", 8.7, [8, 7])."""
    if isinstance(value, (list, tuple)):
        return len(value) == 2 and all(_is_int(v) for v in value)
    return isinstance(value, str) or (isinstance(value, float) and value == value and abs(value) != float("inf"))


# section.key -> (test, what it must be); None values are allowed where edge-build writes null.
_FIELDS = (
    ("manifest_version", lambda v: _is_int(v) and v >= 1, "a positive integer"),
    ("engine", lambda v: isinstance(v, dict), "an object {file, sha256, size}"),
    ("engine.sha256", lambda v: isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) is not None, "64 hex digits"),
    ("engine.size", lambda v: v is None or (_is_int(v) and v >= 0), "a byte count"),
    ("tensorrt", lambda v: isinstance(v, dict), "an object {version, api}"),
    ("tensorrt.version", lambda v: v is None or isinstance(v, str), "a version string such as 8.5.2.2"),
    ("device", lambda v: isinstance(v, dict), "an object {gpu_name, compute_capability, l4t, jetpack}"),
    ("device.compute_capability", lambda v: v is None or _is_cc(v), 'a compute capability such as "8.7"'),
    ("device.gpu_name", lambda v: v is None or isinstance(v, str), "a string or null"),
    ("device.l4t", lambda v: v is None or isinstance(v, str), 'a string such as "36.4.3" or null'),
    ("device.jetpack", lambda v: v is None or isinstance(v, str), 'a string such as "6.1/6.2" or null'),
    ("dla", lambda v: isinstance(v, dict), "an object {core, gpu_fallback}"),
    ("dla.core", lambda v: v is None or _is_int(v), "a DLA core number or null"),
    ("io", lambda v: isinstance(v, list) and all(isinstance(t, dict) for t in v), "a list of tensor objects"),
)


def check_types(data: Dict[str, Any], path: Path) -> None:
    """Every field the run side reads has the type edge-build writes; one line naming the first that has not."""
    for key, ok, what in _FIELDS:
        section, _, field = key.partition(".")  # _FIELDS checks each section before its fields: it is a dict here
        value = data[section].get(field) if field else data.get(section)
        if field and field not in data[section] and key != "engine.sha256":
            continue
        if not ok(value):
            raise EdgeError(
                f"manifest '{path}': key '{key}' should be {what}, got {short(value)}; the manifest was edited or damaged: "
                "copy it again with its engine, or rebuild with edge-build"
            )
