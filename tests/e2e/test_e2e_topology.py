"""Topology-aware gangs on a real ``flotilla up`` (issue 28): the fleet file's cluster
declares its levels, a job asks for one rack; ``why`` says why it waits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.e2e.service import Services, wait_for

RUNNING = frozenset({"running"})


def gang(name: str, replicas: int, topology: dict[str, str], **more: Any) -> dict[str, Any]:
    return {
        "name": name,
        "queue": "default",
        "topology": topology,
        "tasks": [{"name": "w", "replicas": replicas, "resources": {"cpu": 4}}],
        "payload": {"sim": {"duration": 600}},
        **more,
    }


def write_fleet(path: Path, engine_dir: Path) -> Path:
    def rack(name: str) -> dict[str, Any]:
        labels = {"block": "b1", "rack": name}
        return {"name": f"{name}n", "count": 2, "resources": {"cpu": 4}, "labels": labels}

    path.write_text(
        yaml.safe_dump(
            {
                "name": "topology",
                "settings": {"cycle_interval": 0.1},
                "clusters": [
                    {
                        "name": "engine",
                        "backend": "sim",
                        "settings": {"state_dir": str(engine_dir)},
                        "topology": ["block", "rack"],
                        "nodes": [rack("r1"), rack("r2")],
                    }
                ],
                "queues": [{"name": "default"}],
            }
        )
    )
    return path


def test_a_gang_that_requires_one_rack_runs_in_one_or_waits_saying_why(
    services: Services, tmp_path: Path
) -> None:
    fleet = write_fleet(tmp_path / "fleet.yaml", tmp_path / "engine")
    server = services.start(
        db=f"sqlite:///{tmp_path / 'flotilla.db'}",
        state_dir=tmp_path / "local",
        extra=["--fleet", str(fleet)],
    )
    [pair] = server.submit(gang("pair", 2, {"required": "rack"}))
    server.wait_states([pair], RUNNING)
    run = server.job(pair)["runs"][-1]
    nodes = {placement["node"][:2] for placement in run["assignment"]["placements"]}
    assert len(nodes) == 1  # both replicas on r1n-* or both on r2n-*
    # One node is free in each rack now: three replicas fit no rack.
    [single] = server.submit(gang("single", 1, {"required": "rack"}))
    server.wait_states([single], RUNNING)
    [wide] = server.submit(gang("wide", 2, {"required": "rack"}))

    def says_why() -> bool:
        why = server.http.get(f"/v1/jobs/{wide}/why").json()
        reason = why["reason"] or ""
        return bool(why["state"] == "queued" and "no rack domain can hold all 2" in reason)

    wait_for(says_why, 30, "the wide gang's reason to name the topology")
    for job_id in (pair, single, wide):
        server.cancel(job_id)
    server.wait_states([pair, single, wide])
