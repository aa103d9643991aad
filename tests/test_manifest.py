"""The engine manifest: atomic write, checked read, the L4T release parsed from a real nv_tegra_release line."""

from __future__ import annotations

import json

import pytest

from edge.errors import EdgeError
from edge.manifest import read_l4t, read_manifest, write_manifest


def test_write_then_read(tmp_path):
    engine = tmp_path / "m.engine"
    engine.write_bytes(b"plan")
    data = {"manifest_version": 1, "engine": {"sha256": "x"}, "tensorrt": {}, "device": {}, "dla": {}, "io": []}
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
