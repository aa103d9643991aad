"""The engine manifest: atomic write, checked read, the L4T release parsed from a real nv_tegra_release line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge.errors import EdgeError
from edge.manifest import MANIFEST_VERSION, read_l4t, read_manifest, write_manifest


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
    # a newer edge's manifest, whatever its keys: "upgrade edge", not "damaged"
    (tmp_path / "m.engine.json").write_text(json.dumps({"manifest_version": MANIFEST_VERSION + 1, "engines": []}))
    with pytest.raises(EdgeError) as err:
        read_manifest(engine)
    assert str(err.value) == (
        f"manifest '{tmp_path / 'm.engine.json'}': version {MANIFEST_VERSION + 1} is newer than this edge reads "
        f"({MANIFEST_VERSION}); upgrade edge"
    )


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


BASE = {"manifest_version": 1, "engine": {"sha256": "0" * 64, "size": 4}, "tensorrt": {}, "device": {}, "dla": {}, "io": []}


def _read(tmp_path, **sections):
    (tmp_path / "m.engine.json").write_text(json.dumps({**BASE, **sections}))
    return read_manifest(tmp_path / "m.engine")


@pytest.mark.parametrize("cc", ["8.7", "sm_87", 8.7, [8, 7], None])
def test_compute_capabilities_edge_build_or_a_person_writes_are_read(tmp_path, cc):
    assert _read(tmp_path, device={"compute_capability": cc})["device"]["compute_capability"] == cc


@pytest.mark.parametrize("cc, shown", [([8, 7, 2], "[8, 7, 2]"), ([8], "[8]"), ([8, "7"], "[8, '7']"), (True, "True")])
def test_a_compute_capability_that_is_no_pair_is_refused_showing_it(tmp_path, cc, shown):
    with pytest.raises(EdgeError) as info:
        _read(tmp_path, device={"compute_capability": cc})
    msg = str(info.value)
    assert msg.startswith(f"manifest '{tmp_path / 'm.engine.json'}': key 'device.compute_capability' should be")
    assert f"key 'device.compute_capability' should be a compute capability such as \"8.7\", got {shown};" in msg
    assert msg.endswith("the manifest was edited or damaged: copy it again with its engine, or rebuild with edge-build")


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_compute_capability_of_nan_or_infinity_is_refused(tmp_path, value):
    (tmp_path / "m.engine.json").write_text(
        json.dumps(BASE).replace('"device": {}', f'"device": {{"compute_capability": {value}}}')
    )
    with pytest.raises(EdgeError, match="key 'device.compute_capability' should be"):
        read_manifest(tmp_path / "m.engine")


def test_an_engine_section_without_its_sha256_is_refused(tmp_path):
    """Other fields may be missing (null where edge-build writes null); the engine's digest may not: nothing else
    ties the manifest to the file."""
    with pytest.raises(EdgeError, match="key 'engine.sha256' should be 64 hex digits, got None"):
        _read(tmp_path, engine={"size": 4})
    assert _read(tmp_path, device={"gpu_name": "Orin"})["device"] == {"gpu_name": "Orin"}  # the others may be absent


@pytest.mark.parametrize("text", ["[1, 2]", "5", "null", '"manifest_version engine"'])
def test_a_manifest_that_is_no_object_lists_every_key_it_lacks(tmp_path, text):
    (tmp_path / "m.engine.json").write_text(text)
    with pytest.raises(EdgeError) as info:
        read_manifest(tmp_path / "m.engine")
    assert "missing keys manifest_version, engine, tensorrt, device, dla, io; rebuild the engine with edge-build" in str(
        info.value
    )


def test_an_oversized_manifest_is_refused_before_it_is_read(tmp_path):
    (tmp_path / "m.engine.json").write_bytes(b" " * (2 << 20))
    with pytest.raises(EdgeError) as info:
        read_manifest(tmp_path / "m.engine")
    assert str(info.value) == (
        f"manifest '{tmp_path / 'm.engine.json'}': 2097152 bytes, more than the 1048576 this file may hold; "
        "rebuild the engine with edge-build"
    )


def test_the_written_manifest_is_indented_in_the_writers_order(tmp_path):
    """People read the sidecar: two-space indents, manifest_version first as edge-build puts it (not sorted)."""
    from edge.manifest import manifest_text

    text = manifest_text({**BASE, "build": {"seconds": 1}})
    assert text.startswith('{\n  "manifest_version": 1,\n  "engine": {\n    "sha256": ') and text.endswith("}\n")
    with pytest.raises(ValueError, match="manifest lacks tensorrt, io"):
        manifest_text({k: v for k, v in BASE.items() if k not in ("tensorrt", "io")})


def test_l4t_of_an_unknown_release_and_of_damaged_bytes(tmp_path):
    f = tmp_path / "nv_tegra_release"
    f.write_bytes(b"# R99 (release), REVISION: 1.0, GCID: \xff\xfe, BOARD: generic\n")  # not UTF-8 after the part read
    assert read_l4t(f) == {"l4t": "99.1.0", "jetpack": "unknown"}
    f.write_text("# a file of another format\n")
    assert read_l4t(f) is None


def test_an_rtx_engine_is_refused_naming_its_api(tmp_path):
    from edge.manifest import refuse_rtx

    with pytest.raises(EdgeError) as info:
        refuse_rtx("m.engine", {"tensorrt": {"api": "tensorrt_rtx"}})
    assert str(info.value) == (
        "engine 'm.engine' was built with TensorRT-RTX (its manifest's tensorrt.api), which edge-run does not run; "
        "build the engine on the Jetson with edge-build"
    )
    refuse_rtx("m.engine", {"tensorrt": {"api": "tensorrt"}})  # the Jetson's TensorRT: nothing to refuse


def test_the_l4t_release_is_read_where_jetson_linux_keeps_it():
    # Jetson Linux writes its BSP release to /etc/nv_tegra_release (NVIDIA's Jetson Linux developer guide)
    import inspect

    from edge.manifest import read_l4t

    assert inspect.signature(read_l4t).parameters["path"].default == "/etc/nv_tegra_release"
    assert (read_l4t() is None) == (not Path("/etc/nv_tegra_release").is_file())  # None off a Jetson
