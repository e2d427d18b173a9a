"""Serials under concurrent writers: a reader syncing by serial never misses a commit."""

from __future__ import annotations

import threading

from store_support import job

from flotilla.store import SqlStore, make_engine


def test_an_incremental_reader_sees_every_job_of_concurrent_writers(
    store: SqlStore, database_url: str
) -> None:
    writers, batches, size = 3, 8, 10
    done = threading.Event()
    errors: list[BaseException] = []

    def write(writer: int) -> None:
        replica = SqlStore(make_engine(database_url))
        try:
            for batch in range(batches):
                specs = [job(f"w{writer}-b{batch}-{k}") for k in range(size)]
                replica.submit_jobs(specs)
        except BaseException as error:
            errors.append(error)
        finally:
            replica.close()

    seen: dict[str, int] = {}
    serials: list[int] = []

    def read() -> None:
        last = 0
        while True:
            finished = done.is_set()
            for record in store.jobs_since(last):
                serials.append(record.serial)
                seen[record.id] = record.serial
                last = record.serial
            if finished:
                return

    reader = threading.Thread(target=read)
    reader.start()
    threads = [threading.Thread(target=write, args=(index,)) for index in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    reader.join()
    assert errors == []
    assert serials == sorted(serials) and len(set(serials)) == len(serials)
    truth = {record.id for record in store.list_jobs(limit=10_000).jobs}
    assert len(truth) == writers * batches * size
    assert set(seen) == truth


def test_concurrent_submissions_of_one_name_give_one_job_each(
    store: SqlStore, database_url: str
) -> None:
    """A name may be used again (issue 37): each writer's job is stored, with serials in
    commit order, so "the newest of that name" is well defined."""
    writers = 4
    start = threading.Barrier(writers)
    outcomes: list[str] = []

    def write() -> None:
        replica = SqlStore(make_engine(database_url))
        try:
            start.wait()
            outcomes.extend(replica.submit_jobs([job("same-name")]))
        finally:
            replica.close()

    threads = [threading.Thread(target=write) for _ in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    records = store.list_jobs().jobs
    assert sorted(outcomes) == sorted(record.id for record in records) and len(outcomes) == 4
    newest = max(records, key=lambda record: record.serial)
    assert store.find_job("same-name").id == newest.id
