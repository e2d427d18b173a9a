"""Finding jobs: the filters of a job listing, and a job by the reference a user types.

A reference is, in this order of precedence:

* a full job id;
* ``QUEUE/NAME``: the latest job of that name in that queue;
* a ``NAME``: the latest job of that name, if exactly one queue has a job of that name;
* an id prefix (hexadecimal digits);
* ``ARRAY_INDEX``: element ``INDEX`` of the array whose id (or id prefix) is ``ARRAY``, as
  Slurm's ``JOBID_TASKID`` (``jobs`` shows array elements so).

A ``NAME`` that some queue uses and that is also the prefix of another job's id is
ambiguous, as is a name several queues use or a prefix several ids share:
``AmbiguousJobError`` lists the candidates, and nothing is guessed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Select, func, select
from sqlalchemy.orm import Session

from flotilla.store.errors import AmbiguousJobError, NotFoundError, job_not_found
from flotilla.store.schema import ID, Job
from flotilla.store.states import JobState

HEX = re.compile(r"^[0-9a-f]+$")
ELEMENT = re.compile(r"^([0-9a-f]+)_([0-9]+)$")
"""``ARRAY_INDEX``: an array's id or id prefix, then an element's index."""
CANDIDATES = 10
"""At most this many candidates are named in an ambiguity error."""


def job_filters(
    *,
    queue: str | None = None,
    states: Sequence[JobState] | None = None,
    owner: str | None = None,
    labels: Mapping[str, str] | None = None,
    name_contains: str | None = None,
    array_id: str | None = None,
) -> list[ColumnElement[bool]]:
    """The WHERE clauses of a job listing (``labels``: every pair must match;
    ``name_contains``: a case-insensitive substring of the name, ``%`` and ``_`` literal)."""
    clauses: list[ColumnElement[bool]] = []
    if queue is not None:
        clauses.append(Job.queue == queue)
    if states is not None:
        clauses.append(Job.state.in_([state.value for state in states]))
    if owner is not None:
        clauses.append(Job.owner == owner)
    for key, value in (labels or {}).items():
        clauses.append(Job.labels[key].as_string() == value)
    if name_contains:
        clauses.append(func.lower(Job.name).contains(name_contains.lower(), autoescape=True))
    if array_id is not None:
        clauses.append(Job.array_id == array_id)
    return clauses


def count_jobs(session: Session, clauses: Sequence[ColumnElement[bool]]) -> int:
    query: Select[Any] = select(func.count()).select_from(Job).where(*clauses)
    return int(session.execute(query).scalar_one())


def _latest_named(session: Session, name: str, queue: str | None) -> list[tuple[str, str]]:
    """(queue, id) of the latest job named ``name`` in each queue (or in ``queue``)."""
    query = select(Job.queue, Job.id, Job.submit_serial).where(Job.name == name)
    if queue is not None:
        query = query.where(Job.queue == queue)
    latest: dict[str, tuple[int, str]] = {}
    for found_queue, job_id, serial in session.execute(query):
        if found_queue not in latest or serial > latest[found_queue][0]:
            latest[found_queue] = (serial, job_id)
    return [(found_queue, job_id) for found_queue, (_, job_id) in sorted(latest.items())]


def _by_prefix(session: Session, prefix: str) -> list[tuple[str, str, str]]:
    """(id, queue, name) of up to ``CANDIDATES + 1`` jobs whose id starts with ``prefix``
    (a range on the primary key, so the index answers it)."""
    upper = prefix + "f" * (ID - len(prefix))
    query = (
        select(Job.id, Job.queue, Job.name)
        .where(Job.id >= prefix, Job.id <= upper)
        .order_by(Job.id)
        .limit(CANDIDATES + 1)
    )
    return [(job_id, queue, name) for job_id, queue, name in session.execute(query)]


def resolve_array(session: Session, reference: str) -> str:
    """The array id ``reference`` names: the id itself, or an unambiguous prefix of one (as
    job ids; a range on the array id's index). Raises ``NotFoundError`` or
    ``AmbiguousJobError``."""
    if HEX.match(reference):
        upper = reference + "f" * (ID - len(reference))
        query = (
            select(Job.array_id)
            .where(Job.array_id >= reference, Job.array_id <= upper)
            .distinct()
            .order_by(Job.array_id)
            .limit(CANDIDATES + 1)
        )
        found = [str(array_id) for array_id in session.scalars(query)]
        if reference in found or len(found) == 1:
            return reference if reference in found else found[0]
        if found:
            raise AmbiguousJobError(reference, [f"array {array_id}" for array_id in found])
    raise NotFoundError(f"no such array: {reference}")


def resolve_job(session: Session, reference: str) -> str:
    """The id of the job ``reference`` names (see the module's docstring); raises
    ``NotFoundError`` when none matches and ``AmbiguousJobError`` when several do."""
    if not reference:
        raise job_not_found(reference)
    if session.get(Job, reference) is not None:
        return reference
    element = ELEMENT.match(reference)
    if element is not None:
        try:
            array_id = resolve_array(session, element.group(1))
        except NotFoundError:
            raise job_not_found(reference) from None
        query = select(Job.id).where(
            Job.array_id == array_id, Job.array_index == int(element.group(2))
        )
        found = session.scalars(query).first()
        if found is None:
            raise job_not_found(reference)
        return str(found)
    queue, slash, name = reference.partition("/")
    if slash:
        named = _latest_named(session, name, queue)
        if not named:
            raise job_not_found(reference)
        return named[0][1]
    candidates: dict[str, str] = {
        job_id: f"{found_queue}/{reference} ({job_id})"
        for found_queue, job_id in _latest_named(session, reference, None)
    }
    if HEX.match(reference):
        for job_id, found_queue, found_name in _by_prefix(session, reference):
            candidates.setdefault(job_id, f"{found_queue}/{found_name} ({job_id})")
    if len(candidates) == 1:
        return next(iter(candidates))
    if not candidates:
        raise job_not_found(reference)
    raise AmbiguousJobError(reference, list(candidates.values()))
