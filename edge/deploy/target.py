"""The device side of a deploy. Runs on the Jetson with the Python standard library only.

`edge deploy` pipes this file into ``python3 -`` over SSH and the Ansible playbook does the same through
its command module, so a device needs no edge install to receive an engine, and both paths run the same
checks. Layout under the device root (``--root``; ``/`` on a real device)::

    opt/edge/NAME/releases/ID/{ENGINE, ENGINE.json, config.yaml}   one directory per deploy
    opt/edge/NAME/releases/.incoming-ID/                           an upload in progress, never run
    opt/edge/NAME/current -> releases/ID                           switched by one rename(2)
    etc/edge/NAME.yaml -> ../../opt/edge/NAME/current/config.yaml  what edge-camera@NAME.service reads

``prepare`` makes the upload directory. ``activate`` checks the upload against its manifest, moves it
into place, restarts the service, waits until it is healthy and rolls back to the previous release when
it is not. Progress goes to stderr (one line per step), the outcome to stdout (one JSON object), and the
exit status names the step that failed (EXIT_CODES).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import itertools
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

STEPS = ("connect", "upload", "verify", "check", "swap", "restart", "health", "rollback")
EXIT_CODES = {step: 10 + i for i, step in enumerate(STEPS)}

# Used as a systemd instance name and as a file name, so no escaping is ever needed. Always matched with
# fullmatch: `$` would accept a trailing newline ("front\n").
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
SHA256_RE = re.compile(r"[0-9a-f]{64}")
# The config may hold camera passwords: readable by root and the service's group only.
CONFIG_MODE = 0o640
SERVICE_GROUP = "edge"
CONFIG_NAME = "config.yaml"
DEFAULT_RESTART = ["systemctl", "restart", "edge-camera@{name}.service"]  # for Type=notify it returns after READY=1
DEFAULT_HEALTH = ["systemctl", "is-active", "--quiet", "edge-camera@{name}.service"]
# The new release must load on this device (manifest gate, deserialisation, config vs tensors) before it goes live.
# No --engine: the config's own model.engine must name the engine beside it, or the check fails as the service would.
DEFAULT_CHECK = ["edge-run", "--check", "--config", "{config}"]
STALE_UPLOAD_S = 3600.0  # younger .incoming-* directories may belong to a deploy still uploading
POLL_S = 0.5


class StepFailed(Exception):
    def __init__(self, step: str, message: str) -> None:
        super().__init__(message)
        self.step = step


@dataclass(frozen=True)
class Layout:
    root: Path
    name: str

    @property
    def home(self) -> Path:
        return self.root / "opt" / "edge" / self.name

    @property
    def releases(self) -> Path:
        return self.home / "releases"

    @property
    def current(self) -> Path:
        return self.home / "current"

    @property
    def config_link(self) -> Path:
        return self.root / "etc" / "edge" / f"{self.name}.yaml"

    @property
    def config_backup(self) -> Path:
        """A hand-installed config (``edge service install --config``) kept when the first deploy replaces it."""
        return self.config_link.with_name(f"{self.name}.yaml.pre-deploy")

    def staging(self, release: str) -> Path:
        return self.releases / f".incoming-{release}"


def progress(step: str, status: str, seconds: float, detail: str) -> str:
    """One progress or summary line; `edge deploy` prints its own steps with the same format."""
    return f"  {step:<8} {status:<6} {seconds:6.2f}s  {detail}"


def _say(line: str) -> None:
    # The SSH session may be gone (Ctrl-C, a dropped link); activation still has to finish or roll back.
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass


def expected_engine(manifest: Path, step: str = "verify") -> Tuple[str, int]:
    """The sha256 and size a manifest records: under ``engine`` as edge-build writes it, or at the top level."""
    if manifest.exists() and (not manifest.is_file() or manifest.stat().st_size > 1 << 20):
        raise StepFailed(step, f"{manifest}: not a manifest (a regular file of at most 1 MiB; edge-build writes a few kB)")
    try:
        data = json.loads(manifest.read_text())
    except FileNotFoundError:
        raise StepFailed(step, f"{manifest}: manifest not found; the build writes it beside the engine as ENGINE.json") from None
    except ValueError as exc:
        raise StepFailed(step, f"{manifest}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise StepFailed(step, f"{manifest}: expected a JSON object with engine.sha256 and engine.size")
    nested = isinstance(data.get("engine"), dict)
    section, prefix = (data["engine"], "engine.") if nested else (data, "")
    want, size = section.get("sha256"), section.get("size")
    if not isinstance(want, str) or not SHA256_RE.fullmatch(want):
        raise StepFailed(step, f"{manifest}: key '{prefix}sha256': expected 64 lowercase hex digits, got {want!r}")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise StepFailed(step, f"{manifest}: key '{prefix}size': expected a byte count, got {size!r}")
    return want, size


def check_engine(engine: Path, manifest: Path, step: str = "verify") -> str:
    """Raise StepFailed unless ``engine`` has the size and sha256 that ``manifest`` (its JSON sidecar) records."""
    want, size = expected_engine(manifest, step)
    try:
        actual = engine.stat().st_size
    except FileNotFoundError:
        raise StepFailed(step, f"{engine}: engine not found") from None
    if actual != size:
        raise StepFailed(
            step, f"{engine}: {actual} bytes but {manifest.name} says {size}: an incomplete copy or another engine's manifest"
        )
    digest = hashlib.sha256()
    with engine.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != want:
        raise StepFailed(
            step,
            f"{engine}: sha256 {digest.hexdigest()[:12]}… does not match {manifest.name} ({want[:12]}…): the engine is corrupt or not the one the manifest describes",
        )
    return f"sha256 {want[:12]}… and size {size} match {manifest.name}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(str(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    # A Jetson loses power without warning; a release must be on flash before `current` points at it.
    for item in path.iterdir():
        fd = os.open(str(item), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    _fsync_dir(path)


def _set_modes(release: Path, engine: str) -> None:
    """One documented set of modes, whatever the upload tool did: the engine and manifest world-readable, the config
    (camera passwords) CONFIG_MODE with the service's group, so only root and edge-camera@ can read it."""
    import grp

    os.chmod(str(release), 0o755)
    for name in (engine, f"{engine}.json"):
        os.chmod(str(release / name), 0o644)
    config = release / CONFIG_NAME
    os.chmod(str(config), 0o600)
    try:
        os.chown(str(config), -1, grp.getgrnam(SERVICE_GROUP).gr_gid)
        os.chmod(str(config), CONFIG_MODE)
    except (KeyError, PermissionError):
        pass  # no such group yet, or not ours to give: the config stays readable by its owner only


def _replace_with_symlink(link: Path, target: str) -> None:
    """Point ``link`` at ``target`` in one rename, so readers see the old or the new link, never none."""
    tmp = link.with_name(f".{link.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    os.symlink(target, str(tmp))  # fails rather than follows if something sits at that (unguessable) name
    os.replace(str(tmp), str(link))
    _fsync_dir(link.parent)


def prepare(layout: Layout, sha256: str) -> Dict[str, object]:
    """Make an empty upload directory for a new release and say how to fill it."""
    layout.releases.mkdir(parents=True, exist_ok=True)
    layout.config_link.parent.mkdir(parents=True, exist_ok=True)
    base = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{sha256[:12]}"
    for n in itertools.count():
        release = base if n == 0 else f"{base}.{n}"
        if (layout.releases / release).exists():
            continue
        try:
            layout.staging(release).mkdir()
        except FileExistsError:
            continue
        return {
            "release": release,
            "staging": str(layout.staging(release)),
            "rsync": shutil.which("rsync") is not None,
            "python": platform.python_version(),
        }
    raise AssertionError("unreachable")  # itertools.count() never ends


def _fill(template: List[str], values: Dict[str, str]) -> List[str]:
    out = []
    for arg in template:
        for key, value in values.items():
            arg = arg.replace("{" + key + "}", value)
        out.append(arg)
    return out


def run_command(step: str, template: List[str], values: Dict[str, str], timeout: float) -> str:
    """Run one configured command (an argument list, never a shell string); StepFailed unless it exits 0."""
    argv = _fill(template, values)
    shown = shlex.join(argv)
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    except FileNotFoundError:
        raise StepFailed(step, f"{shown}: command not found on the target") from None
    except subprocess.TimeoutExpired:
        raise StepFailed(step, f"{shown}: still running after {timeout:g}s") from None
    if proc.returncode != 0:
        lines = proc.stdout.decode(errors="replace").strip().splitlines()
        said = f": {lines[-1]}" if lines else ""
        raise StepFailed(step, f"{shown} exited with status {proc.returncode}{said}")
    return shown


def wait_healthy(template: List[str], values: Dict[str, str], timeout: float) -> str:
    """Run the health command until it succeeds, for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return run_command("health", template, values, max(deadline - time.monotonic(), POLL_S))
        except StepFailed as exc:
            if time.monotonic() + POLL_S >= deadline:
                raise StepFailed("health", f"not healthy within {timeout:g}s: {exc}") from None
        time.sleep(POLL_S)


@dataclass
class Activation:
    layout: Layout
    release: str
    engine: str
    check: Optional[List[str]]
    restart: List[str]
    health: List[str]
    timeout: float
    keep: int

    def __post_init__(self) -> None:
        self.steps: List[Dict[str, object]] = []
        self.previous: Optional[str] = None
        self.outcome = "failed"

    def _do(self, step: str, action: Callable[[], str]) -> str:
        """Run one step, print its progress line and keep it for the summary."""
        started = time.monotonic()
        failure: Optional[StepFailed] = None
        try:
            detail = action()
        except StepFailed as exc:
            failure = exc
        except OSError as exc:  # a full disk or a read-only mount: still say which step stopped
            failure = StepFailed(step, str(exc))
        seconds = time.monotonic() - started
        status = "ok"
        if failure is not None:
            step, status, detail = failure.step, "FAILED", str(failure)
        self.steps.append({"step": step, "status": status, "seconds": round(seconds, 3), "detail": detail})
        _say(progress(step, status, seconds, detail))
        if failure is not None:
            raise failure
        return detail

    def _values(self) -> Dict[str, str]:
        release = self.layout.releases / self.release
        return {
            "name": self.layout.name,
            "root": str(self.layout.root),
            "current": str(self.layout.current),
            "release": str(release),
            "engine": str(release / self.engine),
            "manifest": str(release / f"{self.engine}.json"),
            "config": str(release / CONFIG_NAME),
        }

    def run(self) -> None:
        values = self._values()
        self._do("verify", self._verify)
        if self.check:
            self._do("check", lambda: self._check(values))
        self._do("swap", self._swap)
        try:
            self._do("restart", lambda: run_command("restart", self.restart, values, self.timeout))
            self._do("health", lambda: wait_healthy(self.health, values, self.timeout))
        except StepFailed as failure:
            try:
                done = self._do("rollback", lambda: self._roll_back(values))
            except StepFailed as exc:
                raise StepFailed("rollback", f"{failure.step} failed ({failure}), and rolling back failed too: {exc}") from None
            self.outcome = "rolled back"
            raise StepFailed(failure.step, f"{failure}; {done}") from None
        self._prune()
        self.outcome = "deployed"

    def _verify(self) -> str:
        """Check the upload, flush it to flash and rename it into releases/ (not live yet)."""
        lay = self.layout
        staging = lay.staging(self.release)
        if not staging.is_dir():
            raise StepFailed("verify", f"{staging}: no upload there; run prepare and upload first")
        try:
            detail = check_engine(staging / self.engine, staging / f"{self.engine}.json")
            if not (staging / CONFIG_NAME).is_file():
                raise StepFailed("verify", f"{staging / CONFIG_NAME}: the config was not uploaded")
            _set_modes(staging, self.engine)
            _fsync_tree(staging)
        except StepFailed:
            shutil.rmtree(str(staging), ignore_errors=True)
            raise
        os.rename(str(staging), str(lay.releases / self.release))
        _fsync_dir(lay.releases)
        return detail

    def _check(self, values: Dict[str, str]) -> str:
        try:
            return run_command("check", self.check or [], values, self.timeout)
        except StepFailed:
            shutil.rmtree(str(self.layout.releases / self.release), ignore_errors=True)
            raise

    def _swap(self) -> str:
        lay = self.layout
        self.previous = Path(os.readlink(str(lay.current))).name if lay.current.is_symlink() else None
        if lay.config_link.exists() and not lay.config_link.is_symlink():
            shutil.copy2(str(lay.config_link), str(lay.config_backup))
        # The config link goes through `current`, so flipping `current` alone switches engine and config together.
        _replace_with_symlink(lay.config_link, os.path.relpath(str(lay.current / CONFIG_NAME), str(lay.config_link.parent)))
        _replace_with_symlink(lay.current, f"releases/{self.release}")
        return f"current -> releases/{self.release} (was {self.previous or 'none'})"

    def _roll_back(self, values: Dict[str, str]) -> str:
        lay = self.layout
        if self.previous:
            _replace_with_symlink(lay.current, f"releases/{self.previous}")
            back_to = f"releases/{self.previous}"
        elif lay.config_backup.is_file():
            os.replace(str(lay.config_backup), str(lay.config_link))
            lay.current.unlink()
            back_to = f"the config from before the first deploy ({lay.config_link})"
        else:
            raise StepFailed("rollback", "no previous release to roll back to; the new release stays in place")
        shutil.rmtree(str(lay.releases / self.release), ignore_errors=True)
        run_command("rollback", self.restart, values, self.timeout)
        try:
            wait_healthy(self.health, values, self.timeout)
        except StepFailed as exc:
            raise StepFailed("rollback", f"{back_to}: {exc}") from None
        return f"rolled back to {back_to}, which is healthy"

    def _prune(self) -> None:
        """Keep ``keep`` releases (the new one and the one to roll back to first); drop stale uploads."""
        names = sorted(p.name for p in self.layout.releases.iterdir() if not p.name.startswith("."))
        kept = {self.release} | ({self.previous} if self.previous else set())
        for name in reversed(names):
            if len(kept) >= self.keep:
                break
            kept.add(name)
        for name in names:
            if name not in kept:
                shutil.rmtree(str(self.layout.releases / name), ignore_errors=True)
        now = time.time()
        for stale in self.layout.releases.glob(".incoming-*"):
            if now - stale.stat().st_mtime > STALE_UPLOAD_S:
                shutil.rmtree(str(stale), ignore_errors=True)

    def result(self) -> Dict[str, object]:
        return {"release": self.release, "previous": self.previous, "outcome": self.outcome, "steps": self.steps}


def _command(text: str) -> List[str]:
    value = json.loads(text)
    if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
        raise ValueError("expected a JSON list of strings")
    return value


def _checked(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if not pattern.fullmatch(text):
            raise argparse.ArgumentTypeError(f"{what} {text!r} has characters other than letters, digits, '_', '.', '-'")
        return text

    return parse


# edge.argtypes does this for the edge commands; this program runs on the device without edge (stdlib only).
def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value < 1e6):  # also refuses NaN and infinity (Ansible's edge_timeout arrives as text)
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text[:40]!r}")
    return value


def _keep(text: str) -> int:
    if not text.isdigit() or not 2 <= int(text) <= 1000:
        raise argparse.ArgumentTypeError(f"expected a number of releases from 2 to 1000, got {text[:40]!r}")
    return int(text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="edge-deploy-target", description="Device side of `edge deploy`.")
    sub = parser.add_subparsers(dest="action", required=True)
    for action in ("prepare", "activate"):
        p = sub.add_parser(action)
        p.add_argument("--root", default="/", help="device root (a temporary directory in tests)")
        p.add_argument("--name", required=True, type=_checked(NAME_RE, "name"))
    prep = sub.choices["prepare"]
    prep.add_argument("--sha256", required=True, type=_checked(SHA256_RE, "sha256"))
    act = sub.choices["activate"]
    act.add_argument("--release", required=True, type=_checked(NAME_RE, "release"))
    act.add_argument("--engine", required=True, type=_checked(NAME_RE, "engine file name"))
    act.add_argument(
        "--check-cmd", type=_command, default=DEFAULT_CHECK, help="JSON list; run on the new release before the swap"
    )
    act.add_argument("--no-check", dest="check_cmd", action="store_const", const=None, help="skip the device check")
    act.add_argument("--restart-cmd", type=_command, default=DEFAULT_RESTART)
    act.add_argument("--health-cmd", type=_command, default=DEFAULT_HEALTH)
    act.add_argument("--timeout", type=_seconds, default=120.0, help="seconds for each of check, restart and health")
    act.add_argument("--keep", type=_keep, default=2, help="releases to keep, at least 2 (the new one and the previous)")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    layout = Layout(Path(args.root), args.name)
    if args.action == "prepare":
        print(json.dumps(prepare(layout, args.sha256)))
        return 0
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # see _say: finish even when the SSH session drops
    activation = Activation(
        layout, args.release, args.engine, args.check_cmd, args.restart_cmd, args.health_cmd, args.timeout, args.keep
    )
    layout.home.mkdir(parents=True, exist_ok=True)
    with open(str(layout.home / ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two deploys of one service wait for each other
        try:
            activation.run()
            code, error = 0, None
        except StepFailed as exc:
            code, error = EXIT_CODES[exc.step], {"step": exc.step, "message": str(exc)}
    result = activation.result()
    if error:
        result["error"] = error
    try:
        print(json.dumps(result), flush=True)
    except OSError:
        pass
    return code


if __name__ == "__main__":
    sys.exit(main())
