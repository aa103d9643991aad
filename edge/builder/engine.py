"""The TensorRT builder adapter: ONNX in; engine, manifest and placement report out.

Order of work: refuse what the installed TensorRT cannot do (before anything slow), parse, pin input shapes
(optimization profiles with min = opt = max, one per edge-run buffer set for a GPU engine with dynamic inputs), configure precision, DLA, memory pools and the compute-capability
target, run the pre-build DLA pass, calibrate and build, then write the engine byte for byte as TensorRT
serialised it, its manifest and the placement report, each under a temporary name renamed into place.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import tempfile
import threading
import time
import warnings
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from edge import __version__, stoppable
from edge.builder import placement as pl
from edge.builder import trt as trt_api
from edge.builder.config import BuildConfig, pool_bytes, target_cc
from edge.builder.precision import apply_fp16_layers, check_equalized, fp16_from_sidecar
from edge.calib.sidecar import sidecar_path
from edge.errors import EdgeError, RunFailed
from edge.graph.model import preflight
from edge.inputs import read_small
from edge.manifest import MANIFEST_VERSION, manifest_path, manifest_text, plugin_ops, read_l4t, sha256_file
from edge.outputs import atomic_open, check_outputs, hold, settle, write_atomic, write_together
from edge.progress import Heartbeat, say

QDQ_HINT = "make a Q/DQ model with `edge calib --qdq` (its scales travel inside the ONNX) and build that without --int8"
MAX_TIMING_CACHE_BYTES = 256 << 20  # tactic timings: a few MB for a large model
# Jetson GPU compute capability -> DLA generation, for the offline prediction's rules.
DLA_TARGETS = {"8.7": "orin", "7.2": "xavier"}
# The SoC entry of the device tree's compatible list -> its GPU's compute capability (every Jetson's upstream DTS
# ends the list with its SoC: "nvidia,p3737-0000+p3701-0000", ..., "nvidia,tegra234").
_SOC_CC = {"nvidia,tegra234": "8.7", "nvidia,tegra194": "7.2"}
DEVICE_TREE = Path("/proc/device-tree")


@dataclass
class Plan:
    """What the build will ask of TensorRT, decided from the config and the API before any slow step."""

    flags: List[str] = field(default_factory=list)  # BuilderFlag names
    precisions: List[str] = field(default_factory=list)
    strongly_typed: bool = False
    compute_capability: Optional[str] = None  # --target-cc, when the API can build for it
    notes: List[str] = field(default_factory=list)


def plan(cfg: BuildConfig, caps: trt_api.Capabilities, dla_flag: Optional[str] = None) -> Plan:
    """Refuse requests this TensorRT cannot serve, with the sentence that says what to do instead. ``dla_flag``
    names what asked for the DLA in those sentences (default ``--dla N``)."""
    p = Plan()
    who = f"this TensorRT ({caps.module} {caps.version})"
    core = cfg.dla.core
    if core is not None:
        asked = dla_flag or f"--dla {core}"
        if not caps.dla_api:
            raise EdgeError(
                f"{asked}: {who} has no DLA API (TensorRT 11.0-11.3 dropped the DLA); build with the TensorRT of "
                "the target's JetPack (8.5 on JetPack 5.1, 8.6 on JetPack 6.0, 10.3 on JetPack 6.1/6.2)"
            )
        if caps.dla_cores == 0:
            raise EdgeError(
                f"{asked}: this machine has no DLA: build on a Jetson with the target's JetPack ({who} reports 0 DLA cores)"
            )
        if core >= caps.dla_cores:
            raise EdgeError(f"{asked}: this Jetson has {caps.dla_cores} DLA core(s), numbered 0 to {caps.dla_cores - 1}")
        if cfg.dla.gpu_fallback:
            p.flags.append("GPU_FALLBACK")
    if cfg.int8 and not caps.int8_flag:
        raise EdgeError(
            f"--int8: {who} is strongly typed: it has no INT8 builder flag and no calibrators, so precision comes from the "
            f"tensor types in the ONNX; {QDQ_HINT}"
        )
    if cfg.int8 and not caps.calibrators:
        raise EdgeError(f"--int8: {who} has the INT8 flag but no calibrators (int8_calibrator); {QDQ_HINT}")
    if cfg.fp16 and not caps.fp16_flag:
        raise EdgeError(
            f"--fp16: {who} is strongly typed: precision comes from the tensor types in the ONNX; export an FP16 model "
            "(e.g. with ModelOpt AutoCast) and drop --fp16"
        )
    if caps.weakly_typed:
        p.precisions.append("fp32")
        fp16 = cfg.fp16 or (core is not None)
        if fp16:
            p.flags.append("FP16")
            p.precisions.append("fp16")
            if core is not None and not cfg.fp16:
                p.notes.append(
                    "FP16 enabled: the DLA runs FP16 or INT8 only, and layers without INT8 scales need FP16 to stay on it"
                )
        if cfg.int8:
            p.flags.append("INT8")
            p.precisions.append("int8")
    else:
        p.strongly_typed = caps.strongly_typed_flag
    cc = target_cc(cfg.target_cc)
    if cc is not None:
        if not caps.compute_capabilities:
            raise EdgeError(
                f"--target-cc {cc}: {who} builds only for the GPU it runs on; build on the target (a Jetson with its "
                "JetPack) and drop --target-cc"
            )
        if cc not in caps.compute_capabilities:
            raise EdgeError(f"--target-cc {cc}: {who} can build for {', '.join(caps.compute_capabilities)} only")
        p.compute_capability = cc
    return p


def parse(trt: Any, builder: Any, caps: trt_api.Capabilities, onnx_path: Path, strongly_typed: bool) -> Any:
    """The network definition from the ONNX file, or an EdgeError naming the node TensorRT could not import."""
    flags = 0
    if caps.explicit_batch_flag:  # TensorRT 8.x parses ONNX only into explicit-batch networks
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)  # trt-api: caps saw the member (gone in 11)
    if strongly_typed:  # only where caps.strongly_typed_flag saw the member
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)  # trt-api: plan() sets it from caps
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # EXPLICIT_BATCH is deprecated (and ignored) in 10.x
        network = builder.create_network(flags)
    parser = trt.OnnxParser(network, trt_api.logger())
    # The parser has no cancel: a signal abandons it (and keeps the network and builder it writes into). A parse
    # that fails fast stays one error line; a long one says it is running after a second.
    with Heartbeat(f"parsing {onnx_path.name}", first_s=1.0):
        parsed = stoppable.call(parser.parse_from_file, str(onnx_path), keep=(network, builder))
    if parsed:
        if network.num_layers == 0 or network.num_outputs == 0:  # some parsers accept an empty or random file
            raise EdgeError(f"{onnx_path}: not an ONNX model (TensorRT's parser found no layers or outputs); re-export it")
        return network, parser
    errors = [parser.get_error(i) for i in range(parser.num_errors)]
    node_errors = [e for e in errors if e.node() >= 0]
    if not node_errors:
        detail = "; ".join(e.desc() for e in errors) or "no detail"
        raise EdgeError(f"{onnx_path}: not a valid ONNX model (TensorRT's parser: {detail}); re-export it or check the download")
    e = node_errors[0]
    raise EdgeError(
        f"{onnx_path}: TensorRT cannot import {node_label(e, onnx_path)}: {e.desc()}; "
        "this TensorRT has no importer or plugin for it: replace the op in the export (or register a plugin)"
    )


def node_label(error: Any, onnx_path: Path) -> str:
    """ "node 7 'name' (op Kind)" for a parser error. ParserError has node_name()/node_operator() from TensorRT 10.0
    (pyOnnx.cpp); 8.5 and 8.6 give only the index, so the name and op are read from the ONNX file when onnx is here."""
    index = error.node()
    if hasattr(error, "node_name") and hasattr(error, "node_operator"):
        return f"node {index} '{error.node_name()}' (op {error.node_operator()})"
    try:
        from edge.graph.model import load_model

        node = load_model(onnx_path).graph.node[index]
        return f"node {index} '{node.name}' (op {node.op_type})"
    except (EdgeError, IndexError):  # no onnx on this machine, or an index outside the top-level graph
        return f"node {index}"


def input_shapes(network: Any, shape_texts: List[str], dla: bool, onnx_path: Optional[Path] = None) -> Dict[str, Tuple[int, ...]]:
    """The build shape of every network input: its static shape, or the --shape given for a dynamic one (the hint for
    a missing one takes its size from the ONNX file's Ultralytics metadata, else 640)."""
    from edge.graph.model import parse_shapes
    from edge.metadata import NONE, from_onnx, shape_hint

    names = [network.get_input(i).name for i in range(network.num_inputs)]
    given = parse_shapes(shape_texts, names)
    shapes = {}
    for i in range(network.num_inputs):
        t = network.get_input(i)
        dims = tuple(t.shape)
        want = given.get(t.name)
        if 0 in dims or (want is None and any(d < 0 for d in dims)):
            meta = NONE
            if onnx_path is not None:
                from edge.graph.model import load_model

                meta = from_onnx(str(onnx_path), load_model(onnx_path))
            example = "x".join(map(str, want)) if want else shape_hint(dims, meta)
            if 0 in dims:  # the parser reads it as an empty axis, and a profile cannot change a static dimension
                raise EdgeError(
                    f"input '{t.name}' is {list(dims)}: TensorRT reads a dimension of 0 as an empty axis (some exporters "
                    f"write 0 for an unknown size); write the size into the file: edge dla {onnx_path or 'MODEL'} "
                    f"--shape {t.name}={example} --fix OUT.onnx"
                )
        if want is None:
            if any(d < 0 for d in dims):
                why = (
                    "the DLA needs static shapes (one optimization profile with min = opt = max)"
                    if dla
                    else "edge-build makes optimization profiles with min = opt = max"
                )
                raise EdgeError(f"input '{t.name}' is dynamic {list(dims)}: {why}; pass --shape {t.name}={example}")
            want = dims
        elif len(want) != len(dims) or any(d >= 0 and d != w for d, w in zip(dims, want)):
            raise EdgeError(f"--shape {t.name}={'x'.join(map(str, want))}: the model declares {list(dims)}")
        shapes[t.name] = tuple(int(d) for d in want)
    return shapes


def typed_precisions(trt: Any, network: Any) -> List[str]:
    """A strongly typed network's precisions: the float types its layers produce."""
    names = {trt.DataType.FLOAT: "fp32", trt.DataType.HALF: "fp16", trt.DataType.INT8: "int8"}
    found = set()
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        found |= {names[layer.get_output(k).dtype] for k in range(layer.num_outputs) if layer.get_output(k).dtype in names}
    return sorted(found)


def gpu_here(device_tree: Path = DEVICE_TREE) -> Tuple[Optional[str], Optional[str]]:
    """(GPU name, compute capability) of this machine: pycuda when it can open the GPU, else the Jetson's device tree
    (its SoC for the compute capability, its model for the name)."""
    try:
        import pycuda.driver as cuda

        cuda.init()
        dev = cuda.Device(0)
        major, minor = dev.compute_capability()
        return dev.name(), f"{major}.{minor}"
    except Exception:  # no pycuda, no driver or no GPU: all mean "ask the device tree"
        pass
    cc = None
    try:
        with open(device_tree / "compatible", "rb") as f:
            entries = [e.decode("ascii", "replace") for e in f.read(4096).split(b"\0")]
        cc = next((_SOC_CC[e] for e in entries if e in _SOC_CC), None)
        if cc is not None:
            with open(device_tree / "model", "rb") as f:
                return f.read(4096).decode("utf-8", "replace").strip("\x00\n ") or None, cc
    except OSError:  # no device tree (not an ARM board), or a Jetson's without a model: its SoC still names the target
        pass
    return None, cc


def cuda_version() -> Optional[str]:
    """The CUDA toolkit release beside TensorRT (/usr/local/cuda), or None where there is none."""
    root = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    try:
        return json.loads((root / "version.json").read_text())["cuda"]["version"]
    except (OSError, ValueError, KeyError):
        pass
    try:
        m = re.search(r"(\d+\.\d+(?:\.\d+)?)", (root / "version.txt").read_text())
        return m.group(1) if m else None
    except OSError:
        return None


@dataclass
class Scales:
    """The INT8 scales a build used, handed to the next build of the same command (``--engines``) so that every
    engine gets the same scales from one calibration."""

    data: bytes  # the cache TensorRT read or wrote
    cache: Optional[Path]  # the calib.cache file they came from; None when the build calibrated them


@dataclass
class BuildResult:
    engine: Path
    manifest: Path
    report: Path
    size: int
    sha256: str
    seconds: float
    caps: trt_api.Capabilities
    plan: Plan
    placement: pl.Placement
    compute_capability: Optional[str]
    warnings: int
    notes: List[str]
    scales: Optional[Scales] = None  # INT8 builds: the scales this build used


def model_path(cfg: BuildConfig) -> Path:
    if cfg.model.asset:
        from edge import assets

        return assets.resolve(cfg.model.asset)
    return cfg.resolve_path(cfg.model.path or "")


def default_engine(cfg: BuildConfig, onnx: Path) -> Path:
    """model.engine, or ``<model>.engine`` in the current folder."""
    return cfg.resolve_path(cfg.model.engine) if cfg.model.engine else Path.cwd() / (onnx.stem + ".engine")


def engine_path(cfg: BuildConfig, onnx: Path) -> Path:
    """The engine to write, after checking every output of the build against the folders and the inputs."""
    out = default_engine(cfg, onnx)
    check_engine_outputs(cfg, onnx, {cfg.name_of("model.engine"): out})
    return out


def check_engine_outputs(cfg: BuildConfig, onnx: Path, engines: Dict[str, Path]) -> None:
    """Every output of the build (each engine with its manifest and report, the log, the caches) checked against the
    folders, the inputs and each other; ``engines`` maps how to name an engine in a message to its path."""
    outputs: Dict[str, Optional[Path]] = {}
    for name, out in engines.items():
        of = "" if len(engines) == 1 else f" of {name}"
        outputs.update({name: out, f"the manifest{of}": manifest_path(out), f"the placement report{of}": report_path(out)})
    cache = cfg.optional_path(cfg.calib.cache)
    outputs.update(
        {
            cfg.name_of("log"): cfg.optional_path(cfg.log),
            # read when present and written after: outputs, so they may be neither the model nor each other
            cfg.name_of("timing_cache"): cfg.optional_path(cfg.timing_cache),
            cfg.name_of("calib.cache"): cache,
            f"{cfg.name_of('calib.cache')} (its sidecar)": sidecar_path(cache) if cache is not None else None,
        }
    )
    check_outputs(outputs, {cfg.name_of("model.path"): onnx, "--config": cfg.config_file})


def report_path(engine: Path) -> Path:
    return engine.with_name(engine.name + ".layers.json")


def _console(level: str, msg: str) -> None:
    # DLA fallback warnings are many and belong to the placement report; everything else worth seeing goes out now.
    if level == "ERROR" or (level == "WARNING" and "DLA" not in msg):
        say(f"TensorRT {level.lower()}: {msg.splitlines()[0]}")


def _log_file(path: Path) -> Any:
    """TensorRT's verbose log, written through the atomic-write path as the build goes (kept when it fails too)."""
    return atomic_open(path, text=True)


def build(cfg: BuildConfig, scales: Optional[Scales] = None, log_file: Any = None) -> BuildResult:
    """One engine. ``scales``: an earlier build's INT8 scales, used instead of calibrating or reading calib.cache;
    ``log_file``: an open log to write TensorRT's lines to instead of opening ``cfg.log``."""
    started = time.monotonic()
    started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    onnx = model_path(cfg)
    out = engine_path(cfg, onnx)
    # The locks are released when the build ends, also by an error that keeps this frame alive in a reference cycle.
    with ExitStack() as stack:
        stack.enter_context(hold(out, cfg.name_of("model.engine")))  # one build per engine at a time
        preflight(onnx)
        cache = cfg.optional_path(cfg.calib.cache)
        if cfg.int8 and scales is None and cfg.calib.images is not None and cache is not None:
            stack.enter_context(hold(cache, cfg.name_of("calib.cache")))  # this build may write it: no edge calib meanwhile
        if cfg.int8 and scales is None and cfg.calib.images is None and cache is not None:
            settle(cache)  # edge calib killed while committing: its cache, sidecar and equalized model are whole again
            if cache.is_file():
                check_equalized(cache, onnx)
        trt = trt_api.load()
        settle(out)  # an earlier build killed while committing: finish it, so its pair is whole before we replace it
        if log_file is None and cfg.log:
            log_file = stack.enter_context(_log_file(cfg.resolve_path(cfg.log)))
        sink = stack.enter_context(trt_api.capture(log_file, _console))
        builder = trt.Builder(trt_api.logger())
        caps = trt_api.detect(trt, builder)
        p = plan(cfg, caps)
        translated = _qdq_for_dla(cfg, caps, onnx)
        parsed = onnx
        if translated is not None:  # the DLA takes no Q/DQ before TensorRT 11: the same scales as a cache
            parsed = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="edge-build-"))) / f"{onnx.stem}.noqdq.onnx"
            write_atomic(parsed, translated.model.SerializeToString())
            p.flags.append("INT8")
            p.precisions.append("int8")
            p.notes.append(
                f"INT8 for the DLA from the Q/DQ model: {translated.pairs} Q/DQ pairs removed, {len(translated.scales)} "
                f"tensor scales from {translated.source}, {len(translated.fp16_layers)} layer(s) in FP16"
            )
            if translated.weight_mismatches:
                p.notes.append(
                    f"{len(translated.weight_mismatches)} weight(s) had Q/DQ scales other than max|w| / 127 (e.g. "
                    f"{translated.weight_mismatches[0]}); TensorRT quantizes weights per channel by max|w| / 127 on this path"
                )
        sink.console = None  # a failed parse becomes one EdgeError naming the node; the details stay in the log
        network, _parser = parse(trt, builder, caps, parsed, p.strongly_typed)
        sink.console = _console
        if not caps.weakly_typed:
            p.precisions = typed_precisions(trt, network)
        say(f"parsed {onnx.name}: {network.num_layers} layers, TensorRT {caps.version} ({caps.module})")
        dla = cfg.dla.core is not None
        shapes = input_shapes(network, cfg.shapes, dla, onnx)
        config = builder.create_builder_config()
        profile = _configure(trt, builder, config, network, cfg, p, shapes)
        gpu_name, local_cc = gpu_here()
        cc = p.compute_capability or local_cc
        if p.compute_capability and p.compute_capability != local_cc:
            gpu_name = None  # the engine is for another GPU than this one
        if not cc:
            p.notes.append("no GPU here and no --target-cc: the manifest cannot name the compute capability")
        prebuild = _prebuild(cfg, caps, config, network, parsed, shapes, cc) if dla else None
        if translated is not None:
            feed = _calibration(
                trt, cfg, caps, config, network, profile, shapes, onnx, _translated_scales(trt, network, caps, cfg, translated)
            )
        else:
            feed = _calibration(trt, cfg, caps, config, network, profile, shapes, onnx, scales) if cfg.int8 else None
        if feed is not None:
            stack.callback(feed.close)
        if translated is not None and translated.fp16_layers:
            apply_fp16_layers(trt, config, network, translated.fp16_layers, "the Q/DQ model's FP16 layers")
        if translated is None:
            fp16_from_sidecar(trt, config, network, feed, p)  # edge calib's FP16 layers (issue 15)
        timing = _load_timing_cache(config, cfg, p)
        cancel = threading.Event()
        monitor = trt_api.cancelling_monitor(trt, config, cancel)  # kept below: TensorRT holds no reference of its own
        sink.console = lambda level, msg: None if cancel.is_set() else _console(level, msg)  # not "BuildCanceled"
        with Heartbeat("building the engine"):
            serialized = stoppable.call(
                builder.build_serialized_network, network, config, cancel=cancel, keep=(monitor, feed, _parser)
            )
        if feed is not None and feed.error is not None:
            # Taken off the feed first: the error's traceback holds the calibrator, which holds the feed, and that
            # cycle would keep the network and TensorRT's builder alive until the garbage collector runs.
            error, feed.error = feed.error, None
            try:
                raise error
            finally:
                del error  # nor may this frame's local hold it (the traceback holds this frame)
        if serialized is None:
            errors = [m.splitlines()[0] for level, m in sink.lines if level == "ERROR"]
            raise RunFailed(f"TensorRT could not build the engine: {'; '.join(errors[-3:]) or 'no error logged'}")
        if timing is not None:
            write_atomic(timing, bytes(config.get_timing_cache().serialize()))
        engine_bytes = bytes(serialized)  # byte for byte what TensorRT wrote; metadata goes in the sidecar
        placement = _placement(trt, engine_bytes, sink.lines, cfg.dla.core, prebuild)
        placement.int8 = _int8_path(trt, network, translated, feed)
        size, digest = len(engine_bytes), hashlib.sha256(engine_bytes).hexdigest()
        seconds = time.monotonic() - started
        data = _manifest(trt, cfg, caps, p, network, shapes, out, size, digest, onnx, gpu_name, cc, started_at, seconds)
        report = report_path(out)
        # a kill at any moment leaves the old engine+manifest+report or the new ones
        write_together([(out, engine_bytes), (manifest_path(out), manifest_text(data)), (report, pl.report_text(placement))])
        manifest = manifest_path(out)
        warned = sum(1 for level, _ in sink.lines if level == "WARNING")
    used = None
    if feed is not None and feed.cached is not None:
        used = Scales(feed.cached, feed.cache_path)
    elif feed is not None and feed.written is not None:
        used = Scales(feed.written, None)
    return BuildResult(out, manifest, report, size, digest, seconds, caps, p, placement, cc, warned, p.notes, used)


def _configure(
    trt: Any, builder: Any, config: Any, network: Any, cfg: BuildConfig, p: Plan, shapes: Dict[str, Tuple[int, ...]]
) -> Any:
    for name in p.flags:
        config.set_flag(getattr(trt.BuilderFlag, name))
    profiles = []
    for _ in range(profile_count(network, cfg)):
        profile = builder.create_optimization_profile()
        for name, dims in shapes.items():
            profile.set_shape(name, dims, dims, dims)
        config.add_optimization_profile(profile)
        profiles.append(profile)
    linear = 1 << int(trt.TensorFormat.LINEAR)
    for tensor in [network.get_input(i) for i in range(network.num_inputs)] + [
        network.get_output(i) for i in range(network.num_outputs)
    ]:
        tensor.allowed_formats = linear  # what the runner's preprocessing writes and its postprocessing reads
    if hasattr(config, "profiling_verbosity"):
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED  # the inspector and the log then name precisions
    if cfg.workspace_mib:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, cfg.workspace_mib << 20)
    d = cfg.dla
    if d.core is not None:
        config.default_device_type = trt.DeviceType.DLA
        config.DLA_core = d.core
        for key, pool in (
            ("sram_mib", "DLA_MANAGED_SRAM"),
            ("local_dram_mib", "DLA_LOCAL_DRAM"),
            ("global_dram_mib", "DLA_GLOBAL_DRAM"),
        ):
            if getattr(d, key) is not None:
                config.set_memory_pool_limit(
                    getattr(trt.MemoryPoolType, pool), pool_bytes(getattr(d, key), f"dla.{key}", "config")
                )
    if p.compute_capability:
        config.num_compute_capabilities = 1
        cc = getattr(trt.ComputeCapability, "SM" + p.compute_capability.replace(".", ""))  # trt-api: caps.compute_capabilities
        config.set_compute_capability(cc, 0)
    return profiles[0]


def profile_count(network: Any, cfg: BuildConfig) -> int:
    """Identical optimisation profiles to add: one per buffer set of edge-run for a GPU engine with dynamic inputs.

    Execution contexts in concurrent use on such an engine each need their own profile (NvInferRuntime.h,
    createExecutionContext / setOptimizationProfileAsync); a static engine needs none beyond the one. DLA builds
    keep one profile: whether a DLA loadable accepts several is not confirmed, and DLA models are static anyway.
    """
    from edge.runtime.engines.tensorrt import BUFFER_SETS

    dynamic = any(d < 0 for i in range(network.num_inputs) for d in network.get_input(i).shape)
    return BUFFER_SETS if dynamic and cfg.dla.core is None else 1


def _prebuild(
    cfg: BuildConfig,
    caps: trt_api.Capabilities,
    config: Any,
    network: Any,
    onnx: Path,
    shapes: Dict[str, Tuple[int, ...]],
    cc: Optional[str],
) -> Dict[str, Any]:
    from edge.dla.predict import predict

    target = cfg.dla.target or DLA_TARGETS.get(cc or "")
    prediction = None
    if target is None:
        say(f"pre-build: no offline DLA rules for compute capability {cc}; set dla.target (orin or xavier) for them")
    else:
        try:
            prediction = predict(onnx, target, caps.version, shapes, "int8" if cfg.int8 else "fp16")
        except EdgeError as exc:  # rules for another TensorRT, or onnx not installed: can_run_on_DLA still answers
            say(f"pre-build: offline prediction skipped: {exc}")
    result = pl.prebuild_pass(config, network, prediction)
    for line in pl.prebuild_lines(result):
        say(line)
    return result


def _int8_path(trt: Any, network: Any, translated: Any, feed: Any) -> Optional[str]:
    """Where the engine's INT8 scales came from, for the placement report."""
    if translated is not None:
        return (
            f"the Q/DQ model's scales as a calibration cache (the DLA takes no Q/DQ before TensorRT 11): "
            f"{translated.pairs} pairs removed, {len(translated.scales)} scales from {translated.source}, "
            f"{len(translated.fp16_layers)} layer(s) in FP16"
        )
    quantize = getattr(trt.LayerType, "QUANTIZE", None)
    if quantize is not None and any(network.get_layer(i).type == quantize for i in range(network.num_layers)):
        return "explicit quantization: the Q/DQ model as it is"
    if feed is not None:
        return "calibration cache" if feed.cached is not None else "calibrated from images"
    return None


def _qdq_for_dla(cfg: BuildConfig, caps: trt_api.Capabilities, onnx: Path) -> Optional[Any]:
    """A DLA build of a Q/DQ model on a TensorRT whose DLA takes no Q/DQ (8.5-10.x, the ones with calibrators): the
    model without its pairs, a scale per tensor and the FP16 layers (``edge.graph.qdq_translate``). None otherwise:
    a GPU build, or TensorRT 11, takes the Q/DQ model as it is."""
    if cfg.dla.core is None or not caps.calibrators:
        return None
    from edge.graph.model import load_model
    from edge.graph.qdq_translate import has_qdq, translate

    model = load_model(onnx)
    if not has_qdq(model):
        return None
    if cfg.int8:
        raise EdgeError(
            f"--int8: {onnx.name} has Q/DQ pairs, and a DLA build takes its INT8 scales from them; drop --int8 "
            "(and --calib-cache, --calib-images), or build the model without Q/DQ with its cache"
        )
    return translate(model)


def _translated_scales(trt: Any, network: Any, caps: trt_api.Capabilities, cfg: BuildConfig, translated: Any) -> Scales:
    """The translated scales as a cache fitted to the parsed network (what TensorRT reads instead of calibrating)."""
    from edge.builder.calibrator import fit_cache
    from edge.calib.cache import CalibrationCache, version_tag

    fit = fit_cache(trt, network, CalibrationCache(version_tag(caps.version), cfg.algorithm, translated.scales))
    for line in fit.lines(Path("(from the Q/DQ model)")):
        say(line)
    return Scales(fit.data, None)


def _calibration(
    trt: Any,
    cfg: BuildConfig,
    caps: trt_api.Capabilities,
    config: Any,
    network: Any,
    profile: Any,
    shapes: Dict[str, Tuple[int, ...]],
    onnx: Path,
    scales: Optional[Scales] = None,
) -> Any:
    from edge.builder.calibrator import CalibrationFeed, make_calibrator, usable_cache
    from edge.calib.datasets import find_images
    from edge.runtime.engines.preprocess import Preprocessor

    if scales is not None:  # an earlier build of this command calibrated (or read the cache): the same scales again
        images_dir, cache_path, cached = None, scales.cache, scales.data
    else:
        images_dir = cfg.optional_path(cfg.calib.images)
        cache_path = cfg.optional_path(cfg.calib.cache)
        cached = usable_cache(cache_path, caps.version, cfg.algorithm, images_dir is not None, trt, network)
    images = find_images(images_dir, cfg.calib.max_images) if (images_dir is not None and cached is None) else []
    tensor, spec = _image_input(trt, cfg, network, shapes)
    about = {"model": onnx.name, "model_sha256": sha256_file(onnx), "method": cfg.calib.method} if images else None
    feed = CalibrationFeed(images, Preprocessor(spec), tensor.name, shapes[tensor.name], cache_path, cached, about=about)
    if cached is None:
        say(
            f"calibration: {len(images)} images from {images_dir}, {feed.total_batches} batches of {feed.batch_size} ({cfg.calib.method})"
        )
    config.int8_calibrator = make_calibrator(trt, cfg.calib.method, feed)  # trt-api: plan() refused without caps.calibrators
    if hasattr(config, "set_calibration_profile"):
        config.set_calibration_profile(profile)
    return feed


def _image_input(trt: Any, cfg: BuildConfig, network: Any, shapes: Dict[str, Tuple[int, ...]]) -> Tuple[Any, Any]:
    """The image input (input.name, or the only input) and its preprocessing, as the runner will do it."""
    from edge.runtime.engines import TensorInfo
    from edge.runtime.engines.model import pick_input, preprocess_spec

    inputs = [
        TensorInfo(t.name, shapes[t.name], np.dtype(trt.nptype(t.dtype)))
        for t in (network.get_input(i) for i in range(network.num_inputs))
    ]
    tensor = pick_input(cfg, inputs)
    return tensor, preprocess_spec(cfg, tensor)


def _load_timing_cache(config: Any, cfg: BuildConfig, p: Plan) -> Optional[Path]:
    """Hand TensorRT the timing cache file (an empty cache when it is new); the path to save it to, or None."""
    if not cfg.timing_cache:
        return None
    path = cfg.resolve_path(cfg.timing_cache)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config.set_timing_cache(config.create_timing_cache(b""), False)
    ignored = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    if ignored:  # TensorRT-RTX: the calls exist and do nothing, and it says so
        # Its own warning reads "Use Deprecated in TensorRT-RTX 1.2. ... instead.": said in our words, not quoted.
        p.notes.append("--timing-cache not used: this TensorRT ignores timing caches (a DeprecationWarning says so)")
        return None
    data = read_small(path, MAX_TIMING_CACHE_BYTES, cfg.name_of("timing_cache")) if path.exists() else b""
    if data and not config.set_timing_cache(config.create_timing_cache(data), False):  # False: another GPU or TensorRT
        say(f"timing cache {path} is from another GPU or TensorRT; starting a new one")
        config.set_timing_cache(config.create_timing_cache(b""), False)
    elif data:
        say(f"timing cache: reusing {path} ({len(data)} bytes)")
    return path


def _placement(
    trt: Any, plan_bytes: bytes, lines: List[trt_api.Line], core: Optional[int], prebuild: Optional[Dict[str, Any]]
) -> pl.Placement:
    """From the engine inspector where the engine loads here (a GPU), else from the builder log."""
    facts = pl.parse_log(lines)
    with trt_api.capture() as probe:
        runtime = trt.Runtime(trt_api.logger())
        if core is not None:
            runtime.DLA_core = core
        engine = runtime.deserialize_cuda_engine(plan_bytes)
    if engine is not None and hasattr(engine, "create_engine_inspector"):
        info = json.loads(engine.create_engine_inspector().get_engine_information(trt.LayerInformationFormat.JSON))
        layers = pl.from_inspector(info, facts.dla_names)
        return pl.assemble(layers, facts, "engine inspector", "detailed profiling verbosity", core, prebuild)
    said = next((m.splitlines()[0] for level, m in probe.lines if level == "ERROR"), "it returned no engine")
    why = f"the engine does not load here for the inspector: {said}"
    source = "builder log and the pre-build pass" if prebuild is not None else "builder log"
    return pl.assemble(facts.layers, facts, source, why, core, prebuild)


def _output_shapes(onnx: Path, shapes: Dict[str, Tuple[int, ...]]) -> Dict[str, Tuple[int, ...]]:
    """Static output shapes at the build shape (the network definition leaves them -1 for dynamic inputs)."""
    from edge.graph.model import is_static, prepare

    try:
        graph = prepare(onnx, shapes)
    except EdgeError as exc:  # onnx not installed, or shape inference fails: keep TensorRT's shapes
        say(f"manifest: output shapes as TensorRT declares them ({exc})")
        return {}
    return {name: graph.shape(name) for name in graph.outputs if is_static(graph.shape(name))}


def _model_facts(onnx: Path) -> Tuple[List[str], Dict[str, str]]:
    """(TensorRT plugins its nodes become, the ONNX file's metadata when it is Ultralytics'): edge-run loads the plugin
    library only for an engine that lists one, and reads class names and task from the metadata."""
    from edge.metadata import from_onnx

    try:
        from edge.graph.model import load_model

        model = load_model(onnx)
    except EdgeError:  # onnx not installed: TensorRT parsed it, edge cannot read it
        return [], {}
    meta = {p.key: p.value for p in model.metadata_props} if from_onnx(str(onnx), model).ultralytics else {}
    return plugin_ops(n.op_type for n in model.graph.node), meta


def _manifest(
    trt: Any,
    cfg: BuildConfig,
    caps: trt_api.Capabilities,
    p: Plan,
    network: Any,
    shapes: Dict[str, Tuple[int, ...]],
    out: Path,
    size: int,
    digest: str,
    onnx: Path,
    gpu_name: Optional[str],
    cc: Optional[str],
    started_at: str,
    seconds: float,
) -> Dict[str, Any]:
    """The sidecar, in the key layout of ``edge.manifest``."""
    from edge.errors import ConfigError

    resolved = _output_shapes(onnx, shapes)
    io = []
    for mode, count, get in (
        ("input", network.num_inputs, network.get_input),
        ("output", network.num_outputs, network.get_output),
    ):
        for i in range(count):
            t = get(i)
            shape = list(shapes[t.name]) if mode == "input" else list(resolved.get(t.name, [int(d) for d in t.shape]))
            io.append(
                {"name": t.name, "mode": mode, "shape": shape, "dtype": trt_api.dtype_name(trt, t.dtype), "format": "LINEAR"}
            )
    try:
        preprocess = _image_input(trt, cfg, network, shapes)[1].to_dict()
    except ConfigError as exc:  # not an image model (or several inputs without input.name): nothing to record
        say(f"manifest: no preprocessing recorded: {exc}")
        preprocess = None
    l4t = read_l4t()
    plugins, model_metadata = _model_facts(onnx)
    return {
        "manifest_version": MANIFEST_VERSION,
        "engine": {"file": out.name, "sha256": digest, "size": size},
        "tensorrt": {"version": caps.version, "api": caps.module},
        "cuda": {"version": cuda_version()},
        "device": {
            "gpu_name": gpu_name,
            "compute_capability": cc,
            "l4t": l4t["l4t"] if l4t else None,
            "jetpack": l4t["jetpack"] if l4t else None,
        },
        "dla": {"core": cfg.dla.core, "gpu_fallback": cfg.dla.gpu_fallback if cfg.dla.core is not None else None},
        "precisions": p.precisions,
        "io": io,
        "preprocess": preprocess,
        "source": {"onnx": str(onnx), "sha256": sha256_file(onnx)},
        "plugins": plugins,
        "model_metadata": model_metadata,
        "build": {
            "options": cfg.options(),
            "capabilities": caps.to_dict(),
            "placement_report": report_path(out).name,
            "edge": __version__,
            "started": started_at,
            "seconds": round(seconds, 3),
        },
    }
