"""A job reports "checkpointed now" on a real ``flotilla up`` with a local cluster (issue 28):
``flotilla.checkpoint()`` in the job, and the service shows the time on the job's run."""

from __future__ import annotations

import shlex
import sys
from datetime import datetime
from pathlib import Path

import yaml

from tests.e2e.service import Services, wait_for

WORK = """
import time
import flotilla
assert flotilla.checkpoint()
print("saved", flush=True)
time.sleep(120)
"""


def test_a_checkpoint_the_job_reports_is_kept_on_its_run(
    services: Services, tmp_path: Path
) -> None:
    state_dir = tmp_path / "local"
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        yaml.safe_dump(
            {
                "name": "checkpoints",
                "settings": {"cycle_interval": 0.1},
                "clusters": [
                    {"name": "here", "backend": "local", "settings": {"state_dir": str(state_dir)}}
                ],
                "queues": [{"name": "batch"}],
            }
        )
    )
    server = services.start(
        db=f"sqlite:///{tmp_path / 'flotilla.db'}",
        state_dir=state_dir,
        extra=["--fleet", str(fleet)],
    )
    command = f"{shlex.quote(sys.executable)} -c {shlex.quote(WORK)}"
    spec = {
        "name": "train",
        "queue": "batch",
        "tasks": [{"name": "main", "resources": {"cpu": 0.5, "memory": "64Mi"}}],
        "payload": {"command": command},
    }
    [job] = server.submit(spec)
    server.wait_states([job], frozenset({"running"}))

    def reported() -> bool:
        return server.job(job)["runs"][0].get("last_checkpoint_at") is not None

    wait_for(reported, 30, "the run's checkpoint to be reported")
    run = server.job(job)["runs"][0]
    checkpoint = datetime.fromisoformat(run["last_checkpoint_at"])
    assert datetime.fromisoformat(run["created_at"]) <= checkpoint
    server.cancel(job)
    server.wait_states([job])
