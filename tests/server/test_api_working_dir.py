"""A command job's ``working_dir`` is refused at submission (issue 23), not first at dispatch:
one that leaves the run's scratch dir (``..``), or an absolute path no cluster of the fleet
allows (its admin-set ``allowed_working_dirs``). A 422 naming the field, that names no
allowed directory; nothing is stored."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from flotilla.api.submission import InvalidSubmission, parse_submission
from flotilla.model.fleet_loader import fleet_from_data
from flotilla.service.fleet import fleet_change
from flotilla.store import SqlStore
from tests.server.api_support import spec, submit


def command(working_dir: str) -> dict[str, Any]:
    return {"command": ["pwd"], "working_dir": working_dir}


def apply(store: SqlStore, *allowed: list[Any]) -> None:
    """A fleet of local clusters, one per ``allowed_working_dirs`` list."""
    clusters = [
        {"name": f"here-{index}", "backend": "local", "settings": {"allowed_working_dirs": dirs}}
        for index, dirs in enumerate(allowed)
    ]
    data = {"name": "t", "clusters": clusters, "queues": [{"name": "team-a"}]}
    store.apply_fleet(fleet_change(fleet_from_data(data, "test")))


def refused(client: TestClient, body: Any) -> list[str]:
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 422, response.text
    problems: list[str] = response.json()["problems"]
    return problems


@pytest.mark.parametrize("working_dir", ["..", "../../state/runs", "data/../../x", "a/.."])
def test_a_working_dir_that_leaves_the_scratch_dir_is_refused(
    client: TestClient, store: SqlStore, working_dir: str
) -> None:
    [line] = refused(client, spec("escape", payload=command(working_dir)))
    assert line == (
        f"payload.working_dir: {working_dir!r} leaves the run's scratch dir ('..'); give a "
        "path inside it"
    )
    assert store.list_jobs().jobs == []
    with pytest.raises(InvalidSubmission):  # the client (flotilla submit, the SDK) too
        parse_submission(spec("escape", payload=command(working_dir)))


def test_an_absolute_working_dir_no_cluster_of_the_fleet_allows_is_refused_saying_how(
    client: TestClient, store: SqlStore
) -> None:
    apply(store, [])
    [line] = refused(client, spec("abs", payload=command("/var/lib/flotilla/runs/r-1")))
    assert line.startswith("payload.working_dir: '/var/lib/flotilla/runs/r-1' is an absolute")
    assert "allowed_working_dirs" in line
    assert "flotilla up --allow-working-dir /var/lib/flotilla/runs/r-1" in line
    assert store.list_jobs().jobs == []


def test_without_a_fleet_an_absolute_working_dir_is_the_local_clusters_to_judge(
    client: TestClient, store: SqlStore
) -> None:
    """Issue 37: ``flotilla up``'s own cluster takes the submit directory ``run`` sends (the
    job enters it as its own user: the check), or those of ``--allow-working-dir``, which
    only that backend knows; so do a fleet's local clusters that name no list or take any."""
    submit(client, spec("submit-dir", payload=command("/home/ana/project")))
    data = {
        "name": "t",
        "clusters": [
            {"name": "any", "backend": "local", "settings": {"any_working_dir": True}},
            {"name": "listed", "backend": "local", "settings": {"allowed_working_dirs": []}},
        ],
        "queues": [{"name": "team-a"}],
    }
    store.apply_fleet(fleet_change(fleet_from_data(data, "test")))
    submit(client, spec("anywhere", payload=command("/home/ana/project")))
    assert [job.name for job in store.list_jobs().jobs] == ["submit-dir", "anywhere"]


def test_an_absolute_working_dir_under_an_allowed_dir_of_some_cluster_is_taken(
    client: TestClient, store: SqlStore
) -> None:
    apply(store, [], ["/srv/shared", "/data/team"])
    submit(client, spec("inside", payload=command("/srv/shared/project/./x")))
    submit(client, spec("root", payload=command("/data/team")))
    submit(client, spec("relative", payload=command("out/logs")))
    body = {
        "jobs": [
            spec("ok", payload=command("/srv/shared/a")),
            spec("sibling", payload=command("/srv/shared-not")),
            spec("escape", payload=command("/srv/shared/../../etc")),
        ]
    }
    problems = refused(client, body)
    assert [line.split(":")[0] for line in problems] == [
        "jobs[1].payload.working_dir",
        "jobs[2].payload.working_dir",
    ]
    assert not any("/data/team" in line or "'/srv/shared'" in line for line in problems)
    assert [job.name for job in store.list_jobs().jobs] == ["inside", "root", "relative"]


def test_allowed_dirs_given_by_a_secret_reference_are_left_to_dispatch(
    client: TestClient, store: SqlStore
) -> None:
    apply(store, [{"env": "ALLOWED"}])  # not resolved by the API: dispatch decides
    submit(client, spec("abs", payload=command("/srv/shared/x")))


def test_a_container_jobs_working_dir_is_a_path_in_its_image(
    client: TestClient, store: SqlStore
) -> None:
    image = {"image": "busybox", "working_dir": "/app"}
    submit(client, spec("image", type="container", payload=image))
