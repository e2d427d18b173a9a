"""`describe`, `cancel` and `wait` with an array id, and a retried job's `describe`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flotilla.model import JobSpec
from flotilla.store import SqlStore
from tests.cli.test_client_commands import run
from tests.server.api_support import failed_once, spec


def array_of(store: SqlStore, size: int, **fields: object) -> tuple[str, list[str]]:
    jobs = store.submit_jobs(
        [JobSpec.model_validate(spec("sweep", array={"size": size}, **fields))]
    )
    array_id = store.get_job(jobs[0]).array_id
    assert array_id is not None
    return array_id, jobs


def test_describe_an_array_shows_its_elements_and_counts_by_state(
    servers: list[str],
    store: SqlStore,
) -> None:
    array_id, jobs = array_of(store, 3)
    store.cancel(jobs[2], "not needed")
    result = run("describe", array_id)
    assert result.exit_code == 0, result.output
    assert f"sweep  ({array_id})" in result.output
    assert "cancelled 1, queued 2" in result.output
    # Elements read as ARRAY_INDEX (Slurm's JOBID_TASKID), short, and every command takes it.
    assert all(f"{array_id[:8]}_{index}" in result.output for index in range(3))


def test_an_element_is_named_array_underscore_index_everywhere_an_id_is(
    servers: list[str],
    store: SqlStore,
) -> None:
    array_id, jobs = array_of(store, 3)
    described = run("describe", f"{array_id[:8]}_1")
    assert described.exit_code == 0, described.output
    assert jobs[1] in described.output and jobs[0] not in described.output
    cancelled = run("cancel", f"{array_id[:8]}_2")
    assert cancelled.exit_code == 0, cancelled.output
    assert [store.get_job(job).state.value for job in jobs] == ["queued", "queued", "cancelled"]
    missing = run("describe", f"{array_id[:8]}_7")
    assert missing.exit_code != 0 and "no job" in missing.output.lower(), missing.output


def test_cancel_an_array_cancels_every_element_and_wait_waits_for_them_all(
    servers: list[str],
    store: SqlStore,
) -> None:
    array_id, jobs = array_of(store, 2)
    result = run("cancel", array_id)
    assert result.exit_code == 0, result.output
    assert f"{jobs[0]} sweep-0: cancelled" in result.output
    assert f"{jobs[1]} sweep-1: cancelled" in result.output
    waited = run("wait", array_id)
    assert waited.exit_code == 1  # cancelled is not succeeded
    assert f"{jobs[0]} cancelled" in waited.output and f"{jobs[1]} cancelled" in waited.output
    missing = run("cancel", "no-such-id")
    assert missing.exit_code == 1 and "no such job" in missing.output


def test_describe_a_retried_job_shows_its_policy_attempts_and_last_failure(
    servers: list[str],
    store: SqlStore,
) -> None:
    (job,) = store.submit_jobs(
        [JobSpec.model_validate(spec("flaky", retry={"limit": 2, "backoff": "fixed"}))]
    )
    failed_once(store, job, "east", not_before=datetime.now(UTC) + timedelta(seconds=10))
    result = run("describe", job)
    assert result.exit_code == 0, result.output
    assert "up to 2 more attempts on failed, lost, node_failure; backoff fixed" in result.output
    assert "Last failure  attempt 1: exited 3" in result.output
    assert "Not before" in result.output
