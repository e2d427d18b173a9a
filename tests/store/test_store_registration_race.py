"""Replicas started together on a fresh PostgreSQL database register the same cluster, queue
and fleet at the same moment (issue 23: 5 of 22 such starts crashed on ``UniqueViolation
pk_clusters``). A registration that loses the race to create the row updates it instead.

PostgreSQL only: SQLite serialises writers from the first statement, so there is no race."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.orm import Session
from tests.timing import limit

from flotilla.model import ClusterSpec, QueueSpec
from flotilla.store import SqlStore, catalog
from flotilla.store.schema import Cluster

SPEC = ClusterSpec.model_validate(
    {"name": "local", "nodes": [{"name": "n", "resources": {"cpu": 4}}]}
)


@pytest.fixture
def replicas(postgres_url: str) -> Iterator[tuple[SqlStore, SqlStore]]:
    first, second = SqlStore.open(postgres_url), SqlStore.open(postgres_url)
    yield first, second
    first.close()
    second.close()


class _LooksBeforeTheRivalCommits:
    """A session whose first look-up of a cluster misses it, as it did when the rival
    replica inserted the row between this one's look-up and its insert."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self.missed = False

    def get(self, entity: Any, ident: Any, **options: Any) -> Any:
        if entity is Cluster and not self.missed:
            self.missed = True
            return None
        return self._session.get(entity, ident, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


def test_a_cluster_registered_by_a_rival_meanwhile_is_updated_not_a_crash(
    replicas: tuple[SqlStore, SqlStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, rival = replicas
    original = catalog.upsert_cluster
    calls = 0

    def racing(session: Session, spec: ClusterSpec, state: str, now: Any) -> Cluster:
        nonlocal calls
        calls += 1
        if calls > 1:
            return original(session, spec, state, now)
        monkeypatch.setattr(catalog, "upsert_cluster", original)
        rival.upsert_cluster(spec)  # commits the row in its own connection
        return original(_LooksBeforeTheRivalCommits(session), spec, state, now)  # type: ignore[arg-type]

    monkeypatch.setattr(catalog, "upsert_cluster", racing)
    record = mine.upsert_cluster(SPEC.model_copy(update={"labels": {"by": "mine"}}))
    assert record.labels == {"by": "mine"}  # the second try updated the rival's row
    assert [cluster.name for cluster in rival.list_clusters()] == ["local"]
    assert [node.name for node in rival.list_nodes("local")] == ["n"]


def test_replicas_starting_together_all_register(postgres_url: str) -> None:
    """The shape of the reproduction: several replicas register the same cluster and the
    default queue at once; every one starts."""
    stores = [SqlStore.open(postgres_url) for _ in range(6)]
    start = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def register(store: SqlStore) -> None:
        try:
            start.wait(timeout=limit(60))
            store.upsert_cluster(SPEC)
            store.put_queue(QueueSpec(name="default"))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=register, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=limit(120))
    try:
        assert errors == []
        assert [cluster.name for cluster in stores[0].list_clusters()] == ["local"]
        assert [queue.name for queue in stores[0].list_queues()] == ["default"]
    finally:
        for store in stores:
            store.close()
