"""What-if from the live fleet, end to end: a real ``flotilla up`` with queued work gives
each waiting job an estimated start in ``flotilla why``; its export simulates; ``flotilla
simulate --from-server`` with a changed quota reports both projections side by side."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.service import FLOTILLA, Server, Services, wait_for
from tests.timing import limit


def fleet(cpu_quota: int) -> dict[str, Any]:
    return {
        "name": "whatif",
        "settings": {"cycle_interval": 0.2},
        "clusters": [
            {
                "name": "east",
                "backend": "sim",
                "nodes": [{"name": "n", "count": 2, "resources": {"cpu": 4}}],
            }
        ],
        "quotas": [
            {
                "name": "org",
                "children": [
                    {"name": "research", "min": {"cpu": 2}, "max": {"cpu": cpu_quota}},
                    {"name": "prod", "min": {"cpu": 2}},
                ],
                "max": {"cpu": 8},
            }
        ],
        "queues": [
            {"name": "research", "quota": "research"},
            {"name": "prod", "quota": "prod"},
        ],
    }


def job(name: str, queue: str, minutes: float) -> dict[str, Any]:
    return {
        "name": name,
        "queue": queue,
        "tasks": [{"name": "main", "resources": {"cpu": 2}}],
        "payload": {"sim": {"duration": minutes * 60}},
        "max_runtime": f"{minutes:g}m",
    }


def flotilla(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    command = [str(FLOTILLA), *args]
    if args[0] != "simulate":
        command += ["--server", server.url]
    return subprocess.run(
        command,
        env={**os.environ, "FLOTILLA_TOKEN": server.token or ""},
        capture_output=True,
        text=True,
        timeout=limit(120),
        cwd=server.workdir,
    )


def from_server(server: Server, changed: Path) -> list[str]:
    return ["simulate", "--from-server", server.url, "--fleet", str(changed), "--until", "24h"]


def test_why_shows_an_estimated_start_and_the_what_if_compares(
    services: Services, tmp_path: Path
) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet(cpu_quota=4)))
    server = services.start(
        db=f"sqlite:///{tmp_path / 'flotilla.db'}",
        state_dir=tmp_path / "local",
        extra=["--fleet", str(path), "--projection-interval", "1"],
    )
    running = server.submit(*(job(f"r{i}", "research", 40) for i in range(2)))
    server.wait_states(running, {"running"})
    [waiting] = server.submit(job("next", "research", 10))

    def estimated() -> bool:
        return server.job(waiting).get("estimated_start") is not None

    wait_for(estimated, 60, lambda: "an estimated start for the waiting job")
    why = flotilla(server, "why", waiting)
    assert why.returncode == 0, why.stderr
    # research may hold 4 cpus: next waits for one of the two 40-minute jobs, which have run
    # for as long as this machine took to get here (a minute at most, so 39 or 40 min).
    assert re.search(r"expected to start in about (39|40) min \(projection of ", why.stdout)
    assert "runtimes from max_runtime)" in why.stdout

    exported = flotilla(server, "fleet", "export", "--scenario", "-o", "now.yaml")
    assert exported.returncode == 0, exported.stderr
    simulated = flotilla(server, "simulate", "now.yaml", "--format", "json")
    assert simulated.returncode == 0, simulated.stderr

    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(fleet(cpu_quota=6)))
    what_if = flotilla(server, *from_server(server, changed), "--format", "table")
    assert what_if.returncode == 0, what_if.stderr
    lines = what_if.stdout.splitlines()
    research = next(line for line in lines if line.startswith("research"))
    # Now ~40 minutes (less what the running jobs have run); with a larger quota, at once.
    assert re.search(r"\b(39|40)m → 0s\b", research), research
    page = tmp_path / "whatif.html"
    html = flotilla(server, *from_server(server, changed), "--format", "html", "-o", str(page))
    assert html.returncode == 0, html.stderr
    text = page.read_text()
    assert "The live fleet" in text and "The changed fleet" in text
