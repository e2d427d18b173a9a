"""``flotilla up`` end to end over HTTP: run a job and read its logs, cancel a running one,
refuse unauthenticated callers and an unauthenticated public bind."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import httpx

from flotilla.backends.local.processes import group_alive
from tests.e2e.service import FLOTILLA, Services, job_spec, run_records, wait_for
from tests.timing import limit


def test_submit_run_succeed_with_logs(services: Services, db_url: str, tmp_path: Path) -> None:
    server = services.start(
        db=db_url, state_dir=tmp_path / "runs", extra=["--cycle-interval", "0.1"]
    )
    [job_id] = server.submit(
        job_spec("hello", 'echo "hello from $FLOTILLA_JOB_NAME"; echo oops >&2; exit 0')
    )
    assert server.wait_states([job_id]) == {job_id: "succeeded"}

    job = server.job(job_id)
    assert [run["state"] for run in job["runs"]] == ["succeeded"]
    assert job["runs"][0]["exit_code"] == 0
    assert server.logs(job_id) == "hello from hello\n"
    assert server.logs(job_id, "stderr") == "oops\n"
    history = [(event["from_state"], event["to_state"]) for event in server.events(job_id)]
    assert history[-1][1] == "succeeded"
    assert any(to == "running" for _, to in history), history

    [failing] = server.submit(job_spec("fails", "exit 3"))
    assert server.wait_states([failing]) == {failing: "failed"}
    assert server.job(failing)["runs"][0]["exit_code"] == 3


def test_cancel_running_job_stops_its_processes(services: Services, tmp_path: Path) -> None:
    state_dir = tmp_path / "runs"
    server = services.start(
        db=f"sqlite:///{tmp_path / 'f.db'}", state_dir=state_dir, extra=["--cycle-interval", "0.1"]
    )
    [job_id] = server.submit(job_spec("sleeper", ["sleep", "60"]))
    server.wait_states([job_id], frozenset({"running"}))

    def recorded_pid() -> int | None:
        # The command's pid reaches the run's record just after it runs (its supervisor
        # writes it once it has forked the command): awaited, not assumed.
        [record] = run_records(state_dir)
        [replica] = record["replicas"]
        return replica["pid"]

    wait_for(lambda: recorded_pid() is not None, 30, lambda: "the command's pid on record")
    group = recorded_pid()
    assert group and group_alive(group)

    answer = server.cancel(job_id)
    assert answer["state"] == "running" and answer["cancel_requested"]
    assert server.wait_states([job_id], limit=30) == {job_id: "cancelled"}
    assert not group_alive(group), "the cancelled job's process group is still there"
    assert server.job(job_id)["runs"][0]["state"] == "cancelled"


def _token_file(tmp_path: Path) -> Path:
    def digest(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    path = tmp_path / "tokens.yaml"
    path.write_text(
        "users:\n"
        "  - name: ana\n"
        f"    token_sha256: {digest('ana-secret')}\n"
        "    queues: {default: [submit]}\n"
        "  - name: bo\n"
        f"    token_sha256: {digest('bo-secret')}\n"
        "    queues: {other: [submit]}\n"
        "  - name: ops\n"
        "    token_env: E2E_OPS_TOKEN\n"
        "    admin: true\n"
    )
    return path


def test_auth_refuses_missing_bad_and_unpermitted_tokens(
    services: Services, tmp_path: Path
) -> None:
    server = services.start(
        db=f"sqlite:///{tmp_path / 'f.db'}",
        state_dir=tmp_path / "runs",
        extra=["--auth", str(_token_file(tmp_path))],
        env={"E2E_OPS_TOKEN": "ops-secret"},
    )
    spec = job_spec("guarded", "true")
    url = server.url

    assert httpx.get(f"{url}/v1/jobs").status_code == 401
    assert httpx.post(f"{url}/v1/jobs", json=spec).status_code == 401
    bad = {"Authorization": "Bearer not-a-token"}
    assert httpx.get(f"{url}/v1/jobs", headers=bad).status_code == 401
    assert httpx.get(f"{url}/readyz").status_code == 200  # probes need no token

    bo = {"Authorization": "Bearer bo-secret"}
    refused = httpx.post(f"{url}/v1/jobs", json=spec, headers=bo)
    assert refused.status_code == 403
    assert "default" in refused.json()["message"]

    ana = {"Authorization": "Bearer ana-secret"}
    submitted = httpx.post(f"{url}/v1/jobs", json=spec, headers=ana)
    assert submitted.status_code == 201, submitted.text
    job_id = submitted.json()["ids"][0]
    # bo may not read ana's job: it is not there for him (issue 23)
    assert httpx.post(f"{url}/v1/jobs/{job_id}/cancel", json={}, headers=bo).status_code == 404
    ops = {"Authorization": "Bearer ops-secret"}
    assert httpx.put(f"{url}/v1/queues/q2", json={}, headers=ana).status_code == 403
    assert httpx.put(f"{url}/v1/queues/q2", json={}, headers=ops).status_code == 200
    assert httpx.get(f"{url}/v1/jobs/{job_id}", headers=bo).status_code == 404  # no read
    owner = httpx.get(f"{url}/v1/jobs/{job_id}", headers=ops).json()["owner"]
    assert owner == "ana"
    assert httpx.get(f"{url}/v1/jobs", headers=ana).json()["jobs"][0]["id"] == job_id
    assert "ops-secret" not in server.output() and "ana-secret" not in server.output()


def test_public_bind_without_auth_refuses_to_start(tmp_path: Path) -> None:
    finished = subprocess.run(
        [str(FLOTILLA), "up", "--host", "0.0.0.0", "--port", "0", "--db", "sqlite:///f.db"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=limit(60),
    )
    assert finished.returncode == 2
    assert "refusing to listen on 0.0.0.0 without authentication" in finished.stderr
    assert not (tmp_path / "f.db").exists(), "it touched the database before refusing"
