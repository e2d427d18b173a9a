"""A run's reported checkpoint (issue 28): kept as ``last_checkpoint_at`` on the job's active
run, seen by every JobDb through a new serial; a report about an older run is ignored."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.store.store_support import job

from flotilla.model import QueueSpec
from flotilla.store import CheckpointReport, JobState, SqlStore, Transition


def test_a_reported_checkpoint_is_kept_on_the_active_run(store: SqlStore) -> None:
    store.put_queue(QueueSpec(name="team-a"))
    (job_id,) = store.submit_jobs([job("train")])
    run = store.record_run(job_id, "c1", {})
    store.transition(job_id, JobState.RUNNING, "started", run=run.id)
    seen = store.latest_serial()
    at = datetime(2026, 11, 28, 2, 40, tzinfo=UTC)
    store.record_checkpoints([CheckpointReport(job_id, run.id, at)])
    (changed,) = store.jobs_since(seen)
    assert changed.id == job_id
    assert changed.run is not None and changed.run.last_checkpoint_at == at
    assert store.runs(job_id)[0].last_checkpoint_at == at
    assert store.get_job(job_id).run.last_checkpoint_at == at  # type: ignore[union-attr]


def test_a_report_about_an_ended_run_is_ignored(store: SqlStore) -> None:
    store.put_queue(QueueSpec(name="team-a"))
    (job_id,) = store.submit_jobs([job("train")])
    first = store.record_run(job_id, "c1", {})
    store.transition_many([Transition(job_id, JobState.QUEUED, "node lost", first.id)])
    seen = store.latest_serial()
    late = datetime(2026, 11, 28, 2, 41, tzinfo=UTC)
    store.record_checkpoints([CheckpointReport(job_id, first.id, late)])
    assert store.jobs_since(seen) == []
    assert store.runs(job_id)[0].last_checkpoint_at is None
