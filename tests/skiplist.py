"""The skips CI may see, kept in ``tests/skips-allowed.txt`` and checked at the end of a CI run.

A skip is a check that did not run; in CI (``EDGE_REQUIRE_SERVERS=1``) every one must be listed with its reason, so a
new skip (a missing server, a reference that moved) fails the run instead of hiding in pytest's summary. Each line of
the list is ``FILE: REASON PREFIX``; the line number is left out so that editing a test does not break the list.
conftest.py imports the two hooks below.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

ALLOWED = Path(__file__).with_name("skips-allowed.txt")

Skip = Tuple[str, str]  # (file relative to the repository, reason)
_seen: Dict[str, Skip] = {}


def parse(text: str) -> List[Skip]:
    """The list's entries; blank lines and ``#`` comments are left out."""
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        file, sep, reason = line.partition(": ")
        if not sep or not file.endswith(".py") or not reason.strip():
            raise ValueError(f"{ALLOWED.name} line {number}: expected 'tests/FILE.py: reason', got {line!r}")
        entries.append((file, reason.strip()))
    return entries


def unlisted(skips: List[Skip], allowed: List[Skip]) -> List[Skip]:
    """The skips that no entry allows: same file, and the reason starts with the entry's text."""
    return [(f, r) for f, r in skips if not any(f == af and r.startswith(ar) for af, ar in allowed)]


def _skip_of(report: pytest.TestReport) -> Skip:
    # A skip's longrepr is (path, line, "Skipped: reason"); the path is where pytest.skip was called.
    path, _, message = report.longrepr
    return os.path.relpath(path, ALLOWED.parents[1]), message.split("Skipped: ", 1)[-1]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and isinstance(report.longrepr, tuple) and not hasattr(report, "wasxfail"):
        _seen[report.nodeid] = _skip_of(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("EDGE_REQUIRE_SERVERS") != "1" or hasattr(session.config, "workerinput"):
        return  # checked in CI only, and by xdist's controller, which sees every worker's reports
    path = Path(os.environ.get("EDGE_SKIPS_ALLOWED", ALLOWED))
    extra = unlisted(sorted(set(_seen.values())), parse(path.read_text()))
    if extra:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = [f"{len(extra)} skip(s) not in {path} (CI allows only the listed ones):"] + [f"  {f}: {r}" for f, r in extra]
        if reporter is not None:
            reporter.write_line("\n".join(lines), red=True)
        if session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
