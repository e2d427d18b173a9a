"""What the Slurm backend does beyond the shared contract, against a real slurmctld + slurmd."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flotilla.backends import (
    BackendRunState,
    BackendUnavailable,
    CancelRequest,
    DispatchRejected,
    DispatchRequest,
    LogsRequest,
    LogStream,
    ReplicaPlacement,
    StatusRequest,
    UnknownRun,
    load_backend,
)
from flotilla.backends.slurm import SlurmBackend
from flotilla.backends.slurm.nodes import FEATURE_LABEL
from tests.timing import deadline, wait_until

from .engines.slurm_cluster import CPUS, GPUS, MEMORY_MIB, SlurmCluster
from .support import SlurmHarness, read_all, read_replica

MIB = 1 << 20


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster, tmp_path: Path) -> Iterator[SlurmHarness]:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    made = SlurmHarness(tmp_path / "state", scratch, slurm_cluster)
    try:
        yield made
    finally:
        made.close_all()


def placed(
    backend: SlurmBackend,
    run_id: str,
    command: str,
    *,
    replicas: int = 1,
    gpus_each: int = 0,
    resources: dict[str, float] | None = None,
    **fields: object,
) -> DispatchRequest:
    node = backend.inventory().nodes[0].name
    placements = tuple(
        ReplicaPlacement(
            "main", index, node, tuple(range(index * gpus_each, (index + 1) * gpus_each))
        )
        for index in range(replicas)
    )
    return DispatchRequest(
        run_id=run_id,
        job=f"job-{run_id}",
        cluster=backend.cluster,
        placements=placements,
        payload={"command": command},
        resources={"main": resources or {"cpu": 1}},
        **fields,  # type: ignore[arg-type]
    )


def test_inventory_is_slurms_node_with_its_cpus_memory_gpus_and_features(
    slurm: SlurmHarness,
) -> None:
    backend = slurm.make()
    (node,) = backend.inventory().nodes
    assert node.name == slurm.slurm.node
    assert node.capacity == {"cpu": CPUS, "memory": MEMORY_MIB * MIB, "gpu": GPUS}
    assert node.gpu_count == GPUS
    assert node.labels[f"{FEATURE_LABEL}fast"] == "true"


def test_a_drained_node_is_left_out_of_the_inventory(slurm: SlurmHarness) -> None:
    backend = slurm.make()
    node = slurm.slurm.node
    scontrol = ["scontrol", "update", f"NodeName={node}"]
    environment = slurm.slurm.environment()
    subprocess.run([*scontrol, "State=DRAIN", "Reason=maintenance"], env=environment, check=True)
    try:
        assert backend.inventory().nodes == ()
    finally:
        subprocess.run([*scontrol, "State=RESUME"], env=environment, check=True)
        # Slurm flags a resumed node NOT_RESPONDING until slurmd answers again (a second).
        wait_until(lambda: bool(backend.inventory().nodes), "the resumed node", 15, 0.2)
    assert [info.name for info in backend.inventory().nodes] == [node]


def test_gpu_replicas_see_their_devices_and_others_see_none(slurm: SlurmHarness) -> None:
    backend = slurm.make()
    show = "echo devices=[$CUDA_VISIBLE_DEVICES] replica=$FLOTILLA_REPLICA"
    backend.dispatch(placed(backend, "gpus", show, replicas=2, gpus_each=1))
    backend.dispatch(placed(backend, "none", show))
    assert slurm.wait_terminal(backend, "gpus").state is BackendRunState.SUCCEEDED
    assert slurm.wait_terminal(backend, "none").state is BackendRunState.SUCCEEDED
    seen = {read_replica(backend, "gpus", "main", index).strip() for index in range(2)}
    assert seen == {"devices=[0] replica=0", "devices=[1] replica=1"} or seen == {
        "devices=[1] replica=0",
        "devices=[0] replica=1",
    }
    assert read_all(backend, "none").strip() == "devices=[] replica=0"


def test_cpus_and_memory_become_the_steps_allocation(slurm: SlurmHarness) -> None:
    backend = slurm.make()
    show = "echo cpus=$SLURM_CPUS_PER_TASK mem=$SLURM_MEM_PER_CPU"
    backend.dispatch(placed(backend, "sized", show, resources={"cpu": 2, "memory": 300 * MIB}))
    assert slurm.wait_terminal(backend, "sized").state is BackendRunState.SUCCEEDED
    assert read_all(backend, "sized").strip() == "cpus=2 mem=150"


def test_environment_is_flotillas_and_the_payloads_not_the_services(
    slurm: SlurmHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVICE_SECRET", "hunter2")
    backend = slurm.make()
    request = placed(
        backend,
        "env",
        "echo $FLOTILLA_JOB $FLOTILLA_RUN $FLOTILLA_TASK $FLOTILLA_NODE $QUEUE $MODE "
        "[${SERVICE_SECRET:-unset}] $(pwd)",
        env={"QUEUE": "team-a", "MODE": "from-request"},
    )
    payload = {
        "command": request.payload["command"],
        "env": {"MODE": "from-payload"},  # type: ignore[index]
        "working_dir": "sub",
    }
    (slurm.scratch / "sub").mkdir()
    backend.dispatch(DispatchRequest(**{**vars(request), "payload": payload}))
    assert slurm.wait_terminal(backend, "env").state is BackendRunState.SUCCEEDED
    node = slurm.slurm.node
    assert read_all(backend, "env").split() == [
        "job-env",
        "env",
        "main",
        node,
        "team-a",
        "from-payload",
        "[unset]",
        str(slurm.scratch / "sub"),
    ]


def test_one_failing_replica_stops_the_gang_and_names_itself(slurm: SlurmHarness) -> None:
    backend = slurm.make()
    command = 'if [ "$FLOTILLA_REPLICA" = 1 ]; then echo bad >&2; exit 3; fi; sleep 60'
    backend.dispatch(placed(backend, "gang", command, replicas=2))
    status = slurm.wait_terminal(backend, "gang")
    assert status.state is BackendRunState.FAILED
    assert status.exit_code == 3
    assert status.message == "replica main/1 exited with code 3"
    assert [replica.exit_code for replica in status.replicas][1] == 3
    assert status.replicas[1].state is BackendRunState.FAILED
    assert "bad" in backend.logs(LogsRequest("gang", LogStream.STDERR, replica=1)).text
    slurm.assert_gone(status)


def test_a_request_slurm_can_never_place_is_rejected(slurm: SlurmHarness) -> None:
    backend = slurm.make()
    too_big = placed(backend, "huge", "true", resources={"cpu": 1, "memory": 10 * MEMORY_MIB * MIB})
    with pytest.raises(DispatchRejected, match="Slurm refused"):
        backend.dispatch(too_big)
    with pytest.raises(UnknownRun):
        backend.status(StatusRequest("huge"))


def test_finished_runs_are_read_from_the_completion_log_once_slurm_forgets_them(
    tmp_path: Path,
) -> None:
    cluster = SlurmCluster(tmp_path / "box")
    cluster.start()
    try:
        harness = SlurmHarness(tmp_path / "state", tmp_path, cluster)
        first = harness.make()
        first.dispatch(placed(first, "ok", "echo kept"))
        first.dispatch(placed(first, "bad", "exit 4"))
        assert harness.wait_terminal(first, "ok").state is BackendRunState.SUCCEEDED
        assert harness.wait_terminal(first, "bad").exit_code == 4
        first.close()
        cluster.restart_controller(forget_jobs=True)

        second = harness.make()
        ok = second.status(StatusRequest("ok"))
        assert (ok.state, ok.exit_code, ok.job) == (BackendRunState.SUCCEEDED, 0, "job-ok")
        bad = second.status(StatusRequest("bad"))
        assert (bad.state, bad.exit_code) == (BackendRunState.FAILED, 4)
        assert "kept" in read_all(second, "ok")
        # Idempotent still: the run is known, nothing starts again.
        second.dispatch(placed(second, "ok", "echo kept"))
        time.sleep(1)
        assert read_all(second, "ok").count("kept") == 1
        harness.close_all()
    finally:
        cluster.stop()


def test_an_unreachable_controller_is_one_clear_line_and_construction_still_works(
    slurm: SlurmHarness, tmp_path: Path
) -> None:
    dead = tmp_path / "dead.conf"
    text = slurm.slurm.conf.read_text()
    lines = [
        "SlurmctldPort=9" if line.startswith("SlurmctldPort=") else line
        for line in text.splitlines()
    ]
    dead.write_text("\n".join([*lines, "MessageTimeout=2", ""]))
    (tmp_path / "gres.conf").write_text((slurm.slurm.conf.parent / "gres.conf").read_text())
    backend = load_backend("slurm", cluster="gone", slurm_conf=str(dead))
    try:
        with pytest.raises(BackendUnavailable, match=f"slurmctld does not answer.*{dead}") as error:
            backend.inventory()
        assert "\n" not in str(error.value)
        with pytest.raises(BackendUnavailable):
            backend.poll()
    finally:
        backend.close()
    missing = load_backend("slurm", cluster="gone", slurm_conf=str(tmp_path / "nope.conf"))
    with pytest.raises(BackendUnavailable, match=r"nope\.conf does not exist"):
        missing.inventory()
    missing.close()


def test_an_unknown_setting_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="tokn"):
        load_backend("slurm", cluster="x", tokn="secret")


def test_a_run_that_ignores_sigterm_is_killed_after_the_cancels_grace(slurm: SlurmHarness) -> None:
    # The fixture's KillWait is 30 s: ending sooner proves the backend's own SIGKILL.
    backend = slurm.make()
    stubborn = "trap 'echo ignoring TERM' TERM; echo ready; while true; do sleep 0.1; done"
    backend.dispatch(placed(backend, "stubborn", stubborn))
    slurm.wait_output(backend, "stubborn", "ready")
    assert backend.cancel(CancelRequest("stubborn", grace_period=1.0)).outcome.value == "stopping"
    status = slurm.wait_terminal(backend, "stubborn")
    assert (status.state, status.message) == (BackendRunState.CANCELLED, "cancelled")
    slurm.assert_gone(status)


def test_a_cluster_without_accounting_storage_ends_runs_with_no_figures(
    slurm: SlurmHarness,
) -> None:
    """``flotilla sacct`` on this cluster (``accounting_storage/none``): the run ends as ever,
    the ``sacct -j`` Slurm refuses costs nothing, and its CPU time and peak memory are null
    (``-``), as docs/api.md says. The figures a cluster with accounting gives are read by
    ``test_slurm_accounting.py``."""
    backend = slurm.make()
    backend.dispatch(placed(backend, "plain", "echo done"))
    status = slurm.wait_terminal(backend, "plain")
    assert status.state is BackendRunState.SUCCEEDED, status
    assert status.resources is None
    assert backend.status(StatusRequest("plain")).resources is None


@pytest.mark.parametrize("signal", [None, "SIGUSR1"])
def test_every_replica_gets_the_polite_signal_and_what_its_trap_prints_is_kept(
    slurm: SlurmHarness, signal: str | None
) -> None:
    """``trap 'echo got TERM; exit 0' TERM`` on Slurm: each replica's step gets the signal
    (SIGTERM on a cancel, a preempted job's own ``SIGUSR1``), runs its trap and ends, and the
    trap's line is in its output. The batch shell's ``srun`` must not be signalled: it answers
    SIGTERM by SIGKILLing its step at once (the trap never ran), and USR1 ended the batch shell.
    The grace is long, so only a replica that ends by its own trap lets the run end early."""
    backend = slurm.make()
    name = signal or "SIGTERM"
    trapping = (
        f"trap 'echo got {name} $FLOTILLA_REPLICA; exit 0' {name.removeprefix('SIG')}; "
        "echo ready; while true; do sleep 0.1; done"
    )
    backend.dispatch(placed(backend, "trapping", trapping, replicas=2))
    due = deadline(slurm.wait_limit)
    while not all("ready" in read_replica(backend, "trapping", "main", r) for r in (0, 1)):
        assert not due.expired(), "the replicas never said they were ready"
        slurm.pass_time()
    cancel = CancelRequest("trapping", reason="preempted", grace_period=600.0, signal=signal)
    assert backend.cancel(cancel).outcome.value == "stopping"
    status = slurm.wait_terminal(backend, "trapping")
    assert (status.state, status.message) == (BackendRunState.CANCELLED, "preempted")
    for replica in (0, 1):
        output = read_replica(backend, "trapping", "main", replica)
        assert f"got {name} {replica}\n" in output
    assert [item.exit_code for item in status.replicas] == [0, 0]


CHECKPOINTER = """
import os, time
import flotilla
print("file", os.environ["FLOTILLA_CHECKPOINT_FILE"], flush=True)
assert flotilla.checkpoint()
print("saved", flush=True)
time.sleep(120)
"""


def test_a_checkpoint_the_job_reports_shows_on_its_run(slurm: SlurmHarness) -> None:
    """``flotilla.checkpoint()`` in a Slurm job (issue 28): its ``FLOTILLA_CHECKPOINT_FILE``
    is in the run's output dir, and the backend's poll reports the file's time as the run's
    ``last_checkpoint_at`` while it still runs (victim selection reads it)."""
    backend = slurm.make()
    command = f"{shlex.quote(sys.executable)} -c {shlex.quote(CHECKPOINTER)}"
    backend.dispatch(placed(backend, "saver", command))
    slurm.wait_output(backend, "saver", "saved")
    due = deadline(slurm.wait_limit)
    reported = None
    while reported is None:
        assert not due.expired(), "the checkpoint never reached a poll"
        reported = next(
            (s for s in backend.poll() if s.run_id == "saver" and s.last_checkpoint_at), None
        )
        slurm.pass_time()
    assert reported.state is BackendRunState.RUNNING
    assert reported.started_at is not None and reported.last_checkpoint_at is not None
    assert reported.started_at <= reported.last_checkpoint_at <= time.time()
    assert "/saver/checkpoint" in read_all(backend, "saver")
    backend.cancel(CancelRequest("saver", grace_period=0.5))
    slurm.wait_terminal(backend, "saver")
