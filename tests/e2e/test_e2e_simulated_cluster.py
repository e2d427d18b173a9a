"""``flotilla up --fleet examples/fleet-local.yaml``: this machine and a simulated GPU cluster.

A simulated cluster beside a real one takes only the jobs that ask for it, and the views say
which runs were simulated: an ordinary job never "succeeds" there without running.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.builders import REPO_ROOT
from tests.e2e.service import FLOTILLA, Services
from tests.timing import limit


def flotilla(*args: str, url: str, token: str | None) -> str:
    done = subprocess.run(
        [str(FLOTILLA), *args, "--server", url],
        capture_output=True,
        text=True,
        timeout=limit(60.0),
        env={**os.environ, "FLOTILLA_TOKEN": token or "", "COLUMNS": "200"},
        check=True,
    )
    return done.stdout


def test_ordinary_jobs_stay_off_the_simulated_cluster_and_simulated_runs_say_so(
    services: Services, tmp_path: Path
) -> None:
    server = services.start(
        db=f"sqlite:///{tmp_path / 'flotilla.db'}",
        state_dir=tmp_path / "state",
        extra=["--fleet", str(REPO_ROOT / "examples" / "fleet-local.yaml")],
    )
    [local] = [c for c in server.http.get("/v1/clusters").json() if c["name"] == "local"]
    more_than_local_holds = int(local["capacity"]["cpu"]) + 2  # the rest would fit gpu-sim
    cpu_jobs = server.submit(
        *(
            {
                "name": f"cpu-{index}",
                "queue": "default",
                "tasks": [{"name": "main", "resources": {"cpu": 1}}],
                "payload": {"command": "sleep 1; echo ran-here"},
            }
            for index in range(more_than_local_holds)
        )
    )
    [gpu_job] = server.submit(
        {
            "name": "train",
            "queue": "vision",
            "tasks": [{"name": "w", "resources": {"cpu": 1, "gpu": 4}}],
            "affinity": {"clusters": {"required": {"accelerator": "a100"}}},
            "payload": {"sim": {"duration": 0.5}},
        }
    )
    states = server.wait_states([*cpu_jobs, gpu_job])
    assert set(states.values()) == {"succeeded"}, states
    assert {server.job(job)["run"]["cluster"] for job in cpu_jobs} == {"local"}
    assert server.job(gpu_job)["run"]["cluster"] == "gpu-sim"
    assert "ran-here" in server.logs(cpu_jobs[0])

    listed = flotilla("jobs", "--all", url=server.url, token=server.token)
    rows = {line.split()[1]: line for line in listed.splitlines() if line.split()[1:2]}
    assert "succeeded (simulated)" in rows["train"], listed
    assert "simulated" not in rows["cpu-0"], listed
    described = flotilla("describe", gpu_job, url=server.url, token=server.token)
    assert "gpu-sim (simulated)" in described, described
