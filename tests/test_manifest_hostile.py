"""Generated manifests against the reader and the file checks the run side does before TensorRT or CUDA load:
whatever the JSON holds, the result is a manifest or one line naming the problem (an EdgeError), never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from edge.errors import EdgeError
from edge.manifest import sha256_file
from edge.runtime.engines.gate import verify_manifest

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
SECTIONS = ("manifest_version", "engine", "tensorrt", "device", "dla", "io")


def _must_refuse(sections: dict) -> bool:
    """What the manifest's keys (edge/manifest.py's docstring, docs/edge-build.md) rule out whatever else it holds:
    a version other than 1 (none is newer than 1 here, and 0 or a non-integer is no version), an engine section that
    does not carry this engine's sha256 (random JSON never does), a section that is not an object, io that is not a
    list."""
    version = sections.get("manifest_version", 1)
    if not (isinstance(version, int) and not isinstance(version, bool) and version == 1):
        return True
    if "engine" in sections:
        return True
    if any(k in sections and not isinstance(sections[k], dict) for k in ("tensorrt", "device", "dla")):
        return True
    return "io" in sections and not isinstance(sections["io"], list)


def _write(folder: Path, sections: dict) -> Path:
    engine = folder / "m.engine"
    engine.write_bytes(b"plan")
    data = {"manifest_version": 1, "engine": {"sha256": sha256_file(engine), "size": 4}, "tensorrt": {}, "device": {}}
    data.update({"dla": {}, "io": []})
    data.update(sections)
    (folder / "m.engine.json").write_text(json.dumps(data))
    return engine


@given(st.dictionaries(st.sampled_from(SECTIONS), JSON, max_size=6))
@settings(max_examples=300, deadline=None)
def test_any_manifest_is_accepted_or_one_line(tmp_path_factory, sections):
    engine = _write(tmp_path_factory.mktemp("m"), sections)
    try:
        verify_manifest(engine)
    except EdgeError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 700
    else:
        assert not _must_refuse(sections), f"accepted a manifest with {sections}"


def test_the_untouched_manifest_is_accepted_and_a_newer_one_refused(tmp_path):
    """The property above could pass by refusing everything, or by accepting a version from a newer edge."""
    assert verify_manifest(_write(tmp_path, {}))["engine"]["size"] == 4
    for version, words in ((2, "version 2 is newer than this edge reads (1); upgrade edge"), (0, "'manifest_version'")):
        try:
            verify_manifest(_write(tmp_path, {"manifest_version": version}))
        except EdgeError as exc:
            assert words in str(exc), exc
        else:
            raise AssertionError(f"manifest_version {version} was accepted")
