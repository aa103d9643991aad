"""systemd/edge-camera@.service and `edge service install`, checked by systemd's own tools without a running systemd.

`systemd-analyze verify` also checks that ExecStart's program exists. The unit in the repository names
/usr/local/bin/edge-run (where pip puts it on a Jetson); `edge service install` writes the path of the edge-run
it finds, so these tests verify the unit as installed into a temporary root, with ExecStart pointing at this
environment's edge-run (or, when edge is not pip-installed here, at a two-line script that runs the same entry point).
"""

from __future__ import annotations

import os
import re
import shlex
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
    shim.parent.mkdir(exist_ok=True)
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
    assert all(rule.endswith(" rw") for rule in d["DeviceAllow"])
    assert d["StandardOutput"] == ["journal"] and d["StandardError"] == ["journal"]


def test_systemd_rates_the_units_exposure_ok_with_no_capabilities(tmp_path: Path) -> None:
    """`systemd-analyze security --offline` on the unit: 5.5 MEDIUM before the capability bounding set, RemoveIPC,
    PrivateMounts and ProtectProc were added (issue 32), 3.1 OK after (systemd 252)."""
    analyze = shutil.which("systemd-analyze")
    require_or_skip(analyze is not None, "systemd-analyze is not installed (apt-get install -y systemd)")
    unit = tmp_path / UNIT.name
    shutil.copy(UNIT, unit)
    run = subprocess.run(
        [str(analyze), "security", "--offline=yes", "--no-pager", str(unit)], capture_output=True, text=True, timeout=60
    )
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+) (\w+)", run.stdout)
    require_or_skip(m is not None, f"this systemd-analyze has no --offline security check: {run.stderr.strip()[:200]}")
    assert float(m.group(1)) <= 3.5 and m.group(2) == "OK", run.stdout[-3000:]
    rows = [line.split() for line in run.stdout.splitlines() if line[:1] in ("✓", "✗")]
    checks = {row[1]: row[0] == "✓" for row in rows if len(row) > 1}
    assert checks["CapabilityBoundingSet=~CAP_SYS_ADMIN"] and checks["RemoveIPC="] and checks["ProtectProc="]
    d = directives(UNIT.read_text())
    assert d["CapabilityBoundingSet"] == [""] and d["AmbientCapabilities"] == [""]


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


# -- device rules against NVIDIA's own device lists --------------------------------------------------------------

FIXTURES = Path(__file__).parent / "fixtures" / "jetson"
# What the service does not need from NVIDIA's container lists: the display, hardware codecs, PVA, a second GPU.
NOT_NEEDED = re.compile(
    r"^/dev/(fb\d|tegra_dc_.*|nvidia-modeset|nvidia1|dri/card\*|v4l2-nv(dec|enc)|nvhost-(msenc|nvdec\d?|nvenc\d?|nvjpg\d?|ofa|pva\d|ctrl-pva\d))$"
)
# Linux device groups (/proc/devices) of the nodes matched by char-NAME rules (kernel Documentation/admin-guide/devices.txt).
GROUPS = {"/dev/dri/renderD*": "drm", "/dev/video*": "video4linux"}


def nvidia_devices(name: str) -> List[str]:
    lines = (FIXTURES / name).read_text().splitlines()
    return [line.split(",", 1)[1].strip() for line in lines if line.startswith("dev,")]


def allowed(rules: List[str], node: str) -> bool:
    paths = {r.split()[0] for r in rules if r.startswith("/dev/")}
    groups = {r.split()[0][len("char-") :] for r in rules if r.startswith("char-")}
    return node in paths or GROUPS.get(node) in groups


@pytest.mark.parametrize("listing", ["container-devices-jp5.csv", "container-devices-jp6.csv"])
def test_the_unit_allows_every_compute_device_nvidia_gives_a_cuda_container(listing):
    """The nodes NVIDIA's container runtime gives a container on JetPack 5 and 6, minus display, codecs and PVA.
    The old rule char-nvhost* matched none of the GPU nodes (nvgpu registers them under the GPU's device name)."""
    rules = directives(UNIT.read_text())["DeviceAllow"]
    needed = [n for n in nvidia_devices(listing) if not NOT_NEEDED.match(n)]
    assert needed and [n for n in needed if not allowed(rules, n)] == []
    assert allowed(rules, "/dev/video*")  # cameras


def test_the_unit_allows_nothing_nvidia_does_not_list():
    rules = directives(UNIT.read_text())["DeviceAllow"]
    listed = set(nvidia_devices("container-devices-jp5.csv")) | set(nvidia_devices("container-devices-jp6.csv"))
    for rule in rules:
        node = rule.split()[0]
        assert node in listed or node in ("char-video4linux", "char-drm"), node


# -- edge service check ------------------------------------------------------------------------------------------


def installed(tmp_path: Path, config: Path) -> Path:
    root = tmp_path / "root"
    run = edge("service", "install", "front", "--config", str(config), "--root", str(root), "--edge-run", edge_run_path(tmp_path))
    assert run.returncode == 0, run.stderr
    return root


def test_check_runs_the_units_own_edge_run_in_its_sandbox(tmp_path: Path, config: Path) -> None:
    root = installed(tmp_path, config)
    run = edge("service", "check", "front", "--root", str(root), "--dry-run")
    assert run.returncode == 0, run.stderr
    argv = shlex.split(run.stdout)
    assert argv[:3] == ["systemd-run", "--wait", "--pipe"]
    props = [argv[i + 1] for i, a in enumerate(argv) if a == "-p"]
    d = directives((root / "etc/systemd/system/edge-camera@.service").read_text())
    for key in ("User", "Group", "SupplementaryGroups", "DevicePolicy", "ProtectSystem", "NoNewPrivileges", "PrivateTmp"):
        assert f"{key}={d[key][0]}" in props
    assert [p for p in props if p.startswith("DeviceAllow=")] == [f"DeviceAllow={r}" for r in d["DeviceAllow"]]
    assert "StateDirectory=edge-camera/front" in props  # %i is the instance
    assert "Environment=CUDA_CACHE_PATH=/var/lib/edge-camera/front/cuda-cache" in props  # %S is /var/lib
    assert not [p for p in props if p.split("=")[0] in ("Type", "Restart", "WatchdogSec", "ExecStart", "KillMode")]
    tail = argv[argv.index("--") + 1 :]
    assert tail == [edge_run_path(tmp_path), "--config", "/etc/edge/front.yaml", "--check"]


def test_the_check_properties_pass_systemd_analyze_verify(tmp_path: Path, config: Path) -> None:
    """systemd-run cannot run here (no systemd as PID 1), so its properties are checked by systemd's own parser as
    the directives of an equivalent service unit."""
    analyze = shutil.which("systemd-analyze")
    require_or_skip(analyze is not None, "systemd-analyze is not installed (apt-get install -y systemd)")
    from edge.deploy.service import check_command

    root = installed(tmp_path, config)
    argv = check_command((root / "etc/systemd/system/edge-camera@.service").read_text(), "front", 60)
    props = [argv[i + 1] for i, a in enumerate(argv) if a == "-p"]
    unit = tmp_path / "verify" / "edge-camera-check-front.service"
    unit.parent.mkdir()
    body = "\n".join(props)
    unit.write_text(f"[Service]\nType=exec\nExecStart={shlex.join(argv[argv.index('--') + 1 :])}\n{body}\n")
    check = subprocess.run([str(analyze), "verify", str(unit)], capture_output=True, text=True, timeout=60)
    ours = [line for line in (check.stdout + check.stderr).splitlines() if "edge-camera-check" in line]
    assert check.returncode == 0 and not ours, check.stdout + check.stderr


def test_check_without_a_running_systemd_is_one_line_exit_1(tmp_path: Path) -> None:
    """The real systemd-run, on a machine where systemd is not PID 1."""
    from edge.deploy.service import run_check
    from edge.errors import RunFailed

    require_or_skip(shutil.which("systemd-run") is not None, "systemd-run is not installed (apt-get install -y systemd)")
    if Path("/run/systemd/system").is_dir():
        pytest.skip("systemd runs here: the check would really start a unit")
    with pytest.raises(RunFailed, match="systemd-run cannot reach systemd here") as info:
        run_check(["systemd-run", "--wait", "--pipe", "--", "/bin/true"], "front", 10)
    assert "\n" not in str(info.value)


def test_check_refuses_what_is_not_installed(tmp_path: Path) -> None:
    run = edge("service", "check", "front", "--root", str(tmp_path), "--dry-run")
    assert run.returncode == 2 and "not installed; run `edge service install front" in run.stderr
    run = edge("service", "check", "front cam", "--dry-run")
    assert run.returncode == 2 and "NAME 'front cam'" in run.stderr and "Traceback" not in run.stderr


def test_check_of_an_image_names_what_the_first_boot_would_miss(tmp_path: Path, config: Path) -> None:
    """`install --root` then `check --root` (no --dry-run): the image is checked as files, nothing runs. Each
    failing row is made by the test and then repaired, so every row is seen both ways."""
    require_or_skip(
        shutil.which("systemd-sysusers") and shutil.which("systemctl"), "systemd is not installed (apt-get install -y systemd)"
    )
    root = tmp_path / "image"
    run = edge(
        "service", "install", "front", "--config", str(config), "--root", str(root), "--edge-run", "/usr/local/bin/edge-run"
    )
    assert run.returncode == 0, run.stderr
    (root / "etc/edge/front.yaml").chmod(0o644)
    run = edge("service", "check", "front", "--root", str(root))
    assert run.returncode == 1, run.stdout + run.stderr
    rows = run.stdout.splitlines()
    assert rows == [
        "FAIL ExecStart program '/usr/local/bin/edge-run' in the image",
        "ok   edge-camera@front.service enabled (multi-user.target.wants)",
        "ok   user edge in group video (systemd-sysusers)",
        "FAIL config front.yaml not world-readable, group edge (mode 644)",
        "FAIL model.engine '/etc/edge/model.engine' in the image",
    ]
    assert run.stderr.strip().splitlines()[-1].endswith("3 of 5 checks failed (FAIL rows above)")
    # a venv's edge-run is an absolute link: followed inside the image, not on this machine
    venv = root / "opt/edge/bin"
    venv.mkdir(parents=True)
    (venv / "edge-run").write_text("#!/bin/sh\n")
    (venv / "edge-run").chmod(0o755)
    (root / "usr/local/bin").mkdir(parents=True)
    (root / "usr/local/bin/edge-run").symlink_to("/opt/edge/bin/edge-run")
    (root / "etc/edge/front.yaml").chmod(0o640)
    (root / "etc/edge/model.engine").write_bytes(b"plan")
    run = edge("service", "check", "front", "--root", str(root))
    assert run.returncode == 0, run.stdout + run.stderr
    assert [r[:4] for r in run.stdout.splitlines()[:-1]] == ["ok  "] * 5
    assert "on the device, `edge service check front` runs edge-run --check in its sandbox" in run.stdout
    if os.geteuid() == 0:  # the config in another group than the service's, mode 0640: the service cannot read it
        gid = (root / "etc/edge/front.yaml").stat().st_gid
        os.chown(root / "etc/edge/front.yaml", -1, gid + 1)
        run = edge("service", "check", "front", "--root", str(root))
        assert "FAIL config front.yaml not world-readable, group edge (mode 640)" in run.stdout and run.returncode == 1
        os.chown(root / "etc/edge/front.yaml", -1, gid)
    (root / "etc/systemd/system/multi-user.target.wants/edge-camera@front.service").unlink()
    run = edge("service", "check", "front", "--root", str(root))
    assert run.returncode == 1 and "FAIL edge-camera@front.service enabled" in run.stdout
    # an image whose passwd lost the service user (and whose group file is gone) fails that row, and only it
    (root / "etc/systemd/system/multi-user.target.wants/edge-camera@front.service").symlink_to(
        "/etc/systemd/system/edge-camera@.service"
    )
    passwd = root / "etc/passwd"
    passwd.write_text("".join(line for line in passwd.read_text().splitlines(True) if not line.startswith("edge:")))
    (root / "etc/group").unlink()
    run = edge("service", "check", "front", "--root", str(root))
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert [r for r in run.stdout.splitlines() if r.startswith("FAIL")] == ["FAIL user edge in group video (systemd-sysusers)"]


def test_install_into_a_relative_root(tmp_path: Path, config: Path) -> None:
    """systemd-sysusers and systemctl read their file arguments under --root: a relative root must be made absolute."""
    require_or_skip(
        shutil.which("systemd-sysusers") and shutil.which("systemctl"), "systemd is not installed (apt-get install -y systemd)"
    )
    run = subprocess.run(
        [sys.executable, "-m", "edge", "service", "install", "front", "--config", str(config), "--root", "image"]
        + ["--edge-run", "/usr/local/bin/edge-run"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert "edge:" in (tmp_path / "image/etc/passwd").read_text()
    assert (tmp_path / "image/etc/systemd/system/multi-user.target.wants/edge-camera@front.service").is_symlink()
