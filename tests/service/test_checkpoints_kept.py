"""The service keeps a run's reported checkpoint (issue 28): a poll's ``last_checkpoint_at``
that is news is written on the job's active run, and the JobDb (the scheduler's view, from
which victim selection reads it) then holds it; the same report again writes nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from flotilla.backends.interface import BackendRunState, RunStatus
from flotilla.jobdb import JobDb
from flotilla.model import JobSpec, QueueSpec
from flotilla.service.checkpoints import new_checkpoints
from flotilla.store import JobState, SqlStore


def test_a_polled_checkpoint_reaches_the_schedulers_view(tmp_path: Path) -> None:
    store = SqlStore.open(f"sqlite:///{tmp_path / 'flotilla.db'}")
    try:
        store.put_queue(QueueSpec(name="q"))
        spec = JobSpec.model_validate(
            {"name": "train", "queue": "q", "tasks": [{"name": "main", "resources": {"cpu": 1}}]}
        )
        (job_id,) = store.submit_jobs([spec])
        run = store.record_run(job_id, "local", {})
        store.transition(job_id, JobState.RUNNING, "started", run=run.id)
        jobdb = JobDb.load(store)
        at = datetime(2026, 11, 28, 2, 45, tzinfo=UTC).timestamp()
        polled = RunStatus(
            run.id, job_id, "local", BackendRunState.RUNNING, 0.0, last_checkpoint_at=at
        )
        reports = new_checkpoints(jobdb, [polled])
        assert [(r.job_id, r.run_id, r.at.timestamp()) for r in reports] == [(job_id, run.id, at)]
        store.record_checkpoints(reports)
        jobdb.sync(store)
        record = jobdb.read_txn().get(job_id)
        assert record is not None and record.run is not None
        assert record.run.last_checkpoint_at is not None
        assert record.run.last_checkpoint_at.timestamp() == at
        assert new_checkpoints(jobdb, [polled]) == []
    finally:
        store.close()
