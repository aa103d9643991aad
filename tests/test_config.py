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
# docs/edge-run.md's config reference, docs/pool.md and docs/fleet.md, or the definition named.
LIMITS = [
    ("threads", 256, 257),  # --threads: 256
    ("pipeline.queue_size", 1, 0),
    ("pipeline.frames", 1, 0),
    ("pipeline.duration_s", 0.1, 0),
    ("input.size", [16384, 16384], [16385, 16]),  # a model's input size: 16384 pixels a side
    ("input.size", [1, 1], [0, 16]),
    ("input.pad_value", 255, 256),  # the letterbox's grey, a byte
    ("input.pad_value", 0, -1),
    ("input.std", [1, 2, 3], [1, 0, 3]),  # out = (...) / std
    ("input.mean", [0.5], [0.1, 0.2]),  # one per channel or one for all
    ("input.scale", "1.0e+30", "1.0e+37"),  # 255 * 1e37 is past float32's 3.4e38
    ("source.flip", 7, 8),  # nvvidconv's flip-method 0..7
    ("source.flip", 0, -1),
    ("task.score_threshold", 1.0, 1.01),  # a score threshold is a probability
    ("task.iou_threshold", 0.0, -0.1),  # IoU is in [0, 1]
    ("task.top_k", 1, 0),
    ("task.max_detections", 100_000, 100_001),
    ("task.max_detections", 1, 0),
    ("task.keypoints", [17, 2], [17, 4]),  # x, y and optionally visibility
    ("task.keypoints", [1, 3], [0, 3]),
    ("task.anchor_grids", [[1, 1]], [[16, 0]]),
    ("task.priors.variances", [10, 0.2], [10.5, 0.2]),
    ("task.priors.variances", [0.1, 0.2], [0, 0.2]),
    ("telemetry.interval_s", 0.05, 0),
    ("telemetry.idle_baseline_s", 0, -1),
    ("source.reconnect.max_attempts", 0, -1),
    ("sinks.mqtt.qos", 1, 2),  # MQTT QoS 0 or 1 (2 is not offered)
    ("sinks.mqtt.max_packet_bytes", 268_435_460, 268_435_461),  # MQTT: 256 MiB - 1 of remaining length + 5 bytes
    ("sinks.mqtt.queue_size", 1, 0),
    ("metrics.textfile", "edge.prom", "edge.txt"),  # node_exporter's textfile collector reads *.prom only
    ("metrics.port", 1024, 1023),  # below 1024 needs root (docs/fleet.md)
    ("view.port", 65535, 65536),
    ("view.quality", 100, 101),  # JPEG quality 1..100
    ("view.quality", 1, 0),
    ("view.max_viewers", 64, 65),
    ("view.max_fps", 0.5, 0),
]


@pytest.mark.parametrize(("key", "ok", "bad"), LIMITS, ids=[f"{k}={b}" for k, _, b in LIMITS])
def test_a_key_is_taken_at_its_limit_and_refused_past_it_naming_the_flag(key, ok, bad):
    assert load_config(DEMO_CONFIG, [f"{key}={ok}"]) is not None
    message = refusal([f"{key}={bad}"])
    # docs/robustness.md: a value from --set is named as `--set KEY`
    assert message.startswith(f"--set {key}") and ": expected " in message, message


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
    assert "expected a list of" in refusal(["input.mean=0.5"])
    assert "expected an integer or null" in refusal(["source.width=wide"])
    assert load_config(DEMO_CONFIG, ["task.labels=[a, b]"]).task.labels == ["a", "b"]
