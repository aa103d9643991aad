"""scripts/ansible/deploy.yml run by ansible-core against a real OpenSSH server on 127.0.0.1.

Two "Jetsons" (two inventory hosts on the same sshd, each with its own temporary device root) sit in two
device-type/JetPack groups and must each get the engine built for their group. Restart and health are the
configurable commands, as in test_deploy.py, because there is no systemd to restart here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from ._deploytools import SSHServer, sshd_fixture, write_engine
from .conftest import require_or_skip
from .test_deploy import HEALTH, RESTART

PLAYBOOK = Path(__file__).resolve().parents[1] / "scripts" / "ansible" / "deploy.yml"
EXAMPLE = PLAYBOOK.with_name("inventory.example.yml")

pytestmark = pytest.mark.slow


def _ansible(tool: str) -> str:
    exe = shutil.which(tool)
    require_or_skip(exe is not None, f"{tool} is not installed (pip install ansible-core)")
    return str(exe)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    _ansible("ansible-playbook")
    yield from sshd_fixture(tmp_path_factory)


def inventory(sshd: SSHServer, tmp_path: Path, hosts: dict) -> Path:
    """Same shape as inventory.example.yml; every host is the local sshd with its own device root."""
    connection = {
        "ansible_host": "127.0.0.1",
        "ansible_port": sshd.port,
        "ansible_user": sshd.user,
        "ansible_ssh_private_key_file": str(sshd.key),
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
        "ansible_python_interpreter": sys.executable,
    }
    groups: dict = {}
    for host, (device, jetpack) in hosts.items():
        leaf = groups.setdefault(device.replace("-", "_"), {"vars": {"edge_device": device}, "children": {}})
        if jetpack is None:  # a host of a known device type but no JetPack group
            leaf.setdefault("hosts", {})[host] = {"edge_root": str(tmp_path / host)}
            continue
        group = leaf["children"].setdefault(
            f"{device.replace('-', '_')}_jp{jetpack.replace('.', '')}", {"vars": {"edge_jetpack": jetpack}, "hosts": {}}
        )
        group["hosts"][host] = {"edge_root": str(tmp_path / host)}
    data = {
        "jetsons": {
            "vars": {
                **connection,
                "edge_name": "front",
                "edge_python": sys.executable,
                "edge_timeout": 2,
                "edge_config": str(tmp_path / "configs" / "front.yaml"),
                "edge_engine": str(tmp_path / "engines" / "{{ edge_device }}-jp{{ edge_jetpack }}" / "model.engine"),
                "edge_restart_cmd": RESTART,
                "edge_health_cmd": HEALTH,
                "edge_check_cmd": [],  # stand-in engine bytes: skip edge-run --check (tested in test_deploy.py)
            },
            "children": groups,
        }
    }
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def playbook(inv: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    # Ansible's SSH connection sharing, in a folder this test cleans up; a short one: a Unix socket's path holds at most
    # 107 bytes, and pytest-xdist's worker folders push tmp_path past that.
    control = Path(tempfile.mkdtemp(prefix="ssh-", dir="/tmp"))
    env = {
        **os.environ,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
        "ANSIBLE_PIPELINING": "1",  # fewer SSH round trips per task
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control),
    }
    cmd = [_ansible("ansible-playbook"), "-i", str(inv), str(PLAYBOOK)]
    try:
        return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    finally:
        for socket_path in control.glob("*"):  # stop the shared connections Ansible leaves running (ControlPersist)
            subprocess.run(["ssh", "-o", f"ControlPath={socket_path}", "-O", "exit", "unused"], capture_output=True, timeout=10)
        shutil.rmtree(control, ignore_errors=True)


def engine_for(tmp_path: Path, device: str, jetpack: str, payload: bytes, corrupt: bool = False) -> Path:
    engine = write_engine(tmp_path / "engines" / f"{device}-jp{jetpack}", payload, corrupt_after_manifest=corrupt)
    (tmp_path / "configs").mkdir(exist_ok=True)
    shutil.copy(engine.parent / "front.yaml", tmp_path / "configs" / "front.yaml")
    return engine


def live(root: Path) -> bytes:
    return ((root / "etc/edge/front.yaml").resolve().parent / "model.engine").read_bytes()


def test_playbook_deploys_each_group_its_own_engine_then_refuses_corrupt_and_groupless(sshd: SSHServer, tmp_path: Path) -> None:
    hosts = {"cam-a": ("orin-nano", "6.1"), "cam-b": ("xavier-nx", "5.1")}
    inv = inventory(sshd, tmp_path, hosts)
    orin = engine_for(tmp_path, "orin-nano", "6.1", b"built on orin nano, jetpack 6.1" * 50)
    xavier = engine_for(tmp_path, "xavier-nx", "5.1", b"built on xavier nx, jetpack 5.1" * 50).read_bytes()
    run = playbook(inv, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert live(tmp_path / "cam-a") == orin.read_bytes()
    assert live(tmp_path / "cam-b") == xavier
    assert "health   ok" in run.stdout

    # Second round: a new engine for the Orin group, a corrupt one for the Xavier group, and a host in no JetPack group.
    orin2 = engine_for(tmp_path, "orin-nano", "6.1", b"orin nano engine, second build" * 50)
    engine_for(tmp_path, "xavier-nx", "5.1", b"xavier engine, damaged in the build share" * 50, corrupt=True)
    hosts["cam-c"] = ("orin-nano", None)
    run = playbook(inventory(sshd, tmp_path, hosts), tmp_path)
    assert run.returncode != 0
    assert live(tmp_path / "cam-a") == orin2.read_bytes()
    assert live(tmp_path / "cam-b") == xavier  # the old engine still runs
    # Refused by the same local checks as `edge deploy`, before anything is copied to the device.
    assert "does not match model.engine.json" in run.stdout and "checked here, before uploading" in run.stdout
    assert "cam-c needs edge_device and edge_jetpack" in run.stdout
    assert not (tmp_path / "cam-c").exists()


def test_example_inventory_gives_every_host_an_engine_for_its_group() -> None:
    exe = _ansible("ansible-inventory")
    data = json.loads(subprocess.run([exe, "-i", str(EXAMPLE), "--list"], capture_output=True, text=True, check=True).stdout)
    hostvars = data["_meta"]["hostvars"]
    assert len(hostvars) >= 3
    for host, hv in hostvars.items():
        assert {"edge_device", "edge_jetpack", "edge_engine", "edge_config", "edge_name"} <= hv.keys(), host
    syntax = subprocess.run(
        [_ansible("ansible-playbook"), "--syntax-check", "-i", str(EXAMPLE), str(PLAYBOOK)], capture_output=True, text=True
    )
    assert syntax.returncode == 0, syntax.stderr
