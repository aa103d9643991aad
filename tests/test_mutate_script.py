"""scripts/mutate.py counts each module's own mutants: names made by mutmut's own naming function."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytest.importorskip("mutmut")
from mutmut.utils.format_utils import get_mutant_name, make_mutant_key  # noqa: E402

spec = importlib.util.spec_from_file_location("mutate", ROOT / "scripts" / "mutate.py")
mutate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mutate)


def name(path: str, func: str, cls: str = None) -> str:
    return get_mutant_name(Path(path), make_mutant_key(func, cls) + "__mutmut_3")


@pytest.mark.parametrize(
    "path, func, cls",
    [
        ("edge/runtime/postprocess/__init__.py", "create_postprocessor", None),
        ("edge/runtime/postprocess/yolo.py", "grid", None),
        ("edge/runtime/postprocess/yolo.py", "__call__", "Yolo"),
        ("edge/manifest.py", "load", None),
    ],
)
def test_a_mutant_belongs_to_its_own_module_only(path, func, cls):
    mutant = name(path, func, cls)
    owners = [m for m in ("edge/runtime/postprocess/__init__.py", "edge/runtime/postprocess/yolo.py", "edge/manifest.py")
              if mutate.of_module(mutant, m)]  # fmt: skip
    assert owners == [path]  # a submodule's mutant is not the package __init__'s, nor the other way round
