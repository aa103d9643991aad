"""The docs cannot rot silently: every `edge` command shown in the README and docs/ parses with the real argument
parsers, every config example loads with the real config loader, and every relative link from the README resolves.
(The strict MkDocs build in CI checks the links between the pages of docs/.)"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from edge.builder.config import BuildConfig
from edge.config import RunConfig, load_config, load_dataclass

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ENTRY = {"edge-run": ("run", "edge-run"), "edge-build": ("build", "edge-build")}


def _blocks(path: Path):
    """(language, first line number, text) of each fenced code block."""
    lang, start, lines = None, 0, []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            if lang is None:
                lang, start, lines = line[3:].strip(), n + 1, []
            else:
                yield lang, start, "\n".join(lines)
                lang = None
        elif lang is not None:
            lines.append(line)


def _commands():
    """(page:line, argv) for each edge command line in a shell code block (```sh; plain blocks are output)."""
    for page in PAGES:
        for lang, start, text in _blocks(page):
            if lang not in ("sh", "bash", "console"):
                continue
            text = re.sub(r"\\\n\s*", " ", text)  # join continued lines
            for offset, line in enumerate(text.splitlines()):
                line = line.split(" #")[0].strip().removeprefix("$ ")
                if not line or line.startswith("#"):
                    continue
                for part in re.split(r"\s*(?:&&|\|\||;|\|)\s*", line):
                    try:
                        argv = shlex.split(part)
                    except ValueError:
                        continue
                    while argv and (argv[0] == "sudo" or re.fullmatch(r"[A-Z_]+=\S*", argv[0])):
                        argv = argv[1:]
                    if argv and argv[0].startswith(".venv/bin/"):
                        argv[0] = argv[0][len(".venv/bin/") :]
                    if not argv or argv[0] not in ("edge", "edge-run", "edge-build"):
                        continue
                    if any(a.startswith("[") for a in argv):  # a usage synopsis, not a command
                        continue
                    yield f"{page.relative_to(ROOT)}:{start + offset}", argv


COMMANDS = list(_commands())


def _parse(argv: list[str]) -> argparse.Namespace | None:
    """The namespace the real parser makes of a documented command (None for --help, which exits 0)."""
    from edge import cli

    p = cli.parser() if argv[0] == "edge" else cli.entry_parser(*ENTRY[argv[0]])
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return p.parse_args(argv[1:])
    except SystemExit as exc:
        assert exc.code == 0, err.getvalue().strip().splitlines()[-1]
        return None


def _options(argv: list[str]) -> dict:
    """option string -> argparse action, for the (sub)command ``argv`` names."""
    from edge import cli

    p = cli.parser() if argv[0] == "edge" else cli.entry_parser(*ENTRY[argv[0]])
    for word in argv[1:]:
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            break
        p = subs[0].choices[word]
    return {o: a for a in p._actions for o in a.option_strings}


def test_the_docs_show_commands_of_every_tool():
    shown = {" ".join(argv[:2]) if argv[0] == "edge" else argv[0] for _, argv in COMMANDS}
    for tool in ("edge-run", "edge-build", "edge calib", "edge dla", "edge deploy", "edge service", "edge report"):
        assert tool in shown, f"no example of {tool} in the docs"


@pytest.mark.parametrize("where,argv", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_documented_command_parses(where: str, argv: list[str]):
    """Every flag a documented command gives reaches the namespace: its value, not the default, is what the tool
    gets (a flag renamed to a new dest, or swallowed by a positional, fails here)."""
    ns = _parse(argv)
    if ns is None:
        return
    options = _options(argv)
    for k, word in enumerate(argv):
        flag = word.split("=", 1)[0]
        action = options.get(flag)
        if action is None or action.dest == "help":
            continue
        got = getattr(ns, action.dest)
        if action.nargs == 0:  # store_true / store_false / store_const
            assert got == action.const, f"{where}: {flag} did not set {action.dest}"
            continue
        given = word.split("=", 1)[1] if "=" in word else argv[k + 1] if k + 1 < len(argv) else None
        assert given is not None, f"{where}: {flag} has no value"
        values = got if isinstance(got, list) else [got]
        shown = [x for v in values for x in (str(v), str(getattr(v, "name", v))) if x]
        assert any(given == v or given.endswith(v) or v.endswith(given) for v in shown), (
            f"{where}: {flag} {given!r} reached {action.dest} as {got!r}"
        )


def test_a_wrong_flag_in_the_docs_would_fail():
    with pytest.raises(AssertionError, match="unrecognized arguments: --no-such-flag"):
        _parse(["edge-run", "--config", "x.yaml", "--no-such-flag"])
    with pytest.raises(AssertionError, match="invalid choice"):
        _parse(["edge", "dla", "m.onnx", "--target", "thor"])


def test_config_examples_load():
    """The quick start's config passes every check and is what the README says it runs: BlazeFace from its pinned
    asset on the Megamind clip, with ONNX Runtime on the CPU; the build example loads with its values."""
    demo = load_config(ROOT / "configs" / "demo.yaml")
    assert (demo.model.asset, demo.source.uri, demo.task.type) == ("blazeface-back-256", "asset://megamind", "blazeface")
    assert demo.backend == "onnxruntime" and demo.device in ("auto", "cpu")
    load_dataclass(RunConfig, ROOT / "configs" / "camera.example.yaml")  # names files that exist on a Jetson only
    build_path = ROOT / "configs" / "build.example.yaml"
    build, _ = load_dataclass(BuildConfig, build_path)
    assert _assert_loaded(build, build_path.read_text(), build_path.name) >= 10
    pool, _ = load_dataclass(RunConfig, ROOT / "configs" / "pool.example.yaml")  # its engines exist on a Jetson only
    assert [s.name for s in pool.sources] == ["gate", "dock", "lobby", "yard"] and pool.pool.engines == ["gpu", "dla0", "dla1"]


def _leaves(data, path=()):
    """(key path, value) of every scalar or list-of-scalars leaf of a YAML mapping."""
    for key, value in data.items():
        if isinstance(value, dict):
            yield from _leaves(value, (*path, key))
        elif not (isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value)):
            yield (*path, key), value


def _assert_loaded(cfg, text: str, where: str) -> int:
    """Every leaf of the YAML ``text`` is the value ``cfg`` holds; returns how many were compared."""
    import yaml

    n = 0
    for keys, value in _leaves(yaml.safe_load(text) or {}):
        got = cfg
        for key in keys:
            got = getattr(got, key)
        assert got == value or (isinstance(got, tuple) and list(got) == value), (
            f"{where}: {'.'.join(keys)} is {value!r} in the file but loads as {got!r}"
        )
        n += 1
    return n


def test_yaml_blocks_in_the_docs_load(tmp_path):
    """Each YAML block of the docs loads (unknown keys or wrong types raise, naming the key), and every value it
    shows is the value the tool gets: none dropped or changed by the loader."""
    checked = 0
    for page in PAGES:
        for lang, start, text in _blocks(page):
            if lang != "yaml":
                continue
            f = tmp_path / "block.yaml"
            f.write_text(text)
            schema = BuildConfig if re.search(r"^(calib|dla|int8|fp16):", text, re.M) else RunConfig
            cfg, _ = load_dataclass(schema, f)
            checked += _assert_loaded(cfg, text, f"{page.name}:{start}")
    assert checked >= 5  # the blocks hold leaves: the loop ran


def test_readme_links_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target:
            continue
        assert (ROOT / target).exists(), f"README links to a missing file: {target}"


def test_readme_is_a_front_page():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 300


def test_help_of_every_command_names_its_flags():
    """Every flag of every command and subcommand says what it does in --help (a help string or the config key it
    sets, not just its own name), and the --help text lists it."""
    from edge import cli

    def walk(argv: list, parser: argparse.ArgumentParser):
        yield argv, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for word, sub in action.choices.items():
                    yield from walk([*argv, word], sub)

    tools = [
        (["edge"], cli.parser()),
        *((["edge-run"], cli.entry_parser("run", "edge-run")),),
        (["edge-build"], cli.entry_parser("build", "edge-build")),
    ]
    checked = 0
    for argv, root in tools:
        for path, parser in walk(argv, root):
            text = parser.format_help()
            assert f"usage: {' '.join(path)}" in " ".join(text.split()), text[:200]
            for action in parser._actions:
                longs = [o for o in action.option_strings if o.startswith("--") and o != "--help"]
                if not longs or action.help == argparse.SUPPRESS:
                    continue
                # a help text, or the config key the flag sets (edge-run's flags mirror its keys)
                assert action.help and action.help.strip() not in longs + [o.lstrip("-") for o in longs], (
                    f"{' '.join(path)} {longs[0]}: no help text"
                )
                assert longs[0] in text, f"{' '.join(path)} --help does not list {longs[0]}"
                checked += 1
    assert checked > 100  # every tool's flags, not a few


def test_the_quick_start_writes_only_into_folders_a_fresh_clone_has():
    """edge refuses outputs into a missing folder (exit 2), and `out/` is ignored by git: the quick start must create
    every output folder it names before edge-run runs (it once did not, and a fresh clone stopped there)."""
    import subprocess

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text[text.index("## Quick start") :]
    first = next(line for line in block[block.index("```sh") :].splitlines()[1:] if line.strip())
    tracked = set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split())
    folders = {str(Path(f).parent) for f in tracked} | {"."}
    checked = 0
    for part in first.split("&&"):
        argv = shlex.split(part)
        if argv[:2] == ["mkdir", "-p"]:
            folders.update(str(Path(a)) for a in argv[2:])
        elif argv and argv[0].endswith("edge-run"):
            for flag in ("--results", "--summary-json", "--video"):
                if flag in argv:
                    parent = str(Path(argv[argv.index(flag) + 1]).parent)
                    assert parent in folders, f"{flag} writes into {parent}/, which a fresh clone lacks"
                    checked += 1
    assert checked >= 2


def test_every_example_run_config_loads_with_the_decoder_it_names():
    """Each configs/*.example.yaml other than the build's parses as a run config (types, keys, literals), every value
    it shows is the one loaded, and each family's example names its decoder."""
    want = {
        "centerface": "centerface",
        "picodet": "picodet",
        "ssd": "ssd",
        "retinaface": "retinaface",
        "rtdetr": "detr",
        "segment": "segment",
    }
    seen = {}
    for path in sorted((ROOT / "configs").glob("*.example.yaml")):
        if path.name == "build.example.yaml":
            continue
        cfg, _ = load_dataclass(RunConfig, path)
        seen[path.name.split(".")[0]] = cfg.task.type
        assert _assert_loaded(cfg, path.read_text(), path.name) >= 3
    assert {k: seen[k] for k in want} == want
    assert seen["ssd"] == "ssd" and len(seen) >= 12
