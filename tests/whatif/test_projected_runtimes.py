"""Projected starts (``whatif/project.py`` over the live export) take each running job's
runtime as the export's rule gives it: its estimate — ``max_runtime``, else the median of the
newest runs alike — less what it has run already, at least a second; one that ran past every
past run gets a quarter more than it has run. The store's clock is a fake one, so every run's
start and end are exact."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flotilla.backends.sim import SimBackend
from flotilla.model import JobSpec, QueueSpec
from flotilla.service.loop import SchedulingLoop
from flotilla.service.records import cluster_spec_from_inventory
from flotilla.store import JobState, SqlStore
from flotilla.whatif.estimator import RECENT_RUNS, EstimatorMethod
from flotilla.whatif.project import StoreProjectionInput, project_store
from tests.service_builders import loop_over
from tests.timing import wait_until

OLD_RUN, NEW_RUN = 1000.0, 100.0
"""How long ``train`` ran: its older runs, then (the newest) after a change made it faster."""


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


class Fleet:
    """One 4-cpu node; ``train``'s history: RECENT_RUNS runs of 1000 s, then as many newer
    ones of 100 s (the estimator keeps only the newest RECENT_RUNS of a group)."""

    def __init__(self, root: Path) -> None:
        self.clock = Clock()
        self.store = SqlStore.open(f"sqlite:///{root / 'flotilla.db'}", clock=self.clock)
        self.backend = SimBackend(
            cluster="east", nodes=[{"name": "n", "resources": {"cpu": 4, "memory": "16Gi"}}]
        )
        self.store.upsert_cluster(
            cluster_spec_from_inventory("east", "sim", self.backend.inventory().nodes)
        )
        self.store.put_queue(QueueSpec(name="a"))
        for seconds in [OLD_RUN] * RECENT_RUNS + [NEW_RUN] * RECENT_RUNS:
            self.past_run(seconds)
        self.loop: SchedulingLoop = loop_over(
            self.store, {"east": self.backend}, register=False, replica="r"
        )

    def spec(self, name: str, **extra: Any) -> JobSpec:
        return JobSpec.model_validate(
            {
                "name": name,
                "queue": "a",
                "tasks": [{"name": "main", "resources": {"cpu": 4}}],
                "payload": {"sim": {"duration": 3600}},
                **extra,
            }
        )

    def past_run(self, seconds: float) -> None:
        [job] = self.store.submit_jobs([self.spec("train")], owner="ana")
        run = self.store.record_run(job, "east", {})
        self.store.transition(job, JobState.PENDING, "dispatched", run=run.id)
        self.store.transition(job, JobState.RUNNING, "started", run=run.id)
        self.clock.now += timedelta(seconds=seconds)
        self.store.transition(job, JobState.SUCCEEDED, "exited 0", run=run.id)

    def start(self, name: str, **extra: Any) -> datetime:
        """``name`` running on the node (it holds all of it); when it started."""
        [job] = self.store.submit_jobs([self.spec(name, **extra)], owner="ana")
        wait_until(
            lambda: self.store.get_job(job).state is JobState.RUNNING,
            "the job to run",
            20,
            0.02,
            self.loop.cycle,
        )
        run = self.store.get_job(job).run
        assert run is not None and run.started_at is not None
        return run.started_at

    def projected_start(self, after: float, started: datetime) -> float | None:
        """When a waiting job that needs the node is projected to start, seen ``after``
        seconds into the running job's run (seconds from then)."""
        [waiting] = self.store.submit_jobs([self.spec("next", max_runtime=60)], owner="ana")
        answer = project_store(
            StoreProjectionInput(
                store=self.store,
                now=started + timedelta(seconds=after),
                methods=[EstimatorMethod.AUTO],
                horizon=10_000,
            )
        )
        return answer.starts["auto"][waiting]

    def close(self) -> None:
        self.loop.close()
        self.backend.close()
        self.store.close()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    built = Fleet(tmp_path)
    yield built
    built.close()


def test_a_running_job_without_max_runtime_is_expected_to_take_its_newest_runs_time(
    fleet: Fleet,
) -> None:
    started = fleet.start("train")
    assert fleet.projected_start(0, started) == pytest.approx(NEW_RUN, abs=1)


@pytest.mark.parametrize(
    ("ran", "left"),
    [
        (40, NEW_RUN - 40),  # its estimate less what it has run
        (150, 150 * 0.25),  # past every one of its newest runs: a quarter more
    ],
)
def test_a_running_job_from_history_is_expected_to_end_as_the_estimate_says(
    fleet: Fleet, ran: float, left: float
) -> None:
    started = fleet.start("train")
    assert fleet.projected_start(ran, started) == pytest.approx(left, abs=1)


@pytest.mark.parametrize(
    ("ran", "left"),
    [
        (400, 100),  # past all its newest runs: a quarter more (500 s), within its limit
        (550, 50),  # a quarter more would pass its max_runtime (600 s): the limit bounds it
        (700, 1),  # past its max_runtime: it ends soon, at least a second from now
    ],
)
def test_a_running_job_with_max_runtime_is_expected_to_end_by_it(
    fleet: Fleet, ran: float, left: float
) -> None:
    started = fleet.start("train", max_runtime=600)
    assert fleet.projected_start(ran, started) == pytest.approx(left, abs=0.5)
