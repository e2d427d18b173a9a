"""Without a token config, the local token (``flotilla up``'s default) is the server's own
user, so the jobs it submits have an owner — shown and filterable — not "-"."""

from __future__ import annotations

import os
import pwd

from fastapi.testclient import TestClient

from flotilla.server import AuthSettings, create_app
from flotilla.server.run import server_auth
from flotilla.store import SqlStore
from tests.server.api_support import FakeScheduler, spec, submit


def test_jobs_submitted_with_the_local_token_are_owned_by_the_servers_user(
    store: SqlStore,
) -> None:
    auth = AuthSettings.local("local-secret", name="alice")
    client = TestClient(
        create_app(store, FakeScheduler(), auth, poll_interval=0),
        headers={"Authorization": "Bearer local-secret"},
    )
    (job,) = submit(client, spec("mine"))
    assert client.get(f"/v1/jobs/{job}").json()["owner"] == "alice"
    listed = client.get("/v1/jobs", params={"owner": "alice"}).json()["jobs"]
    assert [item["id"] for item in listed] == [job]
    assert client.get("/v1/jobs", params={"owner": "bob"}).json()["jobs"] == []
    other = TestClient(create_app(store, FakeScheduler(), auth, poll_interval=0))
    assert other.get("/v1/jobs").status_code == 401  # still: no token, no access


def test_flotilla_ups_local_token_is_named_after_the_user_it_runs_as() -> None:
    settings, token = server_auth(None, "127.0.0.1")
    assert token is not None
    user = settings.authenticate(f"Bearer {token}")
    assert user is not None and user.admin
    assert user.name == pwd.getpwuid(os.getuid()).pw_name
