"""`edge deploy` (through scripts/deploy.sh) against a real OpenSSH server on 127.0.0.1, into a temporary device root.

There is no Jetson and no systemd here, so the restart and health commands are the configurable ones: restart
appends to a log, and health stands in for a service that fails to come up on an engine containing b"CRASH".
Everything else is real: ssh, rsync or scp, the device-side program, the renames and the roll-back.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Optional

import pytest

from edge.deploy import target

from ._deploytools import SSHServer, free_port, sshd_fixture, write_engine
from .conftest import require_or_skip

DEPLOY = Path(__file__).resolve().parents[1] / "scripts" / "deploy.sh"
RESTART = [sys.executable, "-c", "import sys; open(sys.argv[1], 'a').write('restart\\n')", "{root}/restarts.log"]
HEALTH = [
    sys.executable,
    "-c",
    "import pathlib, sys; sys.exit(any(b'CRASH' in p.read_bytes() for p in pathlib.Path(sys.argv[1]).glob('*.engine')))",
    "{current}",
]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    yield from sshd_fixture(tmp_path_factory)


def release_args(engine: Path, root: Path) -> list:
    """What every deploy in these tests sends: the service name, the engine, its config and the device root."""
    return ["--name", "front", "--engine", str(engine), "--config", str(engine.parent / "front.yaml"), "--root", str(root)]


def deploy(sshd: SSHServer, root: Path, engine: Path, *extra: str, **popen: object) -> subprocess.CompletedProcess:
    cmd = [str(DEPLOY), sshd.host, *sshd.ssh_args(), *release_args(engine, root)]
    cmd += [
        "--restart-cmd",
        json.dumps(RESTART),
        "--health-cmd",
        json.dumps(HEALTH),
        "--timeout",
        "2",
        "--no-check",  # the test engines are stand-in bytes; the default check (edge-run --check) has its own test
        *extra,
    ]
    env = {**os.environ, "PYTHON": sys.executable}
    if popen:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)  # type: ignore[return-value]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)


def live(root: Path) -> Optional[bytes]:
    """The engine the service would load now, through /etc/edge/front.yaml like edge-run does."""
    config = root / "etc" / "edge" / "front.yaml"
    if not config.exists():
        return None
    return (config.resolve().parent / "model.engine").read_bytes()


def releases(root: Path) -> list:
    return sorted(p.name for p in (root / "opt" / "edge" / "front" / "releases").iterdir() if not p.name.startswith("."))


def restarts(root: Path) -> int:
    log = root / "restarts.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_good_deploys_swap_atomically_keep_previous_and_prune(sshd: SSHServer, tmp_path: Path) -> None:
    root = tmp_path / "device"
    v1 = write_engine(tmp_path / "v1", b"engine v1" * 1000)
    run = deploy(sshd, root, v1)
    assert run.returncode == 0, run.stderr
    for step in ("connect", "upload", "verify", "swap", "restart", "health"):
        assert f"  {step:<8} ok" in run.stderr, run.stderr
    assert "summary: front on" in run.stdout and "deployed release" in run.stdout
    assert live(root) == v1.read_bytes()
    assert (root / "etc/edge/front.yaml").is_symlink() and "engine: model.engine" in (root / "etc/edge/front.yaml").read_text()
    assert restarts(root) == 1

    v2 = write_engine(tmp_path / "v2", b"engine v2" * 1000)
    run = deploy(sshd, root, v2, "--transfer", "scp")
    assert run.returncode == 0, run.stderr
    assert "via scp" in run.stderr and "kept for roll-back" in run.stdout
    assert live(root) == v2.read_bytes()
    assert len(releases(root)) == 2  # the previous one stays for a roll-back

    v3 = write_engine(tmp_path / "v3", b"engine v3" * 1000)
    assert deploy(sshd, root, v3).returncode == 0
    assert live(root) == v3.read_bytes()
    v1_sha = json.loads((tmp_path / "v1/model.engine.json").read_text())["engine"]["sha256"][:12]
    assert len(releases(root)) == 2 and not any(v1_sha in r for r in releases(root))  # the oldest is pruned
    assert restarts(root) == 3


def test_corrupt_engine_is_rejected_before_upload_and_old_one_stays(sshd: SSHServer, tmp_path: Path) -> None:
    root = tmp_path / "device"
    good = write_engine(tmp_path / "good", b"good engine" * 100)
    assert deploy(sshd, root, good).returncode == 0
    bad = write_engine(tmp_path / "bad", b"new engine" * 100, corrupt_after_manifest=True)
    run = deploy(sshd, root, bad)
    assert run.returncode == 2, run.stderr
    assert "does not match model.engine.json" in run.stderr and str(bad) in run.stderr
    assert live(root) == good.read_bytes() and len(releases(root)) == 1 and restarts(root) == 1


def test_device_rejects_an_upload_that_arrived_corrupt(tmp_path: Path) -> None:
    """The device-side check on its own: bytes that changed between the upload and the verify step."""
    root = tmp_path / "device"
    source = Path(target.__file__)
    cmd = [sys.executable, str(source)]
    payload = b"engine" * 100
    good = write_engine(tmp_path / "src", payload)
    sha = json.loads((tmp_path / "src/model.engine.json").read_text())["engine"]["sha256"]
    prep = json.loads(
        subprocess.run(
            [*cmd, "prepare", "--root", str(root), "--name", "front", "--sha256", sha], capture_output=True, check=True
        ).stdout
    )
    staging = Path(prep["staging"])
    (staging / "model.engine").write_bytes(payload[:-1] + b"X")
    (staging / "model.engine.json").write_bytes((tmp_path / "src/model.engine.json").read_bytes())
    (staging / "config.yaml").write_bytes((good.parent / "front.yaml").read_bytes())
    act = [*cmd, "activate", "--root", str(root), "--name", "front", "--release", prep["release"], "--engine", "model.engine"]
    run = subprocess.run(
        [*act, "--restart-cmd", json.dumps(RESTART), "--health-cmd", json.dumps(HEALTH)], capture_output=True, text=True
    )
    assert run.returncode == target.EXIT_CODES["verify"], run.stderr
    result = json.loads(run.stdout)
    assert result["error"]["step"] == "verify" and "does not match" in result["error"]["message"]
    assert not staging.exists() and releases(root) == [] and live(root) is None and restarts(root) == 0


def test_interrupted_upload_leaves_the_running_release(sshd: SSHServer, tmp_path: Path) -> None:
    root = tmp_path / "device"
    old = write_engine(tmp_path / "old", b"old engine" * 100)
    assert deploy(sshd, root, old).returncode == 0
    big = write_engine(tmp_path / "big", os.urandom(8 << 20))
    # 1 MiB/s makes the 8 MiB copy take seconds, so it can be cut half-way like a dropped link.
    proc = deploy(sshd, root, big, "--transfer", "rsync", "--bwlimit", "1024", start_new_session=True)
    incoming = root / "opt/edge/front/releases"
    deadline = time.monotonic() + 10
    while not any(f.stat().st_size > 0 for d in incoming.glob(".incoming-*") for f in d.iterdir()):
        assert proc.poll() is None and time.monotonic() < deadline, "the upload never started"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(10)
    assert proc.returncode != 0
    assert live(root) == old.read_bytes() and len(releases(root)) == 1 and restarts(root) == 1
    new = write_engine(tmp_path / "new", b"new engine" * 100)
    assert deploy(sshd, root, new).returncode == 0  # the leftover upload directory is in nobody's way
    assert live(root) == new.read_bytes()


def test_failed_health_check_rolls_back_to_previous_release(sshd: SSHServer, tmp_path: Path) -> None:
    root = tmp_path / "device"
    good = write_engine(tmp_path / "good", b"good engine" * 100)
    assert deploy(sshd, root, good).returncode == 0
    before = releases(root)
    crash = write_engine(tmp_path / "crash", b"CRASH" * 100)
    run = deploy(sshd, root, crash)
    assert run.returncode == target.EXIT_CODES["health"], run.stderr
    assert "edge deploy: error: health failed: not healthy within 2s" in run.stderr
    assert f"rolled back to releases/{before[0]}, which is healthy" in run.stderr
    assert "FAILED at health" in run.stdout
    assert live(root) == good.read_bytes() and releases(root) == before
    assert restarts(root) == 3  # good, crash, and the roll-back


def test_first_deploy_that_fails_restores_the_hand_installed_config(sshd: SSHServer, tmp_path: Path) -> None:
    root = tmp_path / "device"
    installed = root / "etc/edge/front.yaml"  # as `edge service install --config` leaves it
    installed.parent.mkdir(parents=True)
    installed.write_text("model:\n  path: /opt/models/old.onnx\n")
    run = deploy(sshd, root, write_engine(tmp_path / "crash", b"CRASH" * 100))
    assert run.returncode == target.EXIT_CODES["health"], run.stderr
    assert "the config from before the first deploy" in run.stderr
    assert not installed.is_symlink() and installed.read_text() == "model:\n  path: /opt/models/old.onnx\n"
    assert releases(root) == []


def test_failed_device_check_keeps_the_running_release(sshd: SSHServer, tmp_path: Path) -> None:
    root = tmp_path / "device"
    good = write_engine(tmp_path / "good", b"good engine" * 100)
    assert deploy(sshd, root, good).returncode == 0
    other = write_engine(tmp_path / "other", b"other engine" * 100)
    check = [sys.executable, "-c", "import sys; sys.exit('built for another JetPack: ' + sys.argv[1])", "{engine}"]
    run = deploy(sshd, root, other, "--check-cmd", json.dumps(check))
    assert run.returncode == target.EXIT_CODES["check"], run.stderr
    assert "check failed" in run.stderr and "built for another JetPack" in run.stderr
    assert live(root) == good.read_bytes() and len(releases(root)) == 1 and restarts(root) == 1


def test_unreachable_target_fails_at_connect(sshd: SSHServer, tmp_path: Path) -> None:
    engine = write_engine(tmp_path / "e", b"engine")
    cmd = [str(DEPLOY), sshd.host, "-p", str(free_port()), "-i", str(sshd.key), "--connect-timeout", "2"]
    cmd += release_args(engine, tmp_path / "d")
    run = subprocess.run(cmd, env={**os.environ, "PYTHON": sys.executable}, capture_output=True, text=True, timeout=30)
    assert run.returncode == target.EXIT_CODES["connect"], run.stderr
    assert "edge deploy: error: connect failed:" in run.stderr and "Connection refused" in run.stderr


@pytest.mark.parametrize(
    "change, message",
    [
        ({"--name": "front cam"}, "--name 'front cam': use letters"),
        (
            {"--restart-cmd": "systemctl restart edge-camera@front"},
            "--restart-cmd 'systemctl restart edge-camera@front': not JSON",
        ),
        ({"--health-cmd": '"systemctl"'}, "expected a non-empty JSON list of strings"),
        ({"--root": "relative/dir"}, "--root 'relative/dir': expected an absolute path"),
        ({"config": "model:\n  engine: /opt/other.engine\n"}, "key 'model.engine' is '/opt/other.engine'"),
        ({"config": "model:\n  asset: blazeface-back-256\n"}, "key 'model.engine' is not set; a deployed config runs"),
    ],
)
def test_bad_input_fails_with_exit_2_before_connecting(tmp_path: Path, change: dict, message: str) -> None:
    engine = write_engine(tmp_path / "e", b"engine")
    if "config" in change:
        (engine.parent / "front.yaml").write_text(change.pop("config"))
    opts = {"--name": "front", "--engine": str(engine), "--config": str(engine.parent / "front.yaml"), "--root": "/", **change}
    cmd = [str(DEPLOY), "nobody@192.0.2.1", *[a for kv in opts.items() for a in kv]]
    run = subprocess.run(cmd, env={**os.environ, "PYTHON": sys.executable}, capture_output=True, text=True, timeout=30)
    assert run.returncode == 2, run.stderr
    assert message in run.stderr and "Traceback" not in run.stderr


def dry_run(engine: Path, *extra: str) -> subprocess.CompletedProcess:
    """`edge deploy --dry-run` of ``engine`` and the config beside it to a TEST-NET host that is never contacted."""
    cmd = [
        str(DEPLOY),
        "nobody@192.0.2.1",
        "--name",
        "front",
        "--engine",
        str(engine),
        "--config",
        str(engine.parent / "front.yaml"),
    ]
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run([*cmd, "--dry-run", *extra], env=env, capture_output=True, text=True, timeout=30)


def test_dry_run_prints_the_plan_and_contacts_nothing(tmp_path: Path) -> None:
    """--help promises the plan; a docs walk found only the "checks passed" line. 192.0.2.1 (TEST-NET) is never
    reached: the run would hang on connect if it tried."""
    engine = write_engine(tmp_path / "e", b"engine")
    run = dry_run(engine, "--bwlimit", "500")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("edge deploy: checks passed: model.engine") and lines[1] == "plan (nothing contacted):"
    assert [line.split()[0] for line in lines[2:]] == ["connect", "upload", "activate"]
    assert "nobody@192.0.2.1 (device root /" in lines[2] and "model.engine, model.engine.json, front.yaml" in lines[3]
    assert "at most 500 KiB/s" in lines[3] and "--name front --engine model.engine" in lines[4]


def test_manifest_sha256_and_size_are_read_under_engine_or_at_top_level(tmp_path: Path) -> None:
    engine = tmp_path / "m.engine"
    engine.write_bytes(b"plan")
    digest = "ad8b0a07c1d3bab7f7f2c1e2d1f6a2f1ad1cbe9cb4d2e7a0b8e8f6c2c0f5a3b1"  # not the real one
    for data in ({"engine": {"sha256": digest, "size": 4}}, {"sha256": digest, "size": 4}):
        (tmp_path / "m.engine.json").write_text(json.dumps(data))
        with pytest.raises(target.StepFailed, match="does not match m.engine.json"):
            target.check_engine(engine, tmp_path / "m.engine.json")
    (tmp_path / "m.engine.json").write_text(json.dumps({"engine": {"sha256": digest}}))
    with pytest.raises(target.StepFailed, match="key 'engine.size': expected a byte count"):
        target.check_engine(engine, tmp_path / "m.engine.json")


def test_default_device_check_is_edge_run_check_and_refuses_what_cannot_load(sshd: SSHServer, tmp_path: Path) -> None:
    """The real `edge-run --check` on the device side: stand-in engine bytes cannot load here, so the swap never happens."""
    edge_run = shutil.which("edge-run")
    require_or_skip(edge_run is not None, "edge-run is not installed (pip install -e .)")
    root = tmp_path / "device"
    good = write_engine(tmp_path / "good", b"good engine" * 100)
    assert deploy(sshd, root, good).returncode == 0
    other = write_engine(tmp_path / "other", b"other engine" * 100)
    # The default command, with edge-run's absolute path: sshd's PATH does not include this environment's bin folder.
    check = [edge_run if a == "edge-run" else a for a in target.DEFAULT_CHECK]
    run = deploy(sshd, root, other, "--check-cmd", json.dumps(check))
    assert run.returncode == target.EXIT_CODES["check"], run.stderr
    assert "check failed" in run.stderr and "edge-run: error:" in run.stderr
    assert live(root) == good.read_bytes() and len(releases(root)) == 1


def test_an_engine_built_with_tensorrt_rtx_is_refused_before_anything_is_uploaded(tmp_path: Path) -> None:
    """edge-run refuses such an engine on every machine, so a deploy (and its --dry-run) refuses it at the same
    point, with the same sentence, instead of saying "checks passed"."""
    engine = write_engine(tmp_path / "e", b"engine")
    manifest = engine.with_name(engine.name + ".json")
    data = json.loads(manifest.read_text())
    data["tensorrt"] = {"version": "1.7.1.116", "api": "tensorrt_rtx"}
    manifest.write_text(json.dumps(data))
    run = dry_run(engine)
    err = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(err) == 1 and "checks passed" not in run.stdout, run.stdout + run.stderr
    assert "was built with TensorRT-RTX (its manifest's tensorrt.api), which edge-run does not run" in err[0]
