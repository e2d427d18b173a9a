"""Queues, quotas, clusters and nodes inside one session: the slowly changing configuration."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, delete, func, or_, select, update
from sqlalchemy.orm import Session

from flotilla.model import ClusterSpec, NodeGroup, QueueSpec, QuotaSpec
from flotilla.store.errors import ConflictError, NotFoundError
from flotilla.store.records import ClusterRecord, NodeRecord
from flotilla.store.schema import Cluster, Job, Node, Queue, Quota
from flotilla.store.states import TERMINAL_JOB_STATES


def put_queue(session: Session, spec: QueueSpec, now: datetime) -> None:
    row = session.get(Queue, spec.name)
    if row is None:
        row = Queue(name=spec.name)
        session.add(row)
    row.quota = spec.quota
    row.weight = spec.weight
    row.spec = spec.model_dump(mode="json")
    row.updated_at = now


def get_queue(session: Session, name: str) -> QueueSpec:
    row = session.get(Queue, name)
    if row is None:
        raise NotFoundError(f"no such queue: {name}")
    return QueueSpec.model_validate(row.spec)


def list_queues(session: Session) -> list[QueueSpec]:
    rows = session.scalars(select(Queue).order_by(Queue.name))
    return [QueueSpec.model_validate(row.spec) for row in rows]


def unfinished_job() -> ColumnElement[bool]:
    """A job that has not ended yet (what keeps its queue from being deleted)."""
    return Job.state.not_in([state.value for state in TERMINAL_JOB_STATES])


def delete_queue(session: Session, name: str) -> None:
    if session.get(Queue, name) is None:
        raise NotFoundError(f"no such queue: {name}")
    unfinished = session.scalar(select(func.count()).where(Job.queue == name, unfinished_job()))
    if unfinished:
        raise ConflictError(
            f"queue {name} has {unfinished} unfinished job(s); cancel them or wait until they "
            "end before deleting it (finished jobs keep its name in their history)"
        )
    session.execute(delete(Queue).where(Queue.name == name))


def put_quota(session: Session, spec: QuotaSpec, parent: str | None, now: datetime) -> None:
    if parent is not None and session.get(Quota, parent) is None:
        raise NotFoundError(f"no such parent quota: {parent}")
    existing = session.get(Quota, spec.name)
    position = existing.position if existing is not None else 0
    if existing is not None:
        session.delete(existing)
        session.flush()
    _insert_quota(session, spec, parent, position, now)


def _insert_quota(
    session: Session, spec: QuotaSpec, parent: str | None, position: int, now: datetime
) -> None:
    node = spec.model_dump(mode="json", exclude={"children"})
    session.add(Quota(name=spec.name, parent=parent, position=position, spec=node, updated_at=now))
    session.flush()
    for index, child in enumerate(spec.children):
        _insert_quota(session, child, spec.name, index, now)


def _quota_tree(rows: Sequence[Quota], name: str) -> QuotaSpec:
    by_parent: dict[str | None, list[Quota]] = {}
    by_name: dict[str, Quota] = {}
    for row in rows:
        by_parent.setdefault(row.parent, []).append(row)
        by_name[row.name] = row

    def build(row: Quota) -> QuotaSpec:
        children = sorted(by_parent.get(row.name, []), key=lambda child: child.position)
        data: dict[str, Any] = dict(row.spec)
        data["children"] = [build(child) for child in children]
        return QuotaSpec.model_validate(data)

    return build(by_name[name])


def get_quota(session: Session, name: str) -> QuotaSpec:
    if session.get(Quota, name) is None:
        raise NotFoundError(f"no such quota: {name}")
    return _quota_tree(list(session.scalars(select(Quota))), name)


def list_quotas(session: Session) -> list[QuotaSpec]:
    rows = list(session.scalars(select(Quota)))
    roots = sorted(row.name for row in rows if row.parent is None)
    return [_quota_tree(rows, name) for name in roots]


def delete_quota(session: Session, name: str) -> None:
    row = session.get(Quota, name)
    if row is None:
        raise NotFoundError(f"no such quota: {name}")
    session.delete(row)


def cluster_record(row: Cluster) -> ClusterRecord:
    return ClusterRecord(
        name=row.name,
        backend=row.backend,
        labels=row.labels,
        spec=row.spec,
        state=row.state,
        heartbeat_at=row.heartbeat_at,
        updated_at=row.updated_at,
        reason=row.reason,
    )


def node_record(row: Node) -> NodeRecord:
    return NodeRecord(
        cluster=row.cluster,
        name=row.name,
        resources=row.resources,
        labels=row.labels,
        spec=row.spec,
        state=row.state,
        heartbeat_at=row.heartbeat_at,
    )


def upsert_cluster(session: Session, spec: ClusterSpec, state: str, now: datetime) -> Cluster:
    row = session.get(Cluster, spec.name)
    if row is None:
        row = Cluster(name=spec.name, heartbeat_at=None)
        session.add(row)
    row.backend = spec.backend
    row.labels = dict(spec.labels)
    row.spec = spec.model_dump(mode="json")
    row.state = state
    row.reason = None
    row.updated_at = now
    session.flush()
    wanted: dict[str, NodeGroup] = {}
    for group in spec.nodes:
        for name in group.node_names():
            wanted[name] = group.model_copy(update={"name": name, "count": None})
    existing = {
        node.name: node for node in session.scalars(select(Node).where(Node.cluster == spec.name))
    }
    for name, node in existing.items():
        if name not in wanted:
            session.delete(node)
    for name, group in wanted.items():
        _put_node(session, spec.name, group, existing.get(name), "ready")
    return row


def _put_node(
    session: Session, cluster: str, group: NodeGroup, row: Node | None, state: str
) -> Node:
    if row is None:
        row = Node(cluster=cluster, name=group.name, state=state, heartbeat_at=None)
        session.add(row)
    row.resources = dict(group.resources)
    row.labels = dict(group.labels)
    row.spec = group.model_dump(mode="json")
    return row


def upsert_node(session: Session, cluster: str, group: NodeGroup, state: str) -> Node:
    if group.count is not None:
        raise ValueError(f"node {group.name}: give one node (no count)")
    if session.get(Cluster, cluster) is None:
        raise NotFoundError(f"no such cluster: {cluster}")
    row = _put_node(session, cluster, group, session.get(Node, (cluster, group.name)), state)
    row.state = state
    return row


def get_cluster(session: Session, name: str) -> Cluster:
    row = session.get(Cluster, name)
    if row is None:
        raise NotFoundError(f"no such cluster: {name}")
    return row


REASON_LIMIT = 2000
"""Longest reason a cluster keeps (characters); a longer one is cut and says so."""


def set_cluster_state(
    session: Session, name: str, state: str, reason: str | None, now: datetime
) -> Cluster:
    """``state`` with its ``reason`` (cleared when None)."""
    row = get_cluster(session, name)
    row.state = state
    if reason is not None and len(reason) > REASON_LIMIT:
        reason = reason[: REASON_LIMIT - 1] + "…"
    row.reason = reason
    row.updated_at = now
    return row


NODE_HEARTBEAT_EVERY = timedelta(seconds=60)
"""A node row's ``heartbeat_at`` is rewritten at most this often; its cluster's, at every
heartbeat. A node's heartbeat is only shown (a cluster's decides its health), and rewriting
5,000 node rows every cycle made 1.5M updates and a 247 MB table of dead rows on PostgreSQL
(issue 40)."""


def heartbeat(
    session: Session, cluster: str, nodes: Sequence[str] | None, now: datetime
) -> Cluster:
    row = get_cluster(session, cluster)
    row.heartbeat_at = now
    stale = or_(Node.heartbeat_at.is_(None), Node.heartbeat_at <= now - NODE_HEARTBEAT_EVERY)
    statement = update(Node).where(Node.cluster == cluster, stale).values(heartbeat_at=now)
    if nodes is not None:
        statement = statement.where(Node.name.in_(list(nodes)))
    session.execute(statement)
    return row
