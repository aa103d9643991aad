"""An accuracy budget met with the fewest layers in FP16.

Layers are ranked by the error each causes when it alone is quantized (the per-layer report); the search then keeps
the first k of that ranking in FP16, for the smallest k that meets the budget: k = 0, then 1, 2, 4, ... until one
meets it, then halving the gap to the last k that did not. Each k is one INT8 pass over the check images.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from edge.calib.check import Measurement

TOLERANCE = 1e-12  # a miss this small is float rounding (0.9 - 0.885 is 1.5000000000000013 points), not a miss


@dataclass
class Budget:
    min_agreement: Optional[float] = None  # lowest per-output agreement, 0..1
    max_drop: Optional[float] = None  # points of the labelled set's score: top-1, or mAP@0.5:0.95 for a detector
    outputs: List[str] = field(default_factory=list)  # the outputs min_agreement watches; empty = all

    def agreement(self, m: Measurement) -> float:
        """The lowest agreement among the watched outputs."""
        watched = [f.agreement for f in m.fidelity if not self.outputs or f.name in self.outputs]
        return min(watched, default=1.0)

    @property
    def given(self) -> bool:
        return self.min_agreement is not None or self.max_drop is not None

    def shortfall(self, m: Measurement, fp32_score: Optional[float]) -> float:
        """How far ``m`` is from the budget: 0 when met, else the larger miss (agreement, or points of the score)."""
        miss = 0.0
        if self.min_agreement is not None:
            miss = max(miss, self.min_agreement - self.agreement(m))
        if self.max_drop is not None and m.labelled is not None and fp32_score is not None:
            miss = max(miss, (fp32_score - m.labelled.score) * 100 - self.max_drop)
        return miss if miss > TOLERANCE else 0.0

    def to_dict(self) -> Dict[str, float]:
        out = {}
        if self.min_agreement is not None:
            out["min_agreement"] = self.min_agreement
        if self.max_drop is not None:
            out["max_drop_points"] = self.max_drop
        if self.outputs:
            out["outputs"] = list(self.outputs)
        return out


@dataclass
class SearchResult:
    kept: int  # how many of the ranking stay in FP16
    met: bool
    measurement: Measurement
    shortfall: float
    tried: List[Tuple[int, float]] = field(default_factory=list)  # (k, shortfall) in the order tried


def search(
    ranking: Sequence[int], measure: Callable[[int], Measurement], miss: Callable[[Measurement], float], start: Measurement
) -> SearchResult:
    """The smallest k (of ``len(ranking)``) whose measurement has no miss; the full ranking's result when none has.
    ``start`` is the measurement at k = 0."""
    seen: Dict[int, Tuple[Measurement, float]] = {0: (start, miss(start))}
    tried: List[Tuple[int, float]] = [(0, seen[0][1])]

    def at(k: int) -> float:
        if k not in seen:
            m = measure(k)
            seen[k] = (m, miss(m))
            tried.append((k, seen[k][1]))
        return seen[k][1]

    n = len(ranking)
    if at(0) == 0.0 or n == 0:
        return SearchResult(0, seen[0][1] == 0.0, seen[0][0], seen[0][1], tried)
    low, k = 0, 1  # low: the largest k known to miss
    while at(k) > 0.0:
        if k == n:
            best = min(seen, key=lambda j: (seen[j][1], j))
            return SearchResult(best, False, seen[best][0], seen[best][1], tried)
        low, k = k, min(2 * k, n)
    high = k
    while high - low > 1:
        mid = (low + high) // 2
        if at(mid) == 0.0:
            high = mid
        else:
            low = mid
    return SearchResult(high, True, seen[high][0], 0.0, tried)


def describe_miss(budget: Budget, m: Measurement, fp32_score: Optional[float]) -> str:
    parts = []
    agreement = budget.agreement(m)
    if budget.min_agreement is not None and budget.min_agreement - agreement > TOLERANCE:
        parts.append(f"agreement {agreement:.4f} < {budget.min_agreement} (short by {budget.min_agreement - agreement:.4f})")
    if budget.max_drop is not None and m.labelled is not None and fp32_score is not None:
        drop = (fp32_score - m.labelled.score) * 100
        if drop - budget.max_drop > TOLERANCE:
            parts.append(f"{m.labelled.metric} drop {drop:.2f} points > {budget.max_drop} (over by {drop - budget.max_drop:.2f})")
    return "; ".join(parts) or "met"
