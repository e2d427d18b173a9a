"""``flotilla up`` against a hostile neighbour: a web page on the same machine, a job that
looks around, a submitter who reads what is not theirs (issue 12, defects 6-8)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import httpx

from flotilla.runtime import server_file
from tests.e2e.service import FLOTILLA, Services, job_spec


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
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    server.stop()
    assert not path.exists(), "the token file outlived its server"
