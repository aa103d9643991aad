"""Generated manifests against the reader and the file checks the run side does before TensorRT or CUDA load:
whatever the JSON holds, the result is a manifest or one line naming the problem (an EdgeError), never a traceback."""

from __future__ import annotations

import json

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


@given(st.dictionaries(st.sampled_from(SECTIONS), JSON, max_size=6))
@settings(max_examples=300, deadline=None)
def test_any_manifest_is_accepted_or_one_line(tmp_path_factory, sections):
    folder = tmp_path_factory.mktemp("m")
    engine = folder / "m.engine"
    engine.write_bytes(b"plan")
    data = {"manifest_version": 1, "engine": {"sha256": sha256_file(engine), "size": 4}, "tensorrt": {}, "device": {}}
    data.update({"dla": {}, "io": []})
    data.update(sections)
    (folder / "m.engine.json").write_text(json.dumps(data))
    try:
        verify_manifest(engine)
    except EdgeError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 700
