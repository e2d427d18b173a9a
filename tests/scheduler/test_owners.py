"""Two-level fairness (issue 28): a queue's jobs shared among their owners by DRF, with the
queue's order inside an owner, and per-owner limits; both in the one engine the simulator and
the service run."""

from __future__ import annotations

from typing import Any

from tests.builders import Data, cluster, job, nodes, scenario, simulate_report


def with_user(data: Data, user: str) -> Data:
    return {**data, "user": user}


def research(**owners: Any) -> Data:
    return {"name": "q", "owners": owners}


def started(data: Data, at: float = 0) -> list[str]:
    return sorted(simulate_report(data, until=at).running())


def test_a_sweep_does_not_starve_a_colleague_in_the_same_queue() -> None:
    """alice's 8 jobs come first in the queue's order; with owners by DRF, bob's 2 jobs,
    submitted after them, still get half of the 4 cpu."""
    data = scenario(
        clusters=[cluster("c", nodes(1, cpu=4, memory="16Gi"))],
        queues=[research()],
        jobs=[
            with_user(job("alice", count=8, duration=100), "alice"),
            with_user(job("bob", count=2, duration=100), "bob"),
        ],
    )
    assert started(data) == ["alice-0", "alice-1", "bob-0", "bob-1"]
    without = {**data, "queues": [{"name": "q"}]}
    assert started(without) == ["alice-0", "alice-1", "alice-2", "alice-3"]


def test_inside_an_owner_the_queue_order_holds() -> None:
    """bob's high-priority job goes before his older one; owners still alternate."""
    data = scenario(
        clusters=[cluster("c", nodes(1, cpu=2, memory="16Gi"))],
        queues=[research()],
        jobs=[
            with_user(job("alice", count=3, duration=100), "alice"),
            with_user(job("bob-old", duration=100), "bob"),
            with_user(job("bob-urgent", duration=100, priority=10), "bob"),
        ],
    )
    assert started(data) == ["alice-0", "bob-urgent"]


def test_owner_weights_scale_the_share() -> None:
    data = scenario(
        clusters=[cluster("c", nodes(1, cpu=6, memory="16Gi"))],
        queues=[research(weights={"bob": 2})],
        jobs=[
            with_user(job("alice", count=6, duration=100), "alice"),
            with_user(job("bob", count=6, duration=100), "bob"),
        ],
    )
    assert sum(name.startswith("bob") for name in started(data)) == 4


def test_a_limit_holds_only_its_owners_jobs() -> None:
    """alice at her limit of 2 running jobs; bob's jobs, alike and behind hers in the queue's
    order (owners by the queue's order: limits only), still run, and the reason names the
    owner level."""
    data = scenario(
        clusters=[cluster("c", nodes(1, cpu=8, memory="16Gi"))],
        queues=[research(order="queue", max_running_jobs=2)],
        jobs=[
            with_user(job("alice", count=5, duration=100), "alice"),
            with_user(job("bob", count=2, duration=100), "bob"),
        ],
    )
    report = simulate_report(data, until=0)
    assert sorted(report.running()) == ["alice-0", "alice-1", "bob-0", "bob-1"]
    assert report.job("alice-2")["reason"] == (
        "owner alice is at the limit of 2 running jobs per owner in queue q"
    )


def test_a_resource_limit_per_owner() -> None:
    data = scenario(
        clusters=[cluster("c", nodes(1, cpu=8, memory="16Gi"))],
        queues=[research(max_resources={"cpu": 3})],
        jobs=[with_user(job("alice", count=3, cpu=2, duration=100), "alice")],
    )
    report = simulate_report(data, until=0)
    assert report.running() == {"alice-0"}
    assert report.job("alice-1")["reason"] == (
        "owner alice holds 2 cpu in queue q; with this job's 2 that is over the limit of 3 "
        "per owner"
    )


def test_the_reason_names_the_owner_level_when_others_come_first() -> None:
    data = scenario(
        clusters=[cluster("c", nodes(1, cpu=3, memory="16Gi"))],
        queues=[research()],
        jobs=[
            with_user(job("alice", count=4, duration=100), "alice"),
            with_user(job("bob", count=1, duration=100), "bob"),
        ],
    )
    report = simulate_report(data, until=0)
    assert report.job("alice-2")["reason"].endswith(
        "owner alice's dominant share 0.67 > bob's 0.33 in queue q (owners share it by DRF)"
    )


def test_strict_fifo_stops_the_queue_whoever_owns_its_head() -> None:
    """Owners by DRF pick the head (bob, weight 8, has the lowest share counting his job);
    the queue's strict FIFO still stops there: bob's 3-cpu job does not fit the 2 cpu left,
    and alice's 1-cpu jobs behind it wait."""
    data = scenario(
        clusters=[cluster("c", nodes(1, cpu=4, memory="16Gi"))],
        queues=[research(weights={"bob": 8}), {"name": "other"}],
        jobs=[
            job("filler", queue="other", cpu=2, duration=100),
            with_user(job("alice", count=2, duration=100, submit_at=1), "alice"),
            with_user(job("bob-big", cpu=3, duration=100, submit_at=1), "bob"),
        ],
    )
    data["settings"] = {"queueing": "strict-fifo"}
    report = simulate_report(data, until=1)
    assert report.running() == {"filler"}
    assert report.job("alice-1")["reason"] == (
        "waiting behind bob-big, which heads its queue (strict-fifo)"
    )


def test_an_owners_own_job_limit_replaces_the_queues_and_the_reason_names_it() -> None:
    """Every owner runs at most 2 jobs, alice (owners.limits) 4: she gets 4 of the 8 cpu,
    bob 2, and alice's fifth job names her own limit."""
    data = scenario(
        clusters=[cluster("c", nodes(1, cpu=8, memory="16Gi"))],
        queues=[
            research(order="queue", max_running_jobs=2, limits={"alice": {"max_running_jobs": 4}})
        ],
        jobs=[
            with_user(job("alice", count=6, duration=100), "alice"),
            with_user(job("bob", count=4, duration=100), "bob"),
        ],
    )
    report = simulate_report(data, until=0)
    assert sorted(report.running()) == [
        "alice-0",
        "alice-1",
        "alice-2",
        "alice-3",
        "bob-0",
        "bob-1",
    ]
    assert report.job("alice-4")["reason"] == (
        "owner alice is at its own limit of 4 running jobs in queue q (owners.limits.alice)"
    )
    assert report.job("bob-2")["reason"] == (
        "owner bob is at the limit of 2 running jobs per owner in queue q"
    )


def test_an_owners_own_resource_limit_replaces_only_the_resources_it_names() -> None:
    """The queue limits every owner to 2 cpu and 2 jobs; alice's own limit is 4 cpu (her job
    limit stays the queue's 2). alice runs two 2-cpu jobs, bob one; a limit set only for one
    owner in a queue without a queue-wide one limits only that owner (carol in queue r)."""
    data = scenario(
        clusters=[cluster("c", nodes(1, cpu=16, memory="16Gi"))],
        queues=[
            research(
                max_running_jobs=2,
                max_resources={"cpu": 2},
                limits={"alice": {"max_resources": {"cpu": 4}}},
            ),
            {"name": "r", "owners": {"limits": {"carol": {"max_running_jobs": 1}}}},
        ],
        jobs=[
            with_user(job("alice", count=3, cpu=2, duration=100), "alice"),
            with_user(job("bob", count=2, cpu=2, duration=100), "bob"),
            with_user(job("carol", count=2, queue="r", duration=100), "carol"),
            with_user(job("dave", count=2, queue="r", duration=100), "dave"),
        ],
    )
    report = simulate_report(data, until=0)
    assert sorted(report.running()) == [
        "alice-0",
        "alice-1",
        "bob-0",
        "carol-0",
        "dave-0",
        "dave-1",
    ]
    assert report.job("alice-2")["reason"] == (
        "owner alice is at the limit of 2 running jobs per owner in queue q"
    )
    assert report.job("bob-1")["reason"] == (
        "owner bob holds 2 cpu in queue q; with this job's 2 that is over the limit of 2 per owner"
    )
    assert report.job("carol-1")["reason"] == (
        "owner carol is at its own limit of 1 running job in queue r (owners.limits.carol)"
    )


def test_an_owners_own_resource_limit_is_named_in_the_reason() -> None:
    data = scenario(
        clusters=[cluster("c", nodes(1, cpu=16, memory="16Gi"))],
        queues=[research(limits={"alice": {"max_resources": {"cpu": 3}}})],
        jobs=[with_user(job("alice", count=2, cpu=2, duration=100), "alice")],
    )
    report = simulate_report(data, until=0)
    assert report.job("alice-1")["reason"] == (
        "owner alice holds 2 cpu in queue q; with this job's 2 that is over its own limit of 3 "
        "(owners.limits.alice)"
    )
