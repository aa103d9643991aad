"""``edge dla`` held against published TensorRT placements (tests/dla_corpus/cases.json).

The expected placements come from outside: build logs and layer dumps posted with the model code, and builds
NVIDIA publishes without GPU fallback (all layers on the DLA). Each model is rebuilt from its published code with
random weights. TensorRT itself does not run here; these tests prove agreement with what the publications show.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("onnx")

from tests.dla_corpus.score import cases, score, table  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "edge-dla.md"
CASES = cases()


@pytest.fixture(scope="module")
def scores():
    return {c["id"]: score(c) for c in CASES}


def test_the_corpus_covers_what_the_issue_asks():
    assert len(CASES) >= 16
    assert {c["target"] for c in CASES} == {"orin", "xavier"}
    assert {c["precision"] for c in CASES} == {"int8", "fp16"}
    versions = {c["trt"].split(".")[0] + "." + c["trt"].split(".")[1] for c in CASES}
    assert {"8.4", "8.5", "8.6", "10.3"} <= versions
    assert {"classifier", "detector", "segmenter"} <= {c["kind"] for c in CASES}
    for c in CASES:
        assert (c["url"] or c["locator"]) and c["date"] and c["published"] and c["shapes"] and c["opset"]
        assert c["nodes"] == "all" or all({"published", "node", "device"} <= set(n) for n in c["nodes"])


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_each_count_is_what_its_source_shows(case):
    """The recorded count against the recorded source: the log's [DlaLayer] lines, or a timeline's ForeignNode
    layers (one enqueue) where the log is cut or absent."""
    listed = sum("[DlaLayer]" in line for line in case["published"])
    if case.get("count_from") == "timeline":
        read = case["timeline"]["read"] if "timeline" in case else " | ".join(case["published"]).split(" | ")
        assert sum(label.startswith("{Forei") for label in read) == case["subgraphs"]
        assert listed == case.get("subgraphs_listed", 0)
    elif listed:
        assert listed == case["subgraphs"]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case_agrees_with_its_publication(case, scores):
    s = scores[case["id"]]
    assert s.count_right in (True, None), f"{case['id']}: {case['subgraphs']} published, {s.subgraphs} predicted"
    assert s.nodes_right == s.nodes_listed, s.misses


def test_totals_meet_the_targets(scores):
    listed = sum(s.nodes_listed for s in scores.values())
    right = sum(s.nodes_right for s in scores.values())
    assert right / listed >= 0.95
    small = [s for s in scores.values() if s.case["nodes"] != "all"]  # the logs, without the all-DLA builds
    assert sum(s.nodes_right for s in small) / sum(s.nodes_listed for s in small) >= 0.95


def test_docs_carry_the_current_agreement_table(scores):
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| case | TensorRT |"))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("| **total**"))
    want = table([scores[c["id"]] for c in CASES])
    assert lines[start : end + 1] == want, "run `python -m tests.dla_corpus.score` and update docs/edge-dla.md"
