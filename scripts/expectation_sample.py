"""The seeded sample of test functions for measuring where the tests' expected values come from, drawn the way the
test audit of 2026-12-02 drew its (``../shared/reference/reviews/tests-audit-2026-12-02.md``): stratified by file,
``round(n_file * 205 / n_all)`` functions a file and at least one, ``random.Random(20260)``.

    python scripts/expectation_sample.py > sample.txt        # one ``file::function`` a line, files in name order

Each sampled function is then read and given one class by hand (EXT, SELF-belief, SELF-contract, WEAK: the audit's
definitions); the last classification is ``docs/expectations.tsv``, its table in docs/development.md.
"""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path
from typing import List

SEED = 20260
TARGET = 205
DEF = re.compile(r"^\s*(?:async\s+)?def (test_\w+)\s*\(", re.M)


def sample(tests: Path) -> List[str]:
    funcs = {f.name: DEF.findall(f.read_text(encoding="utf-8")) for f in sorted(tests.glob("test_*.py"))}
    funcs = {name: found for name, found in funcs.items() if found}
    total = sum(len(found) for found in funcs.values())
    rng = random.Random(SEED)
    out = []
    for name, found in funcs.items():
        k = min(len(found), max(1, round(len(found) * TARGET / total)))
        out += [f"{name}::{t}" for t in rng.sample(found, k)]
    return out


if __name__ == "__main__":
    print("\n".join(sample(Path(__file__).resolve().parents[1] / "tests")))
    sys.exit(0)
