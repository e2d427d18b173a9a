"""A victim of preemption that has not started yet — its run leased (not handed to its
cluster yet) or pending (handed over, still starting) — holds its node like a running one:
it is told to stop, and becomes preempted, before its preemptor is dispatched onto that node;
a leased victim's run is never started afterwards. Real loop and store (SQLite), a sim
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
