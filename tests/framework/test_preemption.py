"""Victim selection: Kueue's minimal search over whole gangs, and the preemption policies.

The unit tests drive ``minimal_victims``/``candidate_units`` with a hand-built context whose
"fits" rule is plain arithmetic (free cores plus the victims' cores cover the preemptor), so
the expected victims can be worked out by hand. The scenario tests check the policies
end to end through the simulator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from flotilla.framework.interfaces import Assignment, Placement
from flotilla.framework.jobs import SchedulingJob, build_job
from flotilla.framework.preemption import Unit, candidate_units, minimal_victims
from flotilla.framework.resources import ResourceSpace, Vector
from flotilla.framework.snapshot import RunningJob
from flotilla.model import JobSpec
from tests.policy_kit import events_of, job, jobs_by_name, node, report, scenario

SPACE = ResourceSpace(["cpu"])


def engine_job(
    name: str, cpu: float, *, preemptible: bool = True, gang: str | None = None
) -> SchedulingJob:
    spec = JobSpec.model_validate(
        {
            "name": name,
            "queue": "q",
            "tasks": [{"name": "main", "resources": {"cpu": cpu}}],
            **({"gang": {"name": gang}} if gang else {}),
        }
    )
    return build_job(
        spec,
        name=name,
        space=SPACE,
        sequence=0,
        submit_time=0,
        priority=0,
        preemptible=preemptible,
    )


def running(job: SchedulingJob) -> RunningJob:
    placement = Placement(task="main", replica=0, node="n", row=0, request=job.total)
    return RunningJob(job, Assignment("c", (placement,)))


@dataclass
class FakeContext:
    """A ``PreemptionContext`` over one node: the preemptor fits when free cores suffice."""

    jobs: list[SchedulingJob]
    free: float = 0.0
    calls: list[list[str]] = field(default_factory=list)
    now: float = 0.0

    @property
    def running_jobs(self) -> list[RunningJob]:
        return [running(job) for job in self.jobs]

    def _cpu(self, name: str) -> float:
        return next(float(job.total[0]) for job in self.jobs if job.name == name)

    def fits_without(self, job: SchedulingJob, victims: Sequence[str]) -> bool:
        self.calls.append(list(victims))
        return self.free + sum(self._cpu(name) for name in victims) >= float(job.total[0])

    def gang_of(self, job_name: str) -> list[str]:
        gang = next(job.gang for job in self.jobs if job.name == job_name)
        if gang is None or gang.name is None:
            return [job_name]
        return sorted(j.name for j in self.jobs if j.gang is not None and j.gang.name == gang.name)

    def queue_share(self, queue: str, change: Vector | None = None) -> float:
        raise AssertionError("not used by the victim search")

    def queue_policy(self, queue: str) -> Any:
        raise AssertionError("not used by the victim search")

    def quota_node(self, queue: str) -> int | None:
        raise AssertionError("not used by the victim search")

    def same_cohort(self, queue: str, other: str) -> bool:
        raise AssertionError("not used by the victim search")

    def borrowed(self, queue: str) -> Vector | None:
        raise AssertionError("not used by the victim search")

    def within_guarantee(self, job: SchedulingJob) -> bool:
        raise AssertionError("not used by the victim search")


def units_of(*names: str) -> list[Unit]:
    return [(name,) for name in names]


def search(
    context: FakeContext,
    cpu: float,
    units: list[Unit],
    admissible: Callable[[list[Unit], Unit], bool] | None = None,
) -> list[str] | None:
    return minimal_victims(context, engine_job("preemptor", cpu), units, admissible)


# --- minimal_victims --------------------------------------------------------------------------


def test_the_search_walks_back_and_drops_victims_the_preemptor_does_not_need() -> None:
    context = FakeContext([engine_job("low-1", 1), engine_job("low-2", 1), engine_job("mid", 4)])
    assert search(context, 4, units_of("low-1", "low-2", "mid")) == ["mid"]
    # The prefix is grown one unit at a time, then each earlier unit is tried without.
    assert context.calls == [
        ["low-1"],
        ["low-1", "low-2"],
        ["low-1", "low-2", "mid"],
        ["low-1", "mid"],
        ["mid"],
    ]


def test_the_search_stops_at_the_first_prefix_that_fits() -> None:
    context = FakeContext([engine_job("a", 2), engine_job("b", 2), engine_job("c", 8)], free=1)
    assert search(context, 5, units_of("a", "b", "c")) == ["a", "b"]


def test_victims_keep_candidate_order_after_pruning() -> None:
    context = FakeContext([engine_job(n, cpu) for n, cpu in [("a", 3), ("b", 1), ("c", 3)]])
    assert search(context, 6, units_of("a", "b", "c")) == ["a", "c"]


def test_no_victims_when_even_every_candidate_is_not_enough() -> None:
    context = FakeContext([engine_job("a", 1), engine_job("b", 1)])
    assert search(context, 4, units_of("a", "b")) is None


def test_a_gang_unit_is_taken_and_kept_whole() -> None:
    context = FakeContext(
        [engine_job("solo", 1), engine_job("g-0", 1, gang="g"), engine_job("g-1", 1, gang="g")]
    )
    assert search(context, 2, [("solo",), ("g-0", "g-1")]) == ["g-0", "g-1"]


def test_units_the_predicate_refuses_are_skipped_and_it_sees_the_victims_so_far() -> None:
    context = FakeContext([engine_job(n, 2) for n in ("a", "b", "c")])
    seen: list[tuple[list[Unit], Unit]] = []

    def admissible(chosen: list[Unit], unit: Unit) -> bool:
        seen.append((list(chosen), unit))
        return unit != ("b",)

    assert search(context, 4, units_of("a", "b", "c"), admissible) == ["a", "c"]
    assert seen == [([], ("a",)), ([("a",)], ("b",)), ([("a",)], ("c",))]


# --- candidate_units ------------------------------------------------------------------------


def test_candidates_group_gang_members_into_one_unit_in_first_seen_order() -> None:
    jobs = [
        engine_job("x", 1, gang="g"),
        engine_job("z", 1),
        engine_job("y", 1, gang="g"),
    ]
    context = FakeContext(jobs)
    units = candidate_units(context, jobs)
    assert [(first.name, unit) for first, unit in units] == [("x", ("x", "y")), ("z", ("z",))]


def test_a_non_preemptible_job_is_never_a_candidate_nor_is_its_gang() -> None:
    jobs = [
        engine_job("pinned", 1, preemptible=False),
        engine_job("g-0", 1, gang="g"),
        engine_job("g-1", 1, gang="g", preemptible=False),
        engine_job("free", 1),
    ]
    context = FakeContext(jobs)
    assert [unit for _, unit in candidate_units(context, jobs)] == [("free",)]


def test_a_gang_is_a_candidate_only_when_every_member_is_eligible() -> None:
    jobs = [engine_job("g-0", 1, gang="g"), engine_job("g-1", 1, gang="g")]
    context = FakeContext(jobs)
    assert candidate_units(context, [jobs[1]]) == []
    assert [unit for _, unit in candidate_units(context, jobs)] == [("g-0", "g-1")]


def test_within_queue_preemption_spares_a_gang_with_a_member_of_higher_priority() -> None:
    gang = {"name": "g", "min_member": 2}
    result = report(
        scenario(
            job("lead", cpu=2, priority=10, gang=gang),
            job("helper", cpu=2, priority=0, gang=gang),
            job("urgent", cpu=2, priority=5, submit_at=1),
            nodes=[node(cpu=4)],
            queues=[{"name": "q", "preemption": {"within_queue": "lower_priority"}}],
            max_time=2,
        )
    )
    jobs = jobs_by_name(result)
    assert jobs["lead"]["state"] == jobs["helper"]["state"] == "running"
    assert jobs["urgent"]["state"] == "queued"


def test_a_gang_with_a_member_that_is_not_running_is_not_a_candidate() -> None:
    member = engine_job("g-0", 1, gang="g")
    context = FakeContext([member])
    context.gang_of = lambda name: ["g-0", "g-1"]  # type: ignore[method-assign]
    assert candidate_units(context, [member]) == []


# --- the policies, end to end -------------------------------------------------------------------


def preemption_reasons(result: dict[str, Any], name: str) -> list[str]:
    return [
        event["reason"]
        for event in result["events"]
        if event["job"] == name and event["event"] == "preempted"
    ]


def test_priority_preemption_never_takes_a_job_of_equal_priority() -> None:
    result = report(
        scenario(
            job("first", cpu=4, priority=5),
            job("second", cpu=4, priority=5, submit_at=1),
            nodes=[node(cpu=4)],
            priority_preemption=True,
            max_time=3,
        )
    )
    jobs = jobs_by_name(result)
    assert jobs["first"]["state"] == "running"
    assert jobs["second"]["state"] == "queued"
    assert result["summary"]["preemptions"] == 0


def test_priority_preemption_takes_the_youngest_of_equal_priority_first() -> None:
    result = report(
        scenario(
            job("old", cpu=2, priority=0),
            job("young", cpu=2, priority=0, submit_at=1),
            job("urgent", cpu=2, priority=9, submit_at=2),
            nodes=[node(cpu=4)],
            priority_preemption=True,
            max_time=3,
        )
    )
    jobs = jobs_by_name(result)
    assert jobs["young"]["state"] == "preempted"
    assert preemption_reasons(result, "young") == ["preempted by urgent (priority 9)"]
    assert jobs["old"]["state"] == "running"
    assert jobs["urgent"]["state"] == "running"


def test_a_queue_without_a_within_queue_policy_does_not_preempt_its_own_jobs() -> None:
    result = report(
        scenario(
            job("low", cpu=4, priority=0),
            job("high", cpu=4, priority=9, submit_at=1),
            nodes=[node(cpu=4)],
            max_time=3,
        )
    )
    assert jobs_by_name(result)["high"]["state"] == "queued"
    assert events_of(result, "low") == ["submitted", "scheduled", "started"]


COHORT = [
    {
        "name": "cohort",
        "children": [
            {"name": "a", "min": {"cpu": 4}},
            {"name": "b", "min": {"cpu": 4}},
        ],
    }
]


def reclaim_scenario(policy: str, borrower_priority: int) -> dict[str, Any]:
    # b borrows a's idle guarantee at t=0; a's job arrives at t=1, within a's guarantee.
    return scenario(
        job("borrower", queue="qb", cpu=4, count=2, priority=borrower_priority),
        job("owner", queue="qa", cpu=4, priority=5, submit_at=1),
        nodes=[node(cpu=8)],
        quotas=COHORT,
        queues=[
            {"name": "qa", "quota": "a", "preemption": {"reclaim_within_cohort": policy}},
            {"name": "qb", "quota": "b"},
        ],
        max_time=3,
    )


def test_reclaim_any_takes_back_lent_quota_even_from_a_higher_priority_borrower() -> None:
    result = report(reclaim_scenario("any", borrower_priority=9))
    jobs = jobs_by_name(result)
    assert jobs["owner"]["state"] == "running"
    assert jobs["borrower-1"]["state"] == "preempted"
    assert preemption_reasons(result, "borrower-1") == [
        "preempted by owner (qa, reclaim within cohort)"
    ]
    assert jobs["borrower-0"]["state"] == "running"


def test_reclaim_lower_priority_spares_a_borrower_of_higher_priority() -> None:
    jobs = jobs_by_name(report(reclaim_scenario("lower_priority", borrower_priority=9)))
    assert jobs["owner"]["state"] == "queued"
    assert "guaranteed cpu is lent to b" in jobs["owner"]["reason"]
    assert jobs["borrower-1"]["state"] == "running"


def test_reclaim_never_leaves_the_owner_waiting_for_its_lent_quota() -> None:
    jobs = jobs_by_name(report(reclaim_scenario("never", borrower_priority=0)))
    assert jobs["owner"]["state"] == "queued"
    assert jobs["borrower-1"]["state"] == "running"


def borrow_scenario(threshold: int | None) -> dict[str, Any]:
    # Both queues borrow; a's job at t=1 would have to borrow too (a's guarantee is used).
    return scenario(
        job("mine", queue="qa", cpu=4),
        job("theirs", queue="qb", cpu=4, count=2, priority=3),
        job("more", queue="qa", cpu=4, priority=8, submit_at=1),
        nodes=[node(cpu=12)],
        quotas=[
            {
                "name": "cohort",
                "max": {"cpu": 12},
                "children": [
                    {"name": "a", "min": {"cpu": 4}, "max": {"cpu": 12}},
                    {"name": "b", "min": {"cpu": 4}, "max": {"cpu": 12}},
                ],
            }
        ],
        queues=[
            {
                "name": "qa",
                "quota": "a",
                "preemption": {
                    "borrow_within_cohort": {
                        "policy": "lower_priority",
                        "max_priority_threshold": threshold,
                    }
                },
            },
            {"name": "qb", "quota": "b"},
        ],
        max_time=3,
    )


def test_borrowing_preempts_a_lower_priority_borrower_within_the_threshold() -> None:
    result = report(borrow_scenario(threshold=3))
    jobs = jobs_by_name(result)
    assert jobs["more"]["state"] == "running"
    assert jobs["theirs-1"]["state"] == "preempted"
    assert preemption_reasons(result, "theirs-1") == [
        "preempted by more (qa, priority within cohort)"
    ]


def test_borrowing_never_preempts_above_the_threshold() -> None:
    jobs = jobs_by_name(report(borrow_scenario(threshold=2)))
    assert jobs["more"]["state"] == "queued"
    assert jobs["theirs-1"]["state"] == "running"


def test_a_victim_placed_earlier_in_the_same_cycle_does_not_start() -> None:
    # Global FIFO tries low first; high (priority 9) then preempts it within the same cycle.
    result = report(
        scenario(
            job("low", cpu=3, priority=0),
            job("high", cpu=2, priority=9),
            nodes=[node(cpu=4)],
            fair_share="fifo",
            priority_preemption=True,
            max_time=0,
        )
    )
    jobs = jobs_by_name(result)
    assert jobs["high"]["state"] == "running"
    assert jobs["low"]["state"] == "queued"
    assert jobs["low"]["reason"] == (
        "placed, then displaced before it started: preempted by high (priority 9)"
    )
    assert events_of(result, "low") == ["submitted"]
    assert result["clusters"][0]["allocated"]["cpu"] == 2
