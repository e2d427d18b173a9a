"""Dependencies as the store keeps them: resolved to job ids when the batch is submitted,
refused naming the field when a job is unknown or the batch forms a cycle. SQLite and
PostgreSQL."""

from __future__ import annotations

import pytest
from store_support import job

from flotilla.model import DependencyCondition
from flotilla.store import InvalidDependencyError, JobState, SqlStore, Transition


def needs(name: str, condition: str = "succeeded") -> dict[str, str]:
    return {"job": name, "condition": condition}


def test_a_dependency_on_a_stored_job_is_resolved_to_its_id(store: SqlStore) -> None:
    [prep] = store.submit_jobs([job("prep")])
    [train] = store.submit_jobs([job("train", depends_on=[needs("prep", "finished")])])
    [dependency] = store.get_job(train).dependencies
    assert (dependency.job_id, dependency.job) == (prep, "prep")
    assert dependency.condition is DependencyCondition.FINISHED


def test_a_batch_may_name_its_own_jobs_and_the_default_condition_is_succeeded(
    store: SqlStore,
) -> None:
    ids = store.submit_jobs(
        [
            job("eval", depends_on=[needs("train")]),
            job("train", depends_on=[{"job": "prep"}]),
            job("prep"),
        ]
    )
    eval_id, train_id, prep_id = ids
    assert [d.job_id for d in store.get_job(eval_id).dependencies] == [train_id]
    [dependency] = store.get_job(train_id).dependencies
    assert (dependency.job_id, dependency.condition) == (prep_id, DependencyCondition.SUCCEEDED)
    assert store.get_job(prep_id).dependencies == ()


def test_a_name_resolves_to_the_latest_job_of_that_name_in_the_queue(store: SqlStore) -> None:
    [old] = store.submit_jobs([job("prep", queue="team-b")])
    store.transition(old, JobState.CANCELLED, "replaced")
    [other_queue] = store.submit_jobs([job("prep")])
    [ids_by_queue] = store.submit_jobs([job("train", depends_on=[needs("team-b/prep")])])
    [by_id] = store.submit_jobs([job("again", depends_on=[needs(old)])])
    assert store.get_job(ids_by_queue).dependencies[0].job_id == old
    assert store.get_job(by_id).dependencies[0].job_id == old
    [plain] = store.submit_jobs([job("plain", depends_on=[needs("prep")])])
    assert store.get_job(plain).dependencies[0].job_id == other_queue


def test_an_unknown_dependency_stores_nothing_and_names_the_field(store: SqlStore) -> None:
    with pytest.raises(InvalidDependencyError) as caught:
        store.submit_jobs([job("a"), job("b", depends_on=[needs("a"), needs("nope")])])
    assert caught.value.problems == [
        "jobs[1].depends_on[1].job: no job named 'nope' in queue 'team-a', and no job with "
        "that id (name a job of another queue as QUEUE/NAME)"
    ]
    assert store.list_jobs().jobs == []
    with pytest.raises(InvalidDependencyError) as caught:
        store.submit_jobs([job("c", count=3, depends_on=[needs("team-b/a")])])
    assert caught.value.problems == ["depends_on[0].job: no job named 'a' in queue 'team-b'"]


def test_a_cycle_in_a_batch_is_refused_naming_its_jobs(store: SqlStore) -> None:
    with pytest.raises(InvalidDependencyError) as caught:
        store.submit_jobs(
            [
                job("x", depends_on=[needs("z")]),
                job("y", depends_on=[needs("x")]),
                job("z", depends_on=[needs("y")]),
                job("self", depends_on=[needs("self")]),
            ]
        )
    assert caught.value.problems == [
        "jobs[0].depends_on: dependency cycle x → z → y → x",
        "jobs[3].depends_on: dependency cycle self → self",
    ]
    assert store.list_jobs().jobs == []


def test_dependencies_survive_a_reopen_and_reach_the_sync_feed(
    store: SqlStore, database_url: str
) -> None:
    [prep] = store.submit_jobs([job("prep")])
    [train] = store.submit_jobs([job("train", depends_on=[needs("prep", "failed")])])
    store.transition_many([Transition(prep, JobState.CANCELLED, "x")])
    reopened = SqlStore.open(database_url)
    try:
        fed = {record.id: record for record in reopened.jobs_since(0)}
        [dependency] = fed[train].dependencies
        assert (dependency.job_id, dependency.condition) == (prep, DependencyCondition.FAILED)
    finally:
        reopened.close()
