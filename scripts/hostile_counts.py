#!/usr/bin/env python3
"""Re-run the hostile-input review as tests and count what still goes wrong, by the review's categories.

    python scripts/hostile_counts.py            # every tests/test_hostile_*.py, slow ones included
    python scripts/hostile_counts.py -m "not slow"
    python scripts/hostile_counts.py --junit old.xml   # count an earlier run's results instead of running

Prints one line per category (cases, tracebacks, hangs, lost or overwritten files, security findings, other wrong
behaviour) and the failing tests under each, for the closing note of issue 14. A failing test is put in a category
by the assertion message the tests in tests/_hostile.py write; anything else is "wrong".
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]

# (category, phrases in a failure message that put it there), first match wins.
CATEGORIES = [
    ("hangs", ("did not finish", "s to stop", "after the second SIGTERM", "TIMED OUT", "s to refuse")),
    ("tracebacks", ("a Python traceback", "the guard's last resort", "bare Python exception", "Python complained at exit")),
    (
        "security",
        (
            "leaked",
            "world-readable",
            "group-writable",
            "planted link",
            "got no '--'",
            "comes before '--'",
            "pwned",
            "program accepted",
        ),
    ),
    ("lost files", ("changed (", "was lost", "temps", "a mixed pair", "neither the old file", "not a complete")),
    ("blow-ups", ("MB peak", "MB for a", "grows with the log")),
]


def categorise(message: str) -> str:
    for name, phrases in CATEGORIES:
        if any(p in message for p in phrases):
            return name
    return "wrong"


def run_tests(pytest_args: List[str]) -> Path:
    junit = Path(tempfile.mkstemp(prefix="hostile-", suffix=".xml")[1])
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_hostile_*.py"))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *pytest_args, *files]
    subprocess.run(cmd, cwd=ROOT)
    return junit


def main(argv: List[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--junit", type=Path, help="count this JUnit XML instead of running the tests")
    args, pytest_args = p.parse_known_args(argv)
    junit = args.junit or run_tests(pytest_args)
    cases, skipped = 0, 0
    failing: Dict[str, List[str]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        cases += 1
        if case.find("skipped") is not None:
            skipped += 1
            continue
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        if problem is None:
            continue
        # What the assertions said (pytest's "E " lines), not the test's source, which quotes the review's words.
        said = [line[1:].strip() for line in (problem.text or "").splitlines() if line.startswith("E ")]
        message = (problem.get("message") or "") + "\n" + "\n".join(said)
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        failing.setdefault(categorise(message), []).append(name)
    print(f"cases: {cases} ({skipped} skipped), passing: {cases - skipped - sum(map(len, failing.values()))}")
    for name, _ in [*CATEGORIES, ("wrong", ())]:
        tests = failing.get(name, [])
        print(f"{name}: {len(tests)}")
        for t in tests:
            print(f"  {t}")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
