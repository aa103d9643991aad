"""Secrets, unit files and names (review hostile-inputs-2026-12, "Security" 1, 3, 4, 5, 6; issue 14 items 5 and 6).

- No password in any output: every URI form (any scheme case, ``@`` inside the password, ``user:pass@`` in
  http(s), a token in the query string) through errors, logs at every level, the summary, results and a report.
  The streams that open are real: an HTTP server on 127.0.0.1 serving Megamind.avi to OpenCV's FFmpeg.
- Values written into a systemd unit are validated and quoted by systemd's rules, checked by ``systemd-analyze
  verify`` itself (it resolves ExecStart's program: a wrongly quoted path is "not executable").
- Names never carry a trailing newline; a config holding credentials is never world-readable once installed
  (``edge service install``, ``edge deploy``, the Ansible playbook); rsync, scp and ssh get ``--`` before hosts.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Iterator, List

import pytest
import yaml

from edge import cli

from ._deploytools import SSHServer, sshd_fixture, write_engine
from ._hostile import (
    B,
    assert_clean,
    assert_no_traceback,
    assert_refused,
    call,
    command_parser,
    demo_config,
    edge,
    have,
    http_file,
    onnx_conv,
    require_or_skip,
    run,
)
from .conftest import ROOT

PASSWORD = "s3cr3t-Pw"  # nothing else in any output contains this text


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, demo_model: Path, megamind: Path) -> Path:
    return demo_config(tmp_path_factory.mktemp("secrets"))


def _everything(o, *files: Path) -> str:
    text = o.out + o.err
    for f in files:
        if f.is_file():
            text += f.read_text(errors="replace")
    return text


def _assert_secret_free(text: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in text, f"{secret!r} leaked: ...{text[max(0, text.find(secret) - 200) : text.find(secret) + 80]}..."


# URIs that cannot be opened (nothing listens on port 9): the password must not reach the error line or the logs.
FAILING_URIS = [
    f"RTSP://admin:{PASSWORD}@127.0.0.1:9/stream",
    f"rtsp://admin:p@{PASSWORD}@127.0.0.1:9/stream",
    f"Rtsps://admin:{PASSWORD}@127.0.0.1:9/stream",
    f"https://viewer:{PASSWORD}@127.0.0.1:9/cam.mjpg",
    f"HTTP://viewer:{PASSWORD}@127.0.0.1:9/cam.mjpg",
    f"http://127.0.0.1:9/cam.mjpg?user=viewer&token={PASSWORD}",
    f"http://127.0.0.1:9/cam.mjpg?api_key={PASSWORD}&password={PASSWORD}",
    f"rtsp://{PASSWORD}@127.0.0.1:9/stream",  # a bare token as userinfo
]


@pytest.mark.parametrize("uri", FAILING_URIS)
def test_a_password_in_a_source_that_fails_is_never_printed(base: Path, tmp_path: Path, uri: str) -> None:
    """Review security 5: `RTSP://admin:s3cret@…` (upper case) printed the password; `p@ss` printed `***@ss@host`.
    The URI comes as --source, as --set source.uri (at debug level: tracebacks and debug lines too) and in a file."""
    cfg = tmp_path / "cam.yaml"
    cfg.write_text(base.read_text().replace("uri: asset://megamind", f"uri: '{uri}'"))
    bounded = ["--set", "source.reconnect.max_attempts=1", "--set", "source.reconnect.initial_delay_s=0.1", "-q"]
    bounded += ["--telemetry", "none", "--summary-json", str(tmp_path / "s.json")]
    for argv in (
        ["-c", base, "--source", uri, *bounded],
        ["-c", base, "--set", f"source.uri={uri}", *bounded, "--log-level", "debug"],
        ["-c", cfg, *bounded],
    ):
        o = call(argv, main=cli.run_main)
        assert o.code in (1, 2), o
        _assert_secret_free(_everything(o, tmp_path / "s.json"), PASSWORD, "ss@127")
        if "debug" not in argv:
            assert_clean(o, codes=(1, 2))


def test_a_password_in_a_config_error_is_never_printed(base: Path) -> None:
    """A wrong type echoes the value in the message: the value is redacted too."""
    for override in (
        f"source.uri=[rtsp://admin:{PASSWORD}@cam/x]",
        f"source.uri={{u: 'rtsp://admin:{PASSWORD}@cam/x'}}",
        f"task.labels=[1, 'http://u:{PASSWORD}@h/']",
        f"sinks.results=rtsp://admin:{PASSWORD}@cam/x/nonexistent-folder/r.jsonl",
    ):
        o = call(["run", "-c", base, "--set", override, "--check", "--log-level", "debug"])
        assert_clean(o)
        _assert_secret_free(o.out + o.err, PASSWORD)


def test_a_password_in_an_edge_calib_path_is_never_printed(tmp_path: Path) -> None:
    """A URI given where edge calib expects a path comes back from pathlib with one slash ("rtsp:/user:pw@host"),
    which the redaction missed (found by an attack on the CLI): every path flag, and the config's model.path."""
    model = onnx_conv(tmp_path / "m.onnx")
    images = tmp_path / "images"
    images.mkdir()
    uri = f"rtsp://admin:{PASSWORD}@cam/stream"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model:\n  path: 'mqtt://admin:{PASSWORD}@host/m.onnx'\n")
    for argv in (
        [model, "--images", uri],
        [model, "--images", images, "--agreement-images", uri],
        [model, "--dataset", "mnist_5k[:4]", "--eval", uri],
        [model, "--images", images, "--cache", f"mqtt://admin:{PASSWORD}@h/x.cache"],
        [model, "--images", images, "--qdq", f"https://admin:{PASSWORD}@h/q.onnx"],
        ["--images", images, "--config", f"https://admin:{PASSWORD}@h/c.yaml"],
        ["--images", images, "--config", cfg],
        ["--images", images, "--set", f"model.path=https://admin:{PASSWORD}@h/m.onnx"],
    ):
        o = call(["calib", *argv])
        assert o.code == 2, o
        _assert_secret_free(o.out + o.err, PASSWORD)
        assert_clean(o)


@pytest.mark.slow
def test_credentials_of_a_stream_that_plays_reach_no_output(base: Path, tmp_path: Path, megamind: Path) -> None:
    """A stream that opens and plays (HTTP on loopback, OpenCV's FFmpeg): user:pass@ and ?token= stay out of the
    summary, the results, the status lines, the debug log and the report."""
    with http_file(megamind) as port:
        uri = f"http://viewer:{PASSWORD}@127.0.0.1:{port}/clip.avi?token={PASSWORD}x&session=1"
        out = tmp_path / "run"
        out.mkdir()
        o = B(
            base,
            "--source",
            uri,
            "--frames",
            20,
            "--log-level",
            "debug",
            "--results",
            out / "results.jsonl",
            "--summary-json",
            out / "summary.json",
            timeout=120,
        )
    assert o.code == 0, o
    summary = json.loads((out / "summary.json").read_text())
    assert summary["frames"] > 0 and "127.0.0.1" in json.dumps(
        summary["source"]
    )  # the URI is there, redacted (a live source drops frames)
    report = edge("report", out)
    assert report.code == 0, report
    _assert_secret_free(_everything(o, *out.iterdir()) + report.out + report.err, PASSWORD)


def test_a_report_of_a_folder_holding_a_password_does_not_repeat_it(tmp_path: Path) -> None:
    """An older run's summary.json (or one written by hand) with a camera password: the report redacts it."""
    (tmp_path / "summary.json").write_text(
        json.dumps({"frames": 3, "fps": 10.0, "source": {"uri": f"rtsp://admin:{PASSWORD}@cam/1", "live": True}})
    )
    (tmp_path / "results.jsonl").write_text(
        "".join(
            json.dumps({"frame": i, "t_capture": i * 0.1, "t_done": i * 0.1 + 0.05, "latency_ms": {"infer": 5.0}}) + "\n"
            for i in range(3)
        )
    )
    o = edge("report", tmp_path)
    assert_clean(o, codes=(0,))
    written = [p for p in tmp_path.iterdir() if p.name != "summary.json"]  # the input holds it, the outputs must not
    assert any(p.name == "report.html" for p in written)
    _assert_secret_free(_everything(o, *written), PASSWORD)


# -- systemd unit values ---------------------------------------------------------------------------------------------


def _fake_edge_run(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "edge-run"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} -m edge run "$@"\n')
    exe.chmod(0o755)
    return exe


INJECTIONS = [
    "/usr/local/bin/edge-run\nExecStartPre=+/bin/touch /tmp/pwned\nUser=root\n#",
    "/usr/local/bin/edge-run\rUser=root",
    "/usr/local/bin/edge-run\tUser=root",
    "/usr/local/bin/edge-run\x00",
    "/usr/local/bin/edge-run\x1b[2J",
    "/usr/local/bin/edge-run\x7f",
]


@pytest.mark.parametrize("path", INJECTIONS, ids=["newline", "cr", "tab", "nul", "escape", "del"])
def test_control_characters_in_edge_run_never_reach_the_unit(tmp_path: Path, path: str) -> None:
    """Review security 1: a newline in --edge-run wrote `ExecStartPre=+…` and `User=root` into the unit."""
    cfg = tmp_path / "front.yaml"
    cfg.write_text("model:\n  engine: model.engine\nsource:\n  uri: /dev/video0\n")
    root = tmp_path / "root"
    try:
        o = call(["service", "install", "front", "--config", cfg, "--root", root, "--edge-run", path])
    except ValueError:  # NUL cannot even be an argv element: nothing to test through a real command line
        pytest.skip("an argument cannot hold NUL")
    assert_refused(o, "--edge-run", parser=command_parser("service"))
    assert not (root / "etc/systemd/system/edge-camera@.service").exists()
    assert not any("pwned" in p.read_text(errors="replace") for p in root.rglob("*") if p.is_file())


# A space must work (review); so must what systemd can express. Characters systemd refuses in an executable's name
# ("Executable name contains special characters") may be refused instead, with one line naming --edge-run.
MUST_WORK = ["my venv", "two  spaces", "caméra", "50%b"]
WORK_OR_REFUSE = ["$HOME", "${HOME}", 'a"b', "a'b", "back\\slash", "semi;colon"]


@pytest.mark.parametrize("folder", MUST_WORK + WORK_OR_REFUSE)
def test_an_edge_run_path_with_odd_characters_works_and_systemd_accepts_the_unit(tmp_path: Path, folder: str) -> None:
    """Review security 1: `/opt/my venv/bin/edge-run` gave a broken unquoted ExecStart. systemd-analyze verify checks
    the quoting for real: it resolves ExecStart's program and fails when that path does not exist."""
    analyze = shutil.which("systemd-analyze")
    require_or_skip(analyze is not None, "systemd-analyze is not installed (apt-get install -y systemd)")
    exe = _fake_edge_run(tmp_path / "opt" / folder / "bin")
    cfg = tmp_path / "front.yaml"
    cfg.write_text("model:\n  engine: model.engine\nsource:\n  uri: /dev/video0\n")
    root = tmp_path / "root"
    o = edge("service", "install", "front", "--config", cfg, "--root", root, "--edge-run", exe)
    if folder in WORK_OR_REFUSE and o.code == 2:
        assert_refused(o, "--edge-run")
        assert not (root / "etc/systemd/system/edge-camera@.service").exists()
        return
    assert_clean(o, codes=(0,))
    unit = root / "etc/systemd/system/edge-camera@.service"
    instance = tmp_path / "verify" / "edge-camera@front.service"
    instance.parent.mkdir()
    shutil.copy(unit, instance)
    for path in (unit, instance):
        check = subprocess.run([analyze, "verify", str(path)], capture_output=True, text=True, timeout=60)
        ours = [line for line in (check.stdout + check.stderr).splitlines() if "edge-camera" in line]
        assert check.returncode == 0 and not ours, f"{path}:\n{unit.read_text()}\n{check.stdout}{check.stderr}"
    # Moving the program away makes verify fail: proof that it resolved the quoted path, not some other word.
    exe.rename(exe.with_name("gone"))
    check = subprocess.run([analyze, "verify", str(instance)], capture_output=True, text=True, timeout=60)
    assert check.returncode != 0 or "edge-camera" in check.stdout + check.stderr, "systemd-analyze did not look at ExecStart"


# -- names ------------------------------------------------------------------------------------------------------------

BAD_NAMES = ["front\n", "front\r", "fro\nnt", "\nfront", "front ", "-front", "front/..", "..", "front\x00"]


@pytest.mark.parametrize("name", BAD_NAMES, ids=[repr(n) for n in BAD_NAMES])
def test_a_service_name_with_a_newline_or_odd_character_is_refused(tmp_path: Path, name: str) -> None:
    """Review security 4: `service install $'front\\n'` made a path and a unit with a newline."""
    if "\x00" in name:
        pytest.skip("an argument cannot hold NUL")
    cfg = tmp_path / "front.yaml"
    cfg.write_text("model:\n  engine: model.engine\nsource:\n  uri: /dev/video0\n")
    root = tmp_path / "root"
    o = call(["service", "install", name, "--config", cfg, "--root", root, "--edge-run", "/bin/true"])
    assert_refused(o, "NAME")
    assert not root.exists() or not any("\n" in p.name or "\r" in p.name for p in root.rglob("*"))


@pytest.mark.parametrize("name", [n for n in BAD_NAMES if "\x00" not in n], ids=[repr(n) for n in BAD_NAMES if "\x00" not in n])
def test_a_deploy_name_with_a_newline_is_refused_here_and_on_the_device(tmp_path: Path, name: str) -> None:
    """edge deploy refuses it before connecting; the device program (which the Ansible playbook runs with its
    edge_name) refuses it too and creates nothing."""
    engine = write_engine(tmp_path / "e", b"engine bytes")
    o = call(
        ["deploy", "jetson@127.0.0.1", "--name", name, "--engine", engine, "--config", engine.parent / "front.yaml", "-p", "9"]
    )
    assert_refused(o, "--name")
    root = tmp_path / "device"
    root.mkdir()
    target = ROOT / "edge" / "deploy" / "target.py"
    sha = "0" * 64
    o = run([sys.executable, "-", "prepare", "--root", str(root), "--name", name, "--sha256", sha], stdin=target.read_bytes())
    assert_no_traceback(o)
    assert o.code != 0, f"the device program accepted {name!r}{o}"
    assert not any(p for p in root.rglob("*")), list(root.rglob("*"))


def test_an_engine_name_with_a_trailing_newline_is_refused(tmp_path: Path) -> None:
    engine = write_engine(tmp_path, b"engine bytes", name="model.engine\n")
    o = call(
        ["deploy", "jetson@127.0.0.1", "--name", "front", "--engine", engine, "--config", tmp_path / "front.yaml", "-p", "9"]
    )
    assert_refused(o, "--engine")


@pytest.mark.parametrize("target", ["-oProxyCommand=touch /tmp/pwned", "--help", "host\n", "user@-host", "a b", "host;id", ""])
def test_a_deploy_target_that_looks_like_an_option_is_refused(tmp_path: Path, target: str) -> None:
    engine = write_engine(tmp_path, b"engine bytes")
    o = call(["deploy", "--name", "front", "--engine", engine, "--config", tmp_path / "front.yaml", "--", target])
    assert_clean(o, codes=(2,))


# -- modes of installed configs ---------------------------------------------------------------------------------------


def _private(path: Path) -> None:
    mode = stat.S_IMODE(path.stat().st_mode)
    assert mode & 0o007 == 0, f"{path} is {oct(mode)}: world-readable, and it holds a camera password"
    assert mode & 0o020 == 0, f"{path} is {oct(mode)}: group-writable"


def test_service_install_never_makes_a_config_with_a_password_world_readable(tmp_path: Path) -> None:
    """Review security 3: a 0600 config holding `rtsp://admin:pw@…` was installed 0644 as /etc/edge/NAME.yaml."""
    require_or_skip(have("systemd-sysusers") and have("systemctl"), "systemd is not installed (apt-get install -y systemd)")
    cfg = tmp_path / "front.yaml"
    cfg.write_text(f"model:\n  engine: model.engine\nsource:\n  uri: rtsp://admin:{PASSWORD}@192.0.2.7/stream\n")
    cfg.chmod(0o600)
    root = tmp_path / "root"
    for umask in (0o022, 0o000):
        old = os.umask(umask)
        try:
            o = edge("service", "install", "front", "--config", cfg, "--root", root, "--edge-run", "/bin/true")
        finally:
            os.umask(old)
        assert_clean(o, codes=(0,))
        _private(root / "etc" / "edge" / "front.yaml")
        assert PASSWORD not in o.out + o.err


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    yield from sshd_fixture(tmp_path_factory)


def _logging_tools(folder: Path, log: Path) -> dict:
    """ssh, scp and rsync wrappers first on PATH: each logs its argv (and its parent's name) and runs the real tool."""
    folder.mkdir()
    for tool in ("ssh", "scp", "rsync"):
        real = shutil.which(tool)
        require_or_skip(real is not None, f"{tool} is not installed (apt-get install -y openssh-client rsync)")
        wrapper = folder / tool
        wrapper.write_text(
            "#!/bin/sh\n"
            f'{{ printf "%s\\0" "$(cat /proc/$PPID/comm)" "{tool}"; for a in "$@"; do printf "%s\\0" "$a"; done; printf "\\n"; }} >> {log}\n'
            f'exec {real} "$@"\n'
        )
        wrapper.chmod(0o755)
    return {"PATH": f"{folder}:{os.environ['PATH']}", "PYTHON": sys.executable}


def _logged(log: Path) -> List[List[str]]:
    out = []
    for line in log.read_bytes().split(b"\n"):
        if line:
            out.append([a.decode() for a in line.split(b"\0")[:-1]])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("transfer", ["rsync", "scp"])
def test_deploy_gives_ssh_scp_rsync_a_double_dash_before_the_host_and_installs_a_private_config(
    sshd: SSHServer, tmp_path: Path, transfer: str
) -> None:
    """Review security 6 (rsync got the host without `--`) and 3 (`--chmod=F644` made the config world-readable)."""
    log = tmp_path / "argv.log"
    env = _logging_tools(tmp_path / "bin", log)
    engine = write_engine(tmp_path / "e", b"engine bytes" * 100)
    config = engine.parent / "front.yaml"
    config.write_text(f"model:\n  engine: model.engine\nsource:\n  uri: rtsp://admin:{PASSWORD}@192.0.2.7/stream\n")
    config.chmod(0o600)
    root = tmp_path / "device"
    restart = json.dumps([sys.executable, "-c", "pass"])
    o = run(
        [str(ROOT / "scripts" / "deploy.sh"), sshd.host, *sshd.ssh_args(), "--name", "front", "--engine", str(engine)]
        + ["--config", str(config), "--root", str(root), "--transfer", transfer, "--no-check"]
        + ["--restart-cmd", restart, "--health-cmd", restart, "--timeout", "5"],
        env=env,
        timeout=120,
    )
    assert o.code == 0, o
    assert PASSWORD not in o.out + o.err
    calls = [argv for argv in _logged(log) if argv[0] not in ("rsync", "ssh", "scp")]  # not rsync's own ssh
    tools = {argv[1] for argv in calls}
    assert "ssh" in tools and transfer in tools, calls
    for _parent, tool, *args in calls:
        assert "--" in args, f"{tool} got no '--': {args}"
        hosts = [i for i, a in enumerate(args) if a == sshd.host or a.startswith(f"{sshd.host}:")]
        assert hosts and min(hosts) > args.index("--"), f"{tool}: the host comes before '--': {args}"
    installed = root / "etc" / "edge" / "front.yaml"
    assert PASSWORD in installed.read_text()
    _private(installed.resolve())
    for p in (root / "opt").rglob("*.yaml"):
        _private(p)


def test_the_ansible_upload_never_makes_the_config_world_readable() -> None:
    """The playbook's copy of the config: its mode must not let other users read camera passwords, even in transit."""
    play = yaml.safe_load((ROOT / "scripts" / "ansible" / "deploy.yml").read_text())
    copies = [t for t in play[0]["tasks"] if "ansible.builtin.copy" in t or "copy" in t]
    assert copies, "the playbook has no copy task"
    for task in copies:
        body = task.get("ansible.builtin.copy") or task.get("copy")
        items = task.get("loop") or [{"src": body.get("src"), "dest": body.get("dest")}]
        for item in items:
            if "config" not in str(item.get("dest")):
                continue
            mode = str(item.get("mode") or body.get("mode") or "")
            assert mode and not mode.startswith("{{"), f"the config's mode is not fixed: {mode!r}"
            assert int(mode, 8) & 0o007 == 0, f"the config is copied with mode {mode}: world-readable"


def test_unit_and_sysusers_files_are_not_private_but_configs_are(tmp_path: Path) -> None:
    """One documented set of modes: the unit and sysusers entry are world-readable (systemd reads them), configs not."""
    require_or_skip(have("systemd-sysusers") and have("systemctl"), "systemd is not installed (apt-get install -y systemd)")
    cfg = tmp_path / "front.yaml"
    cfg.write_text("model:\n  engine: model.engine\nsource:\n  uri: /dev/video0\n")
    root = tmp_path / "root"
    o = edge("service", "install", "front", "--config", cfg, "--root", root, "--edge-run", "/bin/true")
    assert_clean(o, codes=(0,))
    for path in (root / "etc/systemd/system/edge-camera@.service", root / "etc/sysusers.d/edge-camera.conf"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, (path, oct(path.stat().st_mode))
    _private(root / "etc/edge/front.yaml")
