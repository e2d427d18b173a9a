"""Secret env values (issue 12, defect 7): stored encrypted, never returned, opened only at
dispatch."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient

from flotilla.secrets import SecretBox, SecretError
from flotilla.server import AuthSettings, create_app
from flotilla.store import SqlStore
from tests.server.api_support import FakeScheduler, spec


def secret_job(value: object = "hunter2") -> dict[str, object]:
    job = spec("with-secret")
    job["payload"] = {"command": ["env"], "env": {"USER_NAME": "ana", "PASS": {"secret": value}}}
    return job


@pytest.fixture
def box() -> SecretBox:
    return SecretBox(Fernet.generate_key())


def test_a_secret_is_stored_encrypted_and_never_returned(
    store: SqlStore, scheduler: FakeScheduler, box: SecretBox, tmp_path: Path
) -> None:
    api = TestClient(create_app(store, scheduler, AuthSettings.disabled(), secrets=box))
    response = api.post("/v1/jobs", json=secret_job())
    assert response.status_code == 201, response.text
    (job_id,) = response.json()["ids"]
    shown = api.get(f"/v1/jobs/{job_id}").json()["spec"]["payload"]["env"]
    assert shown == {"USER_NAME": "ana", "PASS": {"secret": "(hidden)"}}
    stored = store.get_job(job_id).spec.payload
    assert stored is not None and "hunter2" not in str(stored)
    database = Path(str(tmp_path / "flotilla.db"))
    assert b"hunter2" not in database.read_bytes()
    assert box.open(stored)["env"] == {"USER_NAME": "ana", "PASS": "hunter2"}


def test_a_server_without_a_key_and_a_bad_secret_are_refused_naming_the_field(
    store: SqlStore, box: SecretBox
) -> None:
    keyless = TestClient(create_app(store, None, AuthSettings.disabled()))
    refused = keyless.post("/v1/jobs", json=secret_job())
    assert refused.status_code == 422
    assert refused.json()["problems"] == [
        "payload.env: this server has no secret key to store secrets"
    ]
    api = TestClient(create_app(store, None, AuthSettings.disabled(), secrets=box))
    bad = api.post("/v1/jobs", json=secret_job("nul\u0000byte"))
    assert bad.status_code == 400
    assert bad.json()["problems"] == ["payload.env.PASS.secret: NUL characters are not allowed"]
    not_text = api.post("/v1/jobs", json=secret_job(42))
    assert not_text.status_code == 422
    assert not_text.json()["problems"][0].startswith("payload.env.PASS")
    assert store.list_jobs().jobs == []


def test_another_key_cannot_open_a_secret(box: SecretBox) -> None:
    sealed = box.seal({"env": {"PASS": {"secret": "x"}}})
    with pytest.raises(SecretError, match=r"payload.env.PASS: cannot decrypt"):
        SecretBox(Fernet.generate_key()).open(sealed)


def test_the_key_file_is_made_once_for_this_user_only(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "secret.key"
    first = SecretBox.from_file(path)
    assert path.stat().st_mode & 0o777 == 0o600
    sealed = first.seal({"env": {"A": {"secret": "v"}}})
    assert SecretBox.from_file(path).open(sealed)["env"]["A"] == "v"
    assert "v" not in repr(first) and path.read_text().strip() not in repr(first)
