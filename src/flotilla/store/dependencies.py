"""Resolving a batch's ``depends_on`` to job ids, inside the submission's transaction.

A dependency names a job of the same batch by name (that one, being the newest), else the
latest job of that name in the dependent's queue (``QUEUE/NAME`` for another queue), else a
job id. Unknown jobs and cycles within the batch (jobs already stored cannot depend on new
ones, so a cycle always lies within the batch) are refused naming the field; nothing is
written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from flotilla.model import JobSpec
from flotilla.model.job import dependency_cycles
from flotilla.store.errors import InvalidDependencyError
from flotilla.store.schema import Job


class _Lookup:
    """Job ids by (queue, name) and by id, from the batch first and then the store; one
    query per distinct name."""

    def __init__(self, session: Session, jobs: Sequence[JobSpec], ids: Sequence[str]) -> None:
        self._session = session
        self.batch: dict[tuple[str, str], int] = {
            (job.queue, job.name): index for index, job in enumerate(jobs)
        }
        self._ids = ids
        self._stored: dict[tuple[str, str], str | None] = {}

    def by_name(self, queue: str, name: str) -> tuple[str | None, int | None]:
        """(job id, batch index or None) of the latest job named ``name`` in ``queue``."""
        index = self.batch.get((queue, name))
        if index is not None:
            return self._ids[index], index
        key = (queue, name)
        if key not in self._stored:
            self._stored[key] = self._session.scalars(
                select(Job.id)
                .where(Job.queue == queue, Job.name == name)
                .order_by(Job.submit_serial.desc())
                .limit(1)
            ).first()
        return self._stored[key], None

    def by_id(self, job_id: str) -> str | None:
        return self._session.scalars(select(Job.id).where(Job.id == job_id)).first()


def resolve(
    session: Session, jobs: Sequence[JobSpec], ids: Sequence[str], paths: Sequence[str]
) -> list[list[dict[str, Any]] | None]:
    """Each job's dependencies as stored (``None`` for none); ``paths`` prefix each job's
    fields in the problems (``jobs[2].`` or empty). Raises ``InvalidDependencyError``."""
    lookup = _Lookup(session, jobs, ids)
    problems: list[str] = []
    resolved: list[list[dict[str, Any]] | None] = []
    edges: dict[int, list[int]] = {}
    for index, job in enumerate(jobs):
        if not job.depends_on:
            resolved.append(None)
            continue
        entries: list[dict[str, Any]] = []
        for position, dependency in enumerate(job.depends_on):
            field = f"{paths[index]}depends_on[{position}].job"
            queue, slash, name = dependency.job.rpartition("/")
            if slash:
                job_id, batch_index = lookup.by_name(queue, name)
                missing = f"no job named {name!r} in queue {queue!r}"
            else:
                job_id, batch_index = lookup.by_name(job.queue, dependency.job)
                if job_id is None:
                    job_id = lookup.by_id(dependency.job)
                missing = (
                    f"no job named {dependency.job!r} in queue {job.queue!r}, and no job "
                    "with that id (name a job of another queue as QUEUE/NAME)"
                )
            if job_id is None:
                problems.append(f"{field}: {missing}")
                continue
            if batch_index is not None:
                edges.setdefault(index, []).append(batch_index)
            entries.append(
                {"job_id": job_id, "job": dependency.job, "condition": dependency.condition.value}
            )
        resolved.append(entries)
    problems += _cycles(jobs, edges, paths)
    if problems:
        # The elements of a ``count`` spec share its path: one line each.
        raise InvalidDependencyError(list(dict.fromkeys(problems)))
    return resolved


def _cycles(
    jobs: Sequence[JobSpec], edges: dict[int, list[int]], paths: Sequence[str]
) -> list[str]:
    """One problem per cycle of the batch's dependency graph, naming its jobs in order."""
    return [
        f"{paths[cycle[0]]}depends_on: dependency cycle "
        + " → ".join(jobs[index].name for index in cycle)
        for cycle in dependency_cycles(edges)
    ]
