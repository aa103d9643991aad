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
