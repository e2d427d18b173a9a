"""Requeue (Slurm's ``scontrol requeue``) as the store writes it, on SQLite and PostgreSQL: a
job that holds a run — leased, pending or running — becomes preempted with the requester's
reason and its run is ended preempted (the loop then stops it and queues the job again); a job
being cancelled is not requeued, and nothing of the request is written."""

from __future__ import annotations

import pytest
from store_support import job

from flotilla.store import ConflictError, JobState, RunState, SqlStore

REASON = "requeue requested by alice"


def holding_a_run(store: SqlStore, state: JobState) -> tuple[str, str]:
    """A job whose first run got as far as ``state`` (leased, pending or running)."""
    [job_id] = store.submit_jobs([job("j")])
    run = store.record_run(job_id, "c1", {})
    for step in (JobState.PENDING, JobState.RUNNING):
        if state is JobState.LEASED or (state is JobState.PENDING and step is JobState.RUNNING):
            break
        store.transition(job_id, step, step.value, run=run.id)
    assert store.get_job(job_id).state is state
    return job_id, run.id


@pytest.mark.parametrize("state", [JobState.LEASED, JobState.PENDING, JobState.RUNNING])
def test_a_job_holding_a_run_is_requeued_whatever_its_run_reached(
    store: SqlStore, state: JobState
) -> None:
    job_id, run_id = holding_a_run(store, state)
    [record] = store.requeue_many([job_id], REASON)
    assert (record.state, record.reason) == (JobState.PREEMPTED, REASON)
    assert record.run is not None and record.run.id == run_id
    assert record.run.state is RunState.PREEMPTED
    # the job then waits to be queued again for a new attempt
    assert store.transition(job_id, JobState.QUEUED, "requeued").state is JobState.QUEUED
    assert store.record_run(job_id, "c1", {}).attempt == 2


@pytest.mark.parametrize("state", [JobState.LEASED, JobState.PENDING, JobState.RUNNING])
def test_a_job_being_cancelled_is_not_requeued(store: SqlStore, state: JobState) -> None:
    job_id, run_id = holding_a_run(store, state)
    store.cancel(job_id, "cancel requested by bob")
    before = store.get_job(job_id)
    assert before.cancel_requested and before.state is state
    with pytest.raises(ConflictError, match=f"job {job_id} is being cancelled"):
        store.requeue_many([job_id], REASON)
    after = store.get_job(job_id)
    assert (after.state, after.reason, after.cancel_requested) == (state, before.reason, True)
    assert (
        after.run is not None
        and after.run.id == run_id
        and after.run.state is not (RunState.PREEMPTED)
    )
