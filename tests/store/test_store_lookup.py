"""Finding a job by what a user types: id, id prefix, name (the latest), QUEUE/NAME."""

from __future__ import annotations

import pytest
from store_support import job

from flotilla.store import AmbiguousJobError, JobState, NotFoundError, SqlStore


def test_a_full_id_a_unique_prefix_and_a_name_find_the_job(store: SqlStore) -> None:
    [job_id] = store.submit_jobs([job("train")])
    assert store.find_job(job_id).id == job_id
    assert store.find_job(job_id[:12]).id == job_id
    assert store.find_job("train").id == job_id
    assert store.find_job("team-a/train").id == job_id


def test_a_name_means_the_latest_job_of_that_name(store: SqlStore) -> None:
    [first] = store.submit_jobs([job("hello")])
    store.cancel(first, "again")
    [second] = store.submit_jobs([job("hello")])
    assert store.find_job("hello").id == second
    assert store.find_job("team-a/hello").id == second
    assert store.find_job(first).id == first


def test_a_name_two_queues_use_is_ambiguous_and_queue_slash_name_decides(
    store: SqlStore,
) -> None:
    [in_a, in_b] = store.submit_jobs([job("train"), job("train", queue="team-b")])
    with pytest.raises(AmbiguousJobError) as caught:
        store.find_job("train")
    assert caught.value.candidates == [f"team-a/train ({in_a})", f"team-b/train ({in_b})"]
    assert store.find_job("team-b/train").id == in_b


def test_a_prefix_several_ids_share_is_ambiguous(store: SqlStore) -> None:
    ids = store.submit_jobs([job(f"j{index}") for index in range(40)])
    shared = next(
        first[:1] for first in ids if sum(other.startswith(first[:1]) for other in ids) > 1
    )
    with pytest.raises(AmbiguousJobError) as caught:
        store.find_job(shared)
    assert len(caught.value.candidates) >= 2
    assert all(f"({candidate_id})" in " ".join(caught.value.candidates)
               for candidate_id in ids if candidate_id.startswith(shared))  # fmt: skip


@pytest.mark.parametrize("reference", ["nope", "team-a/nope", "nope/train", "", "ffffffffff"])
def test_what_names_no_job_is_not_found(store: SqlStore, reference: str) -> None:
    store.submit_jobs([job("train")])
    with pytest.raises(NotFoundError):
        store.find_job(reference)


def test_count_jobs_counts_every_match_over_all_pages(store: SqlStore) -> None:
    ids = store.submit_jobs([job(f"j{index}", labels={"sweep": "s"}) for index in range(7)])
    store.submit_jobs([job("other", queue="team-b")])
    store.cancel(ids[0], "no")
    assert store.count_jobs() == 8
    assert store.count_jobs(queue="team-a", labels={"sweep": "s"}) == 7
    assert store.count_jobs(states=[JobState.QUEUED], queue="team-a") == 6
    assert store.count_jobs(name_contains="J1") == 1
