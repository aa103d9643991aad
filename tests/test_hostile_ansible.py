"""The Ansible path under hostile inputs (review hostile-inputs-2026-12, "Security" 3 and 4, "Accepted silently";
issue 14 items 5, 6 and 7): scripts/ansible/deploy.yml run by ansible-core against a real sshd on 127.0.0.1, as in
test_ansible.py. It must run the same local checks as `edge deploy` (a config whose model.engine does not name the
engine is refused before anything is copied), refuse an edge_name with a newline, and leave the config holding a
camera password readable by root and the service's group only.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from ._deploytools import SSHServer, sshd_fixture
from .test_ansible import _ansible, engine_for, inventory, live, playbook

pytestmark = pytest.mark.slow
PASSWORD = "s3cr3t-Pw"


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    _ansible("ansible-playbook")
    yield from sshd_fixture(tmp_path_factory)


def _nothing_uploaded(root: Path) -> None:
    releases = root / "opt" / "edge"
    found = [p for p in releases.rglob("*")] if releases.exists() else []
    assert not [p for p in found if p.is_file()], f"files reached the device: {found}"


@pytest.mark.parametrize(
    "config",
    [
        "model:\n  engine: other.engine\nsource:\n  uri: /dev/video0\n",  # names another file
        "model:\n  path: model.onnx\nsource:\n  uri: /dev/video0\n",  # no engine at all
    ],
    ids=["other-engine", "no-engine"],
)
def test_the_playbook_runs_edge_deploys_local_checks_before_copying(sshd: SSHServer, tmp_path: Path, config: str) -> None:
    """Review: the Ansible path skipped the "model.engine names the engine" check that `edge deploy` makes."""
    inv = inventory(sshd, tmp_path, {"cam-a": ("orin-nano", "6.1")})
    engine_for(tmp_path, "orin-nano", "6.1", b"engine bytes" * 100)
    (tmp_path / "configs" / "front.yaml").write_text(config)
    run = playbook(inv, tmp_path)
    assert run.returncode != 0, run.stdout
    assert "Traceback" not in run.stdout + run.stderr
    _nothing_uploaded(tmp_path / "cam-a")


def test_the_playbook_refuses_an_edge_name_with_a_newline(sshd: SSHServer, tmp_path: Path) -> None:
    """Review security 4: Ansible `edge_name "front\\n"` created paths and units with a newline."""
    inv = inventory(sshd, tmp_path, {"cam-a": ("orin-nano", "6.1")})
    data = yaml.safe_load(inv.read_text())
    data["jetsons"]["vars"]["edge_name"] = "front\n"
    inv.write_text(yaml.safe_dump(data))
    engine_for(tmp_path, "orin-nano", "6.1", b"engine bytes" * 100)
    run = playbook(inv, tmp_path)
    assert run.returncode != 0, run.stdout
    root = tmp_path / "cam-a"
    assert not root.exists() or not any("\n" in p.name for p in root.rglob("*"))


def test_the_playbook_installs_a_config_with_a_password_for_root_and_the_service_only(sshd: SSHServer, tmp_path: Path) -> None:
    """Review security 3: the Ansible copy task installed the config 0644."""
    inv = inventory(sshd, tmp_path, {"cam-a": ("orin-nano", "6.1")})
    engine = engine_for(tmp_path, "orin-nano", "6.1", b"engine bytes" * 100)
    cfg = tmp_path / "configs" / "front.yaml"
    cfg.write_text(f"model:\n  engine: model.engine\nsource:\n  uri: rtsp://admin:{PASSWORD}@192.0.2.7/stream\n")
    cfg.chmod(0o600)
    run = playbook(inv, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert live(tmp_path / "cam-a") == engine.read_bytes()
    assert PASSWORD not in run.stdout + run.stderr
    for p in (tmp_path / "cam-a").rglob("*.yaml"):
        if p.is_file() and not p.is_symlink():
            mode = stat.S_IMODE(p.stat().st_mode)
            assert mode & 0o007 == 0, f"{p} is {oct(mode)}: world-readable, and it holds a camera password"
