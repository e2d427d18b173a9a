"""Each owner's uid of a root server's range, kept in the store (issue 37, migration 0012),
on SQLite and PostgreSQL: an owner keeps its uid across calls and store objects, two owners
never share one, uids the backend calls unusable are skipped, and a full range gives none."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from flotilla.model.owner_uids import OwnerUidRequest
from flotilla.store import SqlStore


def test_an_owner_keeps_its_uid_and_no_two_owners_share_one(
    store: SqlStore, database_url: str
) -> None:
    alice = store.owner_uid(OwnerUidRequest("alice", 60000, 60009))
    assert (alice.uid, alice.assigned) == (60000, True)
    again = store.owner_uid(OwnerUidRequest("alice", 60000, 60009, frozenset({60000})))
    assert (again.uid, again.assigned) == (60000, False)  # kept, even if now "unusable"
    bob = store.owner_uid(OwnerUidRequest("bob", 60000, 60009, frozenset({60001, 60002})))
    assert bob.uid == 60003
    reopened = SqlStore.open(database_url)
    try:
        assert reopened.owner_uid(OwnerUidRequest("bob", 60000, 60009)).uid == 60003
        assert reopened.owner_uids() == {"alice": 60000, "bob": 60003}
    finally:
        reopened.close()


def test_a_full_range_gives_no_uid(store: SqlStore) -> None:
    assert store.owner_uid(OwnerUidRequest("a", 61000, 61001)).uid == 61000
    assert store.owner_uid(OwnerUidRequest("b", 61000, 61001)).uid == 61001
    assert store.owner_uid(OwnerUidRequest("c", 61000, 61001)).uid is None


def test_owners_assigned_at_once_get_different_uids(store: SqlStore) -> None:
    owners = [f"user{index}" for index in range(8)]
    with ThreadPoolExecutor(4) as pool:
        found = list(pool.map(lambda o: store.owner_uid(OwnerUidRequest(o, 62000, 62099)), owners))
    uids = [answer.uid for answer in found]
    assert None not in uids and len(set(uids)) == len(owners)
