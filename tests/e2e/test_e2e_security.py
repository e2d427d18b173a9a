"""``flotilla up`` against a hostile neighbour: a web page on the same machine, a job that
looks around, a submitter who reads what is not theirs (issue 12, defects 6-8)."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

import httpx
import pytest

from flotilla.runtime import server_file
from tests.e2e.service import FLOTILLA, Services, job_spec, wait_for
from tests.timing import limit


def test_the_loopback_default_refuses_a_cross_origin_page_and_the_cli_still_works(
    services: Services, tmp_path: Path
) -> None:
    server = services.start(db=f"sqlite:///{tmp_path / 'f.db'}", state_dir=tmp_path / "runs")
    url, spec = server.url, job_spec("from-a-web-page", "touch /tmp/pwned")
    page = {"Origin": "http://evil.example", "Content-Type": "text/plain"}

    # What a web page can send: no token (it cannot read the file), a simple content type.
    as_page = httpx.post(f"{url}/v1/jobs", content=str(spec), headers=page)
    assert as_page.status_code == 415, as_page.text
    no_token = httpx.post(f"{url}/v1/jobs", json=spec, headers={"Origin": "http://evil.example"})
    assert no_token.status_code == 401, no_token.text
    # Even with the token, a body must be JSON (a cross-origin JSON POST needs a preflight)
    # and the Host must be loopback (DNS rebinding sends the page's own name).
    token = {"Authorization": f"Bearer {server.token}"}
    as_text = httpx.post(f"{url}/v1/jobs", content=str(spec), headers={**page, **token})
    assert as_text.status_code == 415 and "content-type" in as_text.json()["message"]
    rebound = httpx.post(f"{url}/v1/jobs", json=spec, headers={**token, "Host": "evil.example"})
    assert rebound.status_code == 403 and "Host" in rebound.json()["message"]
    assert server.http.get("/v1/jobs").json()["jobs"] == []

    # The token file is this user's alone, and the CLI finds it with no token given.
    path = server_file(server.port)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert server.token is not None and server.token not in server.output()
    environment = {k: v for k, v in os.environ.items() if k != "FLOTILLA_TOKEN"}
    listed = subprocess.run(
        [str(FLOTILLA), "jobs"],
        env={**environment, "FLOTILLA_SERVER": url},
        capture_output=True,
        text=True,
        timeout=limit(60),
    )
    assert listed.returncode == 0, listed.stderr
    server.stop()
    assert not path.exists(), "the token file outlived its server"


def _tokens(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.yaml"
    path.write_text(
        "users:\n"
        f"  - {{name: ana, token_sha256: {hashlib.sha256(b'ana-t').hexdigest()},"
        " queues: {default: [submit]}}\n"
        f"  - {{name: bo, token_sha256: {hashlib.sha256(b'bo-t').hexdigest()},"
        " queues: {default: [submit]}}\n"
        "  - {name: ops, token_env: E2E_ADMIN_TOKEN, admin: true}\n"
    )
    return path


@pytest.mark.skipif(os.geteuid() != 0, reason="run_as needs the server to run as root")
def test_a_submit_only_job_cannot_read_the_admin_token_another_users_secret_or_the_state(
    services: Services, tmp_path: Path
) -> None:
    db = tmp_path / "server" / "f.db"
    db.parent.mkdir(mode=0o700)
    server = services.start(
        db=f"sqlite:///{db}",
        state_dir=tmp_path / "server" / "runs",
        extra=["--auth", str(_tokens(tmp_path)), "--run-as", "nobody", "--cycle-interval", "0.1"],
        env={
            "E2E_ADMIN_TOKEN": "the-admin-token",
            "FLOTILLA_SECRET_KEY_FILE": str(tmp_path / "secret.key"),
        },
    )
    url = server.url
    ana, bo = {"Authorization": "Bearer ana-t"}, {"Authorization": "Bearer bo-t"}
    ops = {"Authorization": "Bearer the-admin-token"}
    with_secret = job_spec("bo-job", 'echo "pass=$PASS"')
    with_secret["payload"]["env"] = {"PASS": {"secret": "bo-password"}}
    bo_job = httpx.post(f"{url}/v1/jobs", json=with_secret, headers=bo).json()["ids"][0]
    snoop = (
        # Its parent as the server sees it ($PPID is 1 in the job's own PID namespace).
        "env; read -r _ _ _ parent _ </proc/self/stat; "
        f"cat /proc/$parent/environ /proc/{server.process.pid}/environ; "
        f"cat {db} | head -c 100000; ls {tmp_path / 'server' / 'runs'}; id -un"
    )
    ana_job = httpx.post(f"{url}/v1/jobs", json=job_spec("snoop", snoop), headers=ana).json()[
        "ids"
    ][0]
    server.token = "the-admin-token"
    server.http.headers["Authorization"] = "Bearer the-admin-token"
    server.wait_states([bo_job, ana_job])

    seen = server.logs(ana_job) + server.logs(ana_job, "stderr")
    assert "the-admin-token" not in seen and "bo-password" not in seen
    assert "E2E_ADMIN_TOKEN" not in seen
    assert server.logs(ana_job).split()[-1] == "nobody"
    assert httpx.get(f"{url}/v1/jobs/{bo_job}", headers=ana).status_code == 404
    assert httpx.get(f"{url}/v1/jobs/{bo_job}/logs", headers=ana).status_code == 404
    detail = httpx.get(f"{url}/v1/jobs/{bo_job}", headers=ops).json()
    assert detail["spec"]["payload"]["env"] == {"PASS": {"secret": "(hidden)"}}
    assert server.logs(bo_job) == "pass=bo-password\n"  # delivered to the job, and only there
    assert "bo-password" not in server.output() and "the-admin-token" not in server.output()
    assert b"bo-password" not in db.read_bytes()


def test_as_root_one_tenants_job_cannot_read_write_or_kill_anothers(
    services: Services, tmp_path: Path
) -> None:
    """Issue 23: every job ran as ``nobody``, so a submit-only tenant's job read another
    tenant's decrypted secret from ``/proc/PID/environ``, wrote into its scratch dir and
    killed it with ``kill -9 -1``. As root, ``flotilla up`` now gives each owner (tenant) a
    uid of its own (issue 37; each run one of its own before)."""
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("this test must run as root in CI (owners' uids need root)")
        pytest.skip("owners' uids need the server to run as root")
    base = 56000 + (os.getpid() % 50) * 20
    server = services.start(
        db=f"sqlite:///{tmp_path / 'f.db'}",
        state_dir=tmp_path / "runs",
        extra=["--auth", str(_tokens(tmp_path)), "--uid-range", f"{base}-{base + 19}"],
        env={
            "E2E_ADMIN_TOKEN": "the-admin-token",
            "FLOTILLA_SECRET_KEY_FILE": str(tmp_path / "secret.key"),
        },
    )
    url = server.url
    ana, bo = {"Authorization": "Bearer ana-t"}, {"Authorization": "Bearer bo-t"}
    victim = job_spec("bo-job", "echo ready; pwd; exec sleep 120")
    victim["payload"]["env"] = {"PASS": {"secret": "bo-password"}}
    submitted = httpx.post(f"{url}/v1/jobs", json=victim, headers=bo)
    assert submitted.status_code == 201, (submitted.status_code, submitted.text)
    bo_job = submitted.json()["ids"][0]
    server.token = "the-admin-token"
    server.http.headers["Authorization"] = "Bearer the-admin-token"

    def bo_ready() -> list[str]:
        response = httpx.get(f"{url}/v1/jobs/{bo_job}/logs", headers=bo)
        return response.json()["data"].split() if response.status_code == 200 else []

    wait_for(lambda: len(bo_ready()) == 2, 60, "bo's job to start")
    _, scratch = bo_ready()
    # Its pid as this machine sees it (a job's /proc is its own PID namespace's: issue 35).
    ids = httpx.get(f"{url}/v1/jobs/{bo_job}/engine-ids", headers=bo).json()
    pid = ids["replicas"][0]["engine_id"].removeprefix("pid ")
    attack = (
        f"cat /proc/{pid}/environ && echo read-environ; "
        f"touch {scratch}/from-ana && echo wrote-scratch; kill -9 -1; echo still-here"
    )
    ana_job = httpx.post(f"{url}/v1/jobs", json=job_spec("snoop", attack), headers=ana).json()[
        "ids"
    ][0]
    assert server.wait_states([ana_job]) == {ana_job: "succeeded"}
    seen = server.logs(ana_job) + server.logs(ana_job, "stderr")
    assert "bo-password" not in seen and "read-environ" not in seen
    assert "wrote-scratch" not in seen and not (Path(scratch) / "from-ana").exists()
    assert "still-here" in seen
    assert server.state(bo_job) == "running", "ana's kill -9 -1 reached bo's job"
    assert httpx.post(f"{url}/v1/jobs/{bo_job}/cancel", json={}, headers=bo).status_code == 200
    assert server.wait_states([bo_job]) == {bo_job: "cancelled"}
