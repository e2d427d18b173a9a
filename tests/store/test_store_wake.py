"""Waking a scheduler in another process (``store/wake.py``), on a real PostgreSQL and on a
SQLite file: a submission or a cancel committed by one store wakes the listener of another,
a rolled-back one does not, the listener skips its own store's writes, and it listens again
after its connection is killed (PostgreSQL) or its process died (SQLite)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from flotilla.model import JobSpec, QueueSpec
from flotilla.store import DuplicateJobError, SqlStore
from flotilla.store.wake import NoWakes, PostgresWakes, SocketWakes

WAIT = 10.0
"""How long a wake may take before the test fails (not a performance bound: a hung test)."""


def _job(name: str) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": name,
            "queue": "team-a",
            "tasks": [{"name": "main", "resources": {"cpu": 1}}],
            "payload": {"sim": {"duration": 60}},
        }
    )


class Wakes:
    """Counts wakes; ``wait`` returns once there has been one more than ``seen``."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = threading.Condition()

    def __call__(self) -> None:
        with self._changed:
            self.count += 1
            self._changed.notify_all()

    def wait_beyond(self, seen: int) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.count > seen, timeout=WAIT)


@pytest.fixture
def stores(db_url: str) -> Iterator[tuple[SqlStore, SqlStore]]:
    """The scheduler's store and another process's (here: another engine, as ``serve``'s)."""
    scheduler, api = SqlStore.open(db_url), SqlStore.open(db_url)
    api.put_queue(QueueSpec(name="team-a"))
    yield scheduler, api
    scheduler.close()
    api.close()


def _listen(store: SqlStore, wakes: Wakes) -> PostgresWakes | SocketWakes:
    listener = store.listen_for_wakes(wakes)
    assert isinstance(listener, PostgresWakes | SocketWakes)
    assert listener.listening.wait(WAIT)
    return listener


def test_another_process_s_submit_and_cancel_wake_the_scheduler(
    stores: tuple[SqlStore, SqlStore],
) -> None:
    scheduler, api = stores
    wakes = Wakes()
    listener = _listen(scheduler, wakes)
    try:
        assert wakes.wait_beyond(0)  # the wake on connecting
        seen = wakes.count
        (job_id,) = api.submit_jobs([_job("a")])
        assert wakes.wait_beyond(seen)
        seen = wakes.count
        api.cancel(job_id, "no longer needed")
        assert wakes.wait_beyond(seen)
    finally:
        listener.close()


def test_only_committed_writes_of_other_stores_wake(stores: tuple[SqlStore, SqlStore]) -> None:
    """A submission that fails (rolled back) and the listener's own store's writes wake
    nothing: notifications arrive in commit order, so once the last write's wake is in, any
    wake of the earlier ones would have been too (the pause only gives it time to be
    counted; a slow server can make this test pass wrongly, never fail wrongly)."""
    scheduler, api = stores
    api.submit_jobs([_job("taken")])
    wakes = Wakes()
    listener = _listen(scheduler, wakes)
    try:
        assert wakes.wait_beyond(0)
        seen = wakes.count
        with pytest.raises(DuplicateJobError):
            api.submit_jobs([_job("twice"), _job("twice")])
        scheduler.submit_jobs([_job("own")])
        marker = api.submit_jobs([_job("marker")])
        assert marker and wakes.wait_beyond(seen)
        time.sleep(0.5)
        assert wakes.count == seen + 1, "a rolled-back or own write woke the scheduler"
    finally:
        listener.close()


def test_the_listener_reconnects_after_its_connection_is_killed(postgres_url: str) -> None:
    scheduler, api = SqlStore.open(postgres_url), SqlStore.open(postgres_url)
    api.put_queue(QueueSpec(name="team-a"))
    wakes = Wakes()
    listener = PostgresWakes(scheduler.engine, "scheduler", wakes, retry_seconds=0.05)
    try:
        assert listener.listening.wait(WAIT)
        with api.engine.begin() as connection:
            killed = connection.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE query = 'LISTEN flotilla_wake' AND pid <> pg_backend_pid()"
                )
            ).all()
        assert killed
        seen = wakes.count
        # Reconnected: it wakes once on connecting, and again for a submission.
        assert wakes.wait_beyond(seen)
        assert listener.listening.wait(WAIT)
        seen = wakes.count
        api.submit_jobs([_job("after-reconnect")])
        assert wakes.wait_beyond(seen)
    finally:
        listener.close()
        scheduler.close()
        api.close()


def test_an_in_memory_sqlite_listens_to_nothing() -> None:
    store = SqlStore.open("sqlite://")
    try:
        listener = store.listen_for_wakes(Wakes())
        assert isinstance(listener, NoWakes)
        listener.close()
    finally:
        store.close()


def test_on_sqlite_a_dead_listener_s_socket_is_removed_and_the_live_one_still_woken(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/flotilla.db"
    scheduler, api = SqlStore.open(url), SqlStore.open(url)
    api.put_queue(QueueSpec(name="team-a"))
    directory = tmp_path / "flotilla.db.wakes"
    wakes = Wakes()
    listener = _listen(scheduler, wakes)
    try:
        # A scheduler killed with -9 leaves its registration behind, bound to nobody.
        (directory / "dead.wake").touch()
        seen = wakes.count
        api.submit_jobs([_job("a")])
        assert wakes.wait_beyond(seen)
        assert not (directory / "dead.wake").exists()
    finally:
        listener.close()
        scheduler.close()
        api.close()
    assert list(directory.iterdir()) == []  # closed: its own socket is gone too
