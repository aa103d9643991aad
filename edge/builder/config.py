"""The build config: what `edge-build` builds and how, loaded from YAML with ``edge.config.load_dataclass``.

Every flag is also a key here, so a build is reproducible from one file. The ``input`` section is the same as the
run config's: calibration feeds images through it and the manifest records it for the runner.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Optional, Union

from edge.config import (
    FileConfig,
    InputConfig,
    ModelConfig,
    check_input,
    check_onnx_source,
    flag_errors,
    given_by_flags,
    key_error,
    load_dataclass,
    short,
)
from edge.errors import ConfigError

# TensorRT takes the pool limit as a size_t of bytes; past 1 TiB of scratch memory the number is a typo.
MAX_WORKSPACE_MIB = 1 << 20

# Calibrator algorithm names as TensorRT writes them in a cache header.
ALGORITHMS = {"entropy": "EntropyCalibration2", "minmax": "MinMaxCalibration"}

# What `engines` may list: a GPU engine, a DLA plan (built for dla.core, loadable on either core).
ENGINE_KINDS = ("gpu", "dla")


@dataclass
class CalibConfig:
    images: Optional[str] = None  # a folder of images, fed through the input preprocessing
    cache: Optional[str] = None  # read when present (then no images are needed), written after calibrating
    method: Literal["entropy", "minmax"] = "entropy"  # entropy = IInt8EntropyCalibrator2, the one DLA builds accept
    max_images: Optional[int] = None  # use at most this many images (sorted by name); None = all


@dataclass
class DlaConfig:
    core: Optional[int] = None  # DLA core index; None = a GPU engine
    gpu_fallback: bool = True  # layers the DLA cannot run go to the GPU instead of failing the build
    target: Optional[Literal["orin", "xavier"]] = None  # rules for the pre-build prediction; None = from the GPU
    sram_mib: Optional[float] = None  # DLA_MANAGED_SRAM pool per subgraph (power of two, >= 4 KiB); None = default
    local_dram_mib: Optional[float] = None  # DLA_LOCAL_DRAM pool
    global_dram_mib: Optional[float] = None  # DLA_GLOBAL_DRAM pool


@dataclass
class BuildConfig(FileConfig):
    model: ModelConfig = field(default_factory=ModelConfig)  # path or asset = the ONNX; engine = the output
    int8: bool = False
    fp16: bool = False
    calib: CalibConfig = field(default_factory=CalibConfig)
    dla: DlaConfig = field(default_factory=DlaConfig)
    # engines from one build (one calibration): gpu -> model.engine, dla -> <stem>.dla.engine; None = the one engine
    # of dla.core (a GPU engine when it is null), written at model.engine
    engines: Optional[List[str]] = None
    shapes: List[str] = field(default_factory=list)  # NAME=1x3x640x640 for each dynamic input
    workspace_mib: Optional[int] = None  # builder scratch memory limit; None = TensorRT's default
    timing_cache: Optional[str] = None  # read when present, written after the build
    target_cc: Optional[Union[str, float]] = None  # build for this GPU compute capability (where the API allows)
    log: Optional[str] = None  # write TensorRT's verbose log here
    input: InputConfig = field(default_factory=InputConfig)

    @property
    def algorithm(self) -> str:
        return ALGORITHMS[self.calib.method]

    @property
    def dla_build(self) -> bool:
        """Whether an engine of this build is for the DLA."""
        return self.dla.core is not None if self.engines is None else "dla" in self.engines

    def options(self) -> Dict[str, Any]:
        """The settings as plain data, for the manifest."""
        return self.settings()


def load_build_config(
    path: Optional[str],
    overrides: Optional[List[str]] = None,
    values: Optional[Dict[str, Any]] = None,
    flags: Optional[Dict[str, str]] = None,
) -> BuildConfig:
    with flag_errors(*given_by_flags(flags, overrides, values)):
        cfg, origin = load_dataclass(BuildConfig, path, overrides, values)
        cfg.flags = {k: f for k, f in (flags or {}).items() if k in (values or {})}
        check(cfg, origin)
    return cfg


def pool_bytes(mib: float, key: str, origin: str) -> int:
    """A DLA pool size in bytes; TensorRT fails the loadable compile unless it is a power of two >= 4 KiB."""
    size = int(round(mib * (1 << 20)))
    if size < 4096 or size & (size - 1):
        raise key_error(origin, f"{key}", f"expected a power of two of at least 4 KiB (e.g. 0.5, 1, 2 MiB), got {mib}")
    return size


def target_cc(value: Union[str, float, None], origin: str = "--target-cc") -> Optional[str]:
    """'8.7', 8.7 or 'sm87' -> '8.7'."""
    if value is None:
        return None
    text = str(value).strip().lower().replace("sm_", "").replace("sm", "")
    if text.isdigit() and len(text) >= 2:
        text = f"{text[:-1]}.{text[-1]}"
    major, dot, minor = text.partition(".")
    if not (dot and major.isdigit() and minor.isdigit() and len(minor) == 1):
        raise key_error(origin, "target_cc", f"expected a compute capability like 8.7 or 7.2, got {value!r}")
    return text


def check_engines(engines: Optional[List[str]], origin: str) -> None:
    """``engines``: null, or a non-empty list of gpu and dla, each at most once."""
    if engines is None:
        return
    fix = "give gpu, dla or both, e.g. --engines gpu,dla (in a file: engines: [gpu, dla])"
    if not engines or not any(e.strip() for e in engines):
        raise key_error(origin, "engines", f"names no engine; {fix}, or leave it out for the one engine of dla.core")
    for name in engines:
        if not name.strip():
            raise key_error(origin, "engines", f"an empty engine name (a stray comma?); {fix}")
        if name not in ENGINE_KINDS:
            raise key_error(origin, "engines", f"unknown engine {short(name, 40)}; {fix}")
    twice = next((e for i, e in enumerate(engines) if e in engines[:i]), None)
    if twice is not None:
        raise key_error(origin, "engines", f"'{twice}' is listed twice; list each engine once: {fix}")


def check(cfg: BuildConfig, origin: str) -> None:
    """Rules that span more than one key or need the file system; TensorRT is not imported here."""
    m = cfg.model
    if not (m.path or m.asset):
        raise ConfigError(f"{origin}: no model: pass MODEL.onnx or set model.path (or model.asset)")
    check_onnx_source(cfg, origin)
    check_input(cfg.input, origin)
    check_engines(cfg.engines, origin)
    if cfg.workspace_mib is not None and not 0 < cfg.workspace_mib <= MAX_WORKSPACE_MIB:
        raise key_error(origin, "workspace_mib", f"expected MiB from 1 to {MAX_WORKSPACE_MIB} (1 TiB), got {cfg.workspace_mib}")
    d = cfg.dla
    if d.core is not None and d.core < 0:
        raise key_error(origin, "dla.core", f"expected a DLA core index (0 or 1 on AGX Orin/Xavier), got {d.core}")
    pools = [key for key in ("sram_mib", "local_dram_mib", "global_dram_mib") if getattr(d, key) is not None]
    for key in pools:
        pool_bytes(getattr(d, key), f"dla.{key}", origin)
    if cfg.engines is not None and d.core is not None and not cfg.dla_build:
        raise ConfigError(
            f"{origin}: key 'dla.core' applies to DLA builds only and engines lists no dla; add dla to --engines "
            "(engines) or drop --dla N (dla.core)"
        )
    if not cfg.dla_build and (pools or not d.gpu_fallback or d.target):
        key = f"dla.{pools[0]}" if pools else ("dla.gpu_fallback" if not d.gpu_fallback else "dla.target")
        add = "add --dla N (dla.core)" if cfg.engines is None else "add dla to --engines (engines)"
        raise ConfigError(f"{origin}: key '{key}' applies to DLA builds only; {add} or drop it")
    target_cc(cfg.target_cc, origin)
    c = cfg.calib
    if cfg.dla_build and cfg.int8 and c.method == "minmax":
        which = f"--dla {d.core}" if cfg.engines is None else f"--engines {','.join(cfg.engines)}"
        raise ConfigError(
            f"{origin}: key 'calib.method': minmax with {which}: the DLA takes its INT8 scales from "
            'IInt8EntropyCalibrator2, "the required calibrator for DLA" (NvInfer.h), and reads caches whose header names '
            "EntropyCalibration2; for min-max scales on the DLA run `edge calib MODEL --method minmax --cache C` (it writes "
            "them under that header) and build with --calib-cache C and the default --calib-method entropy"
        )
    if c.max_images is not None and c.max_images < 1:
        raise key_error(origin, "calib.max_images", f"expected a positive integer or null, got {c.max_images}")
    images = cfg.optional_path(c.images)
    if images is not None and not images.is_dir():
        raise key_error(origin, "calib.images", f"not a folder: {images}")
    cache = cfg.optional_path(c.cache)
    if cfg.int8 and images is None and (cache is None or not cache.is_file()):
        where = f"no cache at {cache}" if cache is not None else "no calib.cache"
        raise key_error(
            origin,
            "int8",
            f"INT8 needs scales: pass --calib-images DIR (calibrate) or an existing --calib-cache FILE "
            f"({where}); without them TensorRT's placeholder ranges make an engine that is only good for speed tests",
        )
    if (images or c.cache) and not cfg.int8:
        raise ConfigError(f"{origin}: keys 'calib.images'/'calib.cache' are set but 'int8' is not; add --int8 or drop them")
