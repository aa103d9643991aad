"""systemd/edge-camera@.service and `edge service install`, checked by systemd's own tools without a running systemd.

`systemd-analyze verify` also checks that ExecStart's program exists. The unit in the repository names
/usr/local/bin/edge-run (where pip puts it on a Jetson); `edge service install` writes the path of the edge-run
it finds, so these tests verify the unit as installed into a temporary root, with ExecStart pointing at this
environment's edge-run (or, when edge is not pip-installed here, at a two-line script that runs the same entry point).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from .conftest import require_or_skip

REPO = Path(__file__).resolve().parents[1]
UNIT = REPO / "systemd" / "edge-camera@.service"
CONFIG = "model:\n  engine: model.engine\nsource:\n  uri: /dev/video0\n"


def directives(text: str) -> Dict[str, List[str]]:
    out: Dict[str, List[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def edge(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edge", *args], capture_output=True, text=True, timeout=60, cwd=REPO)


def edge_run_path(tmp_path: Path) -> str:
    found = shutil.which("edge-run")
    if found:
        return found
    shim = tmp_path / "bin" / "edge-run"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m edge run "$@"\n')
    shim.chmod(0o755)
    return str(shim)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "front.yaml"
    path.write_text(CONFIG)
    return path


def test_unit_declares_notify_watchdog_restart_limits_user_and_hardening() -> None:
    d = directives(UNIT.read_text())
    assert d["Type"] == ["notify"] and d["NotifyAccess"] == ["main"]
    assert d["ExecStart"] == ["/usr/local/bin/edge-run --config /etc/edge/%i.yaml"]
    assert d["WatchdogSec"] and d["TimeoutStopSec"] and d["Restart"] == ["on-failure"]
    assert d["StartLimitIntervalSec"] and d["StartLimitBurst"]
    assert d["User"] == ["edge"] and d["SupplementaryGroups"] == ["video"]
    for key, value in (("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"), ("ProtectHome", "yes"), ("PrivateTmp", "yes")):
        assert d[key] == [value], key
    assert d["StateDirectory"] == ["edge-camera/%i"] and d["LogsDirectory"] == ["edge-camera/%i"]
    assert d["DevicePolicy"] == ["closed"]
    assert d["DeviceAllow"] == [
        "char-video4linux rw",
        "char-nvhost* rw",
        "/dev/nvmap rw",
    ]  # /dev/video*, /dev/nvhost*, /dev/nvmap
    assert d["StandardOutput"] == ["journal"] and d["StandardError"] == ["journal"]


def test_installed_unit_passes_systemd_analyze_verify(tmp_path: Path, config: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    require_or_skip(analyze is not None, "systemd-analyze is not installed (apt-get install -y systemd)")
    root = tmp_path / "root"
    run = edge("service", "install", "front", "--config", str(config), "--root", str(root), "--edge-run", edge_run_path(tmp_path))
    assert run.returncode == 0, run.stderr
    installed = root / "etc/systemd/system/edge-camera@.service"
    instance = tmp_path / "verify" / "edge-camera@front.service"  # the name systemd gives the instance
    instance.parent.mkdir()
    shutil.copy(installed, instance)
    for unit in (installed, instance):
        check = subprocess.run([str(analyze), "verify", str(unit)], capture_output=True, text=True, timeout=60)
        ours = [line for line in (check.stdout + check.stderr).splitlines() if "edge-camera" in line]
        assert check.returncode == 0 and not ours, f"{unit}: {check.stdout}{check.stderr}"


def test_install_creates_the_video_user_config_and_enables_the_instance(tmp_path: Path, config: Path) -> None:
    require_or_skip(
        shutil.which("systemd-sysusers") and shutil.which("systemctl"), "systemd is not installed (apt-get install -y systemd)"
    )
    root = tmp_path / "root"
    args = ("service", "install", "front", "--config", str(config), "--root", str(root), "--edge-run", edge_run_path(tmp_path))
    for _ in range(2):  # installing again changes nothing
        run = edge(*args)
        assert run.returncode == 0, run.stderr
    passwd = (root / "etc/passwd").read_text()
    assert any(line.startswith("edge:") and line.endswith(":/usr/sbin/nologin") for line in passwd.splitlines())
    assert any(
        line.startswith("video:") and "edge" in line.split(":")[3] for line in (root / "etc/group").read_text().splitlines()
    )
    assert (root / "etc/edge/front.yaml").read_text() == CONFIG
    wants = root / "etc/systemd/system/multi-user.target.wants/edge-camera@front.service"
    assert os.readlink(wants) == "/etc/systemd/system/edge-camera@.service"


def test_dry_run_prints_the_actions_and_changes_nothing(tmp_path: Path, config: Path) -> None:
    root = tmp_path / "root"
    run = edge(
        "service",
        "install",
        "front",
        "--config",
        str(config),
        "--root",
        str(root),
        "--edge-run",
        "/usr/bin/edge-run",
        "--dry-run",
    )
    assert run.returncode == 0, run.stderr
    assert (
        "would write" in run.stdout and "would run systemctl" in run.stdout and "enable edge-camera@front.service" in run.stdout
    )
    assert not root.exists()


@pytest.mark.parametrize(
    "name, config_text, message",
    [
        ("front cam", CONFIG, "NAME 'front cam': use letters"),
        ("front", "modle:\n  engine: model.engine\n", "unknown key 'modle'"),
    ],
)
def test_bad_name_or_config_is_exit_2_with_the_fix(tmp_path: Path, name: str, config_text: str, message: str) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(config_text)
    run = edge(
        "service", "install", name, "--config", str(config), "--root", str(tmp_path / "r"), "--edge-run", "/usr/bin/edge-run"
    )
    assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.stderr, run.stderr


def test_install_does_not_overwrite_a_config_that_edge_deploy_manages(tmp_path: Path, config: Path) -> None:
    root = tmp_path / "root"
    link = root / "etc/edge/front.yaml"
    link.parent.mkdir(parents=True)
    link.symlink_to("../../opt/edge/front/current/config.yaml")
    run = edge("service", "install", "front", "--config", str(config), "--root", str(root), "--edge-run", "/usr/bin/edge-run")
    assert run.returncode == 2 and "managed by `edge deploy`" in run.stderr, run.stderr
