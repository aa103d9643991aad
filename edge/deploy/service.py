"""`edge service install NAME --config FILE`: install and enable the edge-camera@NAME systemd service;
`edge service check NAME`: run `edge-run --check` for that instance inside the unit's own sandbox.

``install`` writes the unit template and the sysusers.d entry for its dedicated user (in the video group), creates
that user with systemd-sysusers, installs the config as /etc/edge/NAME.yaml and enables the instance.
``--dry-run`` prints the same actions without doing them; ``--root`` installs into another root (an image
being prepared, or a test), where systemctl works offline and nothing is started.

``check`` reads the installed unit, turns its [Service] sandbox (user, devices, file-system protection, ...) into
``systemd-run --wait --pipe -p KEY=VALUE`` properties and runs the unit's own edge-run with ``--check`` in a
transient service that has them, so a user sees that CUDA, the DLA and the camera open under the sandbox before
enabling the service (a DeviceAllow= that misses a node shows up as a CUDA error here, not at 3 a.m.).
``check --root DIR`` checks an install made with ``install --root DIR`` (an image) without running it: the unit, its
edge-run, the enabled link, the service user, the config's mode and every file it names, all inside DIR.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from edge import argtypes
from edge.config import short
from edge.deploy.target import CONFIG_MODE, NAME_RE, SERVICE_GROUP
from edge.errors import EdgeError, RunFailed
from edge.inputs import read_capped
from edge.outputs import write_atomic

UNIT = "edge-camera@.service"
SYSUSERS = "edge-camera.sysusers"
EXEC_PLACEHOLDER = "/usr/local/bin/edge-run"  # the path written in systemd/edge-camera@.service

# A source checkout (and editable install) has systemd/ beside the package; a wheel puts it under share/.
_UNIT_DIR = next(
    (d for d in (Path(__file__).resolve().parents[2] / "systemd", Path(sys.prefix) / "share" / "edge" / "systemd") if d.is_dir()),
    Path(sys.prefix) / "share" / "edge" / "systemd",
)

Action = Tuple[str, Callable[[], None]]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = sub.add_parser(
        "check",
        help="run edge-run --check for NAME inside the unit's sandbox (systemd-run with its properties)",
        description="Run `edge-run --check --config /etc/edge/NAME.yaml` in a transient service with the sandbox of the "
        "installed edge-camera@.service: its user, device rules and file-system protection.",
    )
    c.add_argument("name", metavar="NAME", help="instance name: checks /etc/edge/NAME.yaml")
    c.add_argument("--dry-run", action="store_true", help="print the systemd-run command, run nothing")
    c.add_argument(
        "--root",
        type=Path,
        default=Path("/"),
        help="check an install made with `install --root` (an image): files, user and config, nothing is run",
    )
    c.add_argument(
        "--timeout", type=argtypes.positive_float, default=180.0, help="seconds before the check is stopped (default 180)"
    )
    p = sub.add_parser("install", help="install and enable edge-camera@NAME.service", description=__doc__.splitlines()[0])
    p.add_argument("name", metavar="NAME", help="instance name: the service reads /etc/edge/NAME.yaml")
    p.add_argument("--config", type=Path, help="run config to install as /etc/edge/NAME.yaml (omit to keep the one there)")
    p.add_argument("--dry-run", action="store_true", help="print what would be done, change nothing")
    p.add_argument("--now", action="store_true", help="also (re)start the service")
    p.add_argument("--root", type=Path, default=Path("/"), help="install into this root instead of / (nothing is started)")
    p.add_argument("--edge-run", help="absolute path of edge-run for ExecStart (default: the one on PATH)")


def _write(path: Path, text: str, mode: int = 0o644) -> Callable[[], None]:
    def do() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text, mode=mode)  # a running systemd never reads half a unit or config

    return do


def _run(argv: List[str]) -> Callable[[], None]:
    def do() -> None:
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except FileNotFoundError:
            raise RunFailed(f"{argv[0]}: not found; this command needs systemd (a Jetson with JetPack has it)") from None
        if proc.returncode != 0:
            raise RunFailed(
                f"{' '.join(argv)} exited with status {proc.returncode}: {proc.stdout.decode(errors='replace').strip()}"
            )

    return do


def _edge_run(given: Optional[str], root: Path) -> str:
    path = given or shutil.which("edge-run")
    if not path:
        raise EdgeError(
            "edge-run is not on PATH; install edge on this device (pip install edge) or pass --edge-run /path/to/edge-run"
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise EdgeError(f"--edge-run {short(path)}: a path with a control character (newline, tab) cannot go into a unit file")
    if not os.path.isabs(path):
        raise EdgeError(f"--edge-run {short(path)}: systemd needs an absolute path")
    if any(c in path for c in "$\"'\\"):
        # systemd refuses these in an executable's name ("contains special characters"), however quoted
        raise EdgeError(
            f"--edge-run {short(path)}: systemd cannot run a program whose path holds $ \" ' or \\; install edge elsewhere"
        )
    if root == Path("/") and not os.access(path, os.X_OK):
        raise EdgeError(f"--edge-run {short(path)}: not an executable file")
    return path


def unit_word(value: str) -> str:
    """One word of a unit's ExecStart, quoted by systemd's rules (systemd.service(5) "Command lines",
    systemd.unit(5) "Specifiers"): in double quotes with backslash and quote escaped, '%' doubled (specifiers) and
    '$' doubled (environment expansion). Control characters are refused before this."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"' if escaped != value or any(c in value for c in " \t;'") else value


# Keys naming files the service reads, and outputs it writes, which cannot stay relative to a config that moves to
# /etc/edge (read-only for the service under ProtectSystem=strict). model.engine may: `edge deploy` delivers the
# engine beside the config it installs there.
_PATH_KEYS = ("model.path", "task.labels", "telemetry.replay_path", "metrics.auth_file", "view.auth_file")
_OUTPUT_KEYS = ("sinks.results", "sinks.video", "sinks.summary_json", "telemetry.dir")


def _check_paths(cfg: Any, config: Path, dest_dir: Path) -> List[str]:
    """A config moved to /etc/edge must still find its files: relative paths that only exist beside the original
    config are refused with the absolute path to use instead. Returns notes to print once every check has passed."""
    for key in _PATH_KEYS:
        section, _, name = key.partition(".")
        value = getattr(getattr(cfg, section), name)
        if isinstance(value, str) and value and not os.path.isabs(value) and not (dest_dir / value).exists():
            here = (config.resolve().parent / value).resolve()
            raise EdgeError(
                f"{config}: key '{key}' is relative ({short(value)}); the service reads the config from {dest_dir}, where "
                f"it does not exist: use an absolute path such as {here}"
            )
    notes = []
    engine = cfg.model.engine
    if isinstance(engine, str) and engine and not os.path.isabs(engine) and not (dest_dir / engine).exists():
        # Not refused: it may be copied there later. `edge deploy` links the config instead, and the engine beside it.
        notes.append(
            f"edge service: note: {config}: key 'model.engine' is relative ({short(engine)}); the service will read "
            f"{dest_dir / engine}, which is not there yet: copy the engine there, use an absolute path such as "
            f"{(config.resolve().parent / engine).resolve()}, or install with `edge deploy`, which delivers it"
        )
    for key in _OUTPUT_KEYS:
        section, _, name = key.partition(".")
        value = getattr(getattr(cfg, section), name)
        if isinstance(value, str) and value and not os.path.isabs(value):
            raise EdgeError(
                f"{config}: key '{key}' is relative ({short(value)}); the service can write only under "
                "/var/log/edge-camera/NAME and /var/lib/edge-camera/NAME: give an absolute path there"
            )
    return notes


def _group_id(root: Path, name: str) -> Optional[int]:
    """The gid of group ``name`` in ``root``'s /etc/group (the root may be an image, not this system)."""
    gid = _passwd_field(root, "group", name, 2)
    return int(gid) if gid and gid.isdigit() else None


def _passwd_field(root: Path, table: str, name: str, field: int) -> Optional[str]:
    """Field ``field`` of the entry ``name`` in ``root``'s /etc/passwd or /etc/group (``table``)."""
    try:
        for line in read_capped(root / "etc" / table, 16 << 20).decode(errors="replace").splitlines():
            fields = line.split(":")
            if len(fields) > field and fields[0] == name:
                return fields[field]
    except OSError:
        pass
    return None


def _install_config(dest: Path, text: str, root: Path) -> Callable[[], None]:
    """The config may hold camera passwords: 0640, group edge (the service's), never world-readable."""

    def do() -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        gid = _group_id(root, SERVICE_GROUP)
        write_atomic(dest, text, mode=CONFIG_MODE if gid is not None else 0o600)
        if gid is not None:
            os.chown(dest, -1, gid)

    return do


def plan(args: argparse.Namespace) -> Tuple[List[Action], List[str], List[str]]:
    """The install as a list of (description, action), so --dry-run prints exactly what a real run does, the
    camera's endpoints (metrics, live view) to print after it, and notes to print before it."""
    # absolute: systemd-sysusers and systemctl read their file arguments relative to --root, not to the cwd
    name, root = args.name, Path(os.path.abspath(args.root))
    if not NAME_RE.fullmatch(name):
        raise EdgeError(
            f"NAME {name!r}: use letters, digits, '_', '.', '-' (it becomes edge-camera@{name}.service and /etc/edge/{name}.yaml)"
        )
    if not (_UNIT_DIR / UNIT).is_file():
        raise EdgeError(f"{_UNIT_DIR / UNIT}: unit file not found; reinstall edge (pip install .) or run from a source checkout")
    unit_text = (_UNIT_DIR / UNIT).read_text().replace(EXEC_PLACEHOLDER, unit_word(_edge_run(args.edge_run, root)))
    offline = root != Path("/")
    if args.now and offline:
        raise EdgeError(f"--now with --root {root}: nothing can be started inside another root; drop one of them")
    config_dest = root / "etc" / "edge" / f"{name}.yaml"
    actions: List[Action] = []
    notes: List[str] = []
    if args.config is not None:
        # A wrong key or type fails here, not at 3 a.m. in the journal; files it names may arrive later by edge deploy.
        cfg = _load(args.config)
        notes = _check_paths(cfg, args.config, Path("/etc/edge"))
        if config_dest.is_symlink():
            raise EdgeError(
                f"{config_dest} is managed by `edge deploy` (-> {os.readlink(config_dest)}); deploy a new config with `edge deploy`, or drop --config"
            )
        text = args.config.read_text(encoding="utf-8")  # load_dataclass has checked it is UTF-8 YAML
        config_action = (
            f"write {config_dest} from {args.config} (mode 0640, group {SERVICE_GROUP})",
            _install_config(config_dest, text, root),
        )
    elif not config_dest.exists():
        raise EdgeError(f"{config_dest} does not exist; pass --config FILE")
    else:
        cfg = _load(config_dest)
    fleet_actions, urls = _fleet(cfg, name, root)

    unit_dest = root / "etc" / "systemd" / "system" / UNIT
    sysusers_dest = root / "etc" / "sysusers.d" / "edge-camera.conf"
    systemctl = ["systemctl", f"--root={root}"] if offline else ["systemctl"]
    sysusers = ["systemd-sysusers", f"--root={root}"] if offline else ["systemd-sysusers"]
    instance = f"edge-camera@{name}.service"
    actions += [
        (f"write {unit_dest}", _write(unit_dest, unit_text)),
        (f"write {sysusers_dest}", _write(sysusers_dest, (_UNIT_DIR / SYSUSERS).read_text())),
        (f"run {' '.join(sysusers + [str(sysusers_dest)])}", _run(sysusers + [str(sysusers_dest)])),
    ]
    if args.config is not None:
        actions.append(config_action)  # after sysusers: its group must exist to own the config
    if not offline:
        actions.append(("run systemctl daemon-reload", _run(["systemctl", "daemon-reload"])))
    actions += fleet_actions
    actions.append((f"run {' '.join(systemctl + ['enable', instance])}", _run(systemctl + ["enable", instance])))
    if args.now:
        actions.append((f"run systemctl restart {instance}", _run(["systemctl", "restart", instance])))
    return actions, urls, notes


# [Service] directives that are not sandbox: how the service starts, restarts, logs and notifies. Everything else
# becomes a property of the transient check unit.
_NOT_SANDBOX = {
    "Type",
    "NotifyAccess",
    "ExecStart",
    "WatchdogSec",
    "Restart",
    "RestartSec",
    "TimeoutStartSec",
    "TimeoutStopSec",
    "KillMode",
    "StandardOutput",
    "StandardError",
    "SyslogIdentifier",
}


def unit_service_directives(text: str) -> List[Tuple[str, str]]:
    """(key, value) of every directive in the [Service] section, in order (comments and blank lines skipped)."""
    out, section = [], None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        if section == "Service" and "=" in line:
            key, _, value = line.partition("=")
            out.append((key.strip(), value.strip()))
    return out


def expand_specifiers(value: str, name: str) -> str:
    """The unit specifiers the template uses, as systemd expands them for a system service (systemd.unit(5))."""
    table = {"i": name, "I": name, "S": "/var/lib", "L": "/var/log", "%": "%"}

    def one(m: re.Match[str]) -> str:
        if m.group(1) not in table:
            raise EdgeError(
                f"unit: specifier %{m.group(1)} in {short(value)} is not one `edge service check` knows; reinstall the unit"
            )
        return table[m.group(1)]

    return re.sub(r"%(.)", one, value)


def sandbox_properties(unit_text: str, name: str) -> List[str]:
    """The unit's sandbox as ``KEY=VALUE`` properties for ``systemd-run -p`` (specifiers expanded for NAME)."""
    return [
        f"{key}={expand_specifiers(value, name)}" for key, value in unit_service_directives(unit_text) if key not in _NOT_SANDBOX
    ]


def check_command(unit_text: str, name: str, timeout: float) -> List[str]:
    """systemd-run running the unit's own edge-run with --check, in a transient service with the unit's sandbox."""
    exec_start = dict(unit_service_directives(unit_text)).get("ExecStart")
    if not exec_start:
        raise EdgeError("unit: no ExecStart= in [Service]; reinstall it with `edge service install`")
    argv = shlex.split(expand_specifiers(exec_start, name))
    props = sandbox_properties(unit_text, name) + [f"RuntimeMaxSec={max(1, int(timeout))}"]
    cmd = ["systemd-run", "--wait", "--pipe", "--collect", "--quiet", "--service-type=exec"]
    cmd += [f"--unit=edge-camera-check-{name}-{os.getpid()}", f"--description=edge service check {name}"]
    for prop in props:
        cmd += ["-p", prop]
    return cmd + ["--"] + argv + ["--check"]


def check(args: argparse.Namespace) -> int:
    name, root = args.name, Path(os.path.abspath(args.root))
    if not NAME_RE.fullmatch(name):
        raise EdgeError(f"NAME {name!r}: use letters, digits, '_', '.', '-' (the instance of edge-camera@NAME.service)")
    unit = root / "etc" / "systemd" / "system" / UNIT
    if not unit.is_file():
        raise EdgeError(f"{unit}: not installed; run `edge service install {name} --config FILE` first")
    config = root / "etc" / "edge" / f"{name}.yaml"
    if not config.exists():
        raise EdgeError(f"{config} does not exist; install it with `edge service install {name} --config FILE`")
    cmd = check_command(unit.read_text(), name, args.timeout)
    if args.dry_run:
        print(shlex.join(cmd))
        return 0
    if root != Path("/"):
        return check_image(root, name, cmd)
    print(
        f"edge service check: running edge-run --check for {name} in the sandbox of edge-camera@{name}.service", file=sys.stderr
    )
    run_check(cmd, name, args.timeout)
    print(f"edge service check: ok: edge-camera@{name}.service can open its model, engine and devices in its sandbox")
    return 0


def in_root(root: Path, path: str) -> Path:
    """``path`` as the image at ``root`` sees it: absolute links inside the image point into the image, not at this
    machine (a venv's bin/edge-run is often one)."""
    here = root / path.lstrip("/")
    for _ in range(40):  # the kernel's own limit on links followed
        if not here.is_symlink():
            return here
        target = os.readlink(here)
        here = root / target.lstrip("/") if os.path.isabs(target) else here.parent / target
    return here


def image_rows(root: Path, name: str, argv: List[str]) -> List[Tuple[bool, str]]:
    """(passed, line) for each thing the service needs from the image at ``root`` to start on first boot."""
    rows: List[Tuple[bool, str]] = []
    program = in_root(root, argv[0])
    rows.append((program.is_file() and os.access(program, os.X_OK), f"ExecStart program {short(argv[0])} in the image"))
    wants = root / "etc" / "systemd" / "system" / "multi-user.target.wants" / f"edge-camera@{name}.service"
    rows.append((os.path.lexists(wants), f"edge-camera@{name}.service enabled ({wants.parent.name})"))
    user = _passwd_field(root, "passwd", SERVICE_GROUP, 0) is not None
    video = SERVICE_GROUP in (_passwd_field(root, "group", "video", 3) or "").split(",")
    rows.append((user and video, f"user {SERVICE_GROUP} in group video (systemd-sysusers)"))
    config = root / "etc" / "edge" / f"{name}.yaml"
    try:
        cfg = _load(config)
    except EdgeError as e:
        return rows + [(False, f"config: {e}")]
    info = config.stat()
    gid = _group_id(root, SERVICE_GROUP)
    private = info.st_mode & 0o007 == 0 and (gid is None or info.st_gid == gid)
    rows.append((private, f"config {config.name} not world-readable, group {SERVICE_GROUP} (mode {info.st_mode & 0o777:o})"))
    for key in ("model.engine", *_PATH_KEYS):
        section, _, field = key.partition(".")
        value = getattr(getattr(cfg, section), field)
        if isinstance(value, str) and value:
            seen = value if os.path.isabs(value) else f"/etc/edge/{value}"
            rows.append((in_root(root, seen).is_file(), f"{key} {short(seen)} in the image"))
    return rows


def check_image(root: Path, name: str, cmd: List[str]) -> int:
    """The install under ``root`` checked as files: nothing there can run on this machine's systemd."""
    rows = image_rows(root, name, cmd[cmd.index("--") + 1 :])
    for passed, line in rows:
        print(f"{'ok  ' if passed else 'FAIL'} {line}")
    failed = sum(not passed for passed, _ in rows)
    if failed:
        raise RunFailed(f"edge service check --root {short(str(root))}: {failed} of {len(rows)} checks failed (FAIL rows above)")
    print(
        f"edge service check: the image at {short(str(root))} has what edge-camera@{name}.service needs; on the device, "
        f"`edge service check {name}` runs edge-run --check in its sandbox"
    )
    return 0


def run_check(cmd: List[str], name: str, timeout: float) -> None:
    """Run the systemd-run command; RunFailed (one line) when systemd cannot run it or the check inside fails."""
    if shutil.which(cmd[0]) is None:
        raise RunFailed(f"{cmd[0]}: not found; `edge service check` needs systemd (a Jetson with JetPack has it)")
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout + 30)
    except subprocess.TimeoutExpired:
        raise RunFailed(f"the check did not finish in {timeout:g} s; see journalctl -u 'edge-camera-check-{name}-*'") from None
    said = proc.stderr.decode(errors="replace").strip()
    if proc.returncode != 0:
        last = said.splitlines()[-1] if said else "no output"
        if "Failed to connect to bus" in said or "not been booted with systemd" in said:
            raise RunFailed(f"systemd-run cannot reach systemd here ({last}); run the check on the Jetson that runs the service")
        print(said, file=sys.stderr)  # edge-run's own lines from inside the sandbox
        raise RunFailed(
            f"edge-run --check failed inside the sandbox of edge-camera@{name}.service (status {proc.returncode}: {last}); "
            "a CUDA or camera error here that plain `edge-run --check` does not show means the unit's DeviceAllow=, User= "
            "or SupplementaryGroups= block a device"
        )
    if said:
        print(said, file=sys.stderr)


def main(args: argparse.Namespace) -> int:
    if args.action == "check":
        return check(args)
    actions, urls, notes = plan(args)
    for note in notes:  # only once every check has passed: a refusal stays one line
        print(note, file=sys.stderr)
    for description, action in actions:
        print(("would " if args.dry_run else "") + description)
        if not args.dry_run:
            action()
    for url in urls:
        print(url)
    if not args.dry_run:
        print(f"installed edge-camera@{args.name}.service; logs: journalctl -u edge-camera@{args.name}")
    return 0


def _load(path: Path) -> Any:
    from edge.config import RunConfig, check_fleet, load_dataclass

    cfg, origin = load_dataclass(RunConfig, path)
    check_fleet(cfg, origin)  # ports below 1024 would fail only when the unprivileged service starts
    return cfg


def _ports(cfg: Any) -> Dict[str, int]:
    return {key: port for key, port in (("metrics.port", cfg.metrics.port), ("view.port", cfg.view.port)) if port is not None}


def _fleet(cfg: Any, name: str, root: Path) -> Tuple[List[Action], List[str]]:
    """The camera's metrics and live-view ports checked against the other cameras on this device, the drop-in that
    lets the read-only service write its node_exporter textfile, and the URLs to print."""
    from edge.config import RunConfig, load_dataclass

    mine = _ports(cfg)
    for other in sorted((root / "etc" / "edge").glob("*.yaml")):
        if other.stem == name:
            continue
        try:
            theirs = _ports(load_dataclass(RunConfig, other)[0])
        except EdgeError:
            continue  # not a config this edge reads; its own service says so
        for key, port in mine.items():
            clash = next((k for k, p in theirs.items() if p == port), None)
            if clash:
                raise EdgeError(
                    f"{key} {port}: edge-camera@{other.stem} already uses it ({clash} in {other}); give each camera its own port"
                )
    urls = [f"metrics: http://{cfg.metrics.address}:{mine['metrics.port']}/metrics"] if "metrics.port" in mine else []
    if "view.port" in mine:
        urls.append(f"live view: http://{cfg.view.address}:{mine['view.port']}/")
    dropin = root / "etc" / "systemd" / "system" / f"edge-camera@{name}.service.d" / "metrics-textfile.conf"
    textfile = cfg.metrics.textfile
    if not textfile:
        return ([(f"remove {dropin} (no metrics.textfile now)", dropin.unlink)] if dropin.exists() else []), urls
    folder = Path(textfile).parent
    if not folder.is_absolute() or any(c.isspace() or ord(c) < 32 for c in str(folder)):
        raise EdgeError(
            f"metrics.textfile {textfile!r}: the service needs an absolute path without spaces, e.g. "
            f"/var/lib/prometheus/node-exporter/edge_{name}.prom (node_exporter's --collector.textfile.directory)"
        )
    text = (
        "# Written by `edge service install`: the unit's file system is read-only (ProtectSystem=strict) except where\n"
        "# it writes; this is node_exporter's textfile folder (metrics.textfile). User edge needs write access to it.\n"
        f"[Service]\nReadWritePaths=-{folder}\n"
    )
    urls.append(f"metrics textfile: {textfile} (for node_exporter)")
    return [(f"write {dropin}", _write(dropin, text))], urls
