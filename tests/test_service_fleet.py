"""`edge service install` and the unit with the fleet endpoints: ports checked against the other cameras on the
device, the textfile drop-in verified by systemd-analyze, the URLs printed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import require_or_skip
from .test_systemd_unit import CONFIG, UNIT, directives, edge, edge_run_path


def install(tmp_path: Path, name: str, extra: str, *flags: str) -> subprocess.CompletedProcess:
    config = tmp_path / f"{name}.yaml"
    config.write_text(CONFIG + extra)
    root = tmp_path / "root"
    return edge(
        "service", "install", name, "--config", str(config), "--root", str(root), "--edge-run", edge_run_path(tmp_path), *flags
    )


def test_unit_names_the_instance_for_the_camera_label() -> None:
    d = directives(UNIT.read_text())
    assert "EDGE_INSTANCE=%i" in d["Environment"]
    assert "AF_INET" in d["RestrictAddressFamilies"][0].split()


def test_install_prints_the_endpoints_and_lets_the_service_write_its_textfile(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    require_or_skip(analyze is not None, "systemd-analyze is not installed (apt-get install -y systemd)")
    extra = "metrics:\n  port: 9101\n  textfile: /var/lib/prometheus/node-exporter/edge_front.prom\nview:\n  port: 8090\n"
    run = install(tmp_path, "front", extra)
    assert run.returncode == 0, run.stderr
    assert "metrics: http://127.0.0.1:9101/metrics" in run.stdout and "live view: http://127.0.0.1:8090/" in run.stdout
    root = tmp_path / "root" / "etc" / "systemd" / "system"
    dropin = root / "edge-camera@front.service.d" / "metrics-textfile.conf"
    assert directives(dropin.read_text())["ReadWritePaths"] == ["-/var/lib/prometheus/node-exporter"]
    # systemd's own checker, on the instance with its drop-in beside it as systemd would find them.
    verify = tmp_path / "verify"
    verify.mkdir()
    shutil.copy(root / "edge-camera@.service", verify / "edge-camera@front.service")
    shutil.copytree(dropin.parent, verify / dropin.parent.name)
    check = subprocess.run(
        [str(analyze), "verify", str(verify / "edge-camera@front.service")], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0 and "edge-camera" not in check.stdout + check.stderr, check.stdout + check.stderr
    # Installed again without a textfile: the drop-in goes.
    assert install(tmp_path, "front", "metrics:\n  port: 9101\n").returncode == 0
    assert not dropin.exists()


@pytest.mark.parametrize(
    "first, second, message",
    [
        (
            "metrics:\n  port: 9101\n",
            "metrics:\n  port: 9101\n",
            "metrics.port 9101: edge-camera@front already uses it (metrics.port in",
        ),
        (
            "view:\n  port: 8090\n",
            "metrics:\n  port: 8090\n",
            "metrics.port 8090: edge-camera@front already uses it (view.port in",
        ),
    ],
)
def test_a_second_camera_on_the_same_port_is_refused(tmp_path: Path, first: str, second: str, message: str) -> None:
    assert install(tmp_path, "front", first).returncode == 0
    run = install(tmp_path, "back", second)
    err = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(err) == 1 and message in err[0], run.stderr
    assert not (tmp_path / "root" / "etc" / "edge" / "back.yaml").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        ("metrics:\n  port: 80\n", "key 'metrics.port': expected a port 1024..65535"),
        ("metrics:\n  textfile: edge.prom\n", "the service needs an absolute path"),
        ("view:\n  port: 9000\nmetrics:\n  port: 9000\n", "are both port 9000"),
    ],
)
def test_ports_and_files_the_service_cannot_use_are_refused(tmp_path: Path, extra: str, message: str) -> None:
    run = install(tmp_path, "front", extra, "--dry-run")
    err = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(err) == 1 and message in err[0], run.stderr
