"""CI's skip allow-list: an unlisted skip fails a CI run, a listed one does not, and every entry still names a skip."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.skiplist import ALLOWED, parse, unlisted


def test_an_entry_allows_its_file_and_any_reason_that_starts_with_it():
    allowed = parse("# why\n\ntests/a.py: no server\ntests/b.py: root reads\n")
    assert allowed == [("tests/a.py", "no server"), ("tests/b.py", "root reads")]
    skips = [("tests/a.py", "no server here"), ("tests/b.py", "no server"), ("tests/a.py", "a server")]
    assert unlisted(skips, allowed) == [("tests/b.py", "no server"), ("tests/a.py", "a server")]


@pytest.mark.parametrize("line", ["tests/a.py no colon", "tests/a.txt: reason", "tests/a.py:   "])
def test_a_malformed_entry_is_named_with_its_line(line):
    with pytest.raises(ValueError, match=r"line 2: expected 'tests/FILE.py: reason'"):
        parse(f"# comment\n{line}\n")


def test_every_committed_entry_names_a_skip_that_its_file_still_makes():
    for file, reason in parse(ALLOWED.read_text()):
        source = (ROOT / file).read_text()
        assert reason in source, f"{file} no longer skips with {reason!r}: drop it from {ALLOWED.name}"


def _run(tmp_path: Path, allowed: str, require: bool, *extra: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text("from tests.skiplist import pytest_runtest_logreport, pytest_sessionfinish\n")
    (tmp_path / "test_some.py").write_text(
        textwrap.dedent(
            """
            import pytest
            def test_listed():
                pytest.skip("no broker on this machine")
            def test_new():
                pytest.skip("a reference moved")
            def test_runs():
                assert True
            """
        )
    )
    (tmp_path / "allowed.txt").write_text(allowed)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EDGE_SKIPS_ALLOWED": str(tmp_path / "allowed.txt")}
    env.pop("EDGE_REQUIRE_SERVERS", None)
    if require:
        env["EDGE_REQUIRE_SERVERS"] = "1"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, "--rootdir", str(tmp_path), str(tmp_path)]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def _relative(tmp_path: Path) -> str:
    return os.path.relpath(tmp_path / "test_some.py", ROOT)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_ci_fails_on_a_skip_that_is_not_listed_and_names_it(tmp_path, workers):
    r = _run(tmp_path, f"{_relative(tmp_path)}: no broker\n", True, *workers)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"1 skip(s) not in {tmp_path / 'allowed.txt'}" in r.stdout
    assert f"  {_relative(tmp_path)}: a reference moved" in r.stdout
    assert "no broker on this machine" not in r.stdout.split("not in")[1]


def test_ci_passes_when_every_skip_is_listed(tmp_path):
    r = _run(tmp_path, f"{_relative(tmp_path)}: no broker\n{_relative(tmp_path)}: a reference\n", require=True)
    assert r.returncode == 0 and "1 passed, 2 skipped" in r.stdout, r.stdout + r.stderr


def test_outside_ci_a_skip_is_only_a_skip(tmp_path):
    r = _run(tmp_path, "", require=False)
    assert r.returncode == 0 and "not in" not in r.stdout, r.stdout + r.stderr
