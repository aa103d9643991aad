"""Property-based attacks (issue 14 item 8): Hypothesis throws generated values at every config key (walking the
RunConfig and BuildConfig dataclasses), every flag and positional of every command (walking the argparse parsers
from ``edge.cli.parser()``), and generated or mutated bytes at every file reader (config YAML, labels, manifest JSON,
calibration cache, tegrastats log, telemetry JSONL, a report folder, ONNX). Whatever comes in: exit 0 or 2 (a deploy
may also end at a step's own status), at most one error line, never a traceback.

Every example runs ``edge.cli`` in a child forked from this process (imports already done, so an example costs
milliseconds) with 6 GiB of address space and a time limit: a case that is not bounded fails instead of hanging.
Seeds are real files: the BlazeFace demo config, tegrastats lines from the reference, a manifest and a cache that
edge-build and edge calib wrote here, a run folder edge-run wrote here.

Profiles: ``HYPOTHESIS_PROFILE=ci`` (the default: derandomized, bounded, under a minute on 2 cores) or ``explore``
(random seeds, ten times the examples) to hunt for new cases.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import stat
import typing
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from edge import cli  # noqa: E402
from edge.builder.config import BuildConfig  # noqa: E402
from edge.config import RunConfig  # noqa: E402

from ._deploytools import write_engine  # noqa: E402
from ._hostile import Outcome, assert_clean, assert_no_traceback, call, command_parser, demo_config, images, onnx_conv  # noqa: E402
from .test_telemetry_tegrastats import REAL_LINES  # noqa: E402

# ci: the same examples on every run, no shrinking (a failing example is reported as found: shrinking a case that
# loads a model costs minutes); explore: new random examples each run, shrunk to the smallest that fails.
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    max_examples=20,
    phases=[Phase.explicit, Phase.generate],
    report_multiple_bugs=False,
)
settings.register_profile("explore", parent=settings.get_profile("ci"), derandomize=False, max_examples=200, phases=list(Phase))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
SCALE = 10 if os.environ.get("HYPOTHESIS_PROFILE") == "explore" else 1


def examples(n: int) -> Any:
    return settings(max_examples=n * SCALE)


DEPLOY_STEP_CODES = tuple(range(10, 18))


# -- what every example is held to -------------------------------------------------------------------------------------


def judged(o: Outcome, command: str, codes: Sequence[int] = (0, 2)) -> None:
    assert_clean(o, codes=codes, parser=command_parser(command))


def fresh(world: Dict[str, Path]) -> Path:
    """Put back every seed an earlier example overwrote (a command may write to another command's input: edge-run
    does not know tiny.onnx) and return the folder examples run in, so relative outputs land there."""
    for path, data in world["_seeds"].items():  # type: ignore[union-attr]
        if not path.is_file() or path.read_bytes() != data:
            if path.is_dir():
                shutil.rmtree(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    return world["out"]


def attempt(world: Dict[str, Path], argv: Sequence[object], main: Any = None, timeout: float = 60) -> Outcome:
    return call(argv, main=main, timeout=timeout, cwd=fresh(world))


# -- the world the examples run in ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, demo_model: Path, megamind: Path) -> Dict[str, Path]:
    """Real inputs and outputs to seed and aim at; heavy modules imported once so forked examples start warm."""
    import cv2  # noqa: F401
    import onnx  # noqa: F401
    import onnxruntime  # noqa: F401

    d = tmp_path_factory.mktemp("properties")
    w: Dict[str, Path] = {"dir": d, "base": demo_config(d), "tiny": onnx_conv(d / "tiny.onnx"), "imgs": images(d / "imgs")}
    (d / "out").mkdir()
    w["out"] = d / "out"
    w["device"] = d / "null-device"
    try:
        os.mknod(w["device"], 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:  # not root: no device then (a FIFO instead would block a reader, as it should)
        w["device"] = d / "no-device"
    log = d / "tegra.log"
    log.write_text("\n".join(REAL_LINES * 10) + "\n")
    w["tegra"] = log
    w["labels"] = d / "labels.txt"
    w["labels"].write_text("face\nperson\n")
    engine = write_engine(d / "deploy", b"engine bytes" * 10)
    w["engine"], w["front"] = engine, engine.parent / "front.yaml"
    # A real run folder (results, summary, telemetry from replayed real lines) for edge report and the JSONL readers.
    run = d / "run"
    run.mkdir()
    argv = ["-c", w["base"], "-q", "--frames", 20, "--results", run / "results.jsonl", "--summary-json", run / "summary.json"]
    replay = ["--telemetry", "replay", "--set", f"telemetry.replay_path={log}", "--set", "telemetry.interval_s=0.02"]
    o = call([*argv, *replay], main=cli.run_main)
    assert o.code == 0, o
    w["run"] = run
    # A real calibration cache and, where TensorRT-RTX is installed, a real engine manifest.
    o = call(["calib", w["tiny"], "--images", w["imgs"], "--cache", d / "tiny.cache"])
    assert o.code == 0, o
    w["cache"] = d / "tiny.cache"
    try:
        import tensorrt_rtx  # noqa: F401

        o = call([w["tiny"], "-o", d / "tiny.engine", "--target-cc", "8.6"], main=cli.build_main)
        assert o.code == 0, o
        w["manifest"] = d / "tiny.engine.json"
    except ImportError:
        w["manifest"] = engine.parent / "model.engine.json"
    try:
        import matplotlib  # noqa: F401 - edge report's plots
    except ImportError:
        pass
    seeds = [w[k] for k in ("base", "tiny", "tegra", "labels", "engine", "front", "cache", "manifest")]
    seeds += [*w["imgs"].iterdir(), *w["run"].iterdir()]
    w["_seeds"] = {p: p.read_bytes() for p in seeds}  # type: ignore[assignment]
    return w


# -- hostile values ------------------------------------------------------------------------------------------------------

_NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1, 2**31, 2**63, 2**64, 1e-320, -0.0, 1e308]),
)
_SPECIAL_TEXT = st.sampled_from(
    [
        "nan", "NaN", "inf", "-inf", "Infinity", "1e400", "0x1f", "1_000", "٣", "½", "", " ", "-", "--", "-h", "--help",
        "~", "null", "yes", "no", "on", "[", "{", "]", "'", '"', "*a", "&a x", "!!python/object:os.system ls",
        "!!binary AAAA", "<<: *a", "rtsp://admin:pw@cam/x", "/", ".", "..",
        "a\nb", "a\rb", "\t", "\x1b[2J", "\u2028", "é" * 300, "x" * 5000, "%s%n", "{0}", "$(id)", "`id`", ";id", "|id",
    ]
)  # fmt: skip
_BYTES_AS_ARGV = st.binary(min_size=1, max_size=40).map(lambda b: b.decode("utf-8", "surrogateescape"))  # non-UTF-8 argv
TEXT = st.one_of(
    _SPECIAL_TEXT,
    st.text(max_size=60),
    _NUMBERS.map(str),
    _BYTES_AS_ARGV,
).filter(lambda s: "\x00" not in s)


def _paths(w: Dict[str, Path]) -> st.SearchStrategy[str]:
    """Paths worth aiming a flag at: inputs, folders, missing places, devices, odd names. The device is
    made in the test folder (a copy of /dev/null's numbers): a regression that replaces a device with a file must
    cost this test, not the machine it runs on."""
    d = w["dir"]
    return st.sampled_from(
        [
            str(w["tiny"]), str(w["base"]), str(w["imgs"]), str(w["run"]), str(w["tegra"]), str(w["cache"]),
            str(w["out"] / "new.out"), str(d / "missing" / "x"), str(d), "/", str(w["device"]),
            str(w["out"] / "with space.json"), str(w["out"] / "new\nline"), str(w["out"] / "ünï.json"),
            str(w["tiny"]) + "/child", "relative/x.json", "-", str(w["out"] / ".hidden"),
        ]
    )  # fmt: skip


def _yaml_values() -> st.SearchStrategy[str]:
    """A YAML value as typed after `--set key=`: well-formed values of every shape, and raw hostile text."""
    import yaml

    scalars = st.one_of(_NUMBERS, st.booleans(), st.none(), st.text(max_size=30))
    shaped = st.recursive(
        scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
        max_leaves=8,
    )
    dumped = shaped.map(lambda v: yaml.safe_dump(v, default_flow_style=True, width=10**6).replace("\n...", "").strip())
    return st.one_of(
        dumped,
        TEXT,
        st.sampled_from([".nan", "-.inf", ".inf", "[.nan, 1, 2]", "[[16, 2], [8, .nan]]", "[]", "{}", "[1,2", "&a [*a]"]),
    )


# -- every config key ------------------------------------------------------------------------------------------------------


def _leaf_keys(schema: type, prefix: str = "") -> List[str]:
    out = []
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        if f.metadata.get("internal"):
            continue
        if dataclasses.is_dataclass(hints[f.name]):
            out += _leaf_keys(hints[f.name], f"{prefix}{f.name}.")
        else:
            out.append(prefix + f.name)
    return out


RUN_KEYS = _leaf_keys(RunConfig)
BUILD_KEYS = _leaf_keys(BuildConfig)


def test_the_key_walk_finds_every_section() -> None:
    assert {"model.path", "input.mean", "task.anchor_grids", "source.reconnect.max_attempts", "telemetry.interval_s"} <= set(
        RUN_KEYS
    )
    assert {"calib.max_images", "dla.sram_mib", "shapes", "target_cc", "input.size"} <= set(BUILD_KEYS)


@examples(40)
@given(key=st.sampled_from(RUN_KEYS), value=_yaml_values())
def test_any_value_for_any_run_key(world, key: str, value: str) -> None:
    o = attempt(world, ["-c", world["base"], "--set", f"{key}={value}", "--check"], main=cli.run_main, timeout=30)
    judged(o, "edge-run")


@examples(25)
@given(key=st.sampled_from(BUILD_KEYS), value=_yaml_values())
def test_any_value_for_any_build_key(world, key: str, value: str) -> None:
    pytest.importorskip("tensorrt_rtx")
    out = world["out"] / "prop.engine"
    o = attempt(world, [world["tiny"], "-o", out, "--target-cc", "8.6", "--set", f"{key}={value}"], main=cli.build_main)
    judged(o, "edge-build")


# -- every flag and positional of every command ------------------------------------------------------------------------


def _templates(w: Dict[str, Path]) -> Dict[str, Tuple[Any, List[object], str]]:
    """A quick, valid command line per command (main, argv, parser name); a flag under test is appended (argparse:
    the last one wins) and a positional is replaced in place."""
    out = w["out"]
    return {
        "edge-run": (cli.run_main, ["-c", w["base"], "-q", "--telemetry", "none", "--frames", "2"], "edge-run"),
        "edge-build": (cli.build_main, [w["tiny"], "-o", out / "b.engine", "--target-cc", "8.6"], "edge-build"),
        "calib": (cli.main, ["calib", w["tiny"], "--images", w["imgs"], "--cache", out / "c.cache"], "calib"),
        "dla": (cli.main, ["dla", w["tiny"], "--target", "orin"], "dla"),
        "deploy": (
            cli.main,
            ["deploy", "nobody@127.0.0.1", "--name", "front", "--engine", w["engine"], "--config", w["front"]]
            + ["-p", "9", "--connect-timeout", "1", "--no-check"],
            "deploy",
        ),
        "service": (
            cli.main,
            [
                "service",
                "install",
                "front",
                "--config",
                w["front"],
                "--root",
                out / "root",
                "--edge-run",
                "/bin/true",
                "--dry-run",
            ],
            "service",
        ),
        "telemetry": (cli.main, ["telemetry", "parse", "--tegrastats", w["tegra"]], "telemetry"),
        "report": (cli.main, ["report", out / "report-run"], "report"),
        "assets": (cli.main, ["assets", "path", "blazeface-back-256"], "assets"),
        "doctor": (cli.main, ["doctor", "--no-build", "--no-service"], "doctor"),
    }


def _slots(command: str) -> List[Tuple[str, Optional[str]]]:
    """(how, option) for every value-taking option and every positional of ``command``'s parser (and subparsers)."""
    parser = command_parser(command)
    parsers = [parser]
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            parsers += list(a.choices.values())
    slots = []
    for p in parsers:
        for a in p._actions:
            if isinstance(a, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
                continue
            if a.option_strings and a.nargs != 0:
                slots.append(("flag", max(a.option_strings, key=len)))
            elif not a.option_strings:
                slots.append(("positional", a.dest))
    return sorted(set(slots), key=str)


# Every command edge has, as a user reaches it: a new command fails test_the_flag_walk... until it has a template.
COMMANDS = [{"run": "edge-run", "build": "edge-build"}.get(name, name) for name in cli.COMMANDS]
POSITIONAL_INDEX = {  # where each positional's value sits in the template
    ("edge-build", "model"): 0,
    ("calib", "model"): 1,
    ("dla", "model"): 1,
    ("deploy", "target"): 1,
    ("service", "name"): 2,
    ("report", "run_dir"): 1,
    ("assets", "name"): 2,
}
# Values a test must not hand to a real ssh: an ssh option that runs a command.
_SSH_COMMANDS = ("command", "proxy", "match", "include", "localforward", "remoteforward", "permitlocal")


def test_the_flag_walk_finds_every_command_and_its_flags() -> None:
    flags = {(c, o) for c in COMMANDS for how, o in _slots(c) if how == "flag"}
    for expected in [
        ("edge-run", "--idle-baseline"),
        ("edge-build", "--dla-sram"),
        ("calib", "--percentile"),
        ("deploy", "--remote-python"),
    ]:
        assert expected in flags
    assert {c for c, _ in flags} == set(COMMANDS)  # every command has at least --log-level
    missing = set(COMMANDS) - set(_templates({k: Path("/") for k in ("base", "tiny", "imgs", "out", "engine", "front", "tegra")}))
    assert not missing, f"commands without a template here, so no generated values reach them: {missing}"


def _argv_with(template: List[object], command: str, slot: Tuple[str, Optional[str]], value: str) -> List[object]:
    how, name = slot
    if how == "flag":
        return [*template, name, value]
    index = POSITIONAL_INDEX.get((command, name))
    if index is None:
        return [*template, value]  # nargs="+" and other positionals: one more value
    argv = list(template)
    argv[index] = value
    return argv


@pytest.mark.parametrize("command", COMMANDS)
def test_any_value_for_any_flag(world, command: str) -> None:
    main, template, name = _templates(world)[command]
    if command == "edge-build":
        pytest.importorskip("tensorrt_rtx")
    report_run = world["out"] / "report-run"
    if command == "report" and not report_run.exists():
        shutil.copytree(world["run"], report_run)
    codes = (0, 2, *DEPLOY_STEP_CODES) if command == "deploy" else (0, 2)
    if command == "doctor":
        codes = (0, 1, 2)  # 1: a check failed (this is not a Jetson), said on stdout

    @examples({"edge-run": 20, "edge-build": 8, "calib": 12, "report": 5}.get(command, 20))
    @given(slot=st.sampled_from(_slots(command)), value=st.one_of(TEXT, _paths(world)))
    def attack(slot: Tuple[str, Optional[str]], value: str) -> None:
        if command == "deploy" and any(k in value.lower() for k in _SSH_COMMANDS):
            return
        o = attempt(world, _argv_with(template, command, slot, value), main=main)
        if command == "doctor" and o.code == 1:
            assert_no_traceback(o)
            return
        judged(o, name, codes)

    attack()


# -- mutated bytes at every reader -----------------------------------------------------------------------------------------

_TOKENS = [
    b"\xff", b"\xfe\xff", b"\x00", b"NaN", b"Infinity", b"-Infinity", b"1e999", b"[", b"]", b"{", b"}", b'"', b":",
    b"\n", b"\r", b"*a", b"&a ", b"!!binary ", b"- ", b"    ", b"\t", b"99999999999999999999", b"-1", b"null", b"[]",
]  # fmt: skip


@st.composite
def mutated(draw: Any, seed: bytes) -> bytes:
    """``seed`` after a few random edits: byte flips, hostile tokens inserted, a cut, a slice duplicated."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "cut", "dup", "replace"]))
        pos = draw(st.integers(0, max(0, len(data))))
        if op == "flip" and data:
            i = min(pos, len(data) - 1)
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            data[pos:pos] = draw(st.one_of(st.sampled_from(_TOKENS), st.binary(max_size=8)))
        elif op == "cut":
            del data[pos:]
        elif op == "dup":
            data[pos:pos] = bytes(data[pos : pos + draw(st.integers(1, 200))]) * draw(st.integers(1, 20))
        else:
            end = pos + draw(st.integers(1, 16))
            data[pos:end] = draw(st.sampled_from(_TOKENS))
    return bytes(data)


def _bytes_test(seed_of: str, n: int, run_example: Any) -> Any:
    """A Hypothesis test over mutations of the world's ``seed_of`` file (and wholly random bytes)."""

    def test(world) -> None:
        seed = world[seed_of].read_bytes()

        @examples(n)
        @given(data=st.one_of(mutated(seed), st.binary(max_size=300)))
        def attack(data: bytes) -> None:
            run_example(world, data)

        attack()

    return test


def _config(world, data: bytes) -> None:
    cfg = world["out"] / "fuzz.yaml"
    cfg.write_bytes(data)
    judged(attempt(world, ["-c", cfg, "--check"], main=cli.run_main, timeout=30), "edge-run")


def _build_config(world, data: bytes) -> None:
    cfg = world["out"] / "fuzz-build.yaml"
    cfg.write_bytes(data)
    judged(attempt(world, ["-c", cfg, "-o", world["out"] / "fz.engine", "--target-cc", "8.6"], main=cli.build_main), "edge-build")


def _labels(world, data: bytes) -> None:
    labels = world["out"] / "fuzz-labels.txt"
    labels.write_bytes(data)
    judged(attempt(world, ["-c", world["base"], "--set", f"task.labels={labels}", "--check"], main=cli.run_main), "edge-run")


def _tegrastats(world, data: bytes) -> None:
    log = world["out"] / "fuzz-tegra.log"
    log.write_bytes(data)
    for extra in ([], ["--json"]):
        judged(attempt(world, ["telemetry", "parse", "--tegrastats", log, *extra], timeout=30), "telemetry")


def _manifest(world, data: bytes) -> None:
    """What edge-run does with a manifest before TensorRT (read, gate; an AGX Orin's facts), and edge deploy's check."""
    from edge.errors import EdgeError
    from edge.manifest import read_manifest
    from edge.runtime.engines.gate import DeviceFacts, gate

    folder = world["out"] / "manifest"
    folder.mkdir(exist_ok=True)
    engine = folder / "model.engine"
    engine.write_bytes(world["engine"].read_bytes())
    (folder / "model.engine.json").write_bytes(data)
    (folder / "front.yaml").write_text("model:\n  engine: model.engine\n")
    facts = DeviceFacts("10.3.0.30", "8.7", dla_cores=2, l4t="36.4.3", jetpack="6.1/6.2")

    def edge_run_gate(_argv: List[str]) -> int:
        import sys

        try:
            gate(engine, read_manifest(engine), facts, None)
        except EdgeError as exc:
            print(f"edge-run: error: {exc}", file=sys.stderr)
            return 2
        return 0

    judged(attempt(world, [], main=edge_run_gate), "edge-run")
    argv = ["deploy", "nobody@127.0.0.1", "--name", "front", "--engine", engine, "--config", folder / "front.yaml", "-p", "9"]
    judged(attempt(world, [*argv, "--connect-timeout", "1"]), "deploy", (0, 2, *DEPLOY_STEP_CODES))


def _cache(world, data: bytes) -> None:
    """The one reader every cache goes through (edge-build --calib-cache; TensorRT-RTX has no INT8 to reach it by CLI)."""
    from edge.calib.cache import CalibrationCache
    from edge.errors import EdgeError

    def read(_argv: List[str]) -> int:
        import math
        import sys

        try:
            cache = CalibrationCache.from_bytes(data)
        except EdgeError as exc:
            print(f"edge-build: error: {exc}", file=sys.stderr)
            return 2
        bad = {k: v for k, v in cache.scales.items() if not (math.isfinite(v) and v > 0)}
        assert not bad, f"scales that are not positive numbers accepted: {bad}"
        return 0

    judged(attempt(world, [], main=read), "edge-build")


def _onnx(world, data: bytes) -> None:
    model = world["out"] / "fuzz.onnx"
    model.write_bytes(data)
    judged(attempt(world, ["dla", model, "--target", "orin"], timeout=30), "dla")
    judged(attempt(world, ["-c", world["base"], "--model", model, "--check"], main=cli.run_main, timeout=30), "edge-run")


test_mutated_run_config = _bytes_test("base", 25, _config)
test_mutated_build_config = _bytes_test("base", 10, _build_config)
test_mutated_labels_file = _bytes_test("labels", 6, _labels)
test_mutated_tegrastats_log = _bytes_test("tegra", 25, _tegrastats)
test_mutated_manifest = _bytes_test("manifest", 25, _manifest)
test_mutated_calibration_cache = _bytes_test("cache", 40, _cache)
test_mutated_onnx = _bytes_test("tiny", 25, _onnx)


RUN_FILES = ["results.jsonl", "summary.json", "telemetry.jsonl", "telemetry_meta.json"]


def test_mutated_run_folder_for_edge_report(world) -> None:
    """One of the files of a real run folder mutated (or replaced by random bytes), then `edge report` on it."""

    @examples(6)
    @given(name=st.sampled_from(RUN_FILES), data=st.data())
    def attack(name: str, data: Any) -> None:
        content = data.draw(st.one_of(mutated((world["run"] / name).read_bytes()), st.binary(max_size=300)))
        folder = world["out"] / "report-fuzz"
        if folder.exists():
            shutil.rmtree(folder)
        shutil.copytree(world["run"], folder)
        (folder / name).write_bytes(content)
        judged(attempt(world, ["report", folder]), "report")

    attack()


def test_replayed_telemetry_jsonl_mutations_are_clean(world) -> None:
    """The replay backend reads a recorded telemetry.jsonl during a run (edge-run --telemetry replay)."""
    seed = (world["run"] / "telemetry.jsonl").read_bytes()

    @examples(4)
    @given(data=mutated(seed))
    def attack(data: bytes) -> None:
        rec = world["out"] / "fuzz-telemetry.jsonl"
        rec.write_bytes(data)
        argv = ["-c", world["base"], "-q", "--frames", "2", "--telemetry", "replay", "--set", f"telemetry.replay_path={rec}"]
        judged(attempt(world, argv, main=cli.run_main), "edge-run")

    attack()
