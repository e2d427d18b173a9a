"""One job's failure inside the loop stays that job's (issue 23, item 5).

A retry ``delay: "99999999999h"`` was accepted, then raised OverflowError inside the loop: the
rest of that poll was dropped, and other users' jobs ending in the same poll stayed
``running`` forever, across restarts (the same report failed the same way every time). Here an
error is injected into one job's step of each stage of the loop — its run's report, its retry
policy, its dependencies, its conversion to an engine job, the record of its placement, its
dispatch, the write of its lease or of its run's report — and the job fails with the error as
its reason while every other job finishes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flotilla.backends.interface import DispatchRequest, RunStatus
from flotilla.backends.sim import SimBackend
from flotilla.lifecycle import machine
from flotilla.model import JobSpec
from flotilla.service import commit, dependencies, snapshots
from flotilla.service.loop import SchedulingLoop
from flotilla.service.transitions import RunTransitions
from flotilla.store import CycleWrite, JobRecord, JobState, SqlStore
from tests.service_builders import loop_over
from tests.timing import wait_until

WAIT = 60.0
"""How long the test waits for the jobs to end before failing (not a performance bound)."""
GOOD = 4
INJECTED = "injected fault"


def spec(name: str, **fields: Any) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": name,
            "queue": "default",
            "tasks": [{"name": "main", "resources": {"cpu": 1}}],
            "payload": {"sim": {"duration": 0.3}},
            **fields,
        }
    )


class Poison:
    """Names the job the injected hook fails on (its id, known once it is submitted)."""

    id = ""
    name = "poison"


Inject = Callable[[pytest.MonkeyPatch, SimBackend, type[Poison]], None]


def _report(monkeypatch: pytest.MonkeyPatch, _: SimBackend, poison: type[Poison]) -> None:
    on_run_status = RunTransitions.on_run_status

    def raising(self: RunTransitions, status: RunStatus) -> Any:
        if status.job == poison.id:
            raise RuntimeError(INJECTED)
        return on_run_status(self, status)

    monkeypatch.setattr(RunTransitions, "on_run_status", raising)


def _retry(monkeypatch: pytest.MonkeyPatch, _: SimBackend, poison: type[Poison]) -> None:
    """The issue's case: the retry delay overflows (the edge now refuses such a delay, so the
    overflow itself is injected into the lifecycle core's rule for an ended run)."""
    after_run = machine.after_run

    def raising(spec: JobSpec, ended: Any) -> Any:
        if spec.name == poison.name:
            raise OverflowError(f"{INJECTED}: date value out of range")
        return after_run(spec, ended)

    monkeypatch.setattr(machine, "after_run", raising)


def _dependencies(monkeypatch: pytest.MonkeyPatch, _: SimBackend, poison: type[Poison]) -> None:
    def raising(*_: Any) -> Any:  # only the poisoned job has dependencies
        raise ValueError(INJECTED)

    monkeypatch.setattr(dependencies, "dependency_status", raising)


def _conversion(monkeypatch: pytest.MonkeyPatch, _: SimBackend, poison: type[Poison]) -> None:
    job_from_record = snapshots.job_from_record

    def raising(record: JobRecord, *args: Any) -> Any:
        if record.id == poison.id:
            raise KeyError(INJECTED)
        return job_from_record(record, *args)

    monkeypatch.setattr(snapshots, "job_from_record", raising)


def _placement(monkeypatch: pytest.MonkeyPatch, _: SimBackend, poison: type[Poison]) -> None:
    run_request = commit.RunRequest

    def raising(**fields: Any) -> Any:
        if fields["job_id"] == poison.id:
            raise TypeError(INJECTED)
        return run_request(**fields)

    monkeypatch.setattr(commit, "RunRequest", raising)


def _dispatch(monkeypatch: pytest.MonkeyPatch, backend: SimBackend, poison: type[Poison]) -> None:
    dispatch = backend.dispatch

    def raising(request: DispatchRequest) -> Any:
        if request.job == poison.id:
            raise RuntimeError(INJECTED)
        return dispatch(request)

    monkeypatch.setattr(backend, "dispatch", raising)


def _refused_write(kind: str) -> Inject:
    """The store refuses a write carrying one of the poisoned job's values: its lease
    (``lease``) or a report of its run (``report``) — as PostgreSQL refuses a NUL in text."""

    def inject(monkeypatch: pytest.MonkeyPatch, _: SimBackend, poison: type[Poison]) -> None:
        commit_cycle = SqlStore.commit_cycle

        def refusing(self: SqlStore, write: CycleWrite, **fields: Any) -> Any:
            leases = [run for run in write.runs if run.job_id == poison.id]
            reports = [
                change
                for change in write.transitions
                if change.job_id == poison.id and change.new_state is not JobState.FAILED
            ]
            if leases if kind == "lease" else reports:
                raise ValueError(f"{INJECTED}: a value the database refuses")
            return commit_cycle(self, write, **fields)

        monkeypatch.setattr(SqlStore, "commit_cycle", refusing)

    return inject


STAGES: dict[str, tuple[Inject, str, dict[str, Any]]] = {
    "lease-write": (_refused_write("lease"), "recording its lease", {}),
    "report-write": (_refused_write("report"), "writing its change", {}),
    "report": (_report, "its run's report", {}),
    "retry": (
        _retry,
        "its retry policy",
        {
            "payload": {"sim": {"duration": 0.3, "exit_code": 3}},
            "retry": {"limit": 2, "on": ["failed"], "delay": "1h"},
        },
    ),
    "dependencies": (_dependencies, "its dependencies", {"depends_on": [{"job": "good-0"}]}),
    "conversion": (_conversion, "its conversion to an engine job", {}),
    "placement": (_placement, "recording its placement", {}),
    "dispatch": (_dispatch, "its dispatch", {}),
}


@pytest.fixture
def loop_over_sim(tmp_path: Path) -> Iterator[tuple[SqlStore, SimBackend, SchedulingLoop]]:
    store = SqlStore.open(f"sqlite:///{tmp_path / 'flotilla.db'}")
    backend = SimBackend(cluster="sim", nodes=[{"name": "n", "resources": {"cpu": 16}}])
    loop = loop_over(store, {"sim": backend}, replica="only", cycle_interval=0.05)
    yield store, backend, loop
    backend.close()
    store.close()


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_an_error_in_one_jobs_step_fails_that_job_and_every_other_job_finishes(
    loop_over_sim: tuple[SqlStore, SimBackend, SchedulingLoop],
    monkeypatch: pytest.MonkeyPatch,
    stage: str,
) -> None:
    store, backend, loop = loop_over_sim
    inject, words, poisoned = STAGES[stage]
    inject(monkeypatch, backend, Poison)
    good = store.submit_jobs([spec(f"good-{index}") for index in range(GOOD)])
    if stage == "retry":  # a job without the hook fails in the same poll, and is retried
        [retried] = store.submit_jobs([spec("retried", **poisoned)])
    [Poison.id] = store.submit_jobs([spec(Poison.name, **poisoned)])
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    thread.start()
    try:
        ended = {*good, Poison.id}

        def all_ended() -> bool:
            assert thread.is_alive(), "the loop died"
            return all(store.get_job(job_id).state in _TERMINAL for job_id in ended)

        wait_until(
            all_ended,
            lambda: f"every job to end: { {job: store.get_job(job).state.value for job in ended} }",
            WAIT,
            0.05,
        )
        assert [store.get_job(job_id).state for job_id in good] == [JobState.SUCCEEDED] * GOOD
        poison = store.get_job(Poison.id)
        assert poison.state is JobState.FAILED
        [last] = [event for event in store.events(Poison.id) if event.to_state is JobState.FAILED]
        assert words in last.reason and INJECTED in last.reason, last.reason
        if stage == "retry":
            assert store.get_job(retried).state is JobState.QUEUED  # waits out its 1 h delay
        assert thread.is_alive()
    finally:
        stop.set()
        thread.join(timeout=WAIT)


_TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
