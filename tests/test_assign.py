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


def test_an_unbounded_source_counts_its_share_of_the_fastest_engine_as_its_fairness():
    a = make({"gpu": 0.01, "dla0": 0.04}, {"file": math.inf})
    assert a.score({"file": "dla0"})[:2] == pytest.approx((25.0, 0.25))  # 25 fps of the 100 the fastest engine gives
    assert a.score({"file": "gpu"})[:2] == pytest.approx((100.0, 1.0))


def test_one_frame_interval_moves_the_rate_by_alpha():
    a = Assigner(["gpu"], ["cam"])
    a.observe_capture("cam", 10.0)
    a.observe_capture("cam", 10.04)  # the first interval is taken as it is: 25 fps
    assert a.rate["cam"] == pytest.approx(25.0)
    a.observe_capture("cam", 10.14)  # then 0.04 + 0.2 * (0.1 - 0.04) = 0.052 s
    assert a.rate["cam"] == pytest.approx(1 / 0.052)


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


@pytest.mark.parametrize("current", [{"c1": "dla1", "c2": "dla0"}, {"c1": "dla0", "c2": "dla1"}])
def test_of_equally_good_plans_the_one_that_moves_fewest_sources(current):
    a = make({"dla0": 0.02, "dla1": 0.02}, {"c1": 10.0, "c2": 10.0})
    a.assignment = dict(current)
    assert a.plan() == current  # swapping the two identical cores gains nothing


@settings(max_examples=100, deadline=None)
@given(service=st.lists(st.floats(0.002, 0.1), min_size=2, max_size=3), rates=st.lists(RATES, min_size=2, max_size=6))
def test_the_local_search_alone_serves_at_least_95_percent_of_the_best(service, rates):
    """The search used beyond EXHAUSTIVE, on instances small enough to check by brute force, from a bad start."""
    a = make({f"e{i}": s for i, s in enumerate(service)}, {f"s{i}": r for i, r in enumerate(rates)})
    a.assignment = dict.fromkeys(a.sources, a.engines[-1])  # everything on one engine
    assert a.score(a._local())[0] >= 0.95 * brute_force(a)


def test_a_swap_gets_out_of_what_no_single_move_improves():
    # x (15 fps) on B (10 fps) and y (10 fps) on A (15 fps) serve 20; moving either one alone serves 15 or 10;
    # swapping them serves 25
    a = make({"A": 1 / 15, "B": 0.1}, {"x": 15.0, "y": 10.0})
    assert a._improve({"x": "B", "y": "A"}, ["A", "B"]) == {"x": "A", "y": "B"}


def test_a_current_assignment_that_traps_the_search_loses_to_the_greedy_start():
    """Engines of 5 and 20 fps, cameras offering 3, 2, 6, 8 and 6 (25 in all): only {3, 2} fills the 5 fps engine
    exactly, so only that split serves all 25 fps. Taken by offered rate, largest first, the greedy start puts 8, 6, 6
    on the fast engine (20) and 3, 2 on the slow one (5): that split. Started from the 8 and 6 on the slow engine,
    moves and swaps of one camera at a time end short of it."""
    a = make({"slow": 0.2, "fast": 0.05}, {"c3": 3.0, "c2": 2.0, "c6a": 6.0, "c8": 8.0, "c6b": 6.0})
    a.assignment = {"c3": "fast", "c2": "fast", "c6a": "fast", "c8": "slow", "c6b": "slow"}
    assert a.score(a._improve(dict(a.assignment), list(a.engines)))[0] < 25.0  # the trap: improving it is not enough
    plan = a._local()
    assert plan == {"c3": "slow", "c2": "slow", "c6a": "fast", "c8": "fast", "c6b": "fast"}
    assert a.served(plan) == pytest.approx(a.rate)  # every camera gets all it offers


def test_exactly_729_assignments_are_still_tried_one_by_one(monkeypatch):
    a = make({"gpu": 0.01, "dla0": 0.03, "dla1": 0.03}, {f"c{i}": 15.0 for i in range(6)})
    monkeypatch.setattr(Assigner, "_local", lambda self: pytest.fail("the local search ran for 3 ** 6 = 729 assignments"))
    assert len(a.plan()) == 6


def test_a_whole_source_moves_off_an_engine_that_fell_behind_and_says_why():
    a = make({"gpu": 0.01, "dla0": 0.0125}, {"c1": 40.0, "c2": 40.0})
    moves = a.start(0.0)
    assert a.assignment == {"c1": "gpu", "c2": "dla0"}  # both served in full; the busiest engine 50 % loaded, not 80
    assert [m.reason for m in moves] == [
        "start: gpu 10.0 ms/frame, source 40.0 fps",
        "start: dla0 12.5 ms/frame, source 40.0 fps",
    ]
    for _ in range(100):
        a.observe_service("dla0", 0.1)  # the DLA slowed to 10 fps
    (m,) = a.rebalance(10.0)
    assert a.assignment == {"c1": "gpu", "c2": "gpu"} and (m.source, m.old, m.new) == ("c2", "dla0", "gpu")
    assert m.reason == "dla0 behind: pool 50.0 -> 80.0 fps; source had 10.0 fps; gpu 10.0 ms/frame, source 40.0 fps"


def test_of_equal_plans_at_the_start_the_first_in_engine_order():
    a = make({"dla0": 0.02, "dla1": 0.02}, {"c1": 10.0, "c2": 10.0})
    a.start(0.0)
    assert a.assignment == {"c1": "dla0", "c2": "dla1"}


def test_a_source_moved_off_an_engine_that_is_not_behind_says_busier():
    a = make({"gpu": 0.01, "dla0": 0.02}, {"c1": 20.0, "c2": 40.0})
    a.assignment = {"c1": "dla0", "c2": "gpu"}  # dla0 keeps up with c1 (20 of 50 fps), but c2 wants the whole GPU
    for _ in range(100):
        a.observe_service("gpu", 1 / 30.0)  # the GPU slowed to 30 fps: c2 is behind, c1 is not
    moves = a.rebalance(10.0)
    assert {(m.source, m.old, m.new) for m in moves} == {("c1", "dla0", "gpu"), ("c2", "gpu", "dla0")}
    why = {m.source: m.reason.split(":")[0] for m in moves}
    assert why == {"c1": "dla0 busier", "c2": "gpu behind"}


def test_no_move_for_a_small_gain_nor_while_cooling_down(monkeypatch):
    a = make({"gpu": 0.01, "dla0": 0.02}, {"c1": 40.0, "c2": 40.0})
    a.assignment = {"c1": "gpu", "c2": "dla0"}
    a.moved_at = {"c1": 50.0, "c2": 50.0}
    # dla0 serves 38 of c2's 40 fps: the best plan gains 2 of 78 fps (2.6 %), under the 5 % hysteresis
    for _ in range(60):
        a.observe_service("dla0", 1 / 38.0)
    assert a.rebalance(100.0) == [] and a.assignment == {"c1": "gpu", "c2": "dla0"}
    for _ in range(60):
        a.observe_service("dla0", 1 / 20.0)  # now 20 fps: the plan gains 20 fps
    assert a.rebalance(50.0 + assign.COOLDOWN_S / 2) == []  # c2 moved too recently
    moves = a.rebalance(50.0 + assign.COOLDOWN_S)
    assert [(m.source, m.old, m.new) for m in moves] == [("c2", "dla0", "gpu")] and a.assignment["c2"] == "gpu"


@pytest.mark.parametrize("first", ["start", "rebalance", "apply"])
def test_the_first_placement_starts_each_sources_cooldown_at_its_time(first):
    """Placed at t = 50 (by start, by a rebalance with nothing placed yet, or a copy's moves applied), a source the
    plan would move stays until COOLDOWN_S after 50."""
    a = make({"gpu": 0.01, "dla0": 0.0125}, {"c1": 40.0, "c2": 40.0})
    if first == "apply":
        copy = a.copy()
        a.apply(copy.start(50.0), 50.0)
    else:
        getattr(a, first)(50.0)
    assert a.assignment == {"c1": "gpu", "c2": "dla0"} and a.moved_at == {"c1": 50.0, "c2": 50.0}
    for _ in range(100):
        a.observe_service("dla0", 0.1)  # the DLA slowed to 10 fps: c2 would go to the GPU
    assert a.rebalance(50.0 + assign.COOLDOWN_S / 2) == []
    assert [(m.source, m.new) for m in a.rebalance(50.0 + assign.COOLDOWN_S)] == [("c2", "gpu")]


def test_a_pool_needs_an_engine():
    with pytest.raises(ValueError) as err:
        Assigner([], ["c"])
    assert str(err.value) == "a pool needs at least one engine"


def test_every_engine_is_listed_unmeasured_then_its_service_time_is_a_running_average():
    a = Assigner(["gpu", "dla0"], ["c"])
    assert a.service_s == {"gpu": None, "dla0": None}  # what the metrics exporter lists per engine
    a.observe_service("gpu", 0.01)  # the first sample is taken as it is
    a.observe_service("gpu", 0.02)  # then 0.01 + 0.2 * (0.02 - 0.01) = 0.012 s
    assert a.service_s == {"gpu": pytest.approx(0.012), "dla0": None}


def test_a_copy_carries_on_from_the_same_capture_times_and_leaves_the_original_alone():
    a = Assigner(["gpu"], ["cam"])
    a.observe_capture("cam", 10.0)
    a.observe_capture("cam", 10.04)  # 25 fps
    c = a.copy()
    c.observe_capture("cam", 10.14)  # 0.04 + 0.2 * (0.1 - 0.04) = 0.052 s, as on the original
    assert c.rate["cam"] == pytest.approx(1 / 0.052) and a.rate["cam"] == pytest.approx(25.0)


def test_the_swap_can_be_of_the_first_source_with_one_in_the_middle():
    # A 15 fps, B and C 10 fps. x (15 fps) on B and y (10 fps) on A serve 10 + 10, p and q (5 fps each) 10 on C: 30.
    # Every single move serves 30 or less, every other swap 25; swapping x and y serves 15 + 10 + 10 = 35
    a = make({"A": 1 / 15, "B": 0.1, "C": 0.1}, {"x": 15.0, "p": 5.0, "y": 10.0, "q": 5.0})
    start = {"x": "B", "p": "C", "y": "A", "q": "C"}
    assert a._improve(start, ["A", "B", "C"]) == {"x": "A", "p": "C", "y": "B", "q": "C"}


def test_no_sources_score_nothing_served_and_nobody_short_changed():
    assert Assigner(["gpu"], []).score({}) == (0.0, 1.0, -0.0)


def test_a_move_starts_that_sources_cooldown_again():
    a = make({"gpu": 0.01, "dla0": 0.0125}, {"c1": 40.0, "c2": 40.0})
    a.start(0.0)
    for _ in range(100):
        a.observe_service("dla0", 0.1)  # the DLA slowed to 10 fps: c2 goes to the GPU at t = 10
    assert [(m.source, m.new) for m in a.rebalance(10.0)] == [("c2", "gpu")] and a.moved_at["c2"] == 10.0
    for _ in range(100):
        a.observe_service("dla0", 0.0125)  # back to 80 fps, and the GPU down to 50 for the 80 asked of it:
        a.observe_service("gpu", 0.02)  # c2 would return, but only COOLDOWN_S after 10
    assert a.rebalance(10.0 + assign.COOLDOWN_S / 2) == []
    assert [(m.source, m.new) for m in a.rebalance(10.0 + assign.COOLDOWN_S)] == [("c2", "dla0")]
