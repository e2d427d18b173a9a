"""Preemption waits for its victim (issue 36), in the service as in the simulator
(``tests/sim/test_preemption_waits.py``): with a 60 s grace the victim keeps its node until
its run stopped, the preemptor is not dispatched before, and ``why`` names the victim. The
work a victim loses counts from its run's start, not from its lease. Real loop and store
(SQLite), a sim cluster whose clock the test moves."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from flotilla.backends.interface import CancelRequest, CancelResult, DispatchRequest, DispatchResult
from flotilla.backends.sim import FakeClock, SimBackend
from flotilla.framework.preemption import lost_work
from flotilla.jobdb import JobDb
from flotilla.model import ClusterSpec, JobSpec, QueueSpec
from flotilla.service.loop import SchedulingLoop
from flotilla.service.snapshots import SnapshotBuilder
from flotilla.store import JobState, RunRequest, SqlStore, Transition
from tests.service_builders import loop_over
from tests.timing import wait_until


class CallLog(SimBackend):
    """A sim cluster that logs each run it started and each run it was told to stop."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.calls: list[tuple[str, str]] = []

    def dispatch(self, request: DispatchRequest) -> DispatchResult:
        result = super().dispatch(request)
        self.calls.append(("start", request.job))
        return result

    def cancel(self, request: CancelRequest) -> CancelResult:
        self.calls.append(("stop", request.run_id))
        return super().cancel(request)


class Cluster:
    def __init__(self, root: Path) -> None:
        self.store = SqlStore.open(f"sqlite:///{root / 'flotilla.db'}")
        self.clock = FakeClock()
        self.backend = CallLog(
            cluster="sim",
            nodes=[{"name": "n", "resources": {"cpu": 4, "memory": "16Gi"}}],
            clock=self.clock,
        )
        self.loop: SchedulingLoop = loop_over(
            self.store, {"sim": self.backend}, cycle_interval=0.05, replica="victims"
        )
        self.store.put_queue(
            QueueSpec.model_validate(
                {"name": "default", "preemption": {"within_queue": "lower_priority"}}
            )
        )

    def submit(self, name: str, priority: int, **fields: object) -> str:
        spec = JobSpec.model_validate(
            {
                "name": name,
                "queue": "default",
                "priority": priority,
                "tasks": [{"name": "main", "resources": {"cpu": 4}}],
                "payload": {"sim": {"duration": 6000, "sigterm_delay": 1000}},
                **fields,
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

    def close(self) -> None:
        self.loop.close()
        self.backend.close()
        self.store.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    built = Cluster(tmp_path)
    yield built
    built.close()


def test_a_preemptor_starts_only_after_its_victims_grace(cluster: Cluster) -> None:
    low = cluster.submit("low", priority=0, preemption={"grace": 60})
    cluster.cycle_until(low, JobState.RUNNING)
    high = cluster.submit("high", priority=10)
    cluster.cycle_until(low, JobState.PREEMPTED)
    for _ in range(5):
        cluster.loop.cycle()
    assert cluster.store.get_job(high).state is JobState.QUEUED
    assert ("start", high) not in cluster.backend.calls
    why = cluster.loop.pending_reason(high)
    assert why is not None and why.startswith(f"waits for job default/low ({low[:8]}) to stop")

    cluster.clock.advance(59)  # the victim ignores SIGTERM: still within its grace
    for _ in range(5):
        cluster.loop.cycle()
    assert cluster.store.get_job(high).state is JobState.QUEUED
    assert cluster.store.get_job(low).state is JobState.PREEMPTED

    cluster.clock.advance(2)  # killed at the end of its grace: its node is free
    cluster.cycle_until(high, JobState.PENDING, JobState.RUNNING)
    assert cluster.store.get_job(low).state is JobState.QUEUED
    assert ("start", high) in cluster.backend.calls


def test_lost_work_counts_from_the_runs_start(tmp_path: Path) -> None:
    """Leased at t, started at t+50 (its cluster's start-up delay), saving its work every
    100 s of its run: at t+140 it has saved nothing yet and a preemption loses 4 GPUs × 90 s
    = 360 GPU-s (counted from the lease, a checkpoint at t+100: 160)."""
    leased = datetime.now(UTC) - timedelta(seconds=200)
    now = [leased]
    store = SqlStore.open(f"sqlite:///{tmp_path / 'flotilla.db'}", clock=lambda: now[0])
    try:
        store.put_queue(QueueSpec(name="default"))
        store.upsert_cluster(
            ClusterSpec.model_validate(
                {
                    "name": "c",
                    "nodes": [
                        {
                            "name": "n",
                            "resources": {"cpu": 8, "memory": "32Gi"},
                            "gpus": {"count": 8, "memory": "80Gi"},
                        }
                    ],
                }
            )
        )
        spec = JobSpec.model_validate(
            {
                "name": "low",
                "queue": "default",
                "checkpoint_every": 100,
                "tasks": [{"name": "main", "resources": {"cpu": 1, "gpu": 4}}],
            }
        )
        (job,) = store.submit_jobs([spec])
        placement = {"task": "main", "replica": 0, "node": "n", "gpus": [0, 1, 2, 3]}
        assignment = {"cluster": "c", "placements": [placement]}
        (run,) = store.record_runs([RunRequest(job, "c", assignment, "scheduled")])
        store.transition_many([Transition(job, JobState.PENDING, "dispatched", run.id)])
        now[0] = leased + timedelta(seconds=50)
        store.transition_many([Transition(job, JobState.RUNNING, "started", run.id)])
        jobdb = JobDb.load(store)
        (running,) = SnapshotBuilder(store, jobdb).build(jobdb.read_txn()).snapshot.running
        at = (leased + timedelta(seconds=140)).timestamp()
        assert lost_work(running, at) == pytest.approx(4 * 90)
    finally:
        store.close()
