"""Decayed usage (``settings.usage_half_life``): the formula, its independence from how often
rounds run (so the simulator and the service charge the same), and its effect on DRF order."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from flotilla.framework.snapshot import CycleResult, SchedulingConfig, SchedulingSnapshot
from flotilla.model.loader import load_scenario
from flotilla.model.scenario import Settings
from flotilla.scheduler.algorithm import SchedulingAlgorithm
from flotilla.scheduler.decayed_usage import DecayedUsage, decayed_run_usage
from flotilla.scheduler.ordering import DrfOrder, sort_queues
from flotilla.scheduler.types import QueueInfo
from flotilla.sim.report import check_expectations
from flotilla.sim.simulator import Simulator
from tests.scheduler.test_ordering import SORT, take, two_queue_fleet

HOUR = 3600.0


def held(**amounts: list[float]) -> dict[str, np.ndarray]:
    return {queue: np.array(values) for queue, values in amounts.items()}


def test_holding_for_one_half_life_charges_half_the_mean_lifetime() -> None:
    usage = DecayedUsage(half_life=HOUR)
    usage.observe(0.0, held(a=[8.0, 2.0]))
    usage.advance(HOUR)
    tau = HOUR / math.log(2)
    # ∫₀ʰ 8 · 2^(-(h-s)/h) ds = 8 · τ · (1 - 1/2): 8 cpu for an hour is worth 4·τ cpu-seconds,
    # i.e. an average of 4 cpu over the decay window.
    assert usage.usage()["a"] == pytest.approx([8 * tau / 2, 2 * tau / 2])
    assert usage.averages()["a"] == pytest.approx([4.0, 1.0])


def test_usage_halves_every_half_life_once_the_queue_holds_nothing() -> None:
    usage = DecayedUsage(half_life=HOUR)
    usage.observe(0.0, held(a=[8.0]))
    before = usage.observe(HOUR, held(a=[0.0]))["a"][0]
    usage.advance(2 * HOUR)
    assert usage.averages()["a"][0] == pytest.approx(before / 2)
    usage.advance(4 * HOUR)
    assert usage.averages()["a"][0] == pytest.approx(before / 8)


def test_a_short_step_is_slurms_decay_then_add() -> None:
    # Slurm: U ← U · 2^(-Δ/h) + A · Δ. For Δ ≪ h the exact integral agrees with it.
    usage = DecayedUsage(half_life=24 * HOUR)
    usage.seed(0.0, {"a": [1000.0]})
    usage.hold(held(a=[4.0]))
    usage.advance(1.0)
    slurm = 1000.0 * 2 ** (-1.0 / (24 * HOUR)) + 4.0 * 1.0
    assert usage.usage()["a"][0] == pytest.approx(slurm, rel=1e-7)


def test_the_charge_does_not_depend_on_how_often_rounds_run() -> None:
    # A job holds 3 cpu from 100 to 5000 s; usage read at 9000 s. One round at each end, or a
    # round every 7 s as a busy service runs them, give the integral of the closed form.
    half_life = 2 * HOUR
    expected = decayed_run_usage([3.0], 100.0, 5000.0, 9000.0, half_life)
    for step in (None, 7.0):
        usage = DecayedUsage(half_life)
        times = [0.0, 100.0, 5000.0, 9000.0]
        if step is not None:
            times = sorted({*times, *np.arange(0.0, 9000.0, step).tolist()})
        for now in times:
            usage.observe(now, held(a=[3.0 if 100.0 <= now < 5000.0 else 0.0]))
        assert usage.usage()["a"] == pytest.approx(expected, rel=1e-9), step


def test_past_usage_puts_a_fresh_queue_first() -> None:
    f = two_queue_fleet()
    queues = [QueueInfo("a", 1, 0), QueueInfo("b", 1, 1)]
    by_queue = sort_queues(list(f.jobs.values()), queues, SORT)
    total = f.cluster().total_capacity()
    now = {q.name: np.zeros(len(f.space)) for q in queues}
    # Without memory the two alternate, a first (declared first); a used an average of
    # 2.5 cpu lately, so b's jobs at 1/12 … 3/12 come before a's first at 3.5/12.
    plain = DrfOrder(queues, by_queue, now, total)
    assert take(plain, 4) == ["a-0", "b-0", "a-1", "b-1"]
    past = {"a": [2.5] + [0.0] * (len(f.space) - 1)}
    remembering = DrfOrder(queues, by_queue, now, total, past)
    assert take(remembering, 5) == ["b-0", "b-1", "b-2", "a-0", "b-3"]


def test_the_setting_must_be_positive() -> None:
    with pytest.raises(ValidationError, match="usage_half_life"):
        Settings.model_validate({"usage_half_life": 0})
    assert Settings.model_validate({"usage_half_life": 86400}).usage_half_life == 86400
    with pytest.raises(ValidationError, match=r"usage_half_life: .*fair_share: drf"):
        Settings.model_validate({"usage_half_life": 86400, "fair_share": "fifo"})


SCENARIO = (
    Path(__file__).resolve().parents[1] / "scenarios" / "policies" / "fair-share-decayed-usage.yaml"
)


class _ForkedRounds:
    """Each round on an engine that keeps nothing between rounds, as ``ForkedRound`` runs it
    in a child process (whatever the round changes in its copy is lost): only
    ``observe_usage`` in the parent keeps the ledger."""

    def __init__(self, parent: SchedulingAlgorithm) -> None:
        self.parent = parent

    def schedule(self, snapshot: SchedulingSnapshot) -> CycleResult:
        child = SchedulingAlgorithm(self.parent.config)
        return child.schedule(self.parent.observe_usage(snapshot))


def test_rounds_in_a_child_process_order_as_in_process() -> None:
    sim = Simulator(load_scenario(SCENARIO))
    sim.algorithm = _ForkedRounds(sim.algorithm)  # type: ignore[assignment]
    assert check_expectations(sim.run()) == []


def test_a_rebuilt_engine_keeps_the_ledger_of_the_same_half_life() -> None:
    old = SchedulingAlgorithm(SchedulingConfig(usage_half_life=HOUR))
    assert old.usage is not None
    old.usage.seed(0.0, {"a": [5.0]})
    same = SchedulingAlgorithm(SchedulingConfig(usage_half_life=HOUR, profile="default"))
    same.adopt_usage(old)
    assert same.usage is old.usage
    other = SchedulingAlgorithm(SchedulingConfig(usage_half_life=2 * HOUR))
    other.adopt_usage(old)
    assert other.usage is not old.usage
