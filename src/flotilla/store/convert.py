"""Rows to records: the only place that knows both shapes."""

from __future__ import annotations

from flotilla.model import JobSpec
from flotilla.store.records import EventRecord, JobRecord, RunRecord
from flotilla.store.schema import Event, Job, Run
from flotilla.store.states import JobState, RunState


def run_record(row: Run) -> RunRecord:
    return RunRecord(
        id=row.id,
        job_id=row.job_id,
        attempt=row.attempt,
        cluster=row.cluster,
        assignment=row.assignment,
        state=RunState(row.state),
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        exit_code=row.exit_code,
        message=row.message,
    )


def job_record(row: Job, run: Run | None) -> JobRecord:
    return JobRecord(
        id=row.id,
        name=row.name,
        queue=row.queue,
        spec=JobSpec.model_validate(row.spec),
        state=JobState(row.state),
        priority=row.priority,
        submitted_at=row.submitted_at,
        updated_at=row.updated_at,
        submit_serial=row.submit_serial,
        serial=row.serial,
        owner=row.owner,
        labels=row.labels,
        cancel_requested=row.cancel_requested,
        reason=row.reason,
        run=None if run is None else run_record(run),
    )


def event_record(row: Event) -> EventRecord:
    return EventRecord(
        id=row.id,
        job_id=row.job_id,
        run_id=row.run_id,
        time=row.time,
        kind=row.kind,
        from_state=None if row.from_state is None else JobState(row.from_state),
        to_state=None if row.to_state is None else JobState(row.to_state),
        reason=row.reason,
    )
