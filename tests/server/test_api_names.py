"""A task or job name the backends cannot hold is refused at submission (issue 35): a task
name of 247–253 characters, which the API's 253-character ``Name`` allowed, made every run of
its job ``lost`` on the local backend (its replica files' names were too long) and re-queued
it forever. A 422 naming the field; nothing stored. The limits: ``model/names.py``."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from flotilla.api.submission import InvalidSubmission, parse_submission
from flotilla.model.names import MAX_TASK_NAME, NAME_MAX
from flotilla.store import SqlStore
from tests.server.api_support import spec, submit


def with_task(name: str) -> dict[str, object]:
    return spec("named", tasks=[{"name": name, "resources": {"cpu": 1}}])


@pytest.mark.parametrize("length", [MAX_TASK_NAME + 1, 247, 253])
def test_a_task_name_no_backend_can_hold_is_refused(
    client: TestClient, store: SqlStore, length: int
) -> None:
    response = client.post("/v1/jobs", json=with_task("t" * length))
    assert response.status_code == 422, response.text
    assert response.json()["problems"] == [
        f"tasks[0].name: {length} characters; a task name may have at most {MAX_TASK_NAME} "
        "(it names each replica's files, cgroup and Ray submission id: docs/jobs.md, Names)"
    ]
    assert store.list_jobs().jobs == []
    with pytest.raises(InvalidSubmission):  # the client (flotilla submit, the SDK) too
        parse_submission(with_task("t" * length))


def test_a_task_name_of_the_limit_is_taken(client: TestClient) -> None:
    assert len(submit(client, with_task("t" * MAX_TASK_NAME))) == 1


@pytest.mark.parametrize("field", [{"count": 10}, {"array": {"size": 10}}])
def test_a_job_name_whose_elements_the_store_cannot_hold_is_refused(
    client: TestClient, store: SqlStore, field: dict[str, Any]
) -> None:
    """Elements are named ``NAME-INDEX``: the last, ``NAME-9``, must fit 253 characters."""
    response = client.post("/v1/jobs", json=spec("j" * (NAME_MAX - 1), **field))
    assert response.status_code == 422, response.text
    [line] = response.json()["problems"]
    assert line.startswith("name: 252 characters; with 10 elements the last is named 254")
    assert line.endswith("give a name of at most 251 characters")
    assert store.list_jobs().jobs == []
    assert len(submit(client, spec("j" * (NAME_MAX - 2), **field))) == 10
