"""`edge deploy`: put an engine, its manifest and a config on one Jetson over SSH, verified and atomic.

Steps: connect (make an upload directory on the target), upload (rsync when both ends have it, else scp),
then on the target verify (sha256 and size against the manifest), check (an optional device check),
swap (one rename), restart, health (wait until the service is up) and, when restart or health fail,
rollback to the previous release. The target side is ``edge.deploy.target``, sent over the same SSH
connection, so the device needs python3 but no edge install. Every command is an argument list; the
remote command line is built with shlex quoting, never from a shell string the user wrote.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from edge import argtypes
from edge.config import short
from edge.deploy import target as device
from edge.errors import EdgeError, RunFailed
from edge.inputs import missing
from edge.manifest import refuse_rtx

# Device paths travel inside rsync/scp remote specs, which older servers hand to a shell; keep them plain.
_ROOT_RE = re.compile(r"/[A-Za-z0-9_./+-]*")
# [USER@]HOST: rsync hands the host to ssh after its own options (no `--`), so it must not look like an option.
_TARGET_RE = re.compile(r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]*@)?(?:[A-Za-z0-9][A-Za-z0-9.-]*|[0-9A-Fa-f:]+(?:%[A-Za-z0-9]+)?)")
_ENGINE_RE = device.NAME_RE


class DeployFailed(RunFailed):
    """A step after the input checks failed; the exit status says which (edge.deploy.target.EXIT_CODES)."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"{step} failed: {message}")
        self.step = step
        self.exit_code = device.EXIT_CODES[step]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    codes = ", ".join(f"{code} {step}" for step, code in device.EXIT_CODES.items())
    parser.epilog = f"Exit status: 0 deployed, 2 bad input, {codes} (the step that failed)."
    parser.add_argument("target", metavar="[USER@]HOST", help="the Jetson to deploy to")
    parser.add_argument("--name", required=True, help="service instance: edge-camera@NAME reads /etc/edge/NAME.yaml")
    parser.add_argument("--engine", required=True, type=Path, help="the engine file (kept byte for byte)")
    parser.add_argument(
        "--manifest", type=Path, help="its JSON sidecar with engine.sha256 and engine.size (default: ENGINE.json)"
    )
    parser.add_argument("--config", required=True, type=Path, help="the run config; model.engine must name the engine file")
    ssh = parser.add_argument_group("connection")
    ssh.add_argument("-p", "--port", type=argtypes.port, help="SSH port")
    ssh.add_argument("-i", "--identity", type=Path, help="SSH private key")
    ssh.add_argument(
        "-o", "--ssh-option", action="append", default=[], metavar="KEY=VALUE", help="passed to ssh/scp/rsync as -o (repeatable)"
    )
    ssh.add_argument(
        "--connect-timeout",
        type=argtypes.positive_float,
        default=10.0,
        metavar="S",
        help="seconds SSH waits for the device to answer (default: 10)",
    )
    ssh.add_argument("--transfer", choices=("auto", "rsync", "scp"), default="auto", help="auto: rsync when both ends have it")
    ssh.add_argument(
        "--bwlimit", type=argtypes.positive_int, metavar="KIB_S", help="limit the upload bandwidth (slow or shared links)"
    )
    ssh.add_argument("--remote-python", default="python3", help="Python 3.8+ on the target (default: python3)")
    dev = parser.add_argument_group(
        "device",
        "Commands are JSON argument lists; {name} {root} {current} {release} {engine} {manifest} {config} in them become device paths.",
    )
    dev.add_argument("--root", default="/", help="device root; a temporary directory in tests (default: /)")
    dev.add_argument(
        "--check-cmd",
        metavar="JSON",
        help=f"device check before the swap, a JSON list (default: {json.dumps(device.DEFAULT_CHECK)})",
    )
    dev.add_argument(
        "--no-check",
        dest="check_cmd",
        action="store_const",
        const="[]",
        help="skip the device check (sha256 and size are still checked)",
    )
    dev.add_argument("--restart-cmd", metavar="JSON", help=f"JSON list (default: {json.dumps(device.DEFAULT_RESTART)})")
    dev.add_argument(
        "--health-cmd",
        metavar="JSON",
        help=f"JSON list, retried until it succeeds (default: {json.dumps(device.DEFAULT_HEALTH)})",
    )
    dev.add_argument(
        "--timeout",
        type=argtypes.positive_float,
        default=120.0,
        metavar="S",
        help="seconds allowed for each of check, restart and health",
    )
    dev.add_argument("--keep", type=argtypes.positive_int, default=2, help="releases kept on the device, at least 2 (default: 2)")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="run every local check (names, engine vs manifest, config) and print the plan; contact nothing "
        "(the Ansible playbook runs this for each host first)",
    )


@dataclass
class Plan:
    host: str
    name: str
    engine: Path
    manifest: Path
    config: Path
    sha256: str
    size: int
    ssh: List[str]  # ssh and its options, without the host
    scp: List[str]
    transfer: str
    bwlimit: Optional[int]
    remote_python: str
    root: str
    device_args: List[str]  # activate's options after --release


def _command_json(option: str, text: Optional[str]) -> List[str]:
    if text is None:
        return []
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise EdgeError(
            f'{option} {text!r}: not JSON ({exc}); write an argument list such as \'["systemctl", "restart", "edge-camera@{{name}}.service"]\''
        ) from None
    if value == [] and option == "--check-cmd":
        return ["--no-check"]  # an empty check list (--no-check, or [] from Ansible) skips the device check
    if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
        raise EdgeError(f"{option} {text!r}: expected a non-empty JSON list of strings (one per argument), not a shell string")
    return [option, json.dumps(value)]


def _engine_name_in_config(config: Path) -> object:
    from edge.config import load_yaml_file

    data = load_yaml_file(config)
    model = data.get("model") if isinstance(data, dict) else None
    return model.get("engine") if isinstance(model, dict) else None


def plan_from_args(args: argparse.Namespace) -> Plan:
    """Check everything that can be checked here, before anything touches the device."""
    if not device.NAME_RE.fullmatch(args.name):
        raise EdgeError(
            f"--name {args.name!r}: use letters, digits, '_', '.', '-' (it becomes edge-camera@NAME and /etc/edge/NAME.yaml)"
        )
    if not _TARGET_RE.fullmatch(args.target):
        raise EdgeError(f"target {short(args.target)}: expected [USER@]HOST (letters, digits, '.', '-', '_'; an IPv6 address)")
    if not _ROOT_RE.fullmatch(args.root):
        raise EdgeError(f"--root {args.root!r}: expected an absolute path of letters, digits and _ . / + -")
    if args.keep < 2:
        raise EdgeError(f"--keep {args.keep}: keep at least 2 releases (the new one and the one to roll back to)")
    engine: Path = args.engine
    manifest: Path = args.manifest or engine.with_name(engine.name + ".json")
    for what, path in (("--engine", engine), ("--manifest", manifest), ("--config", args.config)):
        if not path.is_file():
            raise EdgeError(f"{what} {path}: {missing(path)}")
    if not _ENGINE_RE.fullmatch(engine.name):
        raise EdgeError(f"--engine {engine}: rename the file to letters, digits, '_', '.', '-' only")
    try:
        device.check_engine(engine, manifest)
    except device.StepFailed as exc:
        raise EdgeError(
            f"{exc} (checked here, before uploading); rebuild the engine or pass its own manifest with --manifest"
        ) from None
    named = _engine_name_in_config(args.config)
    if named != engine.name:
        raise EdgeError(
            f"{args.config}: key 'model.engine' is {'not set' if named is None else repr(named)}; a deployed config runs "
            f"the engine stored beside it, so set model.engine: {engine.name}"
        )
    sha256, size = device.expected_engine(manifest)
    refuse_rtx(engine, json.loads(manifest.read_text()))  # a JSON object: expected_engine has read it

    options = [
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={args.connect_timeout:g}",
        "-o",
        "ServerAliveInterval=15",
        "-o",
        "ServerAliveCountMax=4",
    ]
    if args.identity:
        options += ["-i", str(args.identity)]
    for opt in args.ssh_option:
        options += ["-o", opt]
    port = ["-p", str(args.port)] if args.port else []
    device_args = ["--name", args.name, "--engine", engine.name, "--timeout", f"{args.timeout:g}", "--keep", str(args.keep)]
    device_args += _command_json("--check-cmd", args.check_cmd)
    device_args += _command_json("--restart-cmd", args.restart_cmd)
    device_args += _command_json("--health-cmd", args.health_cmd)
    return Plan(
        host=args.target,
        name=args.name,
        engine=engine,
        manifest=manifest,
        config=args.config,
        sha256=sha256,
        size=size,
        ssh=["ssh", *port, *options],
        scp=["scp", "-q", *(["-P", str(args.port)] if args.port else []), *options],
        transfer=args.transfer,
        bwlimit=args.bwlimit,
        remote_python=args.remote_python,
        root=args.root,
        device_args=device_args,
    )


def _remote_spec(host: str, path: str) -> str:
    user, at, name = host.rpartition("@")
    if ":" in name:  # an IPv6 address
        name = f"[{name}]"
    return f"{user}{at}{name}:{path}"


class Deploy:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.steps: List[Dict[str, object]] = []

    def _device(self, action: str, *extra: str) -> List[str]:
        """ssh running edge.deploy.target on the device; its source goes to stdin."""
        remote = [self.plan.remote_python, "-", action, "--root", self.plan.root, *extra]
        return [*self.plan.ssh, "--", self.plan.host, shlex.join(remote)]

    def _say(self, step: str, status: str, started: float, detail: str) -> None:
        seconds = time.monotonic() - started
        self.steps.append({"step": step, "status": status, "seconds": round(seconds, 3), "detail": detail})
        print(device.progress(step, status, seconds, detail), file=sys.stderr, flush=True)

    def _fail(self, step: str, started: float, message: str) -> DeployFailed:
        self._say(step, "FAILED", started, message)
        return DeployFailed(step, message)

    def connect(self) -> Dict[str, object]:
        started = time.monotonic()
        source = Path(device.__file__).read_bytes()
        argv = self._device("prepare", "--name", self.plan.name, "--sha256", self.plan.sha256)
        proc = subprocess.run(argv, input=source, capture_output=True)
        if proc.returncode != 0:
            lines = proc.stderr.decode(errors="replace").strip().splitlines()
            why = lines[-1] if lines else f"exit status {proc.returncode}"
            if proc.returncode == 127:
                why = f"{self.plan.remote_python} not found on the target ({why}); pass --remote-python"
            raise self._fail("connect", started, f"{self.plan.host}: {why}")
        try:
            info = json.loads(proc.stdout)
            if not isinstance(info, dict) or not {"release", "staging", "python", "rsync"} <= set(info):
                raise ValueError("not the device program's answer")
        except ValueError:
            raise self._fail(
                "connect",
                started,
                f"{self.plan.host}: {short(self.plan.remote_python)} did not run the device program; pass a Python 3.8+ as --remote-python",
            ) from None
        self._say("connect", "ok", started, f"python {info['python']} on {self.plan.host}, release {info['release']}")
        return info

    def upload(self, info: Dict[str, object]) -> None:
        started = time.monotonic()
        plan = self.plan
        use_rsync = plan.transfer == "rsync" or (
            plan.transfer == "auto" and bool(info["rsync"]) and shutil.which("rsync") is not None
        )
        dest = _remote_spec(plan.host, f"{info['staging']}/")
        with tempfile.TemporaryDirectory(prefix="edge-deploy-") as tmp:
            # Links named as the release stores them, so one transfer copies all three under their final names.
            files = {plan.engine.name: plan.engine, f"{plan.engine.name}.json": plan.manifest, device.CONFIG_NAME: plan.config}
            sources = []
            for name, path in files.items():
                link = Path(tmp) / name
                link.symlink_to(path.resolve())
                sources.append(str(link))
            if use_rsync:
                limit = [f"--bwlimit={plan.bwlimit}"] if plan.bwlimit else []
                argv = [
                    "rsync",
                    "--copy-links",
                    "--times",
                    "--chmod=F600",  # private in transit; the device program sets the final modes
                    *limit,
                    "-e",
                    shlex.join(plan.ssh),
                    "--",
                    *sources,
                    dest,
                ]
            else:
                limit = ["-l", str(plan.bwlimit * 8)] if plan.bwlimit else []  # scp counts Kbit/s
                argv = [*plan.scp, *limit, "--", *sources, dest]
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True)
        tool = "rsync" if use_rsync else "scp"
        if proc.returncode != 0:
            lines = proc.stderr.decode(errors="replace").strip().splitlines()
            why = lines[-1] if lines else f"exit status {proc.returncode}"
            raise self._fail("upload", started, f"{tool}: {why}; the running release is untouched")
        mib = (plan.size + plan.manifest.stat().st_size + plan.config.stat().st_size) / 2**20
        self._say("upload", "ok", started, f"3 files, {mib:.1f} MiB via {tool}")

    def activate(self, info: Dict[str, object]) -> Dict[str, object]:
        """Run the device side's verify..rollback; its progress lines pass straight through to stderr."""
        started = time.monotonic()
        argv = self._device("activate", "--release", str(info["release"]), *self.plan.device_args)
        proc = subprocess.run(argv, input=Path(device.__file__).read_bytes(), stdout=subprocess.PIPE)
        try:
            result = json.loads(proc.stdout.decode(errors="replace").strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise self._fail(
                "connect",
                started,
                f"{self.plan.host}: lost during activation (exit status {proc.returncode}); the device finishes on its own, check its current release",
            ) from None
        self.steps.extend(result["steps"])
        error = result.get("error")
        if error:
            raise DeployFailed(error["step"], error["message"])
        return result

    def summary(self, outcome: str, started: float) -> None:
        plan = self.plan
        print(f"summary: {plan.name} on {plan.host} (device root {plan.root}): {outcome}")
        print(f"  {'step':<8} {'result':<6} {'time':>7}")
        for s in self.steps:
            print(f"  {s['step']:<8} {s['status']:<6} {s['seconds']:6.2f}s")
        print(f"  {'total':<15} {time.monotonic() - started:6.2f}s")


def plan_lines(plan: Plan) -> List[str]:
    """What a run would do, step by step (--dry-run prints it; nothing is contacted)."""
    files = plan.size + plan.manifest.stat().st_size + plan.config.stat().st_size
    limit = f", at most {plan.bwlimit} KiB/s" if plan.bwlimit else ""
    return [
        "plan (nothing contacted):",
        f"  connect   {shlex.join([*plan.ssh, plan.host])} (device root {plan.root}, {plan.remote_python})",
        f"  upload    {plan.engine.name}, {plan.manifest.name}, {plan.config.name} ({files / 2**20:.1f} MiB) via "
        f"{'rsync where both ends have it, else scp' if plan.transfer == 'auto' else plan.transfer}{limit} into a new "
        "release folder",
        f"  activate  on the device: verify, check, swap, restart, health ({shlex.join(plan.device_args)})",
    ]


def main(args: argparse.Namespace) -> int:
    plan = plan_from_args(args)
    if args.dry_run:
        print(
            f"edge deploy: checks passed: {plan.engine.name} (sha256 {plan.sha256[:12]}…) and {plan.config.name} -> {plan.name} on {plan.host}"
        )
        for line in plan_lines(plan):
            print(line)
        return 0
    print(
        f"edge deploy: {plan.engine.name} (sha256 {plan.sha256[:12]}…, {plan.size / 2**20:.1f} MiB) -> {plan.name} on {plan.host}",
        file=sys.stderr,
    )
    run = Deploy(plan)
    started = time.monotonic()
    try:
        info = run.connect()
        run.upload(info)
        result = run.activate(info)
    except DeployFailed as exc:
        run.summary(f"FAILED at {exc.step}", started)
        raise
    kept = f"; release {result['previous']} kept for roll-back" if result["previous"] else ""
    run.summary(f"deployed release {result['release']}{kept}", started)
    return 0
