"""Reads on SQLite do not take the write lock, and the sync path parses a spec once."""

from __future__ import annotations

import threading
from pathlib import Path

from sqlalchemy import text
from tests.store.store_support import job

from flotilla.model import QueueSpec
from flotilla.store import JobState, SqlStore
from flotilla.store.convert import SpecCache


def test_a_read_does_not_wait_for_an_open_write_transaction(tmp_path: Path) -> None:
    store = SqlStore.open(f"sqlite:///{tmp_path / 'flotilla.db'}")
    try:
        store.put_queue(QueueSpec(name="team-a"))
        (job_id,) = store.submit_jobs([job("a")])
        read: list[JobState] = []
        with store.engine.connect() as writer:
            writer.execute(text("SELECT 1"))  # BEGIN IMMEDIATE: holds the write lock
            reader = threading.Thread(target=lambda: read.append(store.get_job(job_id).state))
            reader.start()
            reader.join()  # with a locking read this would wait out the busy timeout, then fail
            writer.rollback()
        assert read == [JobState.QUEUED]
        assert [record.id for record in store.jobs_since(0)] == [job_id]
    finally:
        store.close()


def test_the_spec_cache_parses_again_only_when_the_stored_text_changed() -> None:
    cache = SpecCache(limit=2)
    original = job("a").model_dump_json()
    first = cache.spec("id-1", original)
    assert cache.spec("id-1", original) is first
    changed = job("a", priority=5).model_dump_json()
    assert cache.spec("id-1", changed).priority == 5
    cache.spec("id-2", original)
    cache.spec("id-3", original)  # past the limit: starts over, still correct
    assert cache.spec("id-1", original) == first
