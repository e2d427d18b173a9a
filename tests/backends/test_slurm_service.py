"""``flotilla up --fleet`` over SQLite with a real Slurm cluster, end to end through the API.

The service is a real process; its jobs are Slurm batch jobs on the session's slurmctld +
slurmd. The crash test kills the service with SIGKILL while jobs run, restarts it, and checks
that no job was orphaned, lost or run twice.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.service import FLOTILLA, Server, Services, assert_started_once, job_spec, wait_for
from tests.timing import limit

from .engines.slurm_cluster import SlurmCluster


class SlurmFleet:
    """A fleet file with one Slurm cluster, and the service that runs it."""

    def __init__(self, slurm: SlurmCluster, services: Services, root: Path) -> None:
        # Its own cluster name: jobs of earlier tests stay in squeue under the same run ids.
        self.cluster = f"hpc-{uuid.uuid4().hex[:8]}"
        self.slurm = slurm
        self.services = services
        self.root = root
        self.scratch = root / "scratch"
        self.scratch.mkdir()
        self.output = root / "slurm-output"
        self.fleet = root / "fleet.yaml"
        self.fleet.write_text(
            f"""name: slurm-e2e
settings:
  cycle_interval: 0.1
clusters:
  - name: {self.cluster}
    backend: slurm
    settings:
      slurm_conf: {slurm.conf}
      output_dir: {self.output}
      working_dir: {self.scratch}
      grace_period: 2
      monitor_interval: 0.2
queues:
  - {{name: default}}
"""
        )
        self.db = f"sqlite:///{root / 'flotilla.db'}"

    def start(self) -> Server:
        return self.services.start(
            db=self.db, state_dir=self.root / "state", extra=["--fleet", str(self.fleet)]
        )

    def active_slurm_jobs(self) -> list[str]:
        """Names of this fleet's Slurm jobs that have not ended."""
        listing = subprocess.run(
            ["squeue", "-h", "-t", "PD,R,CG,CF,S", "-o", "%j %k"],
            capture_output=True,
            text=True,
            env=self.slurm.environment(),
            check=True,
        )
        return [
            line.split(" ", 1)[0]
            for line in listing.stdout.splitlines()
            if f"cluster={self.cluster};" in line
        ]

    def cancel_leftovers(self) -> None:
        for line in subprocess.run(
            ["squeue", "-h", "-o", "%i %k"],
            capture_output=True,
            text=True,
            env=self.slurm.environment(),
            check=False,
        ).stdout.splitlines():
            job_id, _, comment = line.partition(" ")
            if f"cluster={self.cluster};" in comment:
                subprocess.run(["scancel", job_id], env=self.slurm.environment(), check=False)


@pytest.fixture
def fleet(slurm_cluster: SlurmCluster, services: Services, tmp_path: Path) -> Iterator[SlurmFleet]:
    made = SlurmFleet(slurm_cluster, services, tmp_path)
    try:
        yield made
    finally:
        services.close()
        made.cancel_leftovers()


def cli(server: Server, *arguments: str) -> str:
    """A ``flotilla`` CLI command against ``server``; its stdout (it must exit 0)."""
    done = subprocess.run(
        [str(FLOTILLA), *arguments, "--server", server.url],
        capture_output=True,
        text=True,
        timeout=limit(60),
        check=False,
        env={**os.environ, "COLUMNS": "250"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def spec(name: str, command: str, *, replicas: int = 1, gpu: int = 0) -> dict[str, Any]:
    made = job_spec(name, command, cpu=1)
    resources = made["tasks"][0]["resources"]
    if gpu:
        resources["gpu"] = gpu
    made["tasks"][0]["replicas"] = replicas
    return made


def test_jobs_succeed_fail_are_cancelled_and_show_logs_on_slurm(fleet: SlurmFleet) -> None:
    server = fleet.start()
    ok, broken, sleeper = server.submit(
        spec("hello", "echo hello from slurm"),
        spec("broken", "echo oops >&2; exit 3"),
        spec("sleeper", "sleep 60"),
    )
    states = server.wait_states([ok, broken])
    assert states == {ok: "succeeded", broken: "failed"}
    assert "hello from slurm" in server.logs(ok)
    assert "oops" in server.logs(broken, "stderr")
    assert server.job(broken)["runs"][-1]["exit_code"] == 3

    server.wait_states([sleeper], frozenset({"running"}))
    (ticker,) = server.submit(spec("ticker", "for i in 1 2 3; do echo tick $i; sleep 0.5; done"))
    server.wait_states([ticker], frozenset({"running", "succeeded"}))
    followed = cli(server, "logs", "-f", ticker)
    assert followed.split() == ["tick", "1", "tick", "2", "tick", "3"]
    assert "replica main/0 exited with code 3" in cli(server, "describe", broken)
    assert fleet.cluster in cli(server, "clusters")
    server.cancel(sleeper)
    assert server.wait_states([sleeper]) == {sleeper: "cancelled"}
    wait_for(lambda: not fleet.active_slurm_jobs(), 20, "the cancelled Slurm job to end")


def test_replicas_and_gpus_get_their_nodes_and_devices(fleet: SlurmFleet) -> None:
    server = fleet.start()
    show = "echo replica=$FLOTILLA_REPLICA node=$SLURMD_NODENAME devices=[$CUDA_VISIBLE_DEVICES]"
    pair, gpu = server.submit(spec("pair", show, replicas=2), spec("gpu", show, gpu=2))
    assert server.wait_states([pair, gpu]) == {pair: "succeeded", gpu: "succeeded"}
    node = fleet.slurm.node
    assert server.logs(gpu).strip() == f"replica=0 node={node} devices=[0,1]"
    first = server.http.get(f"/v1/jobs/{pair}/logs", params={"replica": 1}).json()
    assert server.logs(pair).strip() == f"replica=0 node={node} devices=[]"
    assert first["data"].strip() == f"replica=1 node={node} devices=[]"


def test_a_kill_9_of_the_service_orphans_loses_and_repeats_nothing(fleet: SlurmFleet) -> None:
    server = fleet.start()
    ledger = fleet.scratch / "ledger"
    command = f"echo start $FLOTILLA_JOB >> {ledger}; sleep 4; echo end $FLOTILLA_JOB >> {ledger}"
    ids = server.submit(*(spec(f"work-{index}", command) for index in range(4)))
    server.wait_states(ids, frozenset({"running"}), limit=60)
    server.kill9()
    time.sleep(1)
    assert len(fleet.active_slurm_jobs()) == 4, "the runs outlive the service on Slurm"

    again = fleet.start()
    states = again.wait_states(ids, limit=90)
    assert set(states.values()) == {"succeeded"}, states
    lines = ledger.read_text().splitlines()
    for job_id in ids:
        assert lines.count(f"start {job_id}") == 1, lines
        assert lines.count(f"end {job_id}") == 1, lines
        assert_started_once(again, job_id)
    assert fleet.active_slurm_jobs() == []
