"""``flotilla up --fleet`` end to end, with real processes.

Two replicas started with the same fleet file on one PostgreSQL database; the fleet's
cluster is a ``sim`` engine whose truth is on disk, shared by both (as a Ray head or a Slurm
controller is shared by every replica). ``kill -9`` of the leader: the other one takes the
lease, adopts the runs its fresh backend never dispatched, and finishes them: none orphaned,
lost or run twice.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import Engine

from tests.e2e.service import Server, Services, wait_for
from tests.postgres_support import postgres_schema_url
from tests.timing import limit

LEASE_TTL = 10.0


def _leader(server: Server) -> bool:
    scheduler = server.report()["scheduler"]
    return bool(scheduler and scheduler["leader"])


def sim_job(name: str, seconds: float) -> dict[str, Any]:
    return {
        "name": name,
        "queue": "default",
        "tasks": [{"name": "main", "resources": {"cpu": 1}}],
        "payload": {"sim": {"duration": seconds}},
    }


def write_fleet(path: Path, engine_dir: Path) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "name": "e2e",
                "settings": {"cycle_interval": 0.1, "assignment_strategy": "resource-aware"},
                "clusters": [
                    {
                        "name": "engine",
                        "backend": "sim",
                        "labels": {"kind": "remote"},
                        "settings": {"state_dir": str(engine_dir)},
                        "nodes": [{"name": "n", "count": 2, "resources": {"cpu": 8}}],
                    }
                ],
                "queues": [{"name": "default"}],
            }
        )
    )
    return path


def test_up_with_a_fleet_prints_what_it_connected_to(services: Services, tmp_path: Path) -> None:
    fleet = write_fleet(tmp_path / "fleet.yaml", tmp_path / "engine")
    server = services.start(
        db=f"sqlite:///{tmp_path / 'flotilla.db'}",
        state_dir=tmp_path / "local",
        extra=["--fleet", str(fleet)],
    )
    banner = server.log.read_text()
    assert "fleet 'e2e' (version 1)" in banner
    assert "cluster engine (sim): 2 nodes (cpu 16)" in banner
    [job] = server.submit(sim_job("quick", 0.5))
    assert server.wait_states([job]) == {job: "succeeded"}
    clusters = server.http.get("/v1/clusters").json()
    assert [(c["name"], c["backend"], c["state"], c["nodes"]) for c in clusters] == [
        ("engine", "sim", "ready", 2)
    ]
    assert clusters[0]["capacity"]["cpu"] == 16

    # A plain `up` over the same database runs that fleet, not the local default, and says so.
    server.stop()
    plain = services.start(db=f"sqlite:///{tmp_path / 'flotilla.db'}", state_dir=tmp_path / "local")
    banner = plain.log.read_text()
    assert "fleet 'e2e' (version 1, applied " in banner, banner
    assert "kept from this database: a plain `up` runs the fleet last applied to it" in banner
    assert "--db" in banner
    assert [c["name"] for c in plain.http.get("/v1/clusters").json()] == ["engine"]


def test_failover_on_a_fleet_orphans_loses_and_repeats_nothing(
    services: Services, postgres_admin: tuple[Engine, str], tmp_path: Path
) -> None:
    db = postgres_schema_url(postgres_admin)
    fleet = write_fleet(tmp_path / "fleet.yaml", tmp_path / "engine")
    replicas = [
        services.start(
            db=db,
            state_dir=tmp_path / "local",
            workdir=tmp_path / name,
            extra=["--fleet", str(fleet), "--replica", name],
        )
        for name in ("replica-a", "replica-b")
    ]
    wait_for(lambda: any(_leader(server) for server in replicas), 30, "a leader")
    [leader] = [server for server in replicas if _leader(server)]
    [follower] = [server for server in replicas if server is not leader]
    ids = leader.submit(*(sim_job(f"j-{i}", 6.0) for i in range(6)))
    wait_for(lambda: all(leader.job(i)["state"] == "running" for i in ids), 30, "every job to run")
    leader.kill9()
    killed = time.monotonic()
    wait_for(lambda: _leader(follower), LEASE_TTL + 20, "the follower to take the lease")
    assert follower.wait_states(ids, limit=60) == dict.fromkeys(ids, "succeeded")
    for job_id in ids:
        runs = follower.job(job_id)["runs"]
        assert len(runs) == 1, runs  # adopted, not re-dispatched: nothing ran twice
        assert runs[0]["state"] == "succeeded"
    print(f"took over {time.monotonic() - killed:.1f}s after kill -9")


def test_a_replica_whose_local_cluster_would_be_another_one_refuses_to_start(
    services: Services, tmp_path: Path
) -> None:
    """Issue 12 defect 3: two replicas with their own state dirs cannot share the local
    cluster (neither sees the other's processes); the second one says so and exits 2,
    instead of leading later over runs it cannot see."""
    db = f"sqlite:///{tmp_path / 'flotilla.db'}"
    services.start(db=db, state_dir=tmp_path / "runs-a", workdir=tmp_path / "a")
    second = services.start(
        db=db, state_dir=tmp_path / "runs-b", workdir=tmp_path / "b", ready=False
    )
    assert second.process.wait(timeout=limit(60)) == 2
    output = " ".join(second.output().split())
    assert "cluster local: this local cluster is" in output
    assert str(tmp_path / "runs-b") in output  # its own; the other's path is not on record
    assert "Traceback" not in output
