"""The camera-service config: YAML in, typed dataclasses out, precise errors for anything wrong.

Every key has a default, so a config file only states what differs. Unknown keys are errors (with a
"did you mean" when a key is mistyped), and so are wrong types; each message names the file, the key
path and what was expected. CLI flags override keys through ``key.path=value`` strings.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Literal, Optional, Union

from edge.argtypes import MAX_THREADS
from edge.errors import ConfigError
from edge.inputs import missing

# `X | None` is types.UnionType on Python >= 3.10; JetPack 5 ships Python 3.8, so the schema uses Optional.
_UNIONS = (Union, getattr(types, "UnionType", Union))


@dataclass
class ModelConfig:
    path: Optional[str] = None  # an ONNX file; relative paths are relative to the config file
    asset: Optional[str] = None  # or a pinned asset name from `edge assets list`, fetched on first use
    engine: Optional[str] = None  # a TensorRT engine (with its MODEL.engine.json manifest), for backend: tensorrt


@dataclass
class InputConfig:
    name: Optional[str] = None  # input tensor; None = the model's only input
    size: Optional[List[int]] = None  # [width, height]; None = read from the model
    color: Literal["rgb", "bgr"] = "rgb"
    layout: Literal["auto", "nchw", "nhwc"] = "auto"
    dtype: Literal["auto", "float32", "float16", "uint8"] = "auto"
    resize: Literal["letterbox", "stretch"] = "letterbox"
    pad_value: Optional[int] = None  # letterbox padding 0..255; null = 114 for Ultralytics models (as they train), else 0
    # Normalisation, in the network's colour order: out = (pixel * scale + offset - mean) / std.
    scale: float = 1.0 / 255.0
    offset: float = 0.0
    mean: List[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    std: List[float] = field(default_factory=lambda: [1.0, 1.0, 1.0])


# auto: recognised from the outputs and the model's metadata (docs/models.md lists each head); or name the decoder
TaskType = Literal[
    "auto",
    "yolo",
    "yolo_seg",
    "yolo_pose",
    "yolo_end2end",
    "nms_plugin",
    "deepstream_yolo",
    "blazeface",
    "centerface",
    "yunet",
    "picodet",
    "ssd",
    "torchvision",
    "torchvision_nms",
    "retinaface",
    "detr",
    "segment",
    "classify",
]
TASK_TYPES = typing.get_args(TaskType)


@dataclass
class SsdConfig:
    """task.type ssd: TensorFlow Object Detection API's ssd_anchor_generator and box coder (its pipeline.config names
    the same keys); the defaults are SSD(Lite) MobileNet's."""

    feature_maps: Optional[List[List[int]]] = None  # [rows, columns] per layer; null = stride 16, then halved
    min_scale: float = 0.2
    max_scale: float = 0.95
    aspect_ratios: List[float] = field(default_factory=lambda: [1.0, 2.0, 0.5, 3.0, 0.3333])
    interpolated_scale_aspect_ratio: float = 1.0
    reduce_boxes_in_lowest_layer: bool = True
    scale_factors: List[float] = field(default_factory=lambda: [10.0, 10.0, 5.0, 5.0])  # y, x, height, width
    scores: Literal["sigmoid", "softmax"] = "sigmoid"  # SSDLite: sigmoid; classic SSD: softmax


TorchvisionModel = Literal["ssdlite320_mobilenet_v3_large", "ssd300_vgg16", "retinanet_resnet50_fpn", "fcos_resnet50_fpn"]


@dataclass
class TorchvisionConfig:
    """task.type torchvision: the raw heads of a torchvision detector (bbox_regression, cls_logits; FCOS's
    bbox_ctrness), decoded with the anchor generator, box coder and post-processing of the torchvision builder named
    by ``model`` (retinanet_resnet50_fpn also stands for its _v2, which shares them)."""

    model: TorchvisionModel = "ssdlite320_mobilenet_v3_large"
    feature_maps: Optional[List[List[int]]] = None  # [rows, columns] per level; null = the backbone's at the input size
    topk_candidates: Optional[int] = None  # before NMS (per class for SSD, per level otherwise); null = the model's


@dataclass
class PriorsConfig:
    """task.type retinaface: the prior boxes of Pytorch_Retinaface's ``cfg_mnet`` / ``cfg_re50`` (the defaults): per
    feature map of stride ``steps[k]``, one square prior per size in ``min_sizes[k]`` (input pixels) at each cell's
    centre; the box coder's ``variances`` (centre, size)."""

    steps: List[int] = field(default_factory=lambda: [8, 16, 32])
    min_sizes: List[List[float]] = field(default_factory=lambda: [[16.0, 32.0], [64.0, 128.0], [256.0, 512.0]])
    variances: List[float] = field(default_factory=lambda: [0.1, 0.2])


@dataclass
class TaskConfig:
    type: TaskType = "auto"
    # null: the decoder's default; YOLO heads use Ultralytics' predict values (conf 0.25, iou 0.7, max_det 300),
    # blazeface 0.5 / 0.3 / 100. A candidate is kept when its score is above score_threshold.
    score_threshold: Optional[float] = None
    iou_threshold: Optional[float] = None  # NMS: a box suppresses another of its class above this IoU
    max_detections: Optional[int] = None
    agnostic_nms: bool = False  # true: boxes of different classes suppress each other too
    labels: Optional[Union[List[str], str]] = None  # a list, or a file with one label per line; null = the metadata's
    top_k: int = 5  # classify
    softmax: Literal["auto", "yes", "no"] = "auto"  # classify: apply softmax to the output
    yolo_layout: Literal["auto", "v8", "v8t", "v5", "yolox"] = "auto"
    ssd: SsdConfig = field(default_factory=SsdConfig)  # ssd: the anchors and box coder
    torchvision: TorchvisionConfig = field(default_factory=TorchvisionConfig)  # torchvision: which builder's anchors
    priors: PriorsConfig = field(default_factory=PriorsConfig)  # retinaface: the prior boxes and variances
    background: Optional[int] = None  # segment: a class id not reported (0 for VOC-style models); null = every class
    detr_scores: Literal["sigmoid", "softmax"] = "sigmoid"  # detr logits: RT-DETR/D-FINE sigmoid; DETR softmax (+ no-object)
    keypoints: Optional[List[int]] = None  # yolo_pose: [count, 2 or 3]; null = the metadata's kpt_shape, else [17, 3]
    # BlazeFace SSD anchors: [cells per row, anchors per cell] per feature map, in output order.
    anchor_grids: List[List[int]] = field(default_factory=lambda: [[16, 2], [8, 6]])


@dataclass
class ReconnectConfig:
    initial_delay_s: float = 0.5
    max_delay_s: float = 10.0
    max_attempts: int = 0  # 0 = keep trying until stopped


@dataclass
class SourceConfig:
    uri: str = "asset://megamind"
    loop: bool = False
    width: Optional[int] = None  # capture size for cameras (csi://, /dev/videoN)
    height: Optional[int] = None
    framerate: Optional[int] = None
    flip: int = 0  # csi://: nvvidconv flip-method 0..7
    live: Optional[bool] = None  # None = cameras and streams are live, files are not
    # What a camera hands over (csi://, /dev/videoN): auto = its own format (NV12 from nvvidconv, YUYV from a USB
    # camera) with preprocess: gpu, which converts it in the CUDA kernel, else bgr; files and streams are bgr.
    format: Literal["auto", "bgr", "bgrx", "rgba", "nv12", "yuyv", "uyvy"] = "auto"
    color_matrix: Literal["bt601", "bt709"] = "bt601"  # YCbCr formats: the camera's matrix ...
    color_range: Literal["limited", "full"] = "limited"  # ... and range (limited: Y 16..235)
    reconnect: ReconnectConfig = field(default_factory=ReconnectConfig)


@dataclass
class SourceTaskConfig:
    """Per-source task keys of a pool source; null keeps the run's ``task`` value."""

    score_threshold: Optional[float] = None
    iou_threshold: Optional[float] = None
    max_detections: Optional[int] = None
    agnostic_nms: Optional[bool] = None
    top_k: Optional[int] = None


@dataclass
class SourceSinksConfig:
    results: Optional[str] = None  # this source's JSONL results
    video: Optional[str] = None  # this source's annotated video


@dataclass
class PoolSourceConfig(SourceConfig):
    """One of ``sources``: a source config with a name, its own task keys and sinks. ``live`` is its drop policy:
    true drops the oldest waiting frame when its engine is behind (cameras, streams), false waits (files)."""

    name: Optional[str] = None  # in topics, labels and logs: letters, digits, '-', '_', '.'; null = cam0, cam1, ...
    spread: bool = False  # any engine with nothing of its own takes this source's frames (the order is kept)
    task: SourceTaskConfig = field(default_factory=SourceTaskConfig)
    sinks: SourceSinksConfig = field(default_factory=SourceSinksConfig)


@dataclass
class PoolConfig:
    # The engines sources are spread over: tensorrt: gpu (model.engine), dla0, dla1 (pool.dla_engine on that core);
    # onnxruntime: cpu, cpu1, ... (one session each). Empty: one engine, as backend and dla_core say.
    engines: List[str] = field(default_factory=list)
    queue_size: int = 2  # frames of one source waiting for its engine; a live source drops the oldest beyond it
    # The DLA plan for dla0/dla1; null = MODEL.dla.engine beside model.engine (what edge-build --engines gpu,dla writes)
    dla_engine: Optional[str] = None


@dataclass
class MqttConfig:
    url: Optional[str] = None  # mqtt://[user:pass@]host[:port]/topic/prefix, or mqtts:// (TLS); None = off
    ca_file: Optional[str] = None  # mqtts: CA bundle that signed the broker's certificate; None = the system's CAs
    cert_file: Optional[str] = None  # mqtts: client certificate and key, for brokers that want one
    key_file: Optional[str] = None
    qos: int = 0  # 0 or 1
    only_detections: bool = False  # publish only frames with at least one detection or class
    queue_size: int = 1000  # messages kept while the broker is away; beyond that the oldest are dropped
    client_id: Optional[str] = None  # None = edge-<hostname>-<pid>
    keepalive_s: int = 30
    protocol: Literal["5", "3.1.1"] = "5"  # MQTT 5 learns the broker's packet size limit; 3.1.1 for brokers without 5
    # The largest PUBLISH packet (topic and payload included) to send; larger results are dropped and counted, never
    # sent (a broker closes the connection on one, and QoS 1 would resend it after every reconnect). None = the
    # broker's own limit (MQTT 5 CONNACK), else none.
    max_packet_bytes: Optional[int] = None


@dataclass
class SinksConfig:
    results: Optional[str] = None  # JSONL, one line per frame
    video: Optional[str] = None  # annotated video file
    display: bool = False
    summary_json: Optional[str] = None
    mqtt: MqttConfig = field(default_factory=MqttConfig)


@dataclass
class MetricsConfig:
    port: Optional[int] = None  # serve Prometheus /metrics on this port while the run lasts; None = off
    address: str = "127.0.0.1"  # 0.0.0.0 lets a Prometheus on another host scrape it
    textfile: Optional[str] = None  # node_exporter textfile collector: write the same series to this .prom file
    textfile_interval_s: float = 15.0
    # The `camera` label on every series; None = $EDGE_INSTANCE (the systemd unit sets it), else "default".
    camera: Optional[str] = None
    # Host names requests may be addressed to, beyond this machine's own names and addresses (docs/fleet.md#threat-model)
    allowed_hosts: List[str] = field(default_factory=list)
    auth_file: Optional[str] = None  # a file (mode 600) holding a secret every request must carry; None = no login


@dataclass
class ViewConfig:
    port: Optional[int] = None  # serve the live view (annotated MJPEG plus FPS, latency, power) on this port; None = off
    address: str = "127.0.0.1"
    max_fps: float = 10.0  # frames encoded per second while someone watches (none while nobody does)
    quality: int = 70  # JPEG quality 1..100
    width: int = 960  # frames wider than this are scaled down before encoding
    max_viewers: int = 4
    allowed_hosts: List[str] = field(default_factory=list)  # as metrics.allowed_hosts
    auth_file: Optional[str] = None  # as metrics.auth_file: the browser asks for a password (any user name)


@dataclass
class PipelineConfig:
    queue_size: int = 4
    frames: Optional[int] = None  # stop after reading this many frames
    duration_s: Optional[float] = None
    status_interval_s: float = 2.0


@dataclass
class TelemetryConfig:
    # auto tries jtop, tegrastats, sysfs, nvml in that order and falls back to none, saying why.
    backend: Literal["auto", "jtop", "tegrastats", "sysfs", "nvml", "none", "replay"] = "auto"
    interval_s: float = 0.1
    idle_baseline_s: float = 0.0  # measure idle power this long before the first frame; 0 = no baseline
    dir: Optional[str] = None  # where telemetry.jsonl/.csv go; None = beside sinks.results (none without it)
    sysfs_root: str = "/sys"
    tegrastats_cmd: List[str] = field(default_factory=lambda: ["tegrastats"])
    gpu_index: int = 0  # nvml
    replay_path: Optional[str] = None  # replay: a recorded telemetry.jsonl or tegrastats log


@dataclass
class LoggingConfig:
    level: Literal["debug", "info", "warning", "error"] = "info"
    status: bool = True  # the periodic one-line status on stderr


@dataclass
class FileConfig:
    """Where a loaded config came from: the folder its relative paths start at, the file, and which keys flags set."""

    base_dir: Path = field(default_factory=Path.cwd, metadata={"internal": True})
    config_file: Optional[Path] = field(default=None, metadata={"internal": True})
    flags: Dict[str, str] = field(default_factory=dict, metadata={"internal": True})  # key -> the flag that set it

    def resolve_path(self, value: str) -> Path:
        """A path from the config, relative to the config file's folder."""
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.base_dir / p

    def optional_path(self, value: Optional[str]) -> Optional[Path]:
        return None if value is None else self.resolve_path(value)

    def name_of(self, key: str) -> str:
        """How to name a key in a message: the flag that set it, or the key in its file."""
        if key in self.flags:
            return self.flags[key]
        return (f"{self.config_file}: " if self.config_file else "") + f"key '{key}'"

    def settings(self) -> Dict[str, Any]:
        """The keys and values as plain data (for manifests and summaries), without the internal fields."""
        internal = {f.name for f in dataclasses.fields(FileConfig)}
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in internal}


@dataclass
class RunConfig(FileConfig):
    model: ModelConfig = field(default_factory=ModelConfig)
    backend: Literal["auto", "onnxruntime", "tensorrt"] = "auto"  # auto: tensorrt when only model.engine is set
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dla_core: Optional[int] = None  # tensorrt: the DLA core to run on; None = the core the engine was built for
    preprocess: Literal["cpu", "gpu"] = "cpu"  # gpu: the CUDA kernel writes TensorRT's input buffer (tensorrt only)
    # preprocess: gpu: the frame buffers' memory. mapped: the kernel reads the frame where it was decoded (no upload);
    # upload: page-locked, copied to the GPU on the frame's stream; auto: mapped on an integrated GPU (Jetson).
    frame_memory: Literal["auto", "mapped", "upload"] = "auto"
    threads: int = 0  # ONNX Runtime intra-op threads; 0 = all cores but one (the other stages need one)
    input: InputConfig = field(default_factory=InputConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    source: SourceConfig = field(default_factory=SourceConfig)
    sources: List[PoolSourceConfig] = field(default_factory=list)  # many sources in one process (docs/pool.md)
    pool: PoolConfig = field(default_factory=PoolConfig)
    sinks: SinksConfig = field(default_factory=SinksConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    view: ViewConfig = field(default_factory=ViewConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)


def load_config(
    path: str | Path | None,
    overrides: list[str] | None = None,
    values: dict[str, Any] | None = None,
    flags: dict[str, str] | None = None,
) -> RunConfig:
    """Load a run config (or the defaults when ``path`` is None), then apply ``key.path=value`` strings
    (values parsed as YAML) and ``values`` ({"key.path": python value}, from dedicated CLI flags).

    ``flags`` maps a key to the flag that set it ({"pipeline.duration_s": "--duration"}): an error about that key
    then names the flag, not the file.
    """
    names, given = given_by_flags(flags, overrides, values)
    with flag_errors(names, given):
        cfg, origin = load_dataclass(RunConfig, path, overrides, values)
        cfg.flags = {k: f for k, f in names.items() if k in given}  # --set KEY too: the key is not the file's
        _check(cfg, origin)
    return cfg


def key_error(origin: str, key: str, detail: str) -> ConfigError:
    """The error for one key: ``origin: key 'a.b': detail`` (renamed to the flag's name where a flag set it)."""
    return ConfigError(f"{origin}: key '{key}': {detail}", key=key, detail=detail)


def given_by_flags(
    flags: dict[str, str] | None, overrides: list[str] | None, values: dict[str, Any] | None
) -> tuple[dict[str, str], dict[str, Any]]:
    """(key -> flag, key -> value as given) for the keys set on the command line, ``--set`` included."""
    names, given = dict(flags or {}), dict(values or {})
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if sep and key.strip():
            names[key.strip()], given[key.strip()] = f"--set {key.strip()}", raw
    return names, given


@contextlib.contextmanager
def flag_errors(flags: dict[str, str] | None, values: dict[str, Any] | None) -> Iterator[None]:
    """Report an error about a key that a flag set under the flag's name: ``--duration nan: expected ...``."""
    try:
        yield
    except ConfigError as exc:
        # The key at fault, one a --set put below it (--set a.b=1 where 'a' is unknown), or the one a flag set whole
        # around it (--set input.mean=[0, x, 0] for 'input.mean[1]'). A dedicated flag below a broken section
        # (--model under a file's `model: 1`) is not blamed for the file.
        names = flags or {}
        below = [k for k in (values or {}) if exc.key and k.startswith(exc.key + ".") and names.get(k, "").startswith("--set ")]
        above = [k for k in (values or {}) if exc.key and exc.key.startswith((k + ".", k + "["))]
        key = exc.key if exc.key in (values or {}) else next(iter(above + below), None)
        flag = names.get(key or "")
        if flag is None or key is None:
            raise
        value = (values or {})[key]
        quiet = isinstance(value, bool) or str(value) in (exc.detail or "")  # the detail shows the value already
        given = flag if quiet else f"{flag} {short(value, 80)}"
        raise ConfigError(f"{given}: {exc.detail}", key=key, detail=exc.detail) from None


def load_dataclass(
    schema: type, path: str | Path | None, overrides: list[str] | None = None, values: dict[str, Any] | None = None
) -> tuple:
    """Any config schema (a dataclass tree) from YAML plus overrides, with the same precise errors.

    Returns (instance, origin). If the schema has a ``base_dir`` field it is set to the config file's folder.
    """
    data: dict[str, Any] = {}
    origin = "command line"  # no file: the keys came from flags and --set
    base = Path.cwd()
    if path is not None:
        p = Path(path)
        origin = str(p)
        loaded = load_yaml_file(p)
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{p}: the top level must be a mapping of keys, got {type(loaded).__name__}")
        data = loaded or {}
        base = p.resolve().parent
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {short(item)}: expected KEY.PATH=VALUE, e.g. source.uri=video.mp4")
        _set_key(data, key.strip(), load_yaml(raw, f"--set {key.strip()}") if raw.strip() else None)
    for key, value in (values or {}).items():
        _set_key(data, key, value)
    cfg = _build(schema, data, origin, "")
    if isinstance(cfg, FileConfig):
        cfg.base_dir = base
        cfg.config_file = Path(path) if path is not None else None
    return cfg, origin


# A config never needs more than a handful of YAML aliases; a few hundred bytes of nested aliases expand to
# gigabytes when walked or printed ("billion laughs"), so more than this is refused before anything walks it.
MAX_ALIASES = 16
MAX_CONFIG_BYTES = 1 << 20
MAX_INPUT_SIDE = 16384  # pixels; one 16384x16384 BGR frame is already 800 MB
MAX_DETECTIONS = 100_000  # per frame; each is a dict in the results line
MAX_LEVELS = 16  # task.*.feature_maps: detectors have 3 to 7 levels
MAX_STRIDE = 1024  # task.priors.steps: a feature map of a stride beyond this is one cell of any input


def load_yaml(text: str, origin: str) -> Any:
    """YAML with the safe loader, at most MAX_ALIASES aliases, errors as one ConfigError line naming ``origin``."""
    import yaml

    class _Bounded(yaml.SafeLoader):
        aliases = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > MAX_ALIASES:
                    raise ConfigError(f"{origin}: more than {MAX_ALIASES} YAML aliases (*name); write the values out")
            return super().compose_node(parent, index)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            # YAML keeps the last of two equal keys without a word: a second `task:` section silently replaced
            # the first. Keys a merge (<<) brings in may be overridden; the ones written out may not repeat.
            seen: Dict[Any, int] = {}
            for key, _ in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    line = key.start_mark.line + 1
                    if (key.tag, key.value) in seen:
                        first = seen[(key.tag, key.value)]
                        raise ConfigError(
                            f"{origin}: key {short(key.value, 60)} is given twice (lines {first} and {line}); keep one"
                        )
                    seen[(key.tag, key.value)] = line
            return super().construct_mapping(node, deep)

    try:
        return yaml.load(text, Loader=_Bounded)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{origin}: not valid YAML{where}: {short(getattr(exc, 'problem', None) or exc, 160)}") from None
    except RecursionError:
        raise ConfigError(f"{origin}: YAML nested too deeply") from None


def load_yaml_file(path: Path) -> Any:
    """A YAML file read as UTF-8 (size-capped), or one ConfigError line saying what is wrong with it."""
    from edge.inputs import read_capped

    try:
        raw = read_capped(path, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found; pass an existing YAML file (e.g. configs/demo.yaml)") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}); save the config as UTF-8") from None
    return load_yaml(text, str(path))


def short(value: Any, limit: int = 120) -> str:
    """A bounded repr for error messages: never more than about ``limit`` characters of a value."""
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxstring, r.maxother, r.maxlist, r.maxdict = 3, limit, limit, 8, 8
    text = r.repr(value)
    return text if len(text) <= limit + 20 else text[:limit] + "…"


def _set_key(data: dict, key: str, value: Any) -> None:
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override '{key}': '{part}' is not a section")
    node[parts[-1]] = value


def _build(cls: type, data: Any, origin: str, prefix: str) -> Any:
    if not isinstance(data, dict):
        key = prefix.rstrip(".") or "<top>"
        raise key_error(origin, key, f"expected a mapping of keys, got {short(data)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(str(key), fields, n=1)
        hint = f"did you mean '{prefix}{close[0]}'?" if close else f"known keys here: {', '.join(fields)}"
        detail = f"unknown key '{prefix}{key}'; {hint}"
        raise ConfigError(f"{origin}: {detail}", key=f"{prefix}{key}", detail=detail)
    kwargs = {name: _convert(hints[name], data[name], origin, f"{prefix}{name}") for name in data}
    return cls(**kwargs)


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in _UNIONS:
        return " or ".join("null" if a is type(None) else _describe(a) for a in typing.get_args(tp))
    if origin is list:
        return f"a list (each item {_describe(typing.get_args(tp)[0])})"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return {int: "an integer", float: "a finite number", bool: "true or false", str: "a string"}.get(tp, str(tp))


def _convert(tp: Any, value: Any, origin: str, key: str) -> Any:
    def fail() -> ConfigError:
        return key_error(origin, f"{key}", f"expected {_describe(tp)}, got {short(value)}")

    org = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value if value is not None else {}, origin, key + ".")
    if org in _UNIONS:
        args = typing.get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise fail()
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, origin, key)
            except ConfigError:
                continue
        raise fail()
    if org is Literal:
        if value in typing.get_args(tp):
            return value
        raise fail()
    if org is list:
        if not isinstance(value, list):
            raise fail()
        (item_tp,) = typing.get_args(tp)
        return [_convert(item_tp, v, origin, f"{key}[{i}]") for i, v in enumerate(value)]
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise fail()
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise fail()
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        raise fail()
    if tp is str:
        if isinstance(value, str):
            return value
        raise fail()
    raise fail()  # pragma: no cover - a schema type this loader does not know


def _bad(origin: str, key: str, expected: str, value: Any) -> ConfigError:
    return key_error(origin, f"{key}", f"expected {expected}, got {short(value)}")


def check_onnx_source(cfg: Any, origin: str) -> None:
    """model.path and model.asset: at most one, and the file must exist (run and build configs alike)."""
    m = cfg.model
    if m.path and m.asset:
        raise ConfigError(f"{origin}: keys 'model.path' and 'model.asset' both set; keep one")
    if m.path and not cfg.resolve_path(m.path).is_file():
        raise key_error(origin, "model.path", f"{missing(cfg.resolve_path(m.path))}: {cfg.resolve_path(m.path)}")


def check_input(i: InputConfig, origin: str) -> None:
    """The input section's value rules (run and build configs alike)."""
    if i.size is not None and (len(i.size) != 2 or min(i.size) <= 0):
        raise _bad(origin, "input.size", "[width, height] with two positive integers", i.size)
    for key in ("mean", "std"):
        vals = getattr(i, key)
        if len(vals) not in (1, 3):
            raise _bad(origin, f"input.{key}", "1 or 3 numbers", vals)
    if any(s == 0 for s in i.std):
        raise _bad(origin, "input.std", "non-zero numbers", i.std)
    if i.pad_value is not None and not 0 <= i.pad_value <= 255:
        raise _bad(origin, "input.pad_value", "an integer 0..255", i.pad_value)
    if i.size is not None and max(i.size) > MAX_INPUT_SIDE:
        raise _bad(origin, "input.size", f"at most {MAX_INPUT_SIDE} pixels a side", i.size)
    # (pixel * scale + offset - mean) / std over the pixel range must stay a finite float32 (scale 1e38 made NaNs).
    for pixel in (0.0, 255.0):
        for mean, std in zip(i.mean * (3 // len(i.mean)), i.std * (3 // len(i.std))):
            value = (pixel * i.scale + i.offset - mean) / std
            if not math.isfinite(value) or abs(value) > 3.0e38:
                raise _bad(
                    origin,
                    "input.scale",
                    "scale, offset, mean and std that keep (pixel * scale + offset - mean) / std a finite float32 for "
                    "pixels 0..255 (e.g. scale 1/255)",
                    {"scale": i.scale, "offset": i.offset, "mean": i.mean, "std": i.std},
                )


def _check(cfg: RunConfig, origin: str) -> None:
    """Rules that span more than one key's type."""

    def bad(key: str, expected: str, value: Any) -> ConfigError:
        return _bad(origin, key, expected, value)

    m = cfg.model
    if not (m.path or m.asset or m.engine):
        raise key_error(origin, "model", "set one of model.path (an ONNX file) or model.asset (see `edge assets list`)")
    check_onnx_source(cfg, origin)
    if cfg.backend == "auto":
        cfg.backend = "tensorrt" if m.engine and not (m.path or m.asset) else "onnxruntime"
    if cfg.backend == "tensorrt":
        if not m.engine:
            raise key_error(origin, "model.engine", "backend tensorrt needs an engine file: set model.engine to MODEL.engine")
        if not cfg.resolve_path(m.engine).is_file():
            raise key_error(origin, "model.engine", f"{missing(cfg.resolve_path(m.engine))}: {cfg.resolve_path(m.engine)}")
    if cfg.dla_core is not None:
        if cfg.dla_core < 0:
            raise bad("dla_core", "a DLA core index 0, 1, ... or null", cfg.dla_core)
        if cfg.backend != "tensorrt":
            raise key_error(origin, "dla_core", "the DLA runs TensorRT engines; set backend: tensorrt and model.engine")
    if cfg.preprocess == "gpu" and cfg.backend != "tensorrt":
        raise key_error(
            origin, "preprocess", "gpu writes straight into TensorRT's input buffer; use backend: tensorrt or preprocess: cpu"
        )
    if cfg.frame_memory != "auto" and cfg.preprocess != "gpu":
        raise key_error(origin, "frame_memory", "applies to preprocess: gpu only; set preprocess: gpu or leave it auto")
    check_source_format(cfg.source, origin)
    check_input(cfg.input, origin)
    t = cfg.task
    for key in ("score_threshold", "iou_threshold"):
        if getattr(t, key) is not None and not 0.0 <= getattr(t, key) <= 1.0:
            raise bad(f"task.{key}", "a number between 0 and 1, or null for the decoder's default", getattr(t, key))
    if t.top_k < 1:
        raise bad("task.top_k", "a positive integer", t.top_k)
    if t.max_detections is not None and not 1 <= t.max_detections <= MAX_DETECTIONS:
        raise bad("task.max_detections", f"an integer 1..{MAX_DETECTIONS}, or null for the decoder's default", t.max_detections)
    if t.keypoints is not None and (len(t.keypoints) != 2 or not 1 <= t.keypoints[0] <= 1000 or t.keypoints[1] not in (2, 3)):
        raise bad("task.keypoints", "[count, 2 or 3], e.g. [17, 3] for COCO keypoints with visibility", t.keypoints)
    if not t.anchor_grids or any(len(g) != 2 or min(g) < 1 for g in t.anchor_grids):
        raise bad("task.anchor_grids", "a list of [cells_per_row, anchors_per_cell] pairs", t.anchor_grids)
    pr = t.priors
    if (
        not pr.steps
        or len(pr.min_sizes) != len(pr.steps)
        or any(not 1 <= s <= MAX_STRIDE for s in pr.steps)
        or any(not sizes or any(not 0 < m <= MAX_INPUT_SIDE for m in sizes) for sizes in pr.min_sizes)
    ):
        raise bad(
            "task.priors",
            f"steps of 1..{MAX_STRIDE} and one list of prior sizes (pixels, > 0) per step",
            {"steps": pr.steps, "min_sizes": pr.min_sizes},
        )
    if len(pr.variances) != 2 or not all(0 < v <= 10 for v in pr.variances):
        raise bad("task.priors.variances", "two numbers in (0, 10]: centre and size, e.g. [0.1, 0.2]", pr.variances)
    for key, maps in (
        ("task.ssd.feature_maps", t.ssd.feature_maps),
        ("task.torchvision.feature_maps", t.torchvision.feature_maps),
    ):
        if maps is not None and (
            not maps or len(maps) > MAX_LEVELS or any(len(m) != 2 or not all(1 <= v <= MAX_INPUT_SIDE for v in m) for m in maps)
        ):
            raise bad(key, f"1..{MAX_LEVELS} [rows, columns] pairs of 1..{MAX_INPUT_SIDE}, or null", maps)
    if t.torchvision.topk_candidates is not None and not 1 <= t.torchvision.topk_candidates <= MAX_DETECTIONS:
        raise bad("task.torchvision.topk_candidates", f"an integer 1..{MAX_DETECTIONS}, or null", t.torchvision.topk_candidates)
    if isinstance(t.labels, str) and not cfg.resolve_path(t.labels).is_file():
        raise key_error(origin, "task.labels", f"{missing(cfg.resolve_path(t.labels))}: {cfg.resolve_path(t.labels)}")
    p = cfg.pipeline
    if p.queue_size < 1:
        raise bad("pipeline.queue_size", "a positive integer", p.queue_size)
    if p.frames is not None and p.frames < 1:
        raise bad("pipeline.frames", "a positive integer or null", p.frames)
    if p.duration_s is not None and p.duration_s <= 0:
        raise bad("pipeline.duration_s", "a positive number or null", p.duration_s)
    if not 0 <= cfg.threads <= MAX_THREADS:
        raise bad("threads", f"0 (the runtime's default) or a positive integer up to {MAX_THREADS}", cfg.threads)
    r = cfg.source.reconnect
    if r.initial_delay_s <= 0 or r.max_delay_s < r.initial_delay_s or r.max_attempts < 0:
        raise bad(
            "source.reconnect", "initial_delay_s > 0, max_delay_s >= initial_delay_s, max_attempts >= 0", dataclasses.asdict(r)
        )
    tel = cfg.telemetry
    if tel.interval_s <= 0:
        raise bad("telemetry.interval_s", "a positive number", tel.interval_s)
    if tel.idle_baseline_s < 0:
        raise bad("telemetry.idle_baseline_s", "0 (no baseline) or a positive number of seconds", tel.idle_baseline_s)
    if tel.backend == "replay" and not (tel.replay_path and cfg.resolve_path(tel.replay_path).is_file()):
        got = f"{cfg.resolve_path(tel.replay_path)} does not exist" if tel.replay_path else "it is not set"
        raise key_error(
            origin, "telemetry.replay_path", f"the replay backend needs an existing telemetry.jsonl or tegrastats log; {got}"
        )
    if not 0 <= cfg.source.flip <= 7:
        raise bad("source.flip", "an integer 0..7 (nvvidconv flip-method)", cfg.source.flip)
    check_fleet(cfg, origin)
    check_pool(cfg, origin)


SOURCE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # safe in MQTT topics, file names, labels and logs
ENGINE_NAMES = {"tensorrt": re.compile(r"gpu|dla[0-9]"), "onnxruntime": re.compile(r"(cpu|cuda)[0-9]?")}
MAX_ENGINES = 8
MAX_SOURCES = 64


def check_pool(cfg: Any, origin: str) -> None:
    """``sources`` and ``pool``: names, engines and what a pool cannot do (one window, one GPU-preprocessing source)."""

    def bad(key: str, expected: str, value: Any) -> ConfigError:
        return _bad(origin, key, expected, value)

    pool, sources = cfg.pool, cfg.sources
    if not sources:
        if pool.engines:
            raise key_error(origin, "pool.engines", "a pool needs its sources: list them under sources (docs/pool.md)")
        return
    if len(sources) > MAX_SOURCES:
        raise bad("sources", f"at most {MAX_SOURCES} sources in one process", f"{len(sources)} sources")
    if cfg.source.uri != SourceConfig.uri:
        raise key_error(origin, "source", "both source and sources are set; a pool reads sources only, keep one")
    for key, value, why in (
        ("preprocess", cfg.preprocess == "gpu", "the pool preprocesses on the CPU; use preprocess: cpu"),
        ("sinks.display", cfg.sinks.display, "one window cannot show several sources; use the live view (view.port)"),
        ("sinks.video", cfg.sinks.video, "one video cannot hold several sources; set sources[N].sinks.video"),
    ):
        if value:
            raise key_error(origin, key, why)
    seen: Dict[str, int] = {}
    for i, src in enumerate(sources):
        key = f"sources[{i}]"
        if src.name is None:
            src.name = f"cam{i}"
        if not SOURCE_NAME.fullmatch(src.name):
            raise bad(f"{key}.name", "1-64 letters, digits, '-', '_' or '.', starting with a letter or digit", src.name)
        if src.name in seen:
            raise key_error(
                origin, f"{key}.name", f"{src.name!r} is also the name of sources[{seen[src.name]}]; names must differ"
            )
        seen[src.name] = i
        if not src.uri.strip():
            raise bad(f"{key}.uri", "a source URI (file, folder, /dev/videoN, csi://N, rtsp://...)", src.uri)
        check_asset_uri(src.uri, origin, f"{key}.uri")
        if src.format not in ("auto", "bgr") and not src.uri.strip().startswith(CAMERA_PREFIXES):
            raise key_error(
                origin, f"{key}.format", f"{src.format} is what a camera delivers; {short(src.uri, 60)} decodes to bgr"
            )
        if not 0 <= src.flip <= 7:
            raise bad(f"{key}.flip", "an integer 0..7 (nvvidconv flip-method)", src.flip)
        r = src.reconnect
        if r.initial_delay_s <= 0 or r.max_delay_s < r.initial_delay_s or r.max_attempts < 0:
            raise bad(
                f"{key}.reconnect",
                "initial_delay_s > 0, max_delay_s >= initial_delay_s, max_attempts >= 0",
                dataclasses.asdict(r),
            )
        t = src.task
        for name in ("score_threshold", "iou_threshold"):
            value = getattr(t, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise bad(f"{key}.task.{name}", "a number between 0 and 1, or null for the run's task value", value)
        if t.max_detections is not None and not 1 <= t.max_detections <= MAX_DETECTIONS:
            raise bad(f"{key}.task.max_detections", f"an integer 1..{MAX_DETECTIONS}, or null", t.max_detections)
        if t.top_k is not None and t.top_k < 1:
            raise bad(f"{key}.task.top_k", "a positive integer, or null", t.top_k)
    if not 1 <= pool.queue_size <= 64:
        raise bad("pool.queue_size", "an integer 1..64", pool.queue_size)
    if len(pool.engines) > MAX_ENGINES:
        raise bad("pool.engines", f"at most {MAX_ENGINES} engines", pool.engines)
    pattern = ENGINE_NAMES[cfg.backend]
    for i, name in enumerate(pool.engines):  # named as the whole key, so --engines is named when it set them
        if not pattern.fullmatch(name):
            allowed = "gpu, dla0, dla1" if cfg.backend == "tensorrt" else "cpu, cpu1, ... or cuda, cuda1, ... (one session each)"
            raise key_error(origin, "pool.engines", f"{short(name)} is not an engine of backend {cfg.backend}; use {allowed}")
        if name in pool.engines[:i]:
            raise key_error(origin, "pool.engines", f"{name} is listed twice; each engine once")
    if cfg.backend == "tensorrt" and any(e.startswith("dla") for e in pool.engines):
        from edge.manifest import dla_engine_path

        plan = cfg.resolve_path(pool.dla_engine) if pool.dla_engine else dla_engine_path(cfg.resolve_path(cfg.model.engine))
        if not plan.is_file():
            raise key_error(
                origin,
                "pool.dla_engine",
                f"file not found: {plan}; build it with edge-build --engines gpu,dla (or set pool.dla_engine)",
            )
    elif pool.dla_engine:
        raise key_error(origin, "pool.dla_engine", "is for the dla0/dla1 engines of backend tensorrt; list them in pool.engines")


CAMERA_PREFIXES = ("csi://", "v4l2://", "/dev/video")


def check_asset_uri(uri: str, origin: str, key: str) -> None:
    """An asset:// source names a pinned asset: a misspelt one is refused here, not after the model has loaded."""
    from edge.assets import ASSETS

    scheme, _, name = uri.strip().partition("://")
    if scheme.lower() == "asset" and name not in ASSETS:
        raise key_error(origin, key, f"unknown asset {short(name, 60)}; known: {', '.join(ASSETS)} (`edge assets list`)")


def check_source_format(src: SourceConfig, origin: str) -> None:
    """source.format other than auto/bgr is for cameras: files, folders and streams decode to BGR."""
    check_asset_uri(src.uri, origin, "source.uri")
    if src.format not in ("auto", "bgr") and not src.uri.strip().startswith(CAMERA_PREFIXES):
        raise key_error(
            origin,
            "source.format",
            f"{src.format} is what a camera delivers (csi://N, /dev/videoN); {short(src.uri, 60)} decodes to bgr: use auto",
        )


def _host_name(text: Any) -> bool:
    """A DNS name or an IP address."""
    import ipaddress

    if not isinstance(text, str):
        return False
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,62})(\.[a-z0-9]([a-z0-9-]{0,62}))*\.?", text.lower()) is not None


def check_fleet(cfg: Any, origin: str) -> None:
    """The MQTT, metrics and live-view keys' value rules (a run and `edge service install` alike)."""
    q, m, v = cfg.sinks.mqtt, cfg.metrics, cfg.view
    rules = (
        ("sinks.mqtt.qos", q.qos, q.qos in (0, 1) and not isinstance(q.qos, bool), "0 or 1"),
        ("sinks.mqtt.queue_size", q.queue_size, q.queue_size >= 1, "a positive integer"),
        ("sinks.mqtt.keepalive_s", q.keepalive_s, 5 <= q.keepalive_s <= 65535, "an integer 5..65535"),
        (
            "sinks.mqtt.max_packet_bytes",
            q.max_packet_bytes,
            q.max_packet_bytes is None or 128 <= q.max_packet_bytes <= 268_435_460,
            "bytes 128..268435460 (MQTT's largest packet), or null",
        ),
        ("metrics.textfile", m.textfile, m.textfile is None or m.textfile.endswith(".prom"), "a file name ending in .prom"),
        ("metrics.textfile_interval_s", m.textfile_interval_s, m.textfile_interval_s > 0, "a positive number"),
        ("view.max_fps", v.max_fps, v.max_fps > 0, "a positive number"),
        ("view.quality", v.quality, 1 <= v.quality <= 100, "a JPEG quality 1..100"),
        ("view.width", v.width, v.width >= 16, "a width of at least 16 pixels"),
        ("view.max_viewers", v.max_viewers, 1 <= v.max_viewers <= 64, "an integer 1..64"),
    )
    for key, value, ok, expected in rules:
        if not ok:
            raise _bad(origin, key, expected, value)
    for key, hosts in (("metrics.allowed_hosts", m.allowed_hosts), ("view.allowed_hosts", v.allowed_hosts)):
        if len(hosts) > 64:
            raise _bad(origin, key, "at most 64 names", len(hosts))
        for h in hosts:  # anything else could never match a Host header
            if not _host_name(h):
                raise _bad(origin, key, "host names or IP addresses, such as jetson.lan", h)
    ports: dict = {}
    for key, port in (("metrics.port", m.port), ("view.port", v.port)):
        if port is None:
            continue
        if not 1024 <= port <= 65535:
            # The service runs as an unprivileged user: a port below 1024 would only fail once it starts.
            raise _bad(origin, key, "a port 1024..65535 (below 1024 needs root), e.g. 9101 for metrics, 8090 for the view", port)
        if port in ports:
            raise ConfigError(f"{origin}: keys '{ports[port]}' and '{key}' are both port {port}; give each its own")
        ports[port] = key
