"""Two-level fairness on a real ``flotilla up`` (issue 28): a queue's owners share it by DRF
and run within their per-owner limits, and ``why`` names the owner level that holds a job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.e2e.service import Server, Services, wait_for

RUNNING = frozenset({"running"})


def owned_job(name: str, queue: str, user: str) -> dict[str, Any]:
    return {
        "name": name,
        "queue": queue,
        "user": user,
        "tasks": [{"name": "main", "resources": {"cpu": 1}}],
        "payload": {"sim": {"duration": 600}},
    }


def write_fleet(path: Path, engine_dir: Path) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "name": "owners",
                "settings": {"cycle_interval": 0.1},
                "clusters": [
                    {
                        "name": "engine",
                        "backend": "sim",
                        "settings": {"state_dir": str(engine_dir)},
                        "nodes": [{"name": "n", "count": 1, "resources": {"cpu": 4}}],
                    }
                ],
                "queues": [
                    {
                        "name": "limited",
                        "owners": {
                            "order": "queue",
                            "max_running_jobs": 2,
                            "limits": {"carol": {"max_running_jobs": 1}},
                        },
                    },
                    {"name": "shared", "owners": {}},
                ],
            }
        )
    )
    return path


def running(server: Server, ids: list[str]) -> set[str]:
    return {job_id for job_id in ids if server.state(job_id) == "running"}


def test_owners_share_a_queue_and_stay_within_their_limit(
    services: Services, tmp_path: Path
) -> None:
    fleet = write_fleet(tmp_path / "fleet.yaml", tmp_path / "engine")
    server = services.start(
        db=f"sqlite:///{tmp_path / 'flotilla.db'}",
        state_dir=tmp_path / "local",
        extra=["--fleet", str(fleet)],
    )
    # The limit: alice's third job waits though two cpu are free, and why says so.
    limited: list[str] = server.submit(*(owned_job(f"a{i}", "limited", "alice") for i in range(3)))
    server.wait_states(limited[:2], RUNNING)
    reason = "owner alice is at the limit of 2 running jobs per owner in queue limited"

    def held_by_the_limit() -> bool:
        why = server.http.get(f"/v1/jobs/{limited[2]}/why").json()
        return bool(why["state"] == "queued" and reason in (why["reason"] or ""))

    wait_for(held_by_the_limit, 30, "the third job's reason to name the owner limit")
    # An owner's own limit (owners.limits.carol: 1) holds her second job with two cpu free.
    carol = server.submit(*(owned_job(f"c{i}", "limited", "carol") for i in range(2)))
    server.wait_states(carol[:1], RUNNING)
    own = "owner carol is at its own limit of 1 running job in queue limited (owners.limits.carol)"

    def held_by_her_own_limit() -> bool:
        why = server.http.get(f"/v1/jobs/{carol[1]}/why").json()
        return bool(why["state"] == "queued" and own in (why["reason"] or ""))

    wait_for(held_by_her_own_limit, 30, "carol's second job's reason to name her own limit")
    limited += carol
    for job_id in limited:
        server.cancel(job_id)
    server.wait_states(limited)
    # DRF among owners: alice's four jobs come first in the queue's order, yet bob's two,
    # in the same batch, get half of the four cpu.
    alice = [owned_job(f"alice-{i}", "shared", "alice") for i in range(4)]
    bob = [owned_job(f"bob-{i}", "shared", "bob") for i in range(2)]
    ids = server.submit(*alice, *bob)
    server.wait_states(ids[4:], RUNNING)
    assert running(server, ids) == {ids[0], ids[1], ids[4], ids[5]}
    for job_id in ids:
        server.cancel(job_id)
    server.wait_states(ids)
