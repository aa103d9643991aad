"""Score ``edge dla`` against the published placements in ``cases.json``; ``python -m tests.dla_corpus.score`` prints
the agreement table that docs/edge-dla.md carries."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from edge.dla.predict import predict
from tests.dla_corpus.models import BUILDERS

CASES = Path(__file__).with_name("cases.json")


def cases() -> List[dict]:
    return json.loads(CASES.read_text(encoding="utf-8"))["cases"]


@dataclass
class Score:
    case: dict
    subgraphs: int  # predicted
    nodes_right: int
    nodes_listed: int
    misses: List[str] = field(default_factory=list)  # "node: published X, predicted Y"

    @property
    def count_right(self) -> Optional[bool]:
        want = self.case["subgraphs"]
        return None if want is None else want == self.subgraphs


def score(case: dict) -> Score:
    model = BUILDERS[case["model"]]()
    shapes = {k: tuple(v) for k, v in case["shapes"].items()}
    report = predict(model, case["target"], case["rules"], shapes, case["precision"])
    by_name = {n.name: n for n in report.nodes}
    listed = case["nodes"]
    if listed == "all":
        listed = [{"published": "every layer (no GPU fallback)", "node": n.name, "device": "DLA"} for n in model.graph.node]
    right, misses = 0, []
    for item in listed:
        verdict = by_name.get(item["node"])
        got = verdict.device if verdict is not None else "folded"
        ok = got == item["device"]
        if ok and item.get("alone"):
            group = next(s for s in report.subgraphs if s.index == verdict.subgraph)
            ok = group.nodes == [item["node"]]
            got = f"DLA with {len(group.nodes) - 1} more node(s)" if not ok else got
        right += ok
        if not ok:
            why = f" ({verdict.reason})" if verdict is not None and verdict.reason else ""
            misses.append(f"{item['node']}: published {item['device']}, predicted {got}{why}")
    return Score(case, len(report.subgraphs), right, len(listed), misses)


def table(scores: List[Score]) -> List[str]:
    """The agreement table (Markdown), one row per case and a total."""
    lines = [
        "| case | TensorRT | device | precision | kind | DLA subgraphs published / predicted | listed nodes right |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in scores:
        c = s.case
        want = "n/a" if c["subgraphs"] is None else str(c["subgraphs"])
        if c.get("count_from") == "timeline":
            want += " (timeline)"
        mark = {True: "", False: " ✗", None: ""}[s.count_right]
        lines.append(
            f"| {c['id']} | {c['trt']} | {c['target']} | {c['precision']} | {c['kind']} | {want} / {s.subgraphs}{mark} "
            f"| {s.nodes_right}/{s.nodes_listed} |"
        )
    counted = [s for s in scores if s.count_right is not None]
    right = sum(s.nodes_right for s in scores)
    listed = sum(s.nodes_listed for s in scores)
    lines.append(
        f"| **total** ({len(scores)} cases) | | | | | {sum(bool(s.count_right) for s in counted)}/{len(counted)} exact "
        f"| {right}/{listed} ({right / listed:.1%}) |"
    )
    return lines


def summary() -> Dict[str, object]:
    scores = [score(c) for c in cases()]
    return {"scores": scores, "table": table(scores)}


if __name__ == "__main__":
    result = summary()
    print("\n".join(result["table"]))
    for s in result["scores"]:
        for miss in s.misses:
            print(f"{s.case['id']}: {miss}")
