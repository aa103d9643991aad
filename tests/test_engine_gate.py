"""The engine gate's refusals as a user reads them: which engine, what it was built for, what this machine has, and
the fix, each in one line (edge/runtime/engines/gate.py; pure checks, no TensorRT needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge.errors import EdgeError
from edge.manifest import sha256_file
from edge.runtime.engines.gate import (
    DeviceFacts,
    check_file,
    check_platform,
    choose_dla_core,
    gate,
    normalise_cc,
    verify_manifest,
)

ORIN = DeviceFacts("10.3.0", "8.7", 2, "36.4.3", "6.1/6.2")


def manifest(engine: Path, **device) -> dict:
    return {
        "manifest_version": 1,
        "engine": {"sha256": sha256_file(engine), "size": engine.stat().st_size},
        "tensorrt": {"version": "10.3.0"},
        "device": {"compute_capability": "8.7", "gpu_name": "Orin", "jetpack": "6.1/6.2", "l4t": "36.4.3", **device},
        "dla": {"core": None},
        "io": [],
    }


@pytest.fixture
def engine(tmp_path: Path) -> Path:
    e = tmp_path / "m.engine"
    e.write_bytes(b"plan bytes")
    return e


def refused(fn, *args) -> str:
    with pytest.raises(EdgeError) as info:
        fn(*args)
    assert "\n" not in str(info.value)
    return str(info.value)


@pytest.mark.parametrize("value, want", [("8.7", "8.7"), ("sm_87", "8.7"), ("SM87", "8.7"), ("87", "8.7"), (8.7, "8.7"),
                                         ([8, 7], "8.7"), ((10, 1), "10.1"), ("101", "10.1"), (None, None),
                                         ("8", "8")])  # fmt: skip
def test_compute_capability_spellings(value, want):
    # one digit is not split into a major and a minor
    assert normalise_cc(value) == want


def test_a_changed_engine_file_names_both_digests_and_the_fix(engine):
    m = manifest(engine)
    engine.write_bytes(b"plan bytez")  # same size, other bytes
    msg = refused(check_file, engine, m)
    assert f"sha256 {sha256_file(engine)[:12]}… does not match its manifest ({m['engine']['sha256'][:12]}…)" in msg
    assert msg.endswith("the file changed after the build: copy the engine and its .json again, or rebuild with edge-build")
    engine.write_bytes(b"plan")
    msg = refused(check_file, engine, m)
    assert f"engine '{engine}': 4 bytes but its manifest says 10;" in msg
    assert msg.endswith("copy the engine and its .json again, or rebuild with edge-build")


def test_another_tensorrt_gpu_or_jetpack_names_both_sides(engine):
    m = manifest(engine)
    m["tensorrt"]["version"] = None
    assert refused(check_platform, engine, m, ORIN) == (
        f"engine '{engine}': built with TensorRT unknown but this machine has TensorRT 10.3.0; an engine only loads on "
        "the TensorRT that built it: rebuild it here with edge-build"
    )
    m = manifest(engine, compute_capability="7.2", gpu_name=None)
    assert refused(check_platform, engine, m, ORIN) == (
        f"engine '{engine}': built for compute capability 7.2 (unknown GPU) but this GPU is 8.7; rebuild it on this kind "
        "of module"
    )
    m = manifest(engine, jetpack="5.1")
    assert "built on JetPack 5.1 (L4T 36.4.3) but this machine runs JetPack 6.1/6.2 (L4T 36.4.3);" in refused(
        check_platform, engine, m, ORIN
    )
    desktop = DeviceFacts("10.3.0", "8.7", 0)
    assert "but this machine is not a Jetson (no /etc/nv_tegra_release); rebuild it on this JetPack" in refused(
        check_platform, engine, m, desktop
    )


def test_a_dla_core_the_module_lacks_says_which_it_has(engine):
    m = manifest(engine)
    m["dla"]["core"] = 1
    for cores, have in ((0, "no DLA"), (1, "only DLA core 0")):
        msg = refused(choose_dla_core, engine, m, None, DeviceFacts("10.3.0", "8.7", cores))
        assert msg.startswith(f"engine '{engine}': it was built for DLA core 1, but this module has {have}; use ")
    msg = refused(choose_dla_core, engine, m, 3, ORIN)
    assert msg == f"engine '{engine}': --dla 3 asks for DLA core 3, but this module has DLA cores 0..1; use --dla 0"
    assert choose_dla_core(engine, m, 0, ORIN) == 0 and choose_dla_core(engine, m, None, ORIN) == 1
    gpu_only = manifest(engine)
    assert refused(choose_dla_core, engine, gpu_only, 0, ORIN) == (
        f"engine '{engine}' was built for the GPU only (manifest dla.core is null), so --dla 0 cannot put it on the "
        "DLA: drop --dla, or rebuild with edge-build --dla 0"
    )


def test_the_whole_gate_names_the_engine_in_each_refusal(engine):
    m = manifest(engine, compute_capability="7.2")
    assert refused(gate, engine, m, ORIN, None).startswith(f"engine '{engine}': built for compute capability 7.2")
    m = manifest(engine)
    m["dla"]["core"] = 1
    assert refused(gate, engine, m, DeviceFacts("10.3.0", "8.7", 1, "36.4.3", "6.1/6.2"), None).startswith(f"engine '{engine}':")
    assert gate(engine, manifest(engine), ORIN, None) is None


def test_a_manifest_without_its_engine_says_to_copy_both(engine):
    from edge.manifest import write_manifest

    write_manifest(engine, manifest(engine))
    engine.unlink()
    msg = refused(verify_manifest, engine)
    assert msg.startswith(f"engine '{engine}': ") and msg.endswith(" beside its manifest; copy the engine and its .json together")
    assert "no such file" in msg or "not found" in msg or "does not exist" in msg
