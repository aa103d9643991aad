"""Config loading: defaults, overrides, and errors that name the file, the key and what was expected."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from edge.config import load_config
from edge.errors import ConfigError, EdgeError

from .conftest import DEMO_CONFIG


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "cam.yaml"
    p.write_text(text)
    return p


def test_demo_config_loads_with_its_values():
    cfg = load_config(DEMO_CONFIG)
    assert cfg.model.asset == "blazeface-back-256"
    assert cfg.input.size == [256, 256] and cfg.input.layout == "nhwc"
    assert cfg.task.type == "blazeface" and cfg.source.uri == "asset://megamind"


def test_mistyped_key_names_file_path_and_suggestion(tmp_path):
    p = write(tmp_path, "model: {asset: blazeface-back-256}\ninput:\n  szie: [256, 256]\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(p) in str(e.value) and "'input.szie'" in str(e.value) and "did you mean 'input.size'" in str(e.value)


def test_wrong_type_names_key_and_expected_value(tmp_path):
    p = write(tmp_path, "model: {asset: x}\npipeline: {queue_size: lots}\n")
    with pytest.raises(ConfigError, match=r"key 'pipeline.queue_size': expected an integer, got 'lots'"):
        load_config(p)
    p = write(tmp_path, "model: {asset: x}\ninput: {layout: chw}\n")
    with pytest.raises(ConfigError, match=r"key 'input.layout': expected one of 'auto', 'nchw', 'nhwc', got 'chw'"):
        load_config(p)


def test_missing_model_file_is_named(tmp_path):
    p = write(tmp_path, "model: {path: nothere.onnx}\n")
    with pytest.raises(ConfigError, match=r"model.path': file not found: .*nothere.onnx"):
        load_config(p)


def test_missing_config_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "none.yaml")
    with pytest.raises(ConfigError, match=r"cam.yaml: not valid YAML at line \d+, column \d+"):
        load_config(write(tmp_path, "model:\n  path: [unclosed\n"))


def test_overrides_apply_after_the_file_and_are_typed(tmp_path):
    cfg = load_config(DEMO_CONFIG, ["task.score_threshold=0.8", "source.loop=true"], {"pipeline.frames": 7})
    assert cfg.task.score_threshold == 0.8 and cfg.source.loop is True and cfg.pipeline.frames == 7
    with pytest.raises(ConfigError, match="expected a number between 0 and 1"):
        load_config(DEMO_CONFIG, ["task.score_threshold=3"])
    with pytest.raises(ConfigError, match="expected KEY.PATH=VALUE"):
        load_config(DEMO_CONFIG, ["nonsense"])


def test_relative_paths_resolve_against_the_config_folder(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"x")
    cfg = load_config(write(tmp_path, "model: {path: m.onnx}\n"))
    assert cfg.resolve_path(cfg.model.path) == tmp_path / "m.onnx"


def test_the_commented_example_shows_every_key_at_its_default_but_the_three_it_marks():
    """Its header promises the defaults: a key that drifts from the schema (it showed BlazeFace's values) fails."""
    import dataclasses

    from edge.config import RunConfig, load_dataclass

    example = DEMO_CONFIG.with_name("camera.example.yaml")
    cfg, _ = load_dataclass(RunConfig, example)
    marked = {"model.path", "source.uri", "sinks.results"}

    def flat(d, prefix=""):
        for k, v in d.items():
            yield from (flat(v, f"{prefix}{k}.") if isinstance(v, dict) else [(f"{prefix}{k}", v)])

    internal = {f.name for f in dataclasses.fields(RunConfig) if f.metadata.get("internal")}
    shown = {k: v for k, v in flat(dataclasses.asdict(cfg)) if k.split(".")[0] not in internal}
    defaults = {k: v for k, v in flat(dataclasses.asdict(RunConfig())) if k.split(".")[0] not in internal}
    assert shown.keys() == defaults.keys()
    differ = {
        k for k in shown if shown[k] != defaults[k] and not (isinstance(shown[k], float) and abs(shown[k] - defaults[k]) < 1e-12)
    }
    assert differ == marked
    text = example.read_text()
    for key in marked:
        line = next(line for line in text.splitlines() if line.strip().startswith(key.split(".")[-1] + ":"))
        assert "set this" in line


def test_an_unknown_key_in_the_file_is_the_file_s(tmp_path: Path):
    config = tmp_path / "cam.yaml"
    config.write_text("pipline:\n  frames: 3\n")
    with pytest.raises(ConfigError, match=r"cam.yaml: unknown key 'pipline'; did you mean 'pipeline'"):
        load_config(config, ["pipeline.frames=4"])


def test_a_key_of_the_file_is_named_file_first(tmp_path: Path):
    """FILE: key 'a.b' VALUE: ... (the value used to run into the file's name: "key 'a.b' in FILE VALUE")."""
    from edge.runtime.runner import check_run_outputs

    config = tmp_path / "cam.yaml"
    config.write_text(DEMO_CONFIG.read_text() + "sinks:\n  results: /nonexistent/r.jsonl\n")
    with pytest.raises(
        EdgeError,
        match=rf"^{re.escape(str(config))}: key 'sinks.results' "
        r"/nonexistent/r.jsonl: folder /nonexistent does not exist",
    ):
        check_run_outputs(load_config(config))


def test_every_task_type_is_a_value_the_config_takes():
    """task.type's Literal and TASK_TYPES (what the property tests draw from) list the same decoders, and each has
    a fit in the head chooser: a decoder added in one place only is a type no config can name, or a crash."""
    import dataclasses
    import typing

    from edge.config import TASK_TYPES, TaskConfig
    from edge.runtime.postprocess import DEFAULTS
    from edge.runtime.postprocess.heads import FITS

    hints = typing.get_type_hints(TaskConfig)
    assert typing.get_args(hints["type"]) == TASK_TYPES
    assert set(TASK_TYPES) - {"auto"} == set(FITS) == set(DEFAULTS)
    assert {f.name for f in dataclasses.fields(TaskConfig)} >= {"background", "detr_scores"}


def refusal(overrides, config=DEMO_CONFIG, **kw):
    with pytest.raises(ConfigError) as e:
        load_config(config, overrides, **kw)
    return str(e.value)


# Each value on both sides of a documented limit: docs/robustness.md "Limits on work from small inputs",
# docs/edge-run.md's config reference, docs/pool.md and docs/fleet.md, or the definition named; the last column is
# what the message must say of the limit.
LIMITS = [
    ("threads", 256, 257, "256"),  # --threads: 256
    ("pipeline.queue_size", 1, 0, ""),
    ("pipeline.frames", 1, 0, ""),
    ("pipeline.duration_s", 0.1, 0, ""),
    ("input.size", [16384, 16384], [16385, 16], "16384"),  # a model's input size: 16384 pixels a side
    ("input.size", [1, 1], [0, 16], "[width, height]"),
    ("input.pad_value", 255, 256, "0..255"),  # the letterbox's grey, a byte
    ("input.pad_value", 0, -1, "0..255"),
    ("input.std", [1, 2, 3], [1, 0, 3], ""),  # out = (...) / std
    ("input.mean", [0.5], [0.1, 0.2], ""),  # one per channel or one for all
    ("input.scale", "1.0e-30", "1.0e+37", ""),  # 255 * 1e37 is past float32's 3.4e38
    ("source.flip", 7, 8, "flip-method"),  # nvvidconv's flip-method 0..7
    ("source.flip", 0, -1, "0..7"),
    ("task.score_threshold", 1.0, 1.01, ""),  # a score threshold is a probability
    ("task.iou_threshold", 0.0, -0.1, ""),  # IoU is in [0, 1]
    ("task.top_k", 1, 0, ""),
    ("task.max_detections", 100_000, 100_001, "100000"),
    ("task.max_detections", 1, 0, ""),
    ("task.keypoints", [17, 2], [17, 4], "[17, 3]"),  # x, y and optionally visibility; COCO's 17
    ("task.keypoints", [1, 3], [0, 3], ""),
    ("task.anchor_grids", [[1, 1]], [[16, 0]], ""),
    ("task.priors.steps", [8, 16, 32], [8, 16, 0], ""),  # a stride is positive
    ("task.priors.min_sizes", [[1], [64], [256]], [[0], [64], [256]], ""),  # a prior of 1 pixel is still a prior
    ("task.priors.variances", [10, 0.2], [10.5, 0.2], ""),
    ("task.priors.variances", [0.1, 0.2], [0, 0.2], "[0.1, 0.2]"),
    # the levels and cells of a config's feature maps: a side of the input at most, 16 levels
    ("task.ssd.feature_maps", [[16384, 1]], [[16385, 1]], "16384"),
    ("task.torchvision.feature_maps", [[1, 1]] * 16, [[1, 1]] * 17, "1..16"),
    ("task.torchvision.feature_maps", [[20, 20]], [[20, 0]], ""),
    ("task.torchvision.topk_candidates", 100_000, 100_001, "100000"),
    ("telemetry.interval_s", 0.05, 0, ""),
    ("telemetry.idle_baseline_s", 0, -1, ""),
    ("source.reconnect.max_attempts", 0, -1, ""),
    ("sinks.mqtt.qos", 1, 2, "0 or 1"),  # MQTT QoS 0 or 1 (2 is not offered)
    ("sinks.mqtt.keepalive_s", 65535, 65536, "65535"),  # MQTT's Keep Alive is a two-byte integer
    ("sinks.mqtt.max_packet_bytes", 268_435_460, 268_435_461, ""),  # MQTT: 256 MiB - 1 of remaining length + 5
    ("sinks.mqtt.queue_size", 1, 0, ""),
    ("metrics.textfile", "edge.prom", "edge.txt", ".prom"),  # node_exporter's textfile collector reads *.prom only
    ("metrics.port", 1024, 1023, "1024"),  # below 1024 needs root (docs/fleet.md)
    ("view.port", 65535, 65536, "65535"),
    ("view.quality", 100, 101, "JPEG"),  # JPEG quality 1..100
    ("view.quality", 1, 0, "1..100"),
    ("view.max_viewers", 64, 65, ""),
    ("view.max_viewers", 1, 0, "1..64"),
    ("view.max_fps", 0.5, 0, ""),
    ("metrics.allowed_hosts", ["jetson.lan", "10.0.0.2"], ["bad host!"], ""),  # a Host header holds a name or IP
    ("view.allowed_hosts", ["x" * 63 + ".lan"], ["x" * 64 + ".lan"], ""),  # a DNS label is 1..63 octets
]


@pytest.mark.parametrize(("key", "ok", "bad", "says"), LIMITS, ids=[f"{k}={b}" for k, _, b, _ in LIMITS])
def test_a_key_is_taken_at_its_limit_and_refused_past_it_naming_the_flag(key, ok, bad, says):
    assert load_config(DEMO_CONFIG, [f"{key}={ok}"]) is not None
    message = refusal([f"{key}={bad}"])
    # docs/robustness.md: a value from --set is named as `--set KEY`
    assert message.startswith(f"--set {key}") and ": expected " in message and says in message, message


def test_a_file_s_bad_value_is_named_by_the_file_and_key(tmp_path):
    p = write(tmp_path, "model: {asset: x}\ninput: {scale: 1.0e+37}\n")
    assert refusal(None, config=p).startswith(f"{p}: key 'input.scale': expected scale, offset, mean and std that keep")
    p = write(tmp_path, "model: {asset: x}\nmetrics: {allowed_hosts: [" + ", ".join(["a"] * 65) + "]}\n")
    assert refusal(None, config=p).startswith(f"{p}: key 'metrics.allowed_hosts': expected ")


def test_reconnect_delays_must_grow_from_a_positive_start():
    assert load_config(DEMO_CONFIG, ["source.reconnect={initial_delay_s: 2, max_delay_s: 2}"]).source.reconnect.max_delay_s == 2
    for value in ("{initial_delay_s: 0}", "{initial_delay_s: 3, max_delay_s: 2}"):
        assert "--set source.reconnect" in refusal([f"source.reconnect={value}"])


def test_a_flag_s_value_is_named_by_the_flag_and_a_file_s_by_file_and_key(tmp_path):
    """docs/robustness.md: `--duration: expected ...`, `--set KEY`, `FILE: key 'a.b'`."""
    flags = {"pipeline.duration_s": "--duration"}
    message = refusal(None, values={"pipeline.duration_s": -1.0}, flags=flags)
    assert message.startswith("--duration: expected a positive number") and "-1.0" in message
    p = write(tmp_path, DEMO_CONFIG.read_text() + "pipeline: {duration_s: -1}\n")
    assert refusal(None, config=p).startswith(f"{p}: key 'pipeline.duration_s': expected a positive number")
    # a flag whose value the detail does not show gets the value after the flag
    # docs/edge-run.md: dla_core with the ONNX Runtime backend is a config error; the detail does not show the 0
    message = refusal(None, values={"dla_core": 0}, flags={"dla_core": "--dla"})
    assert message.startswith("--dla 0: the DLA runs TensorRT engines")
    # --set under a key the file gets wrong is blamed on the --set (the unknown section is its own)
    message = refusal(["pipline.frames=3"])
    assert message.startswith("--set pipline.frames") and "unknown key 'pipline'; did you mean 'pipeline'" in message


def test_an_empty_set_value_is_null_and_a_scalar_is_no_section():
    """--set reads its value as YAML (docs/edge-run.md); an empty one is YAML's null."""
    assert load_config(DEMO_CONFIG, ["task.score_threshold=0.5", "task.score_threshold="]).task.score_threshold is None
    assert "'uri' is not a section" in refusal(["source.uri.x=1"])
    assert "expected KEY.PATH=VALUE" in refusal(["=3"])


def test_floats_are_finite_and_typed_lists_are_checked_item_by_item(tmp_path):
    for value in (".nan", ".inf", "-.inf", "true"):
        assert "expected a finite number" in refusal([f"input.offset={value}"])
    assert load_config(DEMO_CONFIG, ["input.offset=3"]).input.offset == 3.0
    # the item at fault is named in a file; a --set that gave the whole list is named as the --set
    p = write(tmp_path, "model: {asset: x}\ninput: {mean: [0.1, x, 0.3]}\n")
    assert refusal(None, config=p) == f"{p}: key 'input.mean[1]': expected a finite number, got 'x'"
    assert refusal(["input.mean=[0.1, x, 0.3]"]).startswith("--set input.mean '[0.1, x, 0.3]': expected a finite number")
    assert refusal(["task.ssd={min_scale: x}"]).startswith("--set task.ssd")
    assert "expected true or false, got 1" in refusal(["source.loop=1"])
    assert "expected an integer, got True" in refusal(["source.flip=true"])
    assert "expected a string" in refusal(["source.uri=3"])
    assert "expected a list (each item a finite number), got 0.5" in refusal(["input.mean=0.5"])
    assert "expected an integer or null" in refusal(["source.width=wide"])
    assert load_config(DEMO_CONFIG, ["task.labels=[a, b]"]).task.labels == ["a", "b"]


def test_model_and_backend_rules_of_the_config_reference(tmp_path):
    """docs/edge-run.md: backend auto is TensorRT when only model.engine is set; dla_core and preprocess: gpu need
    it; frame_memory applies to preprocess: gpu; the replay backend reads an existing recording."""
    assert "key 'model': set one of model.path" in refusal(None, config=None)
    (tmp_path / "m.engine").write_bytes(b"x")
    engine = ["model.asset=", f"model.engine={tmp_path / 'm.engine'}"]
    assert load_config(DEMO_CONFIG, engine).backend == "tensorrt"
    assert load_config(DEMO_CONFIG, [f"model.engine={tmp_path / 'm.engine'}"]).backend == "onnxruntime"
    gpu = load_config(DEMO_CONFIG, [*engine, "preprocess=gpu", "frame_memory=mapped", "dla_core=0"])
    assert (gpu.preprocess, gpu.frame_memory, gpu.dla_core) == ("gpu", "mapped", 0)
    assert refusal(["preprocess=gpu"]).startswith("--set preprocess: gpu writes straight into TensorRT")
    assert refusal(["frame_memory=upload"]).startswith("--set frame_memory 'upload': applies to preprocess: gpu")
    assert f"{DEMO_CONFIG}: key 'model.engine': backend tensorrt needs an engine file" in refusal(["backend=tensorrt"])
    p = write(tmp_path, "model: {engine: none.engine}\n")
    assert refusal(None, config=p) == f"{p}: key 'model.engine': file not found: {tmp_path / 'none.engine'}"
    missing = refusal(["model.asset=", f"model.engine={tmp_path / 'none.engine'}"])
    assert missing.startswith("--set model.engine") and f"file not found: {tmp_path / 'none.engine'}" in missing
    assert "key 'telemetry.replay_path'" in refusal(["telemetry.backend=replay"])
    gone = refusal(["telemetry.backend=replay", f"telemetry.replay_path={tmp_path / 'none.jsonl'}"])
    assert gone.startswith("--set telemetry.replay_path") and str(tmp_path / "none.jsonl") in gone


def test_yaml_problems_are_one_line_naming_the_file(tmp_path):
    # docs/robustness.md: a key given twice in one mapping is refused with both line numbers
    p = write(tmp_path, "model: {asset: x}\ntask: {top_k: 1}\ntask: {top_k: 2}\n")
    assert refusal(None, config=p) == f"{p}: key 'task' is given twice (lines 2 and 3); keep one"
    # a control character is a reader error (no problem mark): still one line
    assert refusal(None, config=write(tmp_path, "model: {asset: x}\x07\n")).startswith(f"{p}: not valid YAML")
    p.write_bytes(b"model: {asset: \xff}\n")
    assert refusal(None, config=p).startswith(f"{p}: not UTF-8 text (byte 15)")
    assert refusal(["source=3"]).startswith("--set source") and "expected a mapping of keys, got 3" in refusal(["source=3"])


POOL = "model: {asset: x}\nsources:\n  - {uri: a.mp4}\n  - {uri: b.mp4}\n"


@pytest.mark.parametrize(
    ("override", "names"),
    [
        ("source.uri=c.mp4", "--set source"),  # docs/pool.md: a config has source or sources, not both
        ("sinks.video=v.mp4", "--set sinks.video"),  # refused with sources
        ("sinks.display=true", "--set sinks.display"),
        ("pool.queue_size=65", "--set pool.queue_size"),  # pool.queue_size 1-64
        ("pool.queue_size=0", "--set pool.queue_size"),
        ("pool.engines=[cpu, cpu1, cpu2, cpu3, cpu4, cpu5, cpu6, cpu7, cpu8]", "--set pool.engines"),  # at most 8
        ("pool.engines=[gpu]", "--set pool.engines"),  # ONNX Runtime: cpu, cpu1... or cuda...
        ("pool.engines=[cpu, cpu]", "--set pool.engines"),
        ("pool.dla_engine=d.engine", "--set pool.dla_engine"),  # the DLA plan, for backend tensorrt
    ],
)
def test_a_pool_config_is_refused_where_docs_pool_md_says(tmp_path, override, names):
    p = write(tmp_path, POOL)
    assert refusal([override], config=p).startswith(names)


def test_a_pool_s_refusals_from_the_file_name_the_file_and_the_fix(tmp_path):
    p = write(tmp_path, POOL + "source: {uri: c.mp4}\n")
    assert refusal(None, config=p).startswith(f"{p}: key 'source': ")
    p = write(tmp_path, POOL + "pool: {engines: [gpu]}\n")
    assert refusal(None, config=p).startswith(f"{p}: key 'pool.engines': 'gpu' is not an engine of backend onnxruntime")
    # docs/pool.md: use sources[N].sinks.video
    assert refusal(["sinks.video=v.mp4"], config=write(tmp_path, POOL)).endswith("sources[N].sinks.video")


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("{uri: a.mp4, name: 'a b'}", "sources[0].name"),  # docs/pool.md: 1-64 letters, digits, -, _, .
        ("{uri: a.mp4, name: " + "n" * 65 + "}", "sources[0].name"),
        ("{uri: ' '}", "sources[0].uri"),
        ("{uri: a.mp4, format: nv12}", "sources[0].format"),  # files decode to bgr
        ("{uri: a.mp4, flip: 8}", "sources[0].flip"),
        ("{uri: a.mp4, reconnect: {initial_delay_s: 0}}", "sources[0].reconnect"),
        ("{uri: a.mp4, task: {score_threshold: 1.5}}", "sources[0].task.score_threshold"),
        ("{uri: a.mp4, task: {max_detections: 0}}", "sources[0].task.max_detections"),
        ("{uri: a.mp4, task: {top_k: 0}}", "sources[0].task.top_k"),
    ],
)
def test_a_pool_source_s_own_keys_are_named_by_its_index(tmp_path, text, key):
    p = write(tmp_path, POOL.replace("{uri: a.mp4}", text))
    message = refusal(None, config=p)
    assert message.startswith(f"{p}: key '{key}': ")
    if key.endswith(".name"):
        assert "1-64 letters, digits" in message


def test_pool_source_names_default_to_cam_n_and_must_differ(tmp_path):
    p = write(tmp_path, POOL.replace("{uri: b.mp4}", "{uri: b.mp4, name: cam0}"))
    assert "'cam0' is also the name of sources[0]" in refusal(None, config=p)


def test_a_pool_takes_what_docs_pool_md_allows(tmp_path):
    text = POOL.replace("{uri: a.mp4}", "{uri: 'csi://0', format: nv12, name: " + "n" * 64 + "}")
    cfg = load_config(
        write(tmp_path, text),
        ["pool.engines=[cpu, cpu1]", "pool.queue_size=64"],
    )
    assert [s.name for s in cfg.sources] == ["n" * 64, "cam1"] and cfg.pool.queue_size == 64
    assert load_config(write(tmp_path, POOL), ["pool.queue_size=1"]).pool.queue_size == 1
    edge = POOL.replace("{uri: b.mp4}", "{uri: b.mp4, task: {score_threshold: 0, max_detections: 1, top_k: 1}}")
    assert load_config(write(tmp_path, edge)).sources[1].task.score_threshold == 0
    many = "model: {asset: x}\nsources:\n" + "".join(f"  - {{uri: {i}.mp4}}\n" for i in range(65))
    assert refusal(None, config=write(tmp_path, many)).startswith(f"{tmp_path / 'cam.yaml'}: key 'sources': ")
    assert "a pool needs its sources" in refusal(["pool.engines=[cpu]"])


def test_dla_engines_need_the_dla_plan_beside_the_engine(tmp_path):
    """docs/pool.md: pool.dla_engine null = MODEL.dla.engine beside model.engine."""
    (tmp_path / "m.engine").write_bytes(b"x")
    p = write(tmp_path, POOL.replace("model: {asset: x}", "model: {engine: m.engine}"))
    message = refusal(["pool.engines=[gpu, dla0]"], config=p)
    assert message.startswith(f"{p}: key 'pool.dla_engine': file not found: {tmp_path / 'm.dla.engine'}")
    (tmp_path / "m.dla.engine").write_bytes(b"x")
    assert load_config(p, ["pool.engines=[gpu, dla0]"]).pool.engines == ["gpu", "dla0"]


# Each refusal names the file and the key, says what is expected (or what to do) and shows the value given: the
# brief's one-line error. The cases are the refusals a mutation run (seed 2, 2026-12-04) found without a test.
_M = "model: {asset: blazeface-back-256}\n"
REFUSALS = [
    (_M + "task: {type: yolo, keypoints: [1001, 3]}\n", "task.keypoints", "[1001, 3]"),
    (_M + "dla_core: -1\n", "dla_core", "-1"),
    (_M + "pool: {engines: [cpu]}\n", "pool.engines", None),
    (_M + "source: {uri: a.mp4}\nsources: [{uri: b.mp4}]\n", "source", None),
    (_M + "sources: [" + ", ".join(f"{{uri: v{i}.mp4}}" for i in range(65)) + "]\n", "sources", "65 sources"),
    (
        _M + "sources: [{uri: a.mp4}]\npool: {engines: [cpu, cpu1, cpu2, cpu3, cpu4, cpu5, cpu6, cpu7, cpu8]}\n",
        "pool.engines",
        "'cpu'",
    ),
    (_M + "preprocess: gpu\nsources: [{uri: a.mp4}]\n", "preprocess", None),
    (_M + "sources: [{uri: ''}]\n", "sources[0].uri", "''"),
    (_M + "source: {uri: a.mp4, format: nv12}\n", "source.format", None),
    (_M + "sources: [{uri: a.mp4, task: {score_threshold: 2}}]\n", "sources[0].task.score_threshold", "2.0"),
    (_M + "sources: [{uri: a.mp4}]\npool: {engines: [tpu]}\n", "pool.engines", None),
    (_M + "task: {type: ssd, anchor_grids: [[3]]}\n", "task.anchor_grids", "[[3]]"),
    (_M + "view: {width: 15}\n", "view.width", "15"),
    (_M + "pipeline: {frames: 0}\n", "pipeline.frames", "0"),
    (_M + "telemetry: {interval_s: 0}\n", "telemetry.interval_s", "0.0"),
    (_M + "metrics: {textfile: out.txt}\n", "metrics.textfile", "'out.txt'"),
    (_M + "input: {size: [0, 10]}\n", "input.size", "[0, 10]"),
    (_M + "source: {uri: a.mp4, reconnect: {initial_delay_s: 5, max_delay_s: 1}}\n", "source.reconnect", "'max_delay_s': 1.0"),
    (
        _M + "sources: [{uri: a.mp4, reconnect: {initial_delay_s: 5, max_delay_s: 1}}]\n",
        "sources[0].reconnect",
        "'max_delay_s': 1.0",
    ),
    (_M + "sources: [{uri: a.mp4}]\npool: {engines: [cpu, cpu]}\n", "pool.engines", None),
    (_M + "sources: [{uri: a.mp4}]\npool: {dla_engine: x.engine}\n", "pool.dla_engine", None),
]


@pytest.mark.parametrize(
    "extra, key, fix",
    [
        ("preprocess: gpu\n", "preprocess", "the pool preprocesses on the CPU; use preprocess: cpu"),
        # an Orin's engines: its GPU and two DLA cores (NVIDIA's Jetson AGX Orin and Orin NX module data sheets)
        ("pool: {engines: [cpu]}\n", "pool.engines", "'cpu' is not an engine of backend tensorrt; use gpu, dla0, dla1"),
    ],
)
def test_a_tensorrt_pool_refuses_gpu_preprocessing_and_engines_it_does_not_have(tmp_path, extra, key, fix):
    (tmp_path / "m.engine").write_bytes(bytes(64))
    p = write(tmp_path, "model: {engine: m.engine}\nbackend: tensorrt\nsources: [{uri: a.mp4}]\n" + extra)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(e.value).startswith(f"{p}: key '{key}': ") and str(e.value).endswith(fix), e.value


@pytest.mark.parametrize("text, key, given", REFUSALS, ids=[f"{c[1]}-{i}" for i, c in enumerate(REFUSALS)])
def test_each_refusal_names_the_file_the_key_what_is_expected_and_the_value(tmp_path, text, key, given):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    head = f"{p}: key '{key}': "
    said = str(e.value)
    assert said.startswith(head) and "\n" not in said, said
    detail = said[len(head) :]
    assert "None" not in detail and len(detail) > 20, said  # a fix or an expectation, not an empty slot
    if given is not None:
        assert re.fullmatch(r"expected .+, got .+", detail) and given in detail.split(", got ", 1)[1], said


def test_the_limits_of_a_config_hold_at_their_edges(tmp_path):
    """At the limit accepted, one past it refused: 1000 keypoints, 8 engines, 16 YAML aliases; a file source may say
    bgr (what it decodes to)."""
    load_config(write(tmp_path, _M + "task: {type: yolo, keypoints: [1000, 3]}\n"))
    load_config(
        write(tmp_path, _M + "sources: [{uri: a.mp4}]\npool: {engines: [cpu, cpu1, cpu2, cpu3, cpu4, cpu5, cpu6, cpu7]}\n")
    )
    load_config(write(tmp_path, _M + "sources: [{uri: a.mp4, format: bgr}]\n"))
    load_config(write(tmp_path, _M + "view: {width: 16}\n"))  # the smallest view
    load_config(write(tmp_path, _M + "source: {uri: a.mp4, reconnect: {initial_delay_s: 5, max_delay_s: 5}}\n"))
    load_config(write(tmp_path, _M + "sources: [{uri: a.mp4, reconnect: {initial_delay_s: 5, max_delay_s: 5}}]\n"))

    def labels(n: int) -> str:  # the first label anchored, then n aliases of it
        return _M + "task: {labels: [&a x, " + ", ".join(["*a"] * n) + "]}\n"

    assert load_config(write(tmp_path, labels(16))).task.labels == ["x"] * 17
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, labels(17)))
    assert str(e.value) == f"{tmp_path / 'cam.yaml'}: more than 16 YAML aliases (*name); write the values out"


def test_a_yaml_error_carries_pyyamls_own_account_of_it(tmp_path):
    import yaml

    text = "model:\n  path: [unclosed\n"
    with pytest.raises(yaml.YAMLError) as theirs:
        yaml.safe_load(text)
    with pytest.raises(ConfigError) as ours:
        load_config(write(tmp_path, text))
    assert theirs.value.problem and theirs.value.problem in str(ours.value)


def test_a_long_value_is_cut_in_the_message():
    from edge.config import short

    value = ["y" * 300] * 3  # each string is shortened by reprlib, the three together are still too long
    cut = short(value, 100)
    assert len(cut) == 101 and cut.startswith("['yyyy") and cut.endswith("…")
    assert short(["y"], 100) == "['y']"  # short enough: whole


def test_an_onnxruntime_pools_engine_refusals_name_its_own_engines(tmp_path):
    for engines, said in (
        ("[tpu]", "'tpu' is not an engine of backend onnxruntime; use cpu, cpu1, ... or cuda, cuda1, ... (one session each)"),
        ("[cpu, cpu]", "cpu is listed twice; each engine once"),
    ):
        with pytest.raises(ConfigError) as e:
            load_config(write(tmp_path, _M + f"sources: [{{uri: a.mp4}}]\npool: {{engines: {engines}}}\n"))
        assert str(e.value).endswith(f"key 'pool.engines': {said}")


def test_a_set_value_may_hold_an_equals_sign_and_file_level_refusals_name_the_file(tmp_path):
    """`--set KEY=VALUE` splits at the first '=': the value keeps the rest (a label "a=b")."""
    cfg = load_config(DEMO_CONFIG, ["task.labels=[a=b, c]"])
    assert cfg.task.labels == ["a=b", "c"]
    both = write(tmp_path, "model: {asset: blazeface-back-256, path: m.onnx}\n")
    with pytest.raises(ConfigError) as e:
        load_config(both)
    assert str(e.value) == f"{both}: keys 'model.path' and 'model.asset' both set; keep one"
    listed = write(tmp_path, "[1, 2]\n")
    with pytest.raises(ConfigError) as e:
        load_config(listed)
    assert str(e.value) == f"{listed}: the top level must be a mapping of keys, got list"


# What a refusal says a key takes, word for word: the value rules of docs/edge-run.md's config reference and
# docs/fleet.md, as a user reads them in the one line.
SAYS = [
    (["telemetry.interval_s=0"], "--set telemetry.interval_s: expected a positive number, got 0.0"),
    (
        ["telemetry.idle_baseline_s=-1"],  # 0 means no baseline (docs/edge-run.md); the value shown is its own
        "--set telemetry.idle_baseline_s: expected 0 (no baseline) or a positive number of seconds, got -1.0",
    ),
    (["metrics.textfile=a.txt"], "--set metrics.textfile: expected a file name ending in .prom, got 'a.txt'"),
    (["metrics.textfile_interval_s=0"], "--set metrics.textfile_interval_s: expected a positive number, got 0.0"),
    (["input.std=[1,0,1]"], "--set input.std '[1,0,1]': expected non-zero numbers, got [1.0, 0.0, 1.0]"),
    (["source.flip=8"], "--set source.flip: expected an integer 0..7 (nvvidconv flip-method), got 8"),
    (["pipeline.frames=0"], "--set pipeline.frames: expected a positive integer or null, got 0"),
    (["view.quality=0"], "--set view.quality: expected a JPEG quality 1..100, got 0"),
    (
        ["view.port=80"],
        "--set view.port: expected a port 1024..65535 (below 1024 needs root), e.g. 9101 for metrics, 8090 for the view, got 80",
    ),
    (
        ["task.score_threshold=2"],
        "--set task.score_threshold: expected a number between 0 and 1, or null for the decoder's default, got 2.0",
    ),
    (["sinks.mqtt.keepalive_s=4"], "--set sinks.mqtt.keepalive_s: expected an integer 5..65535, got 4"),
    (["sinks.mqtt.queue_size=0"], "--set sinks.mqtt.queue_size: expected a positive integer, got 0"),
    (
        ["sinks.mqtt.max_packet_bytes=127"],  # MQTT's fixed header and a topic need more than that
        "--set sinks.mqtt.max_packet_bytes: expected bytes 128..268435460 (MQTT's largest packet), or null, got 127",
    ),
    (["task.top_k=0"], "--set task.top_k: expected a positive integer, got 0"),
    (["pipeline.queue_size=0"], "--set pipeline.queue_size: expected a positive integer, got 0"),
    (["dla_core=-1"], "--set dla_core: expected a DLA core index 0, 1, ... or null, got -1"),
    (
        ["task.priors.variances=[0, 0.2]"],
        "--set task.priors.variances '[0, 0.2]': expected two numbers in (0, 10]: centre and size, e.g. [0.1, 0.2], "
        "got [0.0, 0.2]",
    ),
    (
        ["sources=[{uri: a.mp4}]", "pool.dla_engine=x.engine"],
        "--set pool.dla_engine 'x.engine': is for the dla0/dla1 engines of backend tensorrt; list them in pool.engines",
    ),
    (["input=5"], "--set input: expected a mapping of keys, got 5"),
    (["sources=5"], "--set sources: expected a list (each item a mapping), got 5"),
    (["task.labels=5"], "--set task.labels: expected a list (each item a string) or a string or null, got 5"),
    (
        ["task.priors={steps: [0], min_sizes: [[1]]}"],
        "--set task.priors '{steps: [0], min_sizes: [[1]]}': expected steps of 1..1024 and one list of prior sizes "
        "(pixels, > 0) per step, got {'min_sizes': [[1.0]], 'steps': [0]}",
    ),
    (
        ["source.reconnect={initial_delay_s: 5, max_delay_s: 1}"],
        "--set source.reconnect '{initial_delay_s: 5, max_delay_s: 1}': expected initial_delay_s > 0, max_delay_s >= "
        "initial_delay_s, max_attempts >= 0, got {'initial_delay_s': 5.0, 'max_attempts': 0, 'max_delay_s': 1.0}",
    ),
]


@pytest.mark.parametrize(("overrides", "said"), SAYS, ids=[o[0].split("=")[0] for o, _ in SAYS])
def test_a_refusal_says_what_the_key_takes_and_the_value_given(overrides, said):
    assert refusal(overrides) == said


def test_the_edges_a_refusal_table_does_not_reach(tmp_path):
    load_config(DEMO_CONFIG, ["sinks.mqtt.keepalive_s=5"])  # the lowest keep-alive offered
    load_config(DEMO_CONFIG, ["sinks.mqtt.max_packet_bytes=128"])  # the smallest packet limit
    load_config(write(tmp_path, _M + "sources: [{uri: a.mp4, task: {score_threshold: 1.0}}]\n"))  # a probability
    load_config(write(tmp_path, _M + "sources: [{uri: a.mp4, flip: 7}]\n"))  # a pool source's last flip-method
    # an empty section (everything under it commented out) is its defaults
    cfg = load_config(write(tmp_path, _M + "input:\nsinks:\n"))
    assert (cfg.input.layout, cfg.input.offset, cfg.sinks.mqtt.url) == ("auto", 0.0, None)


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ("task: {labels: missing.txt}\n", "key 'task.labels': file not found: {dir}/missing.txt"),
        ("input: 5\n", "key 'input': expected a mapping of keys, got 5"),
        (
            "metrics: {allowed_hosts: ['bad host!']}\n",
            "key 'metrics.allowed_hosts': expected host names or IP addresses, such as jetson.lan, got 'bad host!'",
        ),
        ("sources: [{uri: a.mp4, flip: 8}]\n", "key 'sources[0].flip': expected an integer 0..7 (nvvidconv flip-method), got 8"),
        (
            "sources: [{uri: a.mp4, task: {top_k: 0}}]\n",
            "key 'sources[0].task.top_k': expected a positive integer, or null, got 0",
        ),
        (
            "sources: [{uri: " + "v" * 80 + ".mp4, format: nv12}]\n",  # the URI cut to about 60 characters
            "key 'sources[0].format': nv12 is what a camera delivers; '" + "v" * 27 + "..." + "v" * 24 + ".mp4' decodes to bgr",
        ),
        (
            "source: {uri: " + "w" * 80 + ".mp4, format: nv12}\n",
            "key 'source.format': nv12 is what a camera delivers (csi://N, /dev/videoN); '"
            + "w" * 27
            + "..."
            + "w" * 24
            + ".mp4' decodes to bgr: use auto",
        ),
        (
            "telemetry: {backend: replay, replay_path: none.jsonl}\n",
            "key 'telemetry.replay_path': the replay backend needs an existing telemetry.jsonl or tegrastats log; "
            "{dir}/none.jsonl does not exist",
        ),
        (
            "sources: [{uri: a.mp4, name: cam}, {uri: b.mp4, name: cam}]\n",
            "key 'sources[1].name': 'cam' is also the name of sources[0]; names must differ",
        ),
        (
            "sinks: {display: true}\nsources: [{uri: a.mp4}, {uri: b.mp4}]\n",
            "key 'sinks.display': one window cannot show several sources; use the live view (view.port)",
        ),
        ("input: {mean: [0.1, 0.2]}\n", "key 'input.mean': expected 1 or 3 numbers, got [0.1, 0.2]"),
        (
            "sources: [{uri: a.mp4, reconnect: {initial_delay_s: 5, max_delay_s: 1}}]\n",
            "key 'sources[0].reconnect': expected initial_delay_s > 0, max_delay_s >= initial_delay_s, max_attempts >= 0, "
            "got {{'initial_delay_s': 5.0, 'max_attempts': 0, 'max_delay_s': 1.0}}",  # braces doubled: the text is a format
        ),
        (
            "sources: [{uri: a.mp4, task: {max_detections: 0}}]\n",
            "key 'sources[0].task.max_detections': expected an integer 1..100000, or null, got 0",
        ),
        (
            "sources: [{uri: ''}]\n",
            "key 'sources[0].uri': expected a source URI (file, folder, /dev/videoN, csi://N, rtsp://...), got ''",
        ),
        ("input: {pad_value: 256}\n", "key 'input.pad_value': expected an integer 0..255, got 256"),
        ("view: {width: 15}\n", "key 'view.width': expected a width of at least 16 pixels, got 15"),
        ("sources: [{uri: a.mp4}]\npool: {queue_size: 65}\n", "key 'pool.queue_size': expected an integer 1..64, got 65"),
        (
            "metrics: {allowed_hosts: [" + ", ".join(f"h{i}" for i in range(65)) + "]}\n",
            "key 'metrics.allowed_hosts': expected at most 64 names, got 65",
        ),
    ],
)
def test_a_file_s_refusal_names_the_file_first(tmp_path, extra, said):
    p = write(tmp_path, _M + extra)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(e.value) == f"{p}: " + said.format(dir=tmp_path)


def test_the_normalisation_is_checked_as_docs_write_it(tmp_path):
    # docs/edge-run.md: x = (pixel * scale + offset - mean) / std; an offset and a mean of 2e38 cancel, opposite signs
    # make 4e38, past float32's 3.4e38
    assert load_config(write(tmp_path, _M + "input: {offset: 2.0e+38, mean: [2.0e+38]}\n")).input.offset == 2e38
    p = write(tmp_path, _M + "input: {offset: 2.0e+38, mean: [-2.0e+38]}\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(e.value).startswith(
        f"{p}: key 'input.scale': expected scale, offset, mean and std that keep (pixel * scale + offset - mean) / std "
        "a finite float32 for pixels 0..255 (e.g. scale 1/255), got {'mean': [-2e+38], 'offset': 2e+38, 'scale': 0.00392"
    ), e.value


def test_a_command_line_config_names_keys_without_a_file():
    cfg = load_config(None, ["model.asset=blazeface-back-256"])
    assert cfg.name_of("task.labels") == "key 'task.labels'"
    with pytest.raises(ConfigError) as e:
        load_config(None, ["model.asset=blazeface-back-256", "view.quality=0"])
    assert str(e.value) == "--set view.quality: expected a JPEG quality 1..100, got 0"
    with pytest.raises(ConfigError) as e:  # a rule over two keys: neither flag alone is to blame
        load_config(None, ["model.asset=blazeface-back-256", "model.path=m.onnx"])
    assert str(e.value) == "command line: keys 'model.path' and 'model.asset' both set; keep one"


def test_a_config_path_that_is_a_folder_is_refused_by_name(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path)
    assert str(e.value) == f"{tmp_path}: cannot read the config file (not a regular file (a folder))"


def test_a_tensorrt_pool_needs_the_dla_plan_only_for_dla_engines(tmp_path):
    (tmp_path / "m.engine").write_bytes(bytes(64))
    head = "model: {engine: m.engine}\nbackend: tensorrt\nsources: [{uri: a.mp4}]\n"
    assert load_config(write(tmp_path, head + "pool: {engines: [gpu]}\n")).pool.engines == ["gpu"]
    p = write(tmp_path, head + "pool: {engines: [gpu, dla0], dla_engine: other.engine}\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(e.value).startswith(f"{p}: key 'pool.dla_engine': file not found: {tmp_path / 'other.engine'}; build it")
    (tmp_path / "other.engine").write_bytes(bytes(64))
    assert load_config(p).pool.dla_engine == "other.engine"


def test_ip_addresses_of_both_families_are_allowed_hosts():
    cfg = load_config(DEMO_CONFIG, ["metrics.allowed_hosts=[10.0.0.2, '::1', 'fe80::1']"])
    assert cfg.metrics.allowed_hosts == ["10.0.0.2", "::1", "fe80::1"]


def test_a_config_without_a_model_says_how_to_name_one(tmp_path):
    p = write(tmp_path, "source: {uri: a.mp4}\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(e.value) == f"{p}: key 'model': set one of model.path (an ONNX file) or model.asset (see `edge assets list`)"


@pytest.mark.parametrize(
    "text, key",
    [
        ("source: {uri: 'asset://megamnd'}\n", "source.uri"),
        ("source: {uri: 'ASSET://megamnd'}\n", "source.uri"),  # the scheme in any case, as sources open it
        ("sources:\n  - {uri: 'asset://megamind'}\n  - {uri: 'asset://mesi'}\n", "sources[1].uri"),
    ],
)
def test_an_unknown_asset_source_is_refused_naming_the_key(tmp_path, text, key):
    """A misspelt asset:// source was found only once the model had loaded (seconds on a large one)."""
    path = tmp_path / "c.yaml"
    path.write_text("model: {asset: blazeface-back-256}\n" + text)
    with pytest.raises(ConfigError, match=rf"key '{re.escape(key)}': unknown asset '(megamnd|mesi)'; known: blazeface"):
        load_config(path)
    path.write_text(path.read_text().replace("megamnd", "megamind").replace("mesi", "messi"))
    load_config(path)  # spelt right, both load
