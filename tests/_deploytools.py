"""Shared by the deploy tests: a real OpenSSH server on 127.0.0.1 with throw-away keys, and engine files.

A missing tool skips the test with the reason, unless EDGE_REQUIRE_SERVERS=1 (CI), where it fails instead
(conftest.require_or_skip).
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

from .conftest import require_or_skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SSHServer:
    """sshd -D on a free loopback port, accepting one fresh ed25519 key for the current user."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.user = getpass.getuser()
        self.port = free_port()
        self.key = workdir / "client_ed25519"
        self.proc: Optional[subprocess.Popen] = None

    @property
    def host(self) -> str:
        return f"{self.user}@127.0.0.1"

    def ssh_args(self) -> List[str]:
        """edge deploy options that reach this server."""
        opts = ["StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null", "LogLevel=ERROR"]
        return ["-p", str(self.port), "-i", str(self.key), *[a for o in opts for a in ("-o", o)]]

    def start(self) -> SSHServer:
        sshd = shutil.which("sshd") or "/usr/sbin/sshd"
        require_or_skip(
            os.access(sshd, os.X_OK) and shutil.which("ssh") is not None,
            "OpenSSH is not installed (apt-get install -y openssh-server)",
        )
        for name in ("host_ed25519", "client_ed25519"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.dir / name)], check=True)
        (self.dir / "authorized_keys").write_text((self.dir / "client_ed25519.pub").read_text())
        config = self.dir / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {self.dir / 'host_ed25519'}",
                    f"AuthorizedKeysFile {self.dir / 'authorized_keys'}",
                    f"PidFile {self.dir / 'sshd.pid'}",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    "StrictModes no",
                    "UsePAM no",
                    "Subsystem sftp internal-sftp",  # scp and Ansible's copy speak SFTP
                    "",
                ]
            )
        )
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory, needed when run as root
        self.proc = subprocess.Popen([sshd, "-D", "-f", str(config), "-E", str(self.dir / "sshd.log")])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {self.proc.returncode}: {(self.dir / 'sshd.log').read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd did not listen on 127.0.0.1:{self.port} within 10 s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def sshd_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    """Body of a module-scoped fixture: one sshd for all the tests of a module, stopped at the end."""
    server = SSHServer(tmp_path_factory.mktemp("sshd"))
    try:
        yield server.start()
    finally:
        server.stop()


def write_engine(folder: Path, payload: bytes, name: str = "model.engine", corrupt_after_manifest: bool = False) -> Path:
    """An engine (any bytes will do: nothing here deserialises it), its manifest, and a config that runs it."""
    folder.mkdir(parents=True, exist_ok=True)
    engine = folder / name
    engine.write_bytes(payload)
    # The deploy reads engine.sha256 and engine.size; edge-build writes more (edge.manifest), none of it needed here.
    manifest = {
        "manifest_version": 1,
        "engine": {"file": name, "sha256": hashlib.sha256(payload).hexdigest(), "size": len(payload)},
    }
    (folder / f"{name}.json").write_text(json.dumps(manifest))
    if corrupt_after_manifest:  # same size, one byte different: only the sha256 can tell
        engine.write_bytes(bytes([payload[0] ^ 0xFF]) + payload[1:])
    (folder / "front.yaml").write_text(f"model:\n  engine: {name}\nsource:\n  uri: /dev/video0\n")
    return engine
