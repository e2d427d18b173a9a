"""Rows to records: the only place that knows both shapes."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from sqlalchemy import Row

from flotilla.model import DependencyCondition, JobSpec
from flotilla.store.records import DependencyRecord, EventRecord, JobRecord, RunRecord
from flotilla.store.schema import Event, Job, Run
from flotilla.store.states import JobState, RunState

T = TypeVar("T")

AnyRow = Row[*tuple[Any, ...]]
"""A Core result row of any shape (read by column name)."""


class JsonMapping(Mapping[str, Any]):
    """A JSON object column read as text and decoded on first access. The scheduler's sync
    reads every changed job's labels and its run's assignment, yet most are never looked at
    again, and decoding them all costs the loop time (``docs/performance.md``); a record
    compares equal to the decoded dict."""

    __slots__ = ("_data", "_text")

    def __init__(self, text: str) -> None:
        self._text = text
        self._data: dict[str, Any] | None = None

    def _decoded(self) -> dict[str, Any]:
        data = self._data
        if data is None:
            data = self._data = json.loads(self._text)
        return data

    def __getitem__(self, key: str) -> Any:
        return self._decoded()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._decoded())

    def __len__(self) -> int:
        return len(self._decoded())

    def __repr__(self) -> str:
        return repr(self._decoded())


def lazy_json(text: str | None) -> Mapping[str, Any]:
    return {} if text is None else JsonMapping(text)


def run_record(row: Run | AnyRow) -> RunRecord:
    """From an ORM object or a Core row of the runs table (same attribute names)."""
    return _run_record(row, row.assignment)


def parse_spec(text: str) -> JobSpec:
    return JobSpec.model_validate_json(text)


class SpecCache:
    """Parsed job specs by job id, keyed by the stored JSON text.

    A job's spec does not change after submission (only a reprioritization rewrites it), yet
    the scheduler reads each job back several times (submitted, leased, dispatched, ...):
    parsing and validating it is the largest per-job cost of a JobDb sync. A hit is an
    exact comparison of the stored text, so a rewritten spec is parsed again. Bounded: once
    ``limit`` specs are held it starts over (a job is read back within a few cycles)."""

    def __init__(self, limit: int = 20_000) -> None:
        self._limit = limit
        self._specs: dict[str, tuple[str, JobSpec]] = {}

    def spec(self, job_id: str, text: str, *, last: bool = False) -> JobSpec:
        """The parsed spec; ``last``: the job is finished, so its spec is not read back
        again — it is dropped from the cache instead of kept (memory follows live jobs)."""
        if last:
            held = self._specs.pop(job_id, None)
            return held[1] if held is not None and held[0] == text else parse_spec(text)
        held = self._specs.get(job_id)
        if held is not None and held[0] == text:
            return held[1]
        spec = parse_spec(text)
        if len(self._specs) >= self._limit:
            self._specs.clear()
        self._specs[job_id] = (text, spec)
        return spec


def _run_record(row: Run | AnyRow, assignment: Mapping[str, Any]) -> RunRecord:
    """The record of ``row`` with ``assignment`` as given (decoded, or to decode lazily)."""
    return RunRecord(
        id=row.id,
        job_id=row.job_id,
        attempt=row.attempt,
        cluster=row.cluster,
        assignment=assignment,
        state=RunState(row.state),
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        exit_code=row.exit_code,
        message=row.message,
        last_checkpoint_at=row.last_checkpoint_at,
        cpu_seconds=row.cpu_seconds,
        memory_peak=row.memory_peak,
    )


def job_record(
    row: Job | AnyRow,
    run: Run | RunRecord | None,
    spec: JobSpec | None = None,
    labels: Mapping[str, Any] | None = None,
) -> JobRecord:
    """From an ORM object, or a Core row of the jobs table read without its spec and labels
    (then ``spec`` is the spec already parsed, ``labels`` the labels to decode lazily)."""
    return JobRecord(
        id=row.id,
        name=row.name,
        queue=row.queue,
        spec=spec if spec is not None else JobSpec.model_validate(row.spec),
        state=JobState(row.state),
        priority=row.priority,
        submitted_at=row.submitted_at,
        updated_at=row.updated_at,
        submit_serial=row.submit_serial,
        serial=row.serial,
        owner=row.owner,
        labels=row.labels if labels is None else labels,
        cancel_requested=row.cancel_requested,
        reason=row.reason,
        run=run if run is None or isinstance(run, RunRecord) else run_record(run),
        not_before=row.not_before,
        array_id=row.array_id,
        array_index=row.array_index,
        dependencies=dependency_records(row.dependencies),
    )


def dependency_records(stored: list[dict[str, Any]] | None) -> tuple[DependencyRecord, ...]:
    """The ``dependencies`` column as records (empty when null)."""
    return tuple(
        DependencyRecord(
            job_id=item["job_id"], job=item["job"], condition=DependencyCondition(item["condition"])
        )
        for item in stored or ()
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


def paced(items: Iterable[T], pace: Callable[[], None] | None) -> Iterator[T]:
    """``items``, with ``pace`` called before each (if given): a long conversion lets urgent
    work of other threads go first (``scheduler/precedence.py``)."""
    for item in items:
        if pace is not None:
            pace()
        yield item
