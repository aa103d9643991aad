"""The device side of a deploy (edge/deploy/target.py, piped to the Jetson's python3 by `edge deploy` and by the
Ansible playbook) under hostile arguments (review hostile-inputs-2026-12, "Accepted silently"; issue 14 items 3, 6, 7).

The program runs here for real, into a temporary device root, with the standard library only, as on a Jetson. Its
arguments come from the playbook's inventory unchecked (edge_timeout, edge_keep, edge_name), so it must refuse bad
ones itself, before it changes anything.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List

import pytest

from ._deploytools import write_engine
from ._hostile import Outcome, assert_no_traceback, run
from .conftest import ROOT

TARGET = ROOT / "edge" / "deploy" / "target.py"


def device(*args: str, env: dict = None) -> Outcome:
    return run([sys.executable, "-", *args], stdin=TARGET.read_bytes(), env=env, timeout=60)


def _staged(tmp_path: Path, config: str = "model:\n  engine: model.engine\n") -> tuple:
    """A release uploaded into the device root as `edge deploy` leaves it before activation."""
    root = tmp_path / "device"
    engine = write_engine(tmp_path / "upload", b"engine bytes" * 50)
    sha = json.loads((engine.parent / "model.engine.json").read_text())["engine"]["sha256"]
    o = device("prepare", "--root", str(root), "--name", "front", "--sha256", sha)
    assert o.code == 0, o
    info = json.loads(o.out)
    staging = Path(info["staging"])
    staging.mkdir(parents=True, exist_ok=True)
    (staging / "model.engine").write_bytes(engine.read_bytes())
    (staging / "model.engine.json").write_bytes((engine.parent / "model.engine.json").read_bytes())
    (staging / "config.yaml").write_text(config)
    return root, info["release"]


def _fake(tmp_path: Path, name: str, log: Path, code: int = 0) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    exe = folder / name
    exe.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done >> {log}\nprintf "\\n" >> {log}\nexit {code}\n')
    exe.chmod(0o755)
    return exe


def activate(root: Path, release: str, *args: str, env: dict = None) -> Outcome:
    """`activate` of the front camera's staged release, with its engine; ``args`` add to or override the rest."""
    return device("activate", "--root", str(root), "--name", "front", "--release", release, "--engine", "model.engine", *args, env=env)  # fmt: skip


def _ok() -> List[str]:
    return [
        "--restart-cmd",
        json.dumps([sys.executable, "-c", "pass"]),
        "--health-cmd",
        json.dumps([sys.executable, "-c", "pass"]),
    ]


def test_the_default_device_check_runs_the_config_as_the_service_will(tmp_path: Path) -> None:
    """Review: the device check passed `--engine {engine}`, so a config whose model.engine was wrong or missing passed
    the check and then failed in the service. The default check is run here with a stand-in edge-run that records
    its arguments (TensorRT cannot run here)."""
    root, release = _staged(tmp_path)
    log = tmp_path / "edge-run.argv"
    fake = _fake(tmp_path, "edge-run", log)
    o = activate(root, release, "--timeout", "10", *_ok(), env={"PATH": f"{fake.parent}:/usr/bin:/bin"})
    assert o.code == 0, o
    argv = [a.decode() for a in log.read_bytes().strip(b"\n").split(b"\0") if a]
    assert "--check" in argv and "--config" in argv, argv
    assert "--engine" not in argv, f"the check overrides the config's model.engine: {argv}"


@pytest.mark.parametrize("timeout", ["nan", "inf", "-1", "0", "1e309"])
def test_a_device_timeout_that_is_not_a_positive_number_is_refused_before_anything_changes(tmp_path: Path, timeout: str) -> None:
    """Ansible passes edge_timeout straight through: `--timeout nan` must not make check, restart and health wait
    forever (or not at all)."""
    root, release = _staged(tmp_path)
    before = sorted(str(p) for p in root.rglob("*"))
    o = activate(
        root,
        release,
        "--no-check",
        "--timeout",
        timeout,
        *_ok(),
    )
    assert_no_traceback(o)
    assert o.code == 2, o
    assert "--timeout" in o.err, o
    assert sorted(str(p) for p in root.rglob("*")) == before, "the device changed before the refusal"
    assert not (root / "opt/edge/front/current").exists()


@pytest.mark.parametrize("keep", ["nan", "-1", "1e9", "x"])
def test_a_device_keep_that_is_not_a_count_is_refused(tmp_path: Path, keep: str) -> None:
    root, release = _staged(tmp_path)
    o = activate(
        root,
        release,
        "--no-check",
        "--keep",
        keep,
        *_ok(),
    )
    assert_no_traceback(o)
    assert o.code == 2 and "--keep" in o.err and "from 2 to 1000" in o.err, o  # the device side keeps 2..1000
    assert not (root / "opt/edge/front/current").exists()


@pytest.mark.parametrize("command", ['"systemctl restart x"', "[]", "[1, 2]", '["a", null]', "{}", "["])
def test_a_device_command_that_is_not_an_argument_list_is_refused(tmp_path: Path, command: str) -> None:
    root, release = _staged(tmp_path)
    o = activate(
        root,
        release,
        "--restart-cmd",
        command,
        "--health-cmd",
        json.dumps(["true"]),
    )
    assert_no_traceback(o)
    assert o.code == 2, o
    assert not (root / "opt/edge/front/current").exists()


@pytest.mark.parametrize("release", ["../../etc", "..", "x/../../y", "rel\n", "-rf"])
def test_a_release_name_that_walks_out_of_the_releases_folder_is_refused(tmp_path: Path, release: str) -> None:
    root, _ = _staged(tmp_path)
    o = activate(root, release, "--no-check", *_ok())
    assert_no_traceback(o)
    assert o.code == 2, o
    assert not (root / "opt/edge/front/current").exists()
