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


def _parse(argv: list[str]) -> None:
    from edge import cli

    p = cli.parser() if argv[0] == "edge" else cli.entry_parser(*ENTRY[argv[0]])
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            p.parse_args(argv[1:])
    except SystemExit as exc:
        assert exc.code == 0, err.getvalue().strip().splitlines()[-1]


def test_the_docs_show_commands_of_every_tool():
    shown = {" ".join(argv[:2]) if argv[0] == "edge" else argv[0] for _, argv in COMMANDS}
    for tool in ("edge-run", "edge-build", "edge calib", "edge dla", "edge deploy", "edge service", "edge report"):
        assert tool in shown, f"no example of {tool} in the docs"


@pytest.mark.parametrize("where,argv", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_documented_command_parses(where: str, argv: list[str]):
    _parse(argv)


def test_a_wrong_flag_in_the_docs_would_fail():
    with pytest.raises(AssertionError, match="unrecognized arguments: --no-such-flag"):
        _parse(["edge-run", "--config", "x.yaml", "--no-such-flag"])
    with pytest.raises(AssertionError, match="invalid choice"):
        _parse(["edge", "dla", "m.onnx", "--target", "thor"])


def test_config_examples_load():
    load_config(ROOT / "configs" / "demo.yaml")  # the quick start's config, with every check
    load_dataclass(RunConfig, ROOT / "configs" / "camera.example.yaml")  # names files that exist on a Jetson only
    load_dataclass(BuildConfig, ROOT / "configs" / "build.example.yaml")
    pool, _ = load_dataclass(RunConfig, ROOT / "configs" / "pool.example.yaml")  # its engines exist on a Jetson only
    assert [s.name for s in pool.sources] == ["gate", "dock", "lobby", "yard"] and pool.pool.engines == ["gpu", "dla0", "dla1"]


def test_yaml_blocks_in_the_docs_load(tmp_path):
    for page in PAGES:
        for lang, _start, text in _blocks(page):
            if lang != "yaml":
                continue
            f = tmp_path / "block.yaml"
            f.write_text(text)
            schema = BuildConfig if re.search(r"^(calib|dla|int8|fp16):", text, re.M) else RunConfig
            load_dataclass(schema, f)  # unknown keys or wrong types raise, naming the key


def test_readme_links_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target:
            continue
        assert (ROOT / target).exists(), f"README links to a missing file: {target}"


def test_readme_is_a_front_page():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 300


def test_help_of_every_command_names_its_flags():
    from edge import cli

    for name in cli.COMMANDS:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
            cli.parser().parse_args([name, "--help"])
        assert f"usage: edge {name}" in out.getvalue()
    assert isinstance(cli.entry_parser("run", "edge-run"), argparse.ArgumentParser)


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
    """Each configs/*.example.yaml other than the build's parses as a run config (types, keys, literals)."""
    want = {"centerface": "centerface", "picodet": "picodet", "ssd": "ssd", "rtdetr": "detr", "segment": "segment"}
    seen = {}
    for path in sorted((ROOT / "configs").glob("*.example.yaml")):
        if path.name == "build.example.yaml":
            continue
        cfg, _ = load_dataclass(RunConfig, path)
        seen[path.name.split(".")[0]] = cfg.task.type
    assert {k: seen[k] for k in want} == want
    assert seen["ssd"] == "ssd" and len(seen) >= 11
