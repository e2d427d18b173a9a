"""``flotilla up --fleet`` with a real Ray head, end to end, with real processes.

The fleet names one ``ray`` cluster on the session's Ray head; jobs go through the REST API,
the scheduling loop over SQLite and the Ray backend to Ray's Jobs API. ``kill -9`` of
Flotilla while jobs run on Ray, then a restart: the new process adopts every run from Ray
alone (the marker in each Ray job's metadata): none orphaned, lost or run twice.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from flotilla.backends.ray.client import RayJobsClient
from flotilla.backends.ray.jobs import Marker
from tests.backends.engines.ray_head import RayHead
from tests.backends.ray_support import run_processes
from tests.e2e.service import Server, Services, wait_for

pytestmark = pytest.mark.xdist_group("ray")
"""One worker runs every test on the Ray head, so a session starts one head."""

RAY_LIMIT = 120.0
"""Seconds a job may take to reach a state: a Ray job needs about 4 s to start when idle."""


def write_fleet(path: Path, cluster: str, head: RayHead) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "name": "ray-e2e",
                "settings": {"cycle_interval": 0.2, "assignment_strategy": "resource-aware"},
                "clusters": [
                    {
                        "name": cluster,
                        "backend": "ray",
                        "settings": {"address": head.address, "grace_period": 2},
                    }
                ],
                "queues": [{"name": "default"}],
            }
        )
    )
    return path


def command_job(name: str, command: str, cpu: float = 0.5) -> dict[str, Any]:
    return {
        "name": name,
        "queue": "default",
        "tasks": [{"name": "main", "resources": {"cpu": cpu}}],
        "payload": {"command": command},
    }


def start(services: Services, tmp_path: Path, fleet: Path) -> Server:
    return services.start(
        db=f"sqlite:///{tmp_path / 'flotilla.db'}",
        state_dir=tmp_path / "local",
        extra=["--fleet", str(fleet)],
    )


def ray_jobs_of(head: RayHead, cluster: str) -> list[Any]:
    """Every Ray job carrying this Flotilla cluster's marker."""
    jobs = RayJobsClient(head.address, None, 10.0).jobs()
    return [
        details
        for details in jobs
        if (marker := Marker.from_metadata(details.metadata)) is not None
        and marker.cluster == cluster
    ]


def test_jobs_run_on_ray_succeed_fail_are_cancelled_and_show_logs(
    services: Services, ray_head: RayHead, tmp_path: Path
) -> None:
    cluster = f"ray-{uuid.uuid4().hex[:6]}"
    server = start(services, tmp_path, write_fleet(tmp_path / "fleet.yaml", cluster, ray_head))
    assert f"cluster {cluster} (ray): node " in server.log.read_text()

    ok, bad, long, native = server.submit(
        command_job("ok", "echo hello-from-ray; echo on-stderr >&2"),
        command_job("bad", "echo failing; exit 3"),
        command_job("long", "sleep 300"),
        {
            "name": "native",
            "type": "ray",
            "queue": "default",
            "tasks": [{"name": "main", "resources": {"cpu": 0.5}}],
            "payload": {
                "entrypoint": 'echo "greeting=$GREETING"',
                "runtime_env": {"env_vars": {"GREETING": "hi-ray"}},
            },
        },
    )
    states = server.wait_states([ok, bad, native], limit=RAY_LIMIT)
    assert states == {ok: "succeeded", bad: "failed", native: "succeeded"}
    assert "hello-from-ray" in server.logs(ok)
    assert "greeting=hi-ray" in server.logs(native)
    [failed_run] = server.job(bad)["runs"]
    assert failed_run["exit_code"] == 3
    assert "exit code 3" in failed_run["message"]

    server.wait_states([long], frozenset({"running"}), limit=RAY_LIMIT)
    server.cancel(long)
    assert server.wait_states([long], limit=RAY_LIMIT) == {long: "cancelled"}
    [long_run] = server.job(long)["runs"]
    [stopped] = [job for job in ray_jobs_of(ray_head, cluster) if "sleep 300" in job.entrypoint]
    wait_for(
        lambda: (
            RayJobsClient(ray_head.address, None, 10.0).info(stopped.submission_id).status
            == "STOPPED"
        ),
        30,
        "Ray to report the job stopped",
    )
    # Ray marks the job stopped right after its SIGKILL; the kernel may take a moment more.
    wait_for(
        lambda: run_processes(long_run["id"], cluster) == [],
        15,
        lambda: f"the cancelled run's processes to end: {run_processes(long_run['id'], cluster)}",
    )

    # One Ray job per run, each named after its run: nothing dispatched twice.
    runs = {server.job(job_id)["runs"][0]["id"] for job_id in (ok, bad, long, native)}
    marked = [Marker.from_metadata(job.metadata) for job in ray_jobs_of(ray_head, cluster)]
    assert sorted(marker.run_id for marker in marked if marker) == sorted(runs)


def test_kill9_of_flotilla_while_jobs_run_on_ray_orphans_loses_and_repeats_nothing(
    services: Services, ray_head: RayHead, tmp_path: Path
) -> None:
    cluster = f"ray-{uuid.uuid4().hex[:6]}"
    fleet = write_fleet(tmp_path / "fleet.yaml", cluster, ray_head)
    gate = tmp_path / "gate"
    first = start(services, tmp_path, fleet)
    waiting = f"while [ ! -e '{gate}' ]; do sleep 0.05; done; echo finished-$FLOTILLA_RUN"
    ids = first.submit(*(command_job(f"gated-{index}", waiting) for index in range(3)))
    ids += first.submit(command_job("doomed", "sleep 300"))
    first.wait_states(ids, frozenset({"running"}), limit=RAY_LIMIT)
    first.kill9()

    second = start(services, tmp_path, fleet)
    assert all(second.state(job_id) == "running" for job_id in ids)
    second.cancel(ids[-1])
    gate.touch()
    states = second.wait_states(ids, limit=RAY_LIMIT)
    assert states == {**dict.fromkeys(ids[:-1], "succeeded"), ids[-1]: "cancelled"}
    for job_id in ids:
        runs = second.job(job_id)["runs"]
        assert len(runs) == 1, runs  # adopted, never dispatched again
        if job_id != ids[-1]:
            assert f"finished-{runs[0]['id']}" in second.logs(job_id)
    ray_jobs = ray_jobs_of(ray_head, cluster)
    assert len(ray_jobs) == len(ids)  # one Ray job per run: none submitted twice
    assert sorted(str(job.status) for job in ray_jobs).count("SUCCEEDED") == 3
    assert all(job.status.is_terminal() for job in ray_jobs)  # nothing left running
