"""Preemption that saves work on a real ``flotilla up`` with a local cluster (issue 28): the
victim gets its job's ``preemption.signal`` and saves its work within the grace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.e2e.service import Services, wait_for


def write_fleet(path: Path, state_dir: Path) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "name": "preemption",
                "settings": {"cycle_interval": 0.1, "priority_preemption": True},
                "clusters": [
                    {"name": "here", "backend": "local", "settings": {"state_dir": str(state_dir)}}
                ],
                "queues": [{"name": "batch"}, {"name": "prod"}],
            }
        )
    )
    return path


def job(name: str, queue: str, cpu: float, command: str, **more: Any) -> dict[str, Any]:
    return {
        "name": name,
        "queue": queue,
        "tasks": [{"name": "main", "resources": {"cpu": cpu, "memory": "16Mi"}}],
        "payload": {"command": command},
        **more,
    }


def test_a_victim_gets_its_signal_and_saves_its_work_before_the_kill(
    services: Services, tmp_path: Path
) -> None:
    state_dir = tmp_path / "local"
    fleet = write_fleet(tmp_path / "fleet.yaml", state_dir)
    server = services.start(
        db=f"sqlite:///{tmp_path / 'flotilla.db'}",
        state_dir=state_dir,
        extra=["--fleet", str(fleet)],
    )
    [cluster] = server.http.get("/v1/clusters").json()
    cpu = float(cluster["capacity"]["cpu"])  # each job takes the whole machine
    work = (
        "trap 'echo checkpointed at step $i; exit 0' USR1; i=0; echo ready; "
        "while true; do i=$((i+1)); sleep 0.05; done"
    )
    preemption = {"grace": 30, "signal": "SIGUSR1"}
    [victim] = server.submit(job("train", "batch", cpu, work, preemption=preemption))
    server.wait_states([victim], frozenset({"running"}))

    def started() -> bool:
        response = server.http.get(f"/v1/jobs/{victim}/logs", params={"stream": "stdout"})
        return response.status_code == 200 and "ready" in response.json()["data"]

    wait_for(started, 30, "the victim to start")
    [urgent] = server.submit(job("urgent", "prod", cpu, "echo urgent done", priority=10))
    assert server.wait_states([urgent], frozenset({"succeeded"})) == {urgent: "succeeded"}
    first = server.job(victim)["runs"][0]
    assert first["state"] == "preempted"
    stdout = server.http.get(
        f"/v1/jobs/{victim}/logs", params={"stream": "stdout", "attempt": 1}
    ).json()["data"]
    assert "checkpointed at step" in stdout
    server.cancel(victim)
    server.wait_states([victim])
