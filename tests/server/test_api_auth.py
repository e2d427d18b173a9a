"""Tokens, per-queue permissions, owners, and the refusal to listen openly without tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from flotilla.model import JobSpec, SpecError
from flotilla.server import AuthSettings, InsecureBindError, check_bind, create_app, run_server
from flotilla.server.auth import token_hash
from flotilla.store import JobState, SqlStore
from tests.server.api_support import FakeScheduler, spec

CONFIG = {
    "users": [
        {"name": "ana", "token_sha256": token_hash("ana-token"), "queues": {"team-a": ["submit"]}},
        {"name": "bo", "token_sha256": token_hash("bo-token"), "queues": {"*": ["submit"]}},
        {"name": "cy", "token_sha256": token_hash("cy-token"), "queues": {"team-a": ["admin"]}},
        {"name": "ops", "token_env": "OPS_TOKEN", "admin": True},
    ]
}


@pytest.fixture
def auth() -> AuthSettings:
    return AuthSettings.from_data(CONFIG, environ={"OPS_TOKEN": "ops-token"})


@pytest.fixture
def api(store: SqlStore, scheduler: FakeScheduler, auth: AuthSettings) -> TestClient:
    return TestClient(create_app(store, scheduler, auth, poll_interval=0))


def as_user(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_no_token_is_401_and_a_bad_token_is_401(api: TestClient) -> None:
    missing = api.get("/v1/jobs")
    assert missing.status_code == 401
    assert missing.json()["message"] == "a bearer token is required"
    assert missing.headers["www-authenticate"] == "Bearer"
    bad = api.get("/v1/jobs", headers=as_user("guess"))
    assert bad.status_code == 401 and bad.json()["message"] == "the bearer token is not valid"
    assert "guess" not in bad.text
    assert api.get("/v1/jobs", headers=as_user("ana-token")).status_code == 200


def test_authentication_comes_before_body_validation(api: TestClient) -> None:
    assert api.post("/v1/jobs", json={"bogus": 1}).status_code == 401
    assert api.put("/v1/queues/q", json={"weight": -1}).status_code == 401
    assert api.post("/v1/jobs/x/priority", json={}).status_code == 401


def test_probes_and_metrics_need_no_token(api: TestClient) -> None:
    assert api.get("/healthz").status_code == 200
    assert api.get("/readyz").status_code == 200
    assert api.get("/metrics").status_code == 200


def test_submit_needs_the_permission_on_every_queue_of_the_batch(
    api: TestClient, store: SqlStore
) -> None:
    body = {"jobs": [spec("a"), spec("b", "team-b")]}
    refused = api.post("/v1/jobs", json=body, headers=as_user("ana-token"))
    assert refused.status_code == 403
    assert refused.json()["message"] == "user 'ana' lacks the 'submit' permission on queue 'team-b'"
    assert store.list_jobs().jobs == []
    accepted = api.post("/v1/jobs", json=body, headers=as_user("bo-token"))
    assert accepted.status_code == 201


def test_the_owner_is_the_authenticated_user(api: TestClient, store: SqlStore) -> None:
    response = api.post(
        "/v1/jobs", json=spec("a", user="someone-else"), headers=as_user("ana-token")
    )
    job = store.get_job(response.json()["ids"][0])
    assert job.owner == "ana"


def test_cancel_own_jobs_with_submit_others_need_cancel(api: TestClient, store: SqlStore) -> None:
    (mine,) = api.post("/v1/jobs", json=spec("mine"), headers=as_user("ana-token")).json()["ids"]
    (theirs,) = api.post("/v1/jobs", json=spec("theirs"), headers=as_user("bo-token")).json()["ids"]
    assert api.post(f"/v1/jobs/{mine}/cancel", headers=as_user("ana-token")).status_code == 200
    refused = api.post(f"/v1/jobs/{theirs}/cancel", headers=as_user("ana-token"))
    assert refused.status_code == 404  # ana may not read bo's job: it is not there for her
    assert refused.json()["message"] == f"no such job: {theirs!r} is no job's id, id prefix or name"
    assert store.get_job(theirs).state is JobState.QUEUED
    assert api.post(f"/v1/jobs/{theirs}/cancel", headers=as_user("cy-token")).status_code == 200


def test_bulk_cancel_matches_only_the_jobs_the_caller_may_see(
    api: TestClient, store: SqlStore
) -> None:
    """Issue 23: a 403 for a label match in another's job told ana that it exists."""
    ana = api.post("/v1/jobs", json=spec("a", labels={"s": "1"}), headers=as_user("ana-token"))
    bo = api.post("/v1/jobs", json=spec("b", labels={"s": "1"}), headers=as_user("bo-token"))
    done = api.post("/v1/jobs/cancel", json={"labels": {"s": "1"}}, headers=as_user("ana-token"))
    assert done.status_code == 200
    assert [job["id"] for job in done.json()["cancelled"]] == ana.json()["ids"]
    assert store.get_job(bo.json()["ids"][0]).state is JobState.QUEUED


def test_bulk_cancel_is_all_or_nothing_on_permissions(store: SqlStore) -> None:
    config = {
        "users": [
            {"name": "ana", "token_sha256": token_hash("a"), "queues": {"team-a": ["submit"]}},
            {
                "name": "eve",
                "token_sha256": token_hash("e"),
                "queues": {"team-a": ["submit", "read"]},
            },
        ]
    }
    api = TestClient(create_app(store, None, AuthSettings.from_data(config)))
    ana = api.post("/v1/jobs", json=spec("a", labels={"s": "1"}), headers=as_user("a"))
    eve = api.post("/v1/jobs", json=spec("e", labels={"s": "1"}), headers=as_user("e"))
    refused = api.post("/v1/jobs/cancel", json={"labels": {"s": "1"}}, headers=as_user("e"))
    assert refused.status_code == 403  # eve sees ana's job and may not cancel it
    ids = [ana.json()["ids"][0], eve.json()["ids"][0]]
    assert [store.get_job(job_id).state for job_id in ids] == [JobState.QUEUED] * 2


def test_reprioritize_needs_queue_admin(api: TestClient) -> None:
    (job_id,) = api.post("/v1/jobs", json=spec("a"), headers=as_user("ana-token")).json()["ids"]
    body = {"priority": 5}
    refused = api.post(f"/v1/jobs/{job_id}/priority", json=body, headers=as_user("ana-token"))
    assert refused.status_code == 403 and "'admin' permission on queue 'team-a'" in refused.text
    allowed = api.post(f"/v1/jobs/{job_id}/priority", json=body, headers=as_user("cy-token"))
    assert allowed.status_code == 200


def test_queue_and_quota_changes_need_the_admin_role(api: TestClient) -> None:
    for token in ("ana-token", "cy-token"):
        refused = api.put("/v1/queues/new", json={}, headers=as_user(token))
        assert refused.status_code == 403 and "needs the admin role" in refused.json()["message"]
    assert api.delete("/v1/queues/team-a", headers=as_user("cy-token")).status_code == 403
    assert api.put("/v1/quotas/q", json={}, headers=as_user("bo-token")).status_code == 403
    assert api.put("/v1/queues/new", json={}, headers=as_user("ops-token")).status_code == 200
    assert api.get("/v1/queues", headers=as_user("ana-token")).status_code == 200


def test_without_a_token_config_only_loopback_is_allowed() -> None:
    check_bind("127.0.0.1", AuthSettings.disabled())
    check_bind("::1", AuthSettings.disabled())
    check_bind("localhost", AuthSettings.disabled())
    with pytest.raises(InsecureBindError, match=r"refusing to listen on 0\.0\.0\.0"):
        check_bind("0.0.0.0", AuthSettings.disabled())
    with pytest.raises(InsecureBindError, match="--auth FILE"):
        check_bind("10.1.2.3", AuthSettings.disabled())


def test_run_server_refuses_before_listening(store: SqlStore, auth: AuthSettings) -> None:
    app = create_app(store, None, AuthSettings.disabled())
    with pytest.raises(InsecureBindError):
        run_server(app, "0.0.0.0", 0)


def test_a_token_config_allows_any_address(auth: AuthSettings) -> None:
    check_bind("0.0.0.0", auth)


def test_token_config_problems_name_the_field(tmp_path: Path) -> None:
    config = {
        "users": [
            {"name": "a", "token_sha256": "abc"},
            {"name": "b", "token_env": "MISSING_TOKEN"},
            {"name": "c", "token_sha256": token_hash("x"), "queues": {"q": ["delete"]}},
            {"name": "d"},
        ]
    }
    with pytest.raises(SpecError) as caught:
        AuthSettings.from_data(config, environ={})
    problems = caught.value.problems
    assert any(line.startswith("users[0].token_sha256: ") for line in problems)
    assert any(line.startswith("users[2].queues.q[0]: ") for line in problems)
    assert "users[3]: give exactly one of token_sha256 and token_env" in problems
    dup = {"users": [{"name": "a", "token_env": "T"}, {"name": "b", "token_env": "T"}]}
    with pytest.raises(SpecError, match="same token as user 'a'"):
        AuthSettings.from_data(dup, environ={"T": "t"})
    with pytest.raises(SpecError, match="environment variable MISSING_TOKEN is not set"):
        AuthSettings.from_data({"users": [config["users"][1]]}, environ={})


def test_the_token_config_example_of_the_docs_works_as_written(tmp_path: Path) -> None:
    text = (Path(__file__).parents[2] / "docs" / "api.md").read_text()
    example = text.split("The token config (YAML or JSON):\n\n```yaml\n", 1)[1].split("```")[0]
    path = tmp_path / "tokens.yaml"
    path.write_text(example)
    auth = AuthSettings.from_file(path, environ={"FLOTILLA_OPS_TOKEN": "ops-secret"})
    names = {token: auth.authenticate(f"Bearer {token}") for token in ("secret", "cy-secret")}
    assert {token: user.name if user else None for token, user in names.items()} == {
        "secret": "ana",
        "cy-secret": "cy",
    }
    ops = auth.authenticate("Bearer ops-secret")
    assert ops is not None and ops.admin


def test_a_token_sha256_that_is_not_a_digest_says_what_one_looks_like() -> None:
    config = {"users": [{"name": "cy", "token_sha256": "0f9c9b..."}]}
    with pytest.raises(SpecError) as caught:
        AuthSettings.from_data(config, environ={})
    (problem,) = caught.value.problems
    assert problem.startswith("users[0].token_sha256: must be the sha256 of the token as 64 hex")
    assert 'printf %s "$TOKEN" | sha256sum' in problem


def test_token_config_loads_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "auth.yaml"
    path.write_text(
        f"users:\n  - name: ana\n    token_sha256: {token_hash('t')}\n    admin: true\n"
    )
    auth = AuthSettings.from_file(path)
    user = auth.authenticate("Bearer t")
    assert user is not None and user.name == "ana" and user.admin
    assert auth.authenticate("Basic t") is None


def test_a_submitter_reads_only_their_own_jobs_without_read_on_the_queue(
    api: TestClient,
) -> None:
    """Issue 12, defect 7: ``submit`` is not ``read``; ``cancel``/``admin`` include it."""
    (theirs,) = api.post("/v1/jobs", json=spec("theirs"), headers=as_user("bo-token")).json()["ids"]
    (mine,) = api.post("/v1/jobs", json=spec("mine"), headers=as_user("ana-token")).json()["ids"]
    ana = as_user("ana-token")
    for path in ("", "/events", "/why", "/logs", "/events/stream"):
        refused = api.get(f"/v1/jobs/{theirs}{path}", headers=ana)
        assert refused.status_code == 404, path  # as if it did not exist (issue 23)
        assert refused.json()["message"] == (
            f"no such job: {theirs!r} is no job's id, id prefix or name"
        )
    assert api.get(f"/v1/jobs/{mine}", headers=ana).status_code == 200
    listed = api.get("/v1/jobs", headers=ana).json()["jobs"]
    assert [job["id"] for job in listed] == [mine]
    assert api.get("/v1/jobs?owner=bo", headers=ana).status_code == 403
    assert api.get("/v1/jobs?queue=team-a", headers=ana).json()["jobs"] == listed
    cy = as_user("cy-token")  # admin on team-a
    assert api.get(f"/v1/jobs/{theirs}", headers=cy).status_code == 200
    assert len(api.get("/v1/jobs?queue=team-a", headers=cy).json()["jobs"]) == 2


def test_read_permission_from_the_token_config(store: SqlStore) -> None:
    config = {
        "users": [
            {"name": "ana", "token_sha256": token_hash("a"), "queues": {"team-a": ["submit"]}},
            {"name": "eve", "token_sha256": token_hash("e"), "queues": {"team-a": ["read"]}},
        ]
    }
    api = TestClient(create_app(store, None, AuthSettings.from_data(config)))
    (job,) = api.post("/v1/jobs", json=spec("x"), headers=as_user("a")).json()["ids"]
    assert api.get(f"/v1/jobs/{job}", headers=as_user("e")).status_code == 200
    assert len(api.get("/v1/jobs?queue=team-a", headers=as_user("e")).json()["jobs"]) == 1
    assert api.post(f"/v1/jobs/{job}/cancel", headers=as_user("e")).status_code == 403


def test_a_dependency_on_another_queues_job_needs_read_on_it(
    api: TestClient, store: SqlStore
) -> None:
    [other] = store.submit_jobs([JobSpec.model_validate(spec("secret", "team-b"))])
    by_name = spec("mine", depends_on=[{"job": "team-b/secret"}])
    refused = api.post("/v1/jobs", json=by_name, headers=as_user("ana-token"))
    assert refused.status_code == 403, refused.text  # about the queue, whose name is public
    assert "'read' permission on queue 'team-b'" in refused.json()["message"]
    by_id = api.post(
        "/v1/jobs", json=spec("mine", depends_on=[{"job": other}]), headers=as_user("ana-token")
    )
    unknown = api.post(
        "/v1/jobs", json=spec("mine", depends_on=[{"job": "f" * 32}]), headers=as_user("ana-token")
    )
    # A job she may not read is refused as an id naming no job is (issue 23).
    assert (by_id.status_code, unknown.status_code) == (400, 400), by_id.text
    assert by_id.json()["problems"] == [
        line.replace("f" * 32, other) for line in unknown.json()["problems"]
    ]
    own = api.post(
        "/v1/jobs",
        json={"jobs": [spec("first"), spec("then", depends_on=[{"job": "team-a/first"}])]},
        headers=as_user("ana-token"),
    )
    assert own.status_code == 201, own.text
    allowed = api.post(
        "/v1/jobs",
        json=spec("ops-job", "team-a", depends_on=[{"job": other}]),
        headers=as_user("ops-token"),
    )
    assert allowed.status_code == 201, allowed.text


def test_another_queues_job_is_answered_as_if_it_did_not_exist(api: TestClient) -> None:
    """Issue 23: a 403 where a made-up id is a 404 told a tenant that the job exists."""
    bo, ana = as_user("bo-token"), as_user("ana-token")
    submitted = api.post("/v1/jobs", json=spec("hidden", "team-b"), headers=bo).json()
    job = submitted["ids"][0]
    made_up = "f" * len(job)
    array = api.post("/v1/jobs", json=spec("arr", "team-b", array={"size": 2}), headers=bo).json()[
        "jobs"
    ][0]["array_id"]
    for method, path, body in (
        ("GET", "/v1/jobs/{}", None),
        ("GET", "/v1/jobs/{}/why", None),
        ("GET", "/v1/jobs/{}/logs", None),
        ("POST", "/v1/jobs/{}/cancel", None),
        ("POST", "/v1/jobs/{}/priority", {"priority": 1}),
    ):
        real = api.request(method, path.format(job), json=body, headers=ana)
        fake = api.request(method, path.format(made_up), json=body, headers=ana)
        assert (real.status_code, fake.status_code) == (404, 404), path
        assert real.json()["message"] == fake.json()["message"].replace(made_up, job)
    named = api.get("/v1/queues/team-b/jobs/hidden", headers=ana)
    unknown = api.get("/v1/queues/team-b/jobs/nothing", headers=ana)
    assert (named.status_code, unknown.status_code) == (404, 404)
    assert named.json()["message"] == unknown.json()["message"].replace("nothing", "hidden")
    assert api.get(f"/v1/arrays/{array}", headers=ana).json() == {
        "message": f"no such array: {array}",
        "problems": [],
    }
    assert api.post(f"/v1/arrays/{array}/cancel", headers=ana).status_code == 404
    assert api.get(f"/v1/jobs/{job}", headers=bo).status_code == 200


def test_a_name_is_resolved_among_the_jobs_the_caller_may_read(api: TestClient) -> None:
    """Issue 23: a 409 counting the candidates in unreadable queues told a tenant that
    another queue has a job of that name."""
    ana, bo, ops = as_user("ana-token"), as_user("bo-token"), as_user("ops-token")
    (mine,) = api.post("/v1/jobs", json=spec("train"), headers=ana).json()["ids"]
    (theirs,) = api.post("/v1/jobs", json=spec("train", "team-b"), headers=bo).json()["ids"]
    assert api.get("/v1/jobs/train", headers=ana).json()["id"] == mine
    assert api.get("/v1/jobs/train", headers=bo).json()["id"] == theirs
    both = api.get("/v1/jobs/train", headers=ops)
    assert both.status_code == 409 and len(both.json()["problems"]) == 2
    api.post("/v1/jobs", json=spec("dup", "team-b"), headers=bo)
    api.post("/v1/jobs", json=spec("dup"), headers=ops)
    hidden = api.get("/v1/jobs/dup", headers=ana)
    unknown = api.get("/v1/jobs/nothing", headers=ana)
    assert (hidden.status_code, unknown.status_code) == (404, 404)
    assert hidden.json()["message"] == unknown.json()["message"].replace("nothing", "dup")
