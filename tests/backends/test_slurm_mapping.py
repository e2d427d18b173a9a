"""How the Slurm backend maps Flotilla's fields to Slurm's and back, without an engine."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

from flotilla.backends import BackendRunState, DispatchRequest, ReplicaPlacement
from flotilla.backends.slurm.commands import SlurmNode, _job
from flotilla.backends.slurm.marker import Marker, decode, exit_code_of
from flotilla.backends.slurm.nodes import gpu_count, node_info
from flotilla.backends.slurm.script import batch_script, sbatch_options
from flotilla.model.payload import parse_payload
from tests.timing import limit

MIB = 1 << 20


def gang(max_runtime: float | None = None) -> DispatchRequest:
    return DispatchRequest(
        run_id="train-1-0",
        job="train-1",
        cluster="hpc",
        placements=(
            ReplicaPlacement("worker", 0, "n1", (0, 1)),
            ReplicaPlacement("worker", 1, "n2", (0, 1)),
            ReplicaPlacement("ps", 0, "n1"),
        ),
        payload={"command": ["python", "train.py", "--lr", "1e-3; rm -rf /"]},
        resources={
            "worker": {"cpu": 4, "memory": 8192 * MIB, "gpu": 2},
            "ps": {"cpu": 1.5, "memory": 1024 * MIB},
        },
        max_runtime=max_runtime,
    )


def test_sbatch_options_follow_the_placements_and_resources(tmp_path: Path) -> None:
    options = sbatch_options(
        gang(max_runtime=90),
        comment="flotilla;x",
        output=tmp_path,
        working_dir=tmp_path,
        partition="gpu",
    )
    assert "--job-name=train-1-0" in options
    assert "--comment=flotilla;x" in options
    assert "--nodes=2" in options and "--nodelist=n1,n2" in options
    assert "--ntasks=3" in options
    assert "--cpus-per-task=4" in options  # the largest task's, per replica
    assert "--mem-per-cpu=2048" in options  # enough for every task's memory per CPU
    assert "--gres=gpu:2" in options  # per node: n1 and n2 each hold 2 GPUs
    assert "--time=3" in options  # 90 s + a minute of slack, in whole minutes
    assert "--partition=gpu" in options
    assert "--export=NONE" in options and "--no-requeue" in options


def test_the_batch_script_starts_one_quoted_step_per_replica(tmp_path: Path) -> None:
    request = gang()
    script = batch_script(
        request,
        parse_payload("command", request.payload),
        tmp_path / "out dir",
        {"FLOTILLA_RUN": "train-1-0", "WEIRD": "a'b $c"},
    )
    steps = [line for line in script.splitlines() if " srun " in line and line[0] != "#"]
    assert len(steps) == 3
    assert "--nodelist=n1" in steps[0] and "--gres=gpu:2" in steps[0]
    assert "--cpus-per-task=2" in steps[2] and "CUDA_VISIBLE_DEVICES=" in steps[2]
    assert "'1e-3; rm -rf /'" in steps[0]
    assert "export WEIRD='a'\"'\"'b $c'" in script
    checked = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert checked.returncode == 0, checked.stderr


def test_each_step_gets_its_rank_and_the_first_replicas_node_as_rendezvous(
    tmp_path: Path,
) -> None:
    request = gang()
    script = batch_script(
        request, parse_payload("command", request.payload), tmp_path, {"FLOTILLA_RUN": "x"}
    )
    steps = [line for line in script.splitlines() if " srun " in line and line[0] != "#"]
    port = steps[0].split("MASTER_PORT=")[1].split()[0]
    assert 20000 <= int(port) < 32000
    for rank, step in enumerate(steps):
        assert f"WORLD_SIZE=3 RANK={rank} " in step
        assert f"MASTER_ADDR=n1 MASTER_PORT={port} " in step
    assert "LOCAL_RANK=1 LOCAL_WORLD_SIZE=2" in steps[2]  # the second replica on n1
    assert "LOCAL_RANK=0 LOCAL_WORLD_SIZE=1" in steps[1]
    own = DispatchRequest(
        run_id=request.run_id,
        job=request.job,
        cluster=request.cluster,
        placements=request.placements,
        payload={"command": "train", "env": {"MASTER_PORT": "29500"}},
    )
    script = batch_script(own, parse_payload("command", own.payload), tmp_path, {})
    assert " MASTER_PORT=" not in script  # the job's own (exported with its env) wins


def test_the_marker_survives_any_reason_and_ignores_other_jobs() -> None:
    marker = Marker(
        cluster="hpc;eu",
        run_id="r-1",
        job="j",
        dispatched_at=1700000000,
        placements=gang().placements,
        max_runtime=30,
    ).stopping("preempted by team-a/x; priority=5 100%", kill_at=1700000010.5)
    assert decode(marker.encode()) == marker
    assert decode("") is None
    assert decode("a comment a user wrote") is None
    assert decode("flotilla;cluster=x") is None


def test_exit_codes_come_from_the_raw_wait_status() -> None:
    assert exit_code_of(768) == 3
    assert exit_code_of(0) == 0
    assert exit_code_of(9) == -9
    assert exit_code_of(None) is None


def test_gres_and_node_states_map_to_node_info() -> None:
    assert gpu_count("gpu:2") == 2
    assert gpu_count("gpu:a100:4(S:0-1)") == 4
    assert gpu_count("gpu:a100:2,gpu:v100:1,shard:8") == 3
    assert gpu_count("") == 0

    def node(state: str, flags: tuple[str, ...] = ()) -> SlurmNode:
        return SlurmNode("n1", state, flags, 8, 1024, "gpu:1", ("ib",), ("batch",), "")

    info = node_info(node("mixed"))
    assert info is not None
    assert info.capacity == {"cpu": 8, "memory": 1024 * MIB, "gpu": 1}
    assert info.labels == {"slurm.feature/ib": "true", "slurm.partition/batch": "true"}
    assert node_info(node("idle", ("DRAIN",))) is None
    assert node_info(node("down")) is None
    assert node_info(node("idle", ("NOT_RESPONDING",))) is None


def test_squeue_json_of_both_formats_is_read() -> None:
    old = _job({"job_id": 5, "name": "r", "job_state": "FAILED", "exit_code": 768})
    new = _job(
        {
            "job_id": 5,
            "name": "r",
            "job_state": ["FAILED"],
            "exit_code": {"status": ["EXITED"], "return_code": {"set": True, "number": 3}},
            "start_time": {"set": True, "number": 10},
        }
    )
    assert (old.state, exit_code_of(old.exit_code)) == ("FAILED", 3)
    assert (new.state, exit_code_of(new.exit_code), new.start_time) == ("FAILED", 3, 10.0)
    assert BackendRunState.FAILED.terminal


FAKE_SRUN = """#!/bin/bash
# Stands in for an srun whose step was still being launched when its TERM came: it does
# not pass the TERM on, and waits for its step as long as the step runs.
trap '' TERM
while [[ "$1" == --* ]]; do shift; done
"$@"
"""


def test_a_failed_replica_s_sibling_that_ignores_its_term_is_killed_after_the_grace(
    tmp_path: Path,
) -> None:
    """Slurm sometimes leaves an srun TERMed during its step's launch waiting a minute for the
    step (seen in CI); the gang must still end, with the failed replica's code, soon after
    the grace."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(FAKE_SRUN)
    (bin_dir / "srun").chmod(0o755)
    command = 'if [ "$FLOTILLA_REPLICA" = 1 ]; then exit 3; fi; sleep 60'
    request = DispatchRequest(
        run_id="gang",
        job="job-gang",
        cluster="hpc",
        placements=(ReplicaPlacement("main", 0, "n1"), ReplicaPlacement("main", 1, "n1")),
        payload={"command": ["bash", "-c", command]},
    )
    out = tmp_path / "out"
    out.mkdir()
    script = batch_script(
        request, parse_payload("command", request.payload), out, {}, sibling_grace=0.5
    )
    environment = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    # stderr to a file, not a pipe: the killed srun's orphaned `sleep 60` keeps it open.
    with (tmp_path / "batch.stderr").open("wb") as batch_stderr:
        process = subprocess.Popen(
            ["bash", "-c", script], env=environment, start_new_session=True, stderr=batch_stderr
        )
    try:
        process.wait(timeout=limit(20))  # the step itself would run 60 s
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # that orphan
    stderr = (tmp_path / "batch.stderr").read_text()
    assert process.returncode == 3, stderr
    assert "replica main/1 exited with code 3" in stderr
    assert (out / "main-1.exit").read_text().strip() == "3"
    assert (out / "main-0.exit").read_text().strip() == "137"  # its srun was killed
