"""EASY backfill: a blocked job reserves the earliest time it will fit; shorter jobs that end
before then use the idle capacity, longer ones wait behind the reservation."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.policy_kit import job, jobs_by_name, node, report, scenario


def reservation(reason: str | None) -> float | None:
    match = re.search(r"reserved at t=([0-9.]+)", reason or "")
    return float(match.group(1)) if match else None


def fillers(*shapes: tuple[float, int | None]) -> list[dict[str, object]]:
    """Running jobs from t=0: (cores, duration or None for no known end)."""
    return [
        job(f"fill-{i}", cpu=cpu, **({"duration": d} if d is not None else {}))
        for i, (cpu, d) in enumerate(shapes)
    ]


def test_the_reservation_is_the_first_end_after_which_the_job_fits() -> None:
    result = report(
        scenario(
            *fillers((2, 10), (2, 20), (2, 30), (2, None)),
            job("big", cpu=7, submit_at=1, duration=5),
            nodes=[node(cpu=10)],
            queueing="backfill",
            max_time=1,
        )
    )
    reason = jobs_by_name(result)["big"]["reason"]
    assert reason.startswith("reserved at t=30 on c (backfill): ")


def test_a_job_that_ends_before_the_reservation_backfills_and_longer_ones_wait() -> None:
    result = report(
        scenario(
            *fillers((2, 10), (2, 20), (2, 30), (2, None)),
            job("big", cpu=7, submit_at=1, duration=5),
            job("short", cpu=2, submit_at=1, duration=29),
            job("long", cpu=2, submit_at=1, duration=30),
            job("endless", cpu=2, submit_at=1),
            nodes=[node(cpu=10)],
            queueing="backfill",
            max_time=1,
        )
    )
    jobs = jobs_by_name(result)
    assert jobs["short"]["state"] == "running"  # ends at 30, when big starts
    assert jobs["long"]["state"] == "queued"
    assert jobs["endless"]["state"] == "queued"


def test_a_job_with_no_known_end_never_backfills_into_a_reservation() -> None:
    """A candidate without a duration may run forever: it counts as long, not short. Alone
    with the reservation (no short job takes the idle cores first), it would fit on the cores
    idle now, and at t=30 leave the reserved job 6 of the 7 cores it needs."""
    result = report(
        scenario(
            *fillers((2, 10), (2, 20), (2, 30), (2, None)),
            job("big", cpu=7, submit_at=1, duration=5),
            job("endless", cpu=2, submit_at=2),
            nodes=[node(cpu=10)],
            queueing="backfill",
            max_time=40,
        )
    )
    jobs = jobs_by_name(result)
    assert jobs["big"]["started_at"] == 30
    assert jobs["endless"]["started_at"] is None or jobs["endless"]["started_at"] >= 30


def test_the_reserved_job_starts_at_its_reservation() -> None:
    result = report(
        scenario(
            *fillers((2, 10), (2, 20), (2, 30), (2, None)),
            job("big", cpu=7, submit_at=1, duration=5),
            job("stream", cpu=1, count=6, submit_at=2, duration=40),
            nodes=[node(cpu=10)],
            queueing="backfill",
            max_time=40,
        )
    )
    assert jobs_by_name(result)["big"]["started_at"] == 30


def test_without_backfill_smaller_jobs_overtake_the_blocked_one() -> None:
    result = report(
        scenario(
            *fillers((2, 10), (2, 20), (2, 30), (2, None)),
            job("big", cpu=7, submit_at=1, duration=5),
            job("stream", cpu=1, count=6, submit_at=2, duration=40),
            nodes=[node(cpu=10)],
            queueing="best-effort-fifo",
            max_time=40,
        )
    )
    jobs = jobs_by_name(result)
    assert jobs["big"]["started_at"] is None
    assert reservation(jobs["big"]["reason"]) is None


def test_no_reservation_without_a_running_job_of_known_end() -> None:
    result = report(
        scenario(
            *fillers((8, None)),
            job("big", cpu=4, submit_at=1),
            nodes=[node(cpu=10)],
            queueing="backfill",
            max_time=1,
        )
    )
    reason = jobs_by_name(result)["big"]["reason"]
    assert reason.endswith("; no reservation possible: not enough running jobs with a known end")


def test_only_the_first_blocked_job_of_a_queue_reserves() -> None:
    result = report(
        scenario(
            *fillers((8, 10)),
            job("first", cpu=6, submit_at=1, duration=5),
            job("second", cpu=6, submit_at=1, duration=5),
            nodes=[node(cpu=10)],
            queueing="backfill",
            max_time=1,
        )
    )
    jobs = jobs_by_name(result)
    assert reservation(jobs["first"]["reason"]) == 10
    assert reservation(jobs["second"]["reason"]) is None


@settings(max_examples=200, deadline=None)
@given(
    shapes=st.lists(
        st.tuples(st.integers(1, 4), st.none() | st.integers(2, 30)), min_size=1, max_size=6
    ),
    idle=st.integers(0, 3),
    need=st.integers(1, 12),
)
def test_the_reservation_time_is_the_earliest_end_that_frees_enough(
    shapes: list[tuple[int, int | None]], idle: int, need: int
) -> None:
    capacity = sum(cpu for cpu, _ in shapes) + idle
    result = report(
        scenario(
            *fillers(*shapes),
            job("big", cpu=need, submit_at=1, duration=5),
            nodes=[node(cpu=capacity)],
            queueing="backfill",
            max_time=1,
        )
    )
    big = jobs_by_name(result)["big"]
    if need > capacity:
        assert big["state"] == "queued"
        return
    if need <= idle:
        assert big["state"] == "running"
        return
    expected = None
    for end in sorted({d for _, d in shapes if d is not None}):
        released = sum(cpu for cpu, d in shapes if d is not None and d <= end)
        if idle + released >= need:
            expected = end
            break
    assert big["state"] == "queued"
    assert reservation(big["reason"]) == expected
