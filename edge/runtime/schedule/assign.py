"""Which engine serves which source: the pool's policy, apart from its threads so a simulated clock can drive it.

The model is deliberately small. Engine ``e`` serves ``1 / s_e`` frames a second, where ``s_e`` is its measured
service time (an average of recent frames, so the slowdown from the other engines being busy at the same time is in
it). Source ``s`` offers ``r_s`` frames a second (a camera's measured rate; a file or folder offers as many as it is
given). An engine shares its frames fairly between its sources (each up to what it offers), and the pool's
throughput is the sum over engines of ``min(offered, 1 / s_e)``. The plan maximises that throughput, then the
smallest share any source gets of what it offers, then headroom on the busiest engine. Up to ``EXHAUSTIVE``
assignments it tries them all (three engines and six sources: 729, about 20 ms of Python); beyond, it starts greedy
and improves by moving or swapping whole sources until nothing helps (about 2 ms for eight sources; tests and
bench/pool.py measure how close that comes).

A source stays on one engine (engines of different precision and GPU fallback give slightly different detections, and
a camera whose frames alternate between them flickers). The pool moves a whole source only when the plan's throughput
beats the current one by ``HYSTERESIS``, and never a source it moved less than ``COOLDOWN_S`` ago.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

ALPHA = 0.2  # weight of a new sample in the running averages of service time and frame interval
HYSTERESIS = 0.05  # a new plan must serve 5 % more frames a second before whole sources move
COOLDOWN_S = 5.0  # a moved source stays where it went at least this long (its engine's times must settle first)
EXHAUSTIVE = 729  # assignments tried one by one at most; beyond, the local search
ROUNDS = 64  # local-search rounds; each is one best move or swap, so a plan costs O(ROUNDS * S * (S + E)) steps
UNBOUNDED = math.inf  # the rate of a source read as fast as engines take its frames


@dataclass(frozen=True)
class Move:
    source: str
    old: Optional[str]
    new: str
    reason: str


@dataclass
class Assigner:
    engines: Sequence[str]
    sources: Sequence[str]
    service_s: Dict[str, Optional[float]] = field(default_factory=dict)  # engine -> seconds per frame
    rate: Dict[str, float] = field(default_factory=dict)  # source -> frames per second offered
    assignment: Dict[str, str] = field(default_factory=dict)
    reasons: Dict[str, str] = field(default_factory=dict)
    moved_at: Dict[str, float] = field(default_factory=dict)
    _last_capture: Dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.engines:
            raise ValueError("a pool needs at least one engine")
        for e in self.engines:
            self.service_s.setdefault(e, None)
        for s in self.sources:
            self.rate.setdefault(s, UNBOUNDED)

    # -- what the threads report ------------------------------------------------
    def observe_service(self, engine: str, seconds: float) -> None:
        old = self.service_s.get(engine)
        self.service_s[engine] = seconds if old is None else old + ALPHA * (seconds - old)

    def observe_capture(self, source: str, t: float) -> None:
        """A live source's frame was captured at ``t``: its offered rate follows the frame intervals."""
        last = self._last_capture.get(source)
        self._last_capture[source] = t
        if last is None or t <= last:
            return
        interval = t - last
        old = self.rate.get(source, UNBOUNDED)
        old_interval = 0.0 if math.isinf(old) else 1.0 / old
        new = interval if old_interval == 0.0 else old_interval + ALPHA * (interval - old_interval)
        self.rate[source] = 1.0 / new

    # -- the model ----------------------------------------------------------------
    def _speed(self, engine: str) -> float:
        """Frames a second; an engine not measured yet is taken to be as fast as the measured ones on average."""
        s = self.service_s.get(engine)
        if s:
            return 1.0 / s
        known = [1.0 / v for v in self.service_s.values() if v]
        return sum(known) / len(known) if known else 1.0

    def served(self, assignment: Dict[str, str]) -> Dict[str, float]:
        """Frames a second each source gets under ``assignment``: each engine's speed shared max-min fairly."""
        out: Dict[str, float] = {}
        by_engine: Dict[str, List[str]] = {}
        for s, e in assignment.items():
            by_engine.setdefault(e, []).append(s)
        for e, members in by_engine.items():
            left = self._speed(e)
            members = sorted(members, key=lambda s: self.rate[s])
            for i, s in enumerate(members):
                share = min(self.rate[s], left / (len(members) - i))
                out[s] = share
                left -= share
        return out

    def score(self, assignment: Dict[str, str]) -> Tuple[float, float, float]:
        """(throughput, the smallest fraction of its offer any source gets, minus the busiest engine's load)."""
        served = self.served(assignment)
        fastest = max(self._speed(e) for e in self.engines)  # > 0: unmeasured engines count as measured ones
        fair = min((served[s] / (fastest if math.isinf(self.rate[s]) else self.rate[s]) for s in served), default=1.0)
        load: Dict[str, float] = {}
        for s, e in assignment.items():
            speed = self._speed(e)
            load[e] = load.get(e, 0.0) + (self.rate[s] / speed if speed else math.inf)
        busiest = max(load.values()) if load else 0.0
        return sum(served.values()), fair, -busiest

    @staticmethod
    def _better(a: Tuple[float, ...], b: Tuple[float, ...]) -> bool:
        """``a`` beats ``b``: more throughput (beyond rounding), else fairer, else more headroom."""
        for x, y in zip(a, b):
            tol = 1e-9 * max(1.0, abs(x), abs(y))
            if x > y + tol:
                return True
            if x < y - tol:
                return False
        return False

    def plan(self) -> Dict[str, str]:
        """The best assignment the model finds; of equally good ones, the one that moves fewest sources."""
        if len(self.engines) ** len(self.sources) <= EXHAUSTIVE:
            return self._exhaustive()
        return self._local()

    def _moved(self, plan: Dict[str, str]) -> int:
        return sum(1 for s, e in plan.items() if self.assignment.get(s) != e)

    def _exhaustive(self) -> Dict[str, str]:
        best: Optional[Tuple[Tuple[float, ...], int, Dict[str, str]]] = None
        for combo in itertools.product(self.engines, repeat=len(self.sources)):
            trial = dict(zip(self.sources, combo))
            sc, moved = self.score(trial), self._moved(trial)
            if best is None or self._better(sc, best[0]) or (not self._better(best[0], sc) and moved < best[1]):
                best = (sc, moved, trial)
        return best[2] if best is not None else {}

    def _local(self) -> Dict[str, str]:
        """Improved from the current assignment (so only what helps moves) and from a greedy start by offered rate
        (so a poor current one is not a trap); on a tie the current one's."""
        usable = list(self.engines)
        greedy: Dict[str, str] = {}
        for s in sorted(self.sources, key=lambda s: -self.rate[s]):
            best = None
            for e in usable:
                sc = self.score({**greedy, s: e})
                if best is None or self._better(sc, best[0]):
                    best = (sc, e)
            greedy[s] = best[1]
        fresh = self._improve(greedy, usable)
        if not self.assignment:
            return fresh
        kept = self._improve(dict(self.assignment), usable)
        return fresh if self._better(self.score(fresh), self.score(kept)) else kept

    def _improve(self, current: Dict[str, str], usable: List[str]) -> Dict[str, str]:
        """Local search: the best single move or swap of whole sources, while one helps."""
        best_score = self.score(current)
        for _ in range(ROUNDS):
            improved = None
            for s in self.sources:
                for e in usable:
                    if e != current[s]:
                        trial = {**current, s: e}
                        sc = self.score(trial)
                        if self._better(sc, best_score if improved is None else improved[0]):
                            improved = (sc, trial)
            for i, a in enumerate(self.sources):
                for b in self.sources[i + 1 :]:
                    if current[a] != current[b]:
                        trial = {**current, a: current[b], b: current[a]}
                        sc = self.score(trial)
                        if self._better(sc, best_score if improved is None else improved[0]):
                            improved = (sc, trial)
            if improved is None:
                break
            best_score, current = improved
        return current

    def copy(self) -> Assigner:
        """A snapshot to plan on without holding the pool's lock (planning takes milliseconds)."""
        return Assigner(
            list(self.engines),
            list(self.sources),
            dict(self.service_s),
            dict(self.rate),
            dict(self.assignment),
            dict(self.reasons),
            dict(self.moved_at),
            dict(self._last_capture),
        )

    # -- decisions ------------------------------------------------------------------
    def _why(self, source: str, engine: str) -> str:
        s = self.service_s.get(engine)
        rate = self.rate[source]
        offered = "as fast as served" if math.isinf(rate) else f"{rate:.1f} fps"
        return f"{engine} {s * 1e3:.1f} ms/frame, source {offered}" if s else f"{engine} not yet measured"

    def start(self, now: float) -> List[Move]:
        """The first assignment, from the service times measured so far."""
        plan = self.plan()
        moves = [Move(s, None, e, "start: " + self._why(s, e)) for s, e in plan.items()]
        self._apply(moves, now)
        return moves

    def rebalance(self, now: float) -> List[Move]:
        """Whole-source moves when the plan beats the current assignment by HYSTERESIS; none while a source that
        would move is cooling down from its last move."""
        if not self.assignment:
            return self.start(now)
        plan = self.plan()
        new, old = self.score(plan), self.score(self.assignment)
        if new[0] <= old[0] * (1 + HYSTERESIS):
            return []
        changed = [s for s in self.sources if plan[s] != self.assignment[s]]
        if any(now - self.moved_at.get(s, -math.inf) < COOLDOWN_S for s in changed):
            return []
        before = self.served(self.assignment)
        behind = {
            e
            for e in set(self.assignment.values())
            if sum(self.rate[s] for s in self.assignment if self.assignment[s] == e) > self._speed(e) * (1 + 1e-9)
        }
        moves = []
        for s in changed:
            e_old = self.assignment[s]
            why = f"{e_old} behind" if e_old in behind else f"{e_old} busier"
            moves.append(
                Move(
                    s,
                    e_old,
                    plan[s],
                    f"{why}: pool {old[0]:.1f} -> {new[0]:.1f} fps; source had {before[s]:.1f} fps; " + self._why(s, plan[s]),
                )
            )
        self._apply(moves, now)
        return moves

    def apply(self, moves: List[Move], now: float) -> None:
        """Moves decided on a copy, applied here."""
        self._apply(moves, now)

    def _apply(self, moves: List[Move], now: float) -> None:
        for m in moves:
            self.assignment[m.source] = m.new
            self.reasons[m.source] = m.reason
            self.moved_at[m.source] = now
