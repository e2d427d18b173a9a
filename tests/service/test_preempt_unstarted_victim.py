"""A run that has not started yet — leased (not handed to its cluster yet) or pending (handed
over, still starting) — is stopped like a running one. A victim of preemption holds its node
until then: it is told to stop, and becomes preempted, before its preemptor is dispatched onto
that node. A job requeued (``flotilla requeue``) runs again as a new attempt. Either way a
leased run is never started afterwards. Real loop and store (SQLite), a sim
cluster of one 4-cpu node whose clock never moves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flotilla.backends.interface import (
    BackendUnavailable,
    CancelRequest,
    CancelResult,
    DispatchRequest,
    DispatchResult,
)
from flotilla.backends.sim import FakeClock, SimBackend
from flotilla.model import JobSpec, QueueSpec
from flotilla.service.loop import SchedulingLoop
from flotilla.store import JobState, RunState, SqlStore
from tests.service_builders import loop_over
from tests.timing import wait_until


class CallLog(SimBackend):
    """A sim cluster that logs, in order, each run it started and each run it was told to
    stop; the jobs in ``unreachable`` cannot be dispatched (their runs stay leased)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.calls: list[tuple[str, str]] = []
        self.unreachable: set[str] = set()

    def dispatch(self, request: DispatchRequest) -> DispatchResult:
        if request.job in self.unreachable:
            raise BackendUnavailable("the cluster does not answer")
        result = super().dispatch(request)
        self.calls.append(("start", request.run_id))
        return result

    def cancel(self, request: CancelRequest) -> CancelResult:
        self.calls.append(("stop", request.run_id))
        return super().cancel(request)


class Cluster:
    def __init__(self, root: Path) -> None:
        self.store = SqlStore.open(f"sqlite:///{root / 'flotilla.db'}")
        self.backend = CallLog(
            cluster="sim",
            nodes=[{"name": "n", "resources": {"cpu": 4, "memory": "16Gi"}}],
            clock=FakeClock(),
            startup_delay=60,  # a run handed over stays pending: the clock never moves
        )
        self.loop: SchedulingLoop = loop_over(
            self.store, {"sim": self.backend}, cycle_interval=0.05, replica="victims"
        )
        self.store.put_queue(
            QueueSpec.model_validate(
                {"name": "default", "preemption": {"within_queue": "lower_priority"}}
            )
        )

    def submit(self, name: str, priority: int) -> str:
        spec = JobSpec.model_validate(
            {
                "name": name,
                "queue": "default",
                "priority": priority,
                "tasks": [{"name": "main", "resources": {"cpu": 4}}],
                "payload": {"sim": {"duration": 600}},
            }
        )
        return self.store.submit_jobs([spec])[0]

    def cycle_until(self, job: str, *states: JobState) -> None:
        wait_until(
            lambda: self.store.get_job(job).state in states,
            f"job {job} to be {' or '.join(states)}",
            30,
            0.0,
            self.loop.cycle,
        )

    def run_of(self, job: str) -> str:
        run = self.store.get_job(job).run
        assert run is not None
        return run.id

    def close(self) -> None:
        self.loop.close()
        self.backend.close()
        self.store.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    built = Cluster(tmp_path)
    yield built
    built.close()


@pytest.mark.parametrize("victim_state", [JobState.LEASED, JobState.PENDING])
def test_a_victim_not_started_yet_is_stopped_before_its_preemptor_is_dispatched(
    cluster: Cluster, victim_state: JobState
) -> None:
    low = cluster.submit("low", priority=0)
    if victim_state is JobState.LEASED:
        cluster.backend.unreachable.add(low)
    cluster.cycle_until(low, victim_state)
    for _ in range(3):  # the victim stays where it is: leased (dispatch refused) or pending
        cluster.loop.cycle()
    assert cluster.store.get_job(low).state is victim_state
    victim_run = cluster.run_of(low)

    high = cluster.submit("high", priority=10)
    cluster.cycle_until(high, JobState.PENDING, JobState.RUNNING)
    calls = cluster.backend.calls
    assert ("stop", victim_run) in calls, f"the victim was never told to stop: {calls}"
    assert calls.index(("stop", victim_run)) < calls.index(("start", cluster.run_of(high)))
    assert cluster.store.get_job(low).state in (JobState.PREEMPTED, JobState.QUEUED)
    assert cluster.store.runs(low)[0].state is RunState.PREEMPTED

    cluster.backend.unreachable.clear()
    for _ in range(3):  # the cluster answers again: the victim's run stays unstarted
        cluster.loop.cycle()
    if victim_state is JobState.LEASED:
        assert ("start", victim_run) not in cluster.backend.calls


@pytest.mark.parametrize("state", [JobState.LEASED, JobState.PENDING])
def test_a_job_requeued_before_its_run_started_runs_again_as_a_new_attempt(
    cluster: Cluster, state: JobState
) -> None:
    """``flotilla requeue`` of a job whose run is leased (its cluster did not answer the
    dispatch) or pending (starting): that run is stopped and never starts; the job runs again
    as attempt 2."""
    job = cluster.submit("again", priority=0)
    if state is JobState.LEASED:
        cluster.backend.unreachable.add(job)
    cluster.cycle_until(job, state)
    first = cluster.run_of(job)
    [record] = cluster.store.requeue_many([job], "requeue requested by alice")
    assert record.state is JobState.PREEMPTED
    cluster.backend.unreachable.clear()
    wait_until(
        lambda: (
            len(cluster.store.runs(job)) == 2
            and cluster.store.get_job(job).state in (JobState.PENDING, JobState.RUNNING)
        ),
        "the job's second attempt to be dispatched",
        30,
        0.0,
        cluster.loop.cycle,
    )
    runs = cluster.store.runs(job)
    assert (runs[0].attempt, runs[0].state) == (1, RunState.PREEMPTED)
    calls = cluster.backend.calls
    assert ("stop", first) in calls
    assert calls.index(("stop", first)) < calls.index(("start", runs[1].id))
    if state is JobState.LEASED:
        assert ("start", first) not in calls
