#!/usr/bin/env python3
"""Mutation testing with mutmut on the modules a change touches, in a throw-away clone, in bounded time.

    python scripts/mutate.py edge/runtime/postprocess/retinaface.py      # one module, the tests that name it
    python scripts/mutate.py --changed main                              # every edge/ module changed since main
    python scripts/mutate.py --sample 120 --seed 1 edge/dla/predict.py   # a seeded sample of its mutants

It clones the committed HEAD (the work tree is never touched), lets mutmut mutate only the named modules of edge/,
runs the tests that import them (or --tests), and prints per module the killed share and each survivor's diff. The
exit status is 1 when a module's score is below --min (default 90 %), 2 on bad arguments. Needs mutmut
(`pip install -e '.[mutation]'`).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# mutmut's exit codes (mutmut.stats.status_by_exit_code): what counts as killed (a failing test, or tests that
# time out or crash: the suite did not pass), and what was not decided
KILLED = {1, 3, 37, 36, 24, 152, 255}  # and any negative code: the tests died of a signal (abort, segfault, SIGXCPU)
UNDECIDED = {None, 2, 5, 33, 34}


def fail(message: str) -> None:
    print(f"mutate: {message}", file=sys.stderr)
    sys.exit(2)


def dotted(module: str) -> str:
    return module[: -len(".py")].replace("/", ".").removesuffix(".__init__")


def changed_modules(base: str) -> list[str]:
    out = subprocess.run(["git", "diff", "--name-only", f"{base}...HEAD", "--", "edge"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"--changed {base}: git diff failed ({out.stderr.strip().splitlines()[-1] if out.stderr.strip() else 'no output'})")
    return [m for m in out.stdout.split() if m.endswith(".py") and (ROOT / m).is_file()]


def of_module(name: str, module: str) -> bool:
    """Whether mutmut's mutant ``name`` is in ``module``, by mutmut's own parsing of its names (a package's
    ``__init__`` shares its prefix with every submodule, so a prefix match is not enough)."""
    from mutmut.utils.format_utils import get_module_from_key

    return get_module_from_key(name) == dotted(module)


def tests_naming(module: str) -> list[str]:
    """The test files that import the module: its dotted name, or ``from PACKAGE import NAME``."""
    name = dotted(module)
    package, _, leaf = name.rpartition(".")
    pattern = re.compile(rf"\b{re.escape(name)}\b|from {re.escape(package)} import [^\n]*\b{re.escape(leaf)}\b")
    return sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py") if pattern.search(p.read_text(encoding="utf-8"))
    )


def config(modules: list[str], tests: list[str], per_test_timeout: int, cpu_slack: float = 1.0) -> str:
    quoted = ", ".join(json.dumps(x) for x in modules)
    selected = ", ".join(json.dumps(x) for x in tests)
    return (
        "\n[tool.mutmut]\n"
        'source_paths = ["edge"]\n'
        f"only_mutate = [{quoted}]\n"
        'also_copy = ["bench/", "configs/", "scripts/", "setup.py"]\n'  # tests run bench scripts and import them
        f"pytest_add_cli_args_test_selection = [{selected}]\n"
        f'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "--timeout", "{per_test_timeout}"]\n'
        # mutmut's CPU-time limit per mutant is (the tests' CPU time + this) * 30, the tests' time counted in pytest's
        # process alone: tests whose reference runs in a child process need the slack, or the limit kills them first
        f"timeout_constant = {cpu_slack!r}\n"
    )


def mutants(clone: Path) -> dict:
    """mutant name -> exit code (None: not run), from mutmut's .meta files."""
    out: dict = {}
    for meta in (clone / "mutants").rglob("*.py.meta"):
        out.update(json.loads(meta.read_text())["exit_code_by_key"])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("modules", nargs="*", metavar="MODULE.py", help="modules under edge/ to mutate")
    ap.add_argument("--changed", metavar="BASE", help="mutate every edge/ module changed between BASE and HEAD")
    ap.add_argument("--tests", nargs="+", metavar="FILE", help="test files to run (default: those that import the modules)")
    ap.add_argument("--sample", type=int, metavar="N", help="run a seeded sample of N mutants per module (default: all)")
    ap.add_argument("--seed", type=int, default=0, help="the sample's seed (default 0)")
    ap.add_argument("--jobs", type=int, default=2, help="mutants run at once (default 2)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds for the whole run (default 1800)")
    ap.add_argument("--min", type=float, default=90.0, help="the lowest killed share, in percent, that passes (default 90)")
    ap.add_argument(
        "--cpu-slack",
        type=float,
        default=1.0,
        metavar="S",
        help="CPU seconds added to each test's own before mutmut's limit (default 1, mutmut's): raise it for tests that "
        "run a reference in a child process (tests/test_torchvision.py: 60), whose CPU time the limit does not see",
    )
    ap.add_argument("--keep", action="store_true", help="keep the clone (its mutants/ folder) and print its path")
    args = ap.parse_args()

    modules = list(args.modules) + (changed_modules(args.changed) if args.changed else [])
    if not modules:
        fail("no module to mutate: name edge/... .py files, or --changed BASE with changes under edge/")
    for m in modules:
        if not (m.startswith("edge/") and m.endswith(".py") and (ROOT / m).is_file()):
            fail(f"{m}: not a module under edge/ (give a path such as edge/dla/predict.py)")
    if args.sample is not None and args.sample < 1 or args.jobs < 1 or args.timeout < 60:
        fail("--sample and --jobs take positive counts, --timeout at least 60 s")
    tests = args.tests or sorted({t for m in modules for t in tests_naming(m)})
    if not tests:
        fail(f"no test file imports {', '.join(modules)}; name them with --tests")
    beside = Path(sys.executable).parent / "mutmut"  # this Python's venv first, then PATH
    mutmut = str(beside) if beside.exists() else shutil.which("mutmut")
    if mutmut is None:
        fail("mutmut is not installed: pip install -e '.[mutation]'")
    dirty = subprocess.run(["git", "status", "--porcelain", "--", *modules, *tests], cwd=ROOT, capture_output=True, text=True)
    if dirty.stdout.strip():
        print("mutate: note: uncommitted changes to these files are not in the run (it mutates the committed HEAD)")

    work = Path(tempfile.mkdtemp(prefix="edge-mutate-"))
    clone = work / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    with open(clone / "pyproject.toml", "a", encoding="utf-8") as f:
        f.write(config(modules, tests, per_test_timeout=300, cpu_slack=args.cpu_slack))
    print(f"mutate: {', '.join(modules)} against {len(tests)} test file(s): {' '.join(tests)}", flush=True)

    log = work / "mutmut.log"  # kept to explain a run with no results (mutmut stops when the unmutated tests fail)

    def run(names: list[str], budget: float) -> None:
        with open(log, "ab") as out:
            subprocess.run(
                [mutmut, "run", "--max-children", str(args.jobs), *names],
                cwd=clone,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=budget,
            )

    try:
        if args.sample:
            run(["edge.__mutate_list_only__"], args.timeout)  # generates the mutants and stops: no name matches
            names = sorted(mutants(clone))
            chosen = []
            for m in modules:
                mine = [n for n in names if of_module(n, m)]
                chosen += random.Random(args.seed).sample(mine, min(args.sample, len(mine)))
            run(chosen, args.timeout)
        else:
            run([], args.timeout)
    except subprocess.TimeoutExpired:
        print(f"mutate: stopped after {args.timeout} s; the counts below are of the mutants that ran")

    results = mutants(clone)
    ok = True
    for m in modules:
        mine = {k: v for k, v in results.items() if of_module(k, m) and v not in UNDECIDED}
        dead = {k for k, v in mine.items() if v in KILLED or v < 0}
        killed, survivors = len(dead), sorted(set(mine) - dead)
        share = 100.0 * killed / len(mine) if mine else 0.0
        ok &= bool(mine) and share >= args.min
        print(f"{m}: {killed}/{len(mine)} killed ({share:.1f} %), {len(survivors)} survived")
        if not mine:
            said = log.read_text(errors="replace").splitlines()[-5:] if log.exists() else []
            print("  no mutant ran to a result; the last lines mutmut printed:", *(f"    {s[-200:]}" for s in said), sep="\n")
        for name in survivors:
            shown = subprocess.run([mutmut, "show", name], cwd=clone, capture_output=True, text=True).stdout
            diff = [line for line in shown.splitlines() if line[:2] in ("- ", "+ ")]
            print(f"  {name} (exit {results[name]})")
            for line in diff[:4]:
                print(f"    {line}")
    if args.keep:
        print(f"mutate: the clone is kept at {clone}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
