"""The pool's assignment policy on its own (no threads): its model, its search against exhaustive search, and when it
moves a source. The expectations are worked by hand from the model's definition (module docstring of
edge/runtime/schedule/assign.py) or found by brute force over every assignment."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.runtime.schedule import assign
from edge.runtime.schedule.assign import Assigner


def make(service: dict, rates: dict) -> Assigner:
    a = Assigner(list(service), list(rates))
    for e, s in service.items():
        a.observe_service(e, s)
    a.rate.update(rates)
    return a


def test_an_engine_is_shared_max_min_fairly():
    a = make({"gpu": 0.01}, {"slow": 30.0, "mid": 50.0, "file": math.inf})
    served = a.served(dict.fromkeys(a.sources, "gpu"))
    # 100 fps: 30 to the camera that offers 30, the other 70 split evenly between the two that want more
    assert served == pytest.approx({"slow": 30.0, "mid": 35.0, "file": 35.0})


def test_score_is_throughput_then_fairness_then_headroom():
    a = make({"gpu": 0.01, "dla0": 0.04}, {"c1": 20.0, "c2": 20.0})
    both_gpu = a.score({"c1": "gpu", "c2": "gpu"})
    split = a.score({"c1": "gpu", "c2": "dla0"})
    assert both_gpu[0] == pytest.approx(40.0) and split[0] == pytest.approx(40.0)  # 25 fps of DLA covers 20
    assert both_gpu[1] == split[1] == pytest.approx(1.0)
    assert both_gpu[2] == pytest.approx(-0.4) and split[2] == pytest.approx(-0.8)  # 40 fps on 10 ms vs 20 on 40 ms
    assert a._better(both_gpu, split)


def test_the_frame_rate_follows_the_capture_times():
    a = Assigner(["gpu"], ["cam"])
    assert math.isinf(a.rate["cam"])
    for i in range(200):
        a.observe_capture("cam", i / 25.0)
    assert a.rate["cam"] == pytest.approx(25.0, rel=1e-6)
    a.observe_capture("cam", 200 / 25.0)  # the same time again (a clock tick) changes nothing
    a.observe_capture("cam", 200 / 25.0)
    assert a.rate["cam"] == pytest.approx(25.0, rel=1e-6)


def test_an_engine_not_measured_yet_counts_as_the_average_of_the_measured():
    a = Assigner(["gpu", "dla0", "dla1"], ["c"])
    a.observe_service("gpu", 0.01)
    a.observe_service("dla0", 0.04)
    assert a._speed("dla1") == pytest.approx((100 + 25) / 2)
    assert Assigner(["x"], ["c"])._speed("x") == 1.0


def brute_force(a: Assigner) -> float:
    best = 0.0
    for combo in itertools.product(a.engines, repeat=len(a.sources)):
        best = max(best, a.score(dict(zip(a.sources, combo)))[0])
    return best


RATES = st.sampled_from([5.0, 10.0, 15.0, 25.0, 30.0, 60.0, math.inf])


@settings(max_examples=150, deadline=None)
@given(service=st.lists(st.floats(0.002, 0.1), min_size=1, max_size=3), rates=st.lists(RATES, min_size=1, max_size=6))
def test_up_to_729_assignments_the_plan_is_the_best_by_brute_force(service, rates):
    a = make({f"e{i}": s for i, s in enumerate(service)}, {f"s{i}": r for i, r in enumerate(rates)})
    plan = a.plan()
    assert set(plan) == set(a.sources) and set(plan.values()) <= set(a.engines)
    assert a.score(plan)[0] >= brute_force(a) * (1 - 1e-9)


@settings(max_examples=25, deadline=None)
@given(service=st.lists(st.floats(0.002, 0.1), min_size=3, max_size=3), rates=st.lists(RATES, min_size=7, max_size=8))
def test_beyond_that_the_local_search_serves_at_least_95_percent_of_the_best(service, rates):
    a = make({f"e{i}": s for i, s in enumerate(service)}, {f"s{i}": r for i, r in enumerate(rates)})
    assert len(a.engines) ** len(a.sources) > assign.EXHAUSTIVE
    assert a.score(a.plan())[0] >= 0.95 * brute_force(a)


def test_of_equally_good_plans_the_one_that_moves_fewest_sources():
    a = make({"dla0": 0.02, "dla1": 0.02}, {"c1": 10.0, "c2": 10.0})
    a.assignment = {"c1": "dla1", "c2": "dla0"}
    assert a.plan() == {"c1": "dla1", "c2": "dla0"}  # swapping the two identical cores gains nothing


def test_a_whole_source_moves_off_an_engine_that_fell_behind_and_says_why():
    a = make({"gpu": 0.01, "dla0": 0.02}, {"c1": 30.0, "c2": 30.0})
    a.start(0.0)
    assert sorted(a.assignment.values()) == ["dla0", "gpu"] or set(a.assignment.values()) == {"gpu"}
    for _ in range(50):
        a.observe_service("dla0", 0.1)  # the DLA slowed to 10 fps
    moves = a.rebalance(10.0)
    assert a.assignment == {"c1": "gpu", "c2": "gpu"}
    (m,) = [m for m in moves if m.old == "dla0"] or [None]
    if m is not None:  # the start put one camera on the DLA: it moved, and the reason says the DLA was behind
        assert m.new == "gpu" and m.reason.startswith("dla0 behind")


def test_no_move_for_a_small_gain_nor_while_cooling_down(monkeypatch):
    a = make({"gpu": 0.01, "dla0": 0.02}, {"c1": 40.0, "c2": 40.0})
    a.assignment = {"c1": "gpu", "c2": "dla0"}
    a.moved_at = {"c1": 0.0, "c2": 0.0}
    # dla0 serves 38 of c2's 40 fps: the best plan gains 2 of 78 fps (2.6 %), under the 5 % hysteresis
    for _ in range(60):
        a.observe_service("dla0", 1 / 38.0)
    assert a.rebalance(100.0) == [] and a.assignment == {"c1": "gpu", "c2": "dla0"}
    for _ in range(60):
        a.observe_service("dla0", 1 / 20.0)  # now 20 fps: the plan gains 20 fps
    assert a.rebalance(assign.COOLDOWN_S / 2) == []  # c2 moved too recently
    moves = a.rebalance(100.0)
    assert [(m.source, m.old, m.new) for m in moves] == [("c2", "dla0", "gpu")] and a.assignment["c2"] == "gpu"


def test_a_pool_needs_an_engine():
    with pytest.raises(ValueError, match="at least one engine"):
        Assigner([], ["c"])
