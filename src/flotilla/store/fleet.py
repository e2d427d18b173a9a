"""The fleet in force, and a fleet apply: every catalog change in one transaction."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from flotilla.framework.assignment_record import AssignmentRecord
from flotilla.store import catalog
from flotilla.store.errors import ConflictError
from flotilla.store.records import FleetChange, FleetRecord
from flotilla.store.schema import Cluster, FleetRow, Job, Queue, Quota, Run
from flotilla.store.states import ACTIVE_JOB_STATES

CURRENT = "current"

SYSTEM_LABELS = "flotilla.io/"


def get_fleet(session: Session) -> FleetRecord | None:
    row = session.get(FleetRow, CURRENT)
    if row is None:
        return None
    return FleetRecord(version=row.version, document=row.document, applied_at=row.applied_at)


def fleet_version(session: Session) -> int:
    """The version in force (0: none applied yet); one primary-key read."""
    version = session.scalar(select(FleetRow.version).where(FleetRow.name == CURRENT))
    return int(version or 0)


def _problems(session: Session, change: FleetChange, current: int) -> list[str]:
    """Why ``change`` cannot be applied, one line per problem naming what it is about."""
    problems: list[str] = []
    if change.expected_version is not None and change.expected_version != current:
        problems.append(
            f"(top level): the fleet changed meanwhile (version {current}, expected "
            f"{change.expected_version}); read it again and re-apply"
        )
    keep = {spec.name for spec in change.queues}
    for name in session.scalars(select(Queue.name)):
        if name in keep:
            continue
        unfinished = session.scalar(
            select(func.count()).where(Job.queue == name, catalog.unfinished_job())
        )
        if unfinished:
            problems.append(
                f"queues: queue {name!r} has {unfinished} unfinished job(s); keep it in the "
                "file until they end (finished jobs keep its name in their history)"
            )
    wanted = {spec.name for spec in change.clusters}
    active = [state.value for state in ACTIVE_JOB_STATES]
    for name in session.scalars(select(Cluster.name)):
        if name in wanted:
            continue
        count = session.scalar(
            select(func.count())
            .select_from(Job)
            .join(Run, Run.id == Job.run_id)
            .where(Run.cluster == name, Job.state.in_(active))
        )
        if count:
            problems.append(
                f"clusters: cluster {name!r} still has {count} active job(s); cancel them or "
                "wait until they end before removing it"
            )
    return problems


def apply_fleet(session: Session, change: FleetChange, now: datetime) -> FleetRecord:
    """Write ``change`` or nothing: raise ``ConflictError`` listing every problem first.

    The version counts changes: the same document again (a restart with an unchanged fleet
    file, an apply repeated) keeps the version and its time, though the catalog is written
    again (a queue changed by hand since goes back to what the file says)."""
    row = session.get(FleetRow, CURRENT, with_for_update=True)
    current = row.version if row is not None else 0
    unchanged = row is not None and row.document == dict(change.document)
    problems = _problems(session, change, current)
    if problems:
        error = ConflictError("the fleet cannot be applied: " + "; ".join(problems))
        error.problems = problems
        raise error
    wanted = {spec.name: spec for spec in change.clusters}
    for cluster in list(session.scalars(select(Cluster))):
        if cluster.name not in wanted:
            session.delete(cluster)
    session.flush()
    for spec in change.clusters:
        existing = session.get(Cluster, spec.name)
        if existing is None:
            catalog.upsert_cluster(session, spec, "unreachable", now)
            continue
        # Labels Flotilla itself sets (``flotilla.io/…``: a local cluster's owner) stay.
        labels = {k: v for k, v in existing.labels.items() if k.startswith(SYSTEM_LABELS)}
        labels.update(spec.labels)
        existing.backend = spec.backend
        existing.labels = labels
        existing.spec = {
            **existing.spec,
            "backend": spec.backend,
            "labels": labels,
            "cost": dict(spec.cost),
        }
        existing.updated_at = now
    keep = {spec.name for spec in change.queues}
    session.execute(delete(Queue).where(Queue.name.not_in(keep)))
    session.execute(delete(Quota).where(Quota.parent.is_(None)))  # children cascade
    session.flush()
    for index, quota in enumerate(change.quotas):
        catalog.put_quota(session, quota, None, now)
        session.get_one(Quota, quota.name).position = index
    for queue in change.queues:
        catalog.put_queue(session, queue, now)
    if row is None:
        row = FleetRow(name=CURRENT, version=0, document={}, applied_at=now)
        session.add(row)
    if not unchanged:
        row.version = current + 1
        row.document = dict(change.document)
        row.applied_at = now
    session.flush()
    return FleetRecord(version=row.version, document=row.document, applied_at=row.applied_at)


def cluster_allocations(session: Session) -> dict[str, dict[str, float]]:
    """Per cluster, what active runs hold: each placed replica's task request, summed."""
    active = [state.value for state in ACTIVE_JOB_STATES]
    rows = session.execute(
        select(Job.spec, Run.cluster, Run.assignment)
        .join(Run, Run.id == Job.run_id)
        .where(Job.state.in_(active))
    )
    held: dict[str, dict[str, float]] = {}
    for spec, cluster, assignment in rows:
        requests = {task["name"]: task.get("resources", {}) for task in spec.get("tasks", [])}
        mine = held.setdefault(cluster, {})
        for placement in AssignmentRecord.unmarshal(assignment).placements:
            for name, amount in requests.get(placement.task, {}).items():
                mine[name] = mine.get(name, 0.0) + float(amount)
    return held
