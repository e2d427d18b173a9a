"""Gangs: jobs combined into one unit, placed all at once, split back; non-strict growth."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from flotilla.framework.jobs import (
    GANG_TASK_SEPARATOR,
    SchedulingJob,
    build_job,
    combine_gang,
    remaining_replicas,
)
from flotilla.framework.resources import ResourceSpace
from flotilla.model import JobSpec, SpecError, scenario_from_data
from tests.policy_kit import events_of, job, jobs_by_name, node, report, scenario

SPACE = ResourceSpace(["cpu", "memory", "gpu"])


def engine_job(
    name: str,
    *,
    sequence: int,
    priority: int = 0,
    preemptible: bool = True,
    tasks: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> SchedulingJob:
    spec = JobSpec.model_validate(
        {
            "name": name,
            "queue": extra.pop("queue", "q"),
            "tasks": tasks or [{"name": "main", "resources": {"cpu": 1}}],
            **extra,
        }
    )
    return build_job(
        spec,
        name=name,
        space=SPACE,
        sequence=sequence,
        submit_time=float(sequence),
        priority=priority,
        preemptible=preemptible,
    )


# --- combine_gang ---------------------------------------------------------------------------


def test_a_combined_gang_names_its_tasks_member_slash_task_in_submission_order() -> None:
    server = engine_job("ps", sequence=3, tasks=[{"name": "server", "resources": {"cpu": 2}}])
    workers = engine_job(
        "workers",
        sequence=1,
        tasks=[
            {"name": "head", "resources": {"cpu": 1}},
            {"name": "worker", "replicas": 3, "resources": {"cpu": 4, "gpu": 1}},
        ],
    )
    gang = combine_gang("train", [server, workers])
    assert gang.name == "train"
    assert [(t.name, t.replicas) for t in gang.tasks] == [
        (f"workers{GANG_TASK_SEPARATOR}head", 1),
        (f"workers{GANG_TASK_SEPARATOR}worker", 3),
        (f"ps{GANG_TASK_SEPARATOR}server", 1),
    ]
    assert gang.replica_count == 5
    np.testing.assert_allclose(gang.total, SPACE.vector({"cpu": 15, "gpu": 3}))


def test_a_combined_gang_takes_the_highest_priority_and_is_preemptible_only_if_all_are() -> None:
    low = engine_job("low", sequence=0, priority=1, queue="first", duration=10)
    high = engine_job("high", sequence=1, priority=9, preemptible=False, duration=30)
    gang = combine_gang("g", [high, low])
    assert gang.priority == 9
    assert gang.preemptible is False
    assert gang.queue == "first"  # the earliest member's queue
    assert gang.sequence == 0
    assert gang.submit_time == 0.0
    assert gang.expected_runtime == 30
    both = combine_gang("g", [low, engine_job("other", sequence=2, priority=5)])
    assert both.preemptible is True


def test_remaining_replicas_keeps_only_what_is_not_placed_yet() -> None:
    elastic = engine_job(
        "elastic",
        sequence=0,
        tasks=[
            {"name": "head", "resources": {"cpu": 1}},
            {"name": "worker", "replicas": 4, "resources": {"cpu": 2}},
        ],
    )
    rest = remaining_replicas(elastic, {"head": 1, "worker": 1})
    assert rest is not None
    assert [(t.name, t.replicas) for t in rest.tasks] == [("worker", 3)]
    np.testing.assert_allclose(rest.total, SPACE.vector({"cpu": 6}))
    assert rest.name == "elastic"
    assert remaining_replicas(elastic, {"head": 1, "worker": 4}) is None


# --- gangs in the scheduling loop -------------------------------------------------------------


def test_a_gang_waits_with_a_count_of_submitted_replicas_not_jobs() -> None:
    gang = {"name": "g", "min_member": 5}
    result = report(
        scenario(
            job("a", replicas=2, gang=gang),
            job("b", gang=gang),
            job("c", replicas=2, submit_at=10, gang=gang),
            max_time=3,
        )
    )
    jobs = jobs_by_name(result)
    assert jobs["a"]["reason"] == "gang g: 3/5 members submitted"
    assert jobs["b"]["reason"] == "gang g: 3/5 members submitted"


def test_gang_members_start_together_and_get_their_own_task_names_back() -> None:
    gang = {"name": "g", "min_member": 3}
    result = report(
        scenario(
            job("ps", gang=gang, duration=10),
            job("workers", replicas=2, submit_at=4, gang=gang, duration=10),
            max_time=6,
        )
    )
    jobs = jobs_by_name(result)
    assert jobs["ps"]["state"] == jobs["workers"]["state"] == "running"
    assert jobs["ps"]["started_at"] == jobs["workers"]["started_at"] == 4
    assert [(p["task"], p["replica"]) for p in jobs["workers"]["placements"]] == [
        ("main", 0),
        ("main", 1),
    ]
    assert [(p["task"], p["replica"]) for p in jobs["ps"]["placements"]] == [("main", 0)]


def test_a_strict_gang_that_does_not_fit_whole_holds_nothing() -> None:
    result = report(
        scenario(
            job("gang", cpu=3, replicas=3, gang={"min_member": 3}),
            job("small", cpu=3, submit_at=1),
            nodes=[node(cpu=8)],
            max_time=3,
        )
    )
    jobs = jobs_by_name(result)
    assert jobs["gang"]["state"] == "queued"
    assert jobs["gang"]["placements"] == []
    assert "gang gang 1/3 placeable" in jobs["gang"]["reason"]  # small took 3 of the 8 cores
    assert jobs["small"]["state"] == "running"
    assert result["clusters"][0]["allocated"]["cpu"] == 3


def test_a_non_strict_gang_grows_and_numbers_new_replicas_after_the_placed_ones() -> None:
    result = report(
        scenario(
            job("blocker", cpu=4, duration=5),
            job("elastic", cpu=2, replicas=4, gang={"min_member": 2, "mode": "non-strict"}),
            nodes=[node(cpu=8)],
            max_time=8,
        )
    )
    elastic = jobs_by_name(result)["elastic"]
    assert elastic["state"] == "running"
    assert sorted(p["replica"] for p in elastic["placements"]) == [0, 1, 2, 3]
    assert events_of(result, "elastic") == ["submitted", "scheduled", "started", "expanded"]
    expanded = next(e for e in result["events"] if e["event"] == "expanded")
    assert expanded["time"] == 5
    assert expanded["nodes"] == ["n", "n"]


def test_a_non_strict_gang_below_min_member_does_not_start() -> None:
    result = report(
        scenario(
            job("blocker", cpu=6),
            job("elastic", cpu=2, replicas=4, gang={"min_member": 2, "mode": "non-strict"}),
            nodes=[node(cpu=8)],
            max_time=2,
        )
    )
    elastic = jobs_by_name(result)["elastic"]
    assert elastic["state"] == "queued"
    assert "gang elastic 1/2 placeable" in elastic["reason"]


QUOTAS = [
    {
        "name": "root",
        "max": {"cpu": 10},
        "children": [
            {"name": "a", "min": {"cpu": 2}, "max": {"cpu": 10}},
            {"name": "b", "min": {"cpu": 2}, "max": {"cpu": 10}},
        ],
    }
]


def test_a_named_gang_refused_only_by_runtime_quota_starts_in_the_leftover_pass() -> None:
    # b's demand (one job too big for its max) halves a's runtime quota to 5 cores, so the
    # 6-core gang is deferred; nobody else can use the cores, so the leftover pass places it.
    gang = {"name": "g", "min_member": 2}
    result = report(
        scenario(
            job("big", queue="qb", cpu=12),
            job("ps", queue="qa", cpu=3, gang=gang),
            job("w", queue="qa", cpu=3, gang=gang),
            nodes=[node(cpu=10)],
            quotas=QUOTAS,
            queues=[{"name": "qa", "quota": "a"}, {"name": "qb", "quota": "b"}],
            max_time=3,
        )
    )
    jobs = jobs_by_name(result)
    assert jobs["ps"]["state"] == jobs["w"]["state"] == "running"
    assert jobs["ps"]["started_at"] == jobs["w"]["started_at"] == 0
    assert jobs["big"]["state"] == "queued"


def test_a_gang_across_queues_is_refused_when_loaded() -> None:
    """Members in different queues would each need their own quota admission; a gang is one
    unit of admission, so its jobs must share a queue."""
    gang = {"name": "g", "min_member": 2}
    with pytest.raises(SpecError, match=r"gang 'g' spans queues qa, qb"):
        scenario_from_data(
            scenario(
                job("x", queue="qa", cpu=1, gang=gang),
                job("y", queue="qb", cpu=4, gang=gang),
                queues=[{"name": "qa"}, {"name": "qb"}],
            )
        )


def test_a_strict_named_gang_without_min_member_waits_for_every_member() -> None:
    result = report(
        scenario(
            job("x", gang={"name": "g"}),
            job("y", submit_at=3, gang={"name": "g"}),
            max_time=5,
        )
    )
    jobs = jobs_by_name(result)
    assert jobs["x"]["started_at"] == jobs["y"]["started_at"] == 3
