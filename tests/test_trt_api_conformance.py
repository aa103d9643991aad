"""Every TensorRT attribute edge uses exists in each TensorRT a JetPack ships (8.5.2, 8.6.x, 10.3) and in TensorRT 11
(11.1.0, the newest release in NVIDIA's open repository when this was written; JetPack 7's 11.4 is not there), or is
guarded.

The surfaces come from NVIDIA's binding sources (tests/trt_surfaces, written by scripts/trt_surface.py). The source
of every module that talks to TensorRT is walked as a syntax tree:

- ``trt.X`` / ``trt.X.Y`` (the module, however it was bound: ``trt``, ``self._trt``) must exist in every release;
- any other attribute whose name is, in *some* release, a member of a TensorRT class edge holds objects of (builder,
  config, network, tensor, layer, parser and its errors, runtime, engine, context, profile, calibrators: ``USED``;
  the object's type cannot be known statically) must be a member of one of them in every release.

An access is guarded when it sits under ``hasattr(..., "name")`` (an ``if``, a conditional expression or an
``and``), goes through ``getattr(..., default)``, or carries a ``# trt-api: <reason>`` comment naming the check
that guards it elsewhere. The review of 2026-12 found ``ParserError.node_name()`` used unguarded (absent before
10.0); this test is what catches the next one.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

import pytest

from tests.conftest import require_or_skip
from tests.trt_standin import SURFACES, VERSIONS

# 11.1.0's surface comes from NVIDIA's repository at the commit its "source" names (not in ../shared/reference): the
# calibrators, BuilderFlag.INT8/FP16 and ILayer.precision are gone, so only guarded code may reach them.
API_VERSIONS = (*VERSIONS, "11.1.0")
# A member access cannot be typed statically: names that Python's own containers also have are not taken for TensorRT's.
CONTAINER_METHODS = {n for t in (dict, list, set, str, bytes) for n in dir(t)}

ROOT = Path(__file__).resolve().parents[1]
# The modules that call TensorRT. TensorRT-RTX-only names (ComputeCapability, ...) are guarded by capability checks.
SOURCES = [
    "edge/builder/trt.py",
    "edge/builder/engine.py",
    "edge/builder/calibrator.py",
    "edge/builder/placement.py",
    "edge/runtime/engines/tensorrt.py",
    "edge/doctor.py",
]
MODULE_NAMES = {"trt", "tensorrt"}  # local names the module is bound to; self._trt too
USED = (
    "Builder",
    "IBuilderConfig",
    "INetworkDefinition",
    "ITensor",
    "ILayer",
    "IConstantLayer",
    "IOptimizationProfile",
    "ITimingCache",
    "IHostMemory",
    "OnnxParser",
    "ParserError",
    "Runtime",
    "ICudaEngine",
    "IExecutionContext",
    "EngineInspector",
    "ILogger",
    "Logger",
    "IInt8EntropyCalibrator2",
    "IInt8MinMaxCalibrator",
)


def surface(version: str) -> dict:
    return json.loads((SURFACES / f"{version}.json").read_text())


def module_names(s: dict) -> Set[str]:
    return (
        set(s["classes"])
        | set(s["enums"])
        | set(s["functions"])
        | set(s["attributes"])
        | set(s["package"]["functions"] + s["package"]["attributes"])
    )


def class_members(s: dict, name: str) -> Set[str]:
    """Members of a class (with its bases) or values of an enum, and nested enums of a class."""
    if name in s["enums"]:
        return set(s["enums"][name]["values"]) | set(s["enums"][name].get("python_members", []))
    if name not in s["classes"]:
        return set()
    spec = s["classes"][name]
    out = set(spec["members"]) | set(spec.get("python_members", []))
    for base in spec["bases"]:
        out |= class_members(s, base)
    for qual, enum in s["enums"].items():
        if enum["scope"] == name:
            out.add(qual.split(".")[-1])
            if enum["exported"]:
                out |= set(enum["values"])
    return out


def used_members(s: dict) -> Set[str]:
    return set().union(*(class_members(s, c) for c in USED))


def is_module(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return node.id in MODULE_NAMES
    return (
        isinstance(node, ast.Attribute) and node.attr == "_trt" and isinstance(node.value, ast.Name) and node.value.id == "self"
    )


def guarded(node: ast.AST, attr: str, parents: Dict[ast.AST, ast.AST], lines: List[str]) -> bool:
    if "# trt-api:" in lines[node.lineno - 1]:
        return True
    n = node
    while n in parents:
        n = parents[n]
        tests = [n.test] if isinstance(n, (ast.If, ast.IfExp, ast.While)) else ([n] if isinstance(n, ast.BoolOp) else [])
        for test in tests:
            for call in ast.walk(test):
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Name)
                    and call.func.id == "hasattr"
                    and len(call.args) == 2
                    and isinstance(call.args[1], ast.Constant)
                    and call.args[1].value == attr
                ):
                    return True
    return False


def accesses(path: Path) -> Iterator[Tuple[int, str, str, bool]]:
    """(line, kind, dotted name, guarded) for every TensorRT-looking attribute access in a file."""
    text = path.read_text()
    tree = ast.parse(text)
    lines = text.splitlines()
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        if is_module(node.value):  # trt.X
            parent = parents.get(node)
            inner = parent.attr if isinstance(parent, ast.Attribute) and parent.value is node else None
            yield (
                node.lineno,
                "module",
                node.attr + (f".{inner}" if inner else ""),
                guarded(node, node.attr, parents, lines) or (inner is not None and guarded(parent, inner, parents, lines)),
            )
        elif not (isinstance(node.value, ast.Attribute) and is_module(node.value.value)):
            yield node.lineno, "member", node.attr, guarded(node, node.attr, parents, lines)
        # getattr(trt.X, "Y") with a constant name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) == 2  # no default: it must exist
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[0], ast.Attribute)
            and is_module(node.args[0].value)
        ):
            yield (
                node.lineno,
                "module",
                f"{node.args[0].attr}.{node.args[1].value}",
                guarded(node, node.args[1].value, parents, lines),
            )


def findings(version: str) -> List[str]:
    s = surface(version)
    names = module_names(s)
    every = [surface(v) for v in API_VERSIONS]
    api = set().union(*(used_members(x) for x in every))  # members of the classes edge uses, in some release
    here = used_members(s)
    out = []
    for rel in SOURCES:
        path = ROOT / rel
        if not path.is_file():
            continue
        for line, kind, dotted, ok in accesses(path):
            if ok or dotted.split(".")[-1].startswith("__"):  # Python's own attributes (__name__, __init__)
                continue
            if kind != "module" and dotted in CONTAINER_METHODS:  # dict.update, not 11.1's ITimingCache.update
                continue
            if kind == "module":
                top, _, inner = dotted.partition(".")
                if top not in names:
                    out.append(f"{rel}:{line}: tensorrt.{top} does not exist in TensorRT {version}")
                elif inner and inner not in class_members(s, top):
                    out.append(f"{rel}:{line}: tensorrt.{dotted} does not exist in TensorRT {version}")
            elif dotted in api and dotted not in here:
                out.append(f"{rel}:{line}: .{dotted} is a TensorRT member that TensorRT {version} does not have")
    return out


@pytest.mark.parametrize("version", API_VERSIONS)
def test_every_tensorrt_attribute_edge_uses_exists_or_is_guarded(version):
    assert findings(version) == []


def test_the_walk_catches_an_unguarded_member_and_accepts_a_guarded_one(tmp_path, monkeypatch):
    """The check itself: ParserError.node_name() unguarded is caught on 8.5.2; under hasattr it is not."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f(e, trt):\n    x = trt.BuilderFlag.INT8\n    return e.node_name(), trt.DataType.BF16\n")
    good = tmp_path / "good.py"
    good.write_text(
        "def f(e, trt):\n    return e.node_name() if hasattr(e, 'node_name') else getattr(trt.DataType, 'BF16', None)\n"
    )
    monkeypatch.setattr("tests.test_trt_api_conformance.ROOT", tmp_path)
    monkeypatch.setattr("tests.test_trt_api_conformance.SOURCES", ["bad.py", "good.py"])
    assert findings("8.5.2") == [
        "bad.py:3: .node_name is a TensorRT member that TensorRT 8.5.2 does not have",
        "bad.py:3: tensorrt.DataType.BF16 does not exist in TensorRT 8.5.2",
    ]
    assert findings("10.3.0") == []


def test_surfaces_match_the_reference_sources_when_they_are_here():
    """The committed surfaces are what scripts/trt_surface.py makes of NVIDIA's sources (where the reference is)."""
    import importlib.util

    reference = ROOT.parent / "shared" / "reference" / "tensorrt"
    require_or_skip(
        reference.is_dir(), f"NVIDIA's binding sources are not at {reference} (../shared/reference beside the checkout)"
    )
    spec = importlib.util.spec_from_file_location("trt_surface", ROOT / "scripts" / "trt_surface.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for version in VERSIONS:
        assert module.render(module.surface(reference / version)) == (SURFACES / f"{version}.json").read_text(), version


@pytest.mark.parametrize(
    "version, fact, present",
    [
        ("8.5.2", ("ParserError", "node_name"), False),  # pyOnnx.cpp 8.5.2: code, desc, file, line, func, node
        ("8.6.1", ("ParserError", "node_name"), False),
        ("10.3.0", ("ParserError", "node_name"), True),
        ("8.5.2", ("DataType", "BF16"), False),  # pyFoundationalTypes.cpp
        ("8.6.1", ("DataType", "FP8"), True),
        ("10.3.0", ("DataType", "INT64"), True),
        ("8.5.2", ("NetworkDefinitionCreationFlag", "STRONGLY_TYPED"), False),
        ("10.3.0", ("NetworkDefinitionCreationFlag", "STRONGLY_TYPED"), True),
        ("8.5.2", ("IExecutionContext", "set_optimization_profile_async"), True),
        ("10.3.0", ("IExecutionContext", "execute_async_v3"), True),
        ("8.5.2", ("Runtime", "DLA_core"), True),
        ("8.5.2", ("TensorFormat", "LINEAR"), True),
        # 11.1: no pyInt8.cpp (calibrators), no kINT8/kFP16 in NvInfer.h's BuilderFlag, kSTRONGLY_TYPED kept but
        # "ignored" (strongly typed mode always on), DeviceType::kDLA still there
        ("11.1.0", ("IBuilderConfig", "int8_calibrator"), False),
        ("11.1.0", ("BuilderFlag", "INT8"), False),
        ("11.1.0", ("BuilderFlag", "FP16"), False),
        ("11.1.0", ("ILayer", "precision"), False),
        ("11.1.0", ("NetworkDefinitionCreationFlag", "STRONGLY_TYPED"), True),
        ("11.1.0", ("NetworkDefinitionCreationFlag", "EXPLICIT_BATCH"), False),
        ("11.1.0", ("DeviceType", "DLA"), True),
        ("11.1.0", ("Runtime", "DLA_core"), True),
        ("11.1.0", ("IExecutionContext", "execute_async_v3"), True),
    ],
)
def test_surfaces_hold_facts_read_from_the_sources(version, fact, present):
    assert (fact[1] in class_members(surface(version), fact[0])) is present


def test_every_modelled_behaviour_exists_in_some_release():
    """The stand-in models nothing TensorRT lacks: each behaviour member is in that class's surface somewhere."""
    from tests.trt_standin import behaviour_members

    every = [surface(v) for v in API_VERSIONS]
    for cname, members in behaviour_members().items():
        known = set().union(*(class_members(s, cname) for s in every))
        assert set(members) <= known, (cname, set(members) - known)


@pytest.mark.parametrize("version", ["8.6.1", "10.3.0", "11.1.0"])
def test_the_runtime_backend_uses_only_what_the_lean_runtime_binds(version):
    """edge-run needs only TensorRT's runtime: nothing it touches is under `#if EXPORT_ALL_BINDINGS` (the builder
    side, absent from the lean runtime module). 8.5.2's sources have no such split."""
    s = surface(version)
    full_only = {n for n, c in s["classes"].items() if c["full_only"]} | {n for n, e in s["enums"].items() if e["full_only"]}
    lean = {m for c in s["classes"].values() if not c["full_only"] for m, e in c["members"].items() if not e["full_only"]}
    members = {m for c in s["classes"].values() for m in c["members"]} - lean  # bound only in builder-side code
    for rel in ("edge/runtime/engines/tensorrt.py", "edge/runtime/engines/gate.py"):
        for line, kind, dotted, _ in accesses(ROOT / rel):
            top = dotted.split(".")[0]
            assert not (kind == "module" and top in full_only), f"{rel}:{line}: tensorrt.{dotted} is builder-only"
            assert not (kind == "member" and dotted in members), f"{rel}:{line}: .{dotted} is builder-only"
