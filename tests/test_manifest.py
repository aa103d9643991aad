"""The engine manifest: atomic write, checked read, the L4T release parsed from a real nv_tegra_release line."""

from __future__ import annotations

import json

import pytest

from edge.errors import EdgeError
from edge.manifest import read_l4t, read_manifest, write_manifest


def test_write_then_read(tmp_path):
    engine = tmp_path / "m.engine"
    engine.write_bytes(b"plan")
    data = {"manifest_version": 1, "engine": {"sha256": "0" * 64}, "tensorrt": {}, "device": {}, "dla": {}, "io": []}
    assert write_manifest(engine, data) == tmp_path / "m.engine.json"
    assert read_manifest(engine) == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.engine", "m.engine.json"]  # no temp file left


def test_missing_damaged_and_newer_manifests_are_errors(tmp_path):
    engine = tmp_path / "m.engine"
    with pytest.raises(EdgeError, match="no manifest m.engine.json"):
        read_manifest(engine)
    (tmp_path / "m.engine.json").write_text("{")
    with pytest.raises(EdgeError, match="not valid JSON"):
        read_manifest(engine)
    (tmp_path / "m.engine.json").write_text(json.dumps({"manifest_version": 1}))
    with pytest.raises(EdgeError, match="missing keys engine"):
        read_manifest(engine)


def test_l4t_release_line(tmp_path):
    f = tmp_path / "nv_tegra_release"
    f.write_text(
        "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed Jan  8 01:49:37 UTC 2025\n"
    )
    assert read_l4t(f) == {"l4t": "36.4.3", "jetpack": "6.1/6.2"}
    assert read_l4t(tmp_path / "none") is None


@pytest.mark.parametrize(
    "section, value, key",
    [
        ("engine", "m.engine", "engine"),
        ("engine", {"sha256": "A" * 64, "size": 4}, "engine.sha256"),
        ("engine", {"sha256": "0" * 64, "size": "4"}, "engine.size"),
        ("engine", {"sha256": "0" * 64, "size": True}, "engine.size"),
        ("tensorrt", [], "tensorrt"),
        ("tensorrt", {"version": 8.5}, "tensorrt.version"),
        ("device", {"compute_capability": {"major": 8}}, "device.compute_capability"),
        ("device", {"jetpack": 6.1}, "device.jetpack"),
        ("dla", {"core": "0"}, "dla.core"),
        ("dla", None, "dla"),
        ("io", {"x": 1}, "io"),
        ("manifest_version", "1", "manifest_version"),
    ],
)
def test_fields_of_the_wrong_type_are_one_line_naming_the_key(tmp_path, section, value, key):
    engine = tmp_path / "m.engine"
    data = {"manifest_version": 1, "engine": {"sha256": "0" * 64, "size": 4}, "tensorrt": {}, "device": {}, "dla": {}, "io": []}
    data[section] = value
    (tmp_path / "m.engine.json").write_text(json.dumps(data))
    with pytest.raises(EdgeError, match=rf"key '{key}' should be") as info:
        read_manifest(engine)
    assert "\n" not in str(info.value)
