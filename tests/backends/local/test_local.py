"""What only the ``local`` backend does: real processes, their environment, signals, restarts."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest

from flotilla.backends import (
    BackendRunState,
    CancelRequest,
    DispatchRequest,
    LogStream,
    ReplicaPlacement,
    StatusRequest,
    UnknownBackend,
    load_backend,
)
from flotilla.backends.local.backend import LocalBackend
from flotilla.backends.local.processes import group_alive, process_alive
from tests.backends.support import LocalHarness, node_of, read_all, read_replica, request
from tests.timing import limit, wait_until


def wait_for_file(path: Path) -> str:
    wait_until(lambda: path.exists() and path.read_text().strip() != "", f"{path} to appear")
    return path.read_text().strip()


def test_cuda_visible_devices_lists_the_assigned_gpus(local: LocalHarness) -> None:
    backend = local.make(gpus=4)
    node = node_of(backend)
    assert backend.inventory().nodes[0].gpu_count == 4
    placements = (
        ReplicaPlacement("train", 0, node, gpu_ids=(1, 3)),
        ReplicaPlacement("eval", 0, node),
    )
    payload = {"command": 'echo "[${CUDA_VISIBLE_DEVICES-unset}]"'}
    backend.dispatch(DispatchRequest("run-1", "job-a", backend.cluster, placements, payload))
    assert local.wait_terminal(backend, "run-1").state is BackendRunState.SUCCEEDED
    assert read_replica(backend, "run-1", "train") == "[1,3]\n"
    assert read_replica(backend, "run-1", "eval") == "[]\n"


def test_gpu_count_comes_from_the_environment(
    local: LocalHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOTILLA_LOCAL_GPUS", "2")
    node = local.make().inventory().nodes[0]
    assert (node.gpu_count, node.capacity["gpu"]) == (2, 2.0)
    monkeypatch.setenv("FLOTILLA_LOCAL_GPUS", "0")  # hides GPUs NVML would find
    assert local.make().inventory().nodes[0].gpu_count == 0


def test_a_device_the_node_lacks_is_rejected(local: LocalHarness) -> None:
    backend = local.make(gpus=0)
    placement = ReplicaPlacement("main", 0, node_of(backend), gpu_ids=(0,))
    with pytest.raises(ValueError, match=r"gpu_ids: device 0 does not exist"):
        backend.dispatch(
            DispatchRequest("run-1", "job-a", backend.cluster, (placement,), {"command": "true"})
        )


def test_every_replica_knows_its_job_run_task_and_index(local: LocalHarness) -> None:
    backend = local.make()
    payload = {
        "command": 'echo "$FLOTILLA_JOB $FLOTILLA_RUN $FLOTILLA_TASK $FLOTILLA_REPLICA $MODE"',
        "env": {"MODE": "user", "CUDA_VISIBLE_DEVICES": "7"},
    }
    backend.dispatch(request(backend, "run-9", payload, job="train", replicas=2, env={"MODE": "x"}))
    assert local.wait_terminal(backend, "run-9").state is BackendRunState.SUCCEEDED
    for index in range(2):
        line = read_replica(backend, "run-9", "main", index)
        assert line == f"train run-9 main {index} user\n"


def test_backend_owned_variables_win_over_the_users(local: LocalHarness) -> None:
    backend = local.make()
    payload = {"command": 'echo "[$CUDA_VISIBLE_DEVICES]"', "env": {"CUDA_VISIBLE_DEVICES": "7"}}
    backend.dispatch(request(backend, "run-1", payload))
    local.wait_terminal(backend, "run-1")
    assert read_all(backend, "run-1") == "[]\n"


def test_working_dir_is_where_the_command_runs(local: LocalHarness) -> None:
    """Relative to the backend's ``working_dir`` (here: the harness's scratch), or absolute
    under one of the admin's ``allowed_working_dirs``."""
    (local.scratch / "data").mkdir()
    shared = local.scratch / "shared"
    (shared / "inside").mkdir(parents=True)
    backend = local.make(allowed_working_dirs=[str(shared)])
    backend.dispatch(request(backend, "relative", {"command": ["pwd"], "working_dir": "data"}))
    absolute = {"command": ["pwd"], "working_dir": str(shared / "inside")}
    backend.dispatch(request(backend, "absolute", absolute))
    backend.dispatch(request(backend, "default", {"command": ["pwd"]}))
    for run_id in ("relative", "absolute", "default"):
        local.wait_terminal(backend, run_id)
    assert read_all(backend, "relative").strip() == str((local.scratch / "data").resolve())
    assert read_all(backend, "absolute").strip() == str((shared / "inside").resolve())
    assert read_all(backend, "default").strip() == str(local.scratch.resolve())


def test_a_command_that_cannot_start_fails_with_a_reason(local: LocalHarness) -> None:
    backend = local.make()
    backend.dispatch(request(backend, "no-dir", {"command": ["pwd"], "working_dir": "missing"}))
    backend.dispatch(request(backend, "no-program", {"command": ["/no/such/program"]}))
    no_dir = local.wait_terminal(backend, "no-dir")
    no_program = local.wait_terminal(backend, "no-program")
    assert no_dir.state is BackendRunState.FAILED
    assert "could not start" in no_dir.message and "missing" in no_dir.message
    assert no_program.state is BackendRunState.FAILED
    assert no_program.exit_code == 127
    assert "/no/such/program" in no_program.message


def test_max_runtime_stops_the_process_with_sigterm(local: LocalHarness) -> None:
    # The grace before SIGKILL stretched: a busy machine may deliver the TERM late.
    backend = local.make(grace_period=limit(2.0))
    backend.dispatch(request(backend, "run-1", {"command": ["sleep", "60"]}, max_runtime=0.2))
    status = local.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.FAILED
    assert status.message == "exceeded max_runtime of 0.2s"
    assert status.exit_code == -signal.SIGTERM
    local.assert_gone(status)


def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period(local: LocalHarness) -> None:
    backend = local.make(grace_period=0.3)
    command = "trap '' TERM; echo ready; sleep 60; echo survived"
    backend.dispatch(request(backend, "stubborn", {"command": command}))
    local.wait_output(backend, "stubborn", "ready")
    backend.cancel(CancelRequest("stubborn"))
    status = local.wait_terminal(backend, "stubborn")
    assert status.state is BackendRunState.CANCELLED
    assert status.replicas[0].exit_code == -signal.SIGKILL
    assert "survived" not in read_all(backend, "stubborn")
    local.assert_gone(status)


def supervisors_of(command: int) -> list[int]:
    """The processes between ``command`` and this test's process: its run's supervisor (the
    backend's child) and the PID 1 of the namespace it forked."""
    chain, pid = [], command
    while True:
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        if pid in (os.getpid(), 1, 0):
            return chain
        chain.append(pid)


def test_a_cancelled_run_whose_supervisor_was_killed_ends_cancelled_with_nothing_left(
    local: LocalHarness,
) -> None:
    """The commands of a run live and die with its supervisor (PID 1 of their namespace, and
    their parent's death signal): a supervisor killed outright (SIGKILL, the OOM killer)
    leaves none of them running, and a cancel then still ends the run cancelled at once —
    not after the grace period — with no process left; a restarted backend reads it
    cancelled from its record."""
    backend = local.make(grace_period=60.0)
    backend.dispatch(request(backend, "run-1", local.long(), replicas=3))
    running = local.wait(
        backend, "run-1", lambda s: all(r.process_id for r in s.replicas), "started"
    )
    commands = [replica.process_id for replica in running.replicas]
    supervisors = supervisors_of(commands[0] or 0)
    assert supervisors
    os.kill(supervisors[-1], signal.SIGKILL)  # the backend's child: the outer supervisor

    backend.cancel(CancelRequest("run-1"))
    status = local.wait_terminal(backend, "run-1")  # within the wait limit, not the 60 s grace

    # Cancelled — or lost, when the backend's monitor saw the supervisor gone before the
    # cancel came (a loaded machine): either way at once, never after the grace period.
    assert status.state in (BackendRunState.CANCELLED, BackendRunState.LOST), status
    assert not (local.state_dir / "runs" / "run-1" / "main-0.exit").exists()
    for pid in [*commands, *supervisors]:
        wait_until(lambda pid=pid: not process_alive(pid or 0, None), f"{pid} gone")
    local.assert_gone(status)
    local.close_leaving_runs(backend)
    restarted = local.make()
    assert restarted.status(StatusRequest("run-1")).state is status.state


LAST_WORDS = "trap 'echo last-words; exit 3' TERM; echo ready; sleep 60 & wait"
"""Says something when stopped (``sleep & wait``: the trap runs at once, not after sleep)."""


def test_what_a_cancelled_command_wrote_before_it_ended_reaches_its_log(
    local: LocalHarness,
) -> None:
    """Issue 23: output still in the pipes when a cancel ended the run was lost — the backend
    killed the supervisor as soon as the command was over, before it copied the rest. Here the
    supervisor is stopped while the command answers the cancel's SIGTERM (sent here to the
    command's group, as the supervisor passes it on), so its last words wait in the pipe;
    resumed, the supervisor copies them into the log before it writes the exit file."""
    backend = local.make(grace_period=60.0)
    backend.dispatch(request(backend, "run-1", {"command": LAST_WORDS}))
    local.wait_output(backend, "run-1", "ready")
    status = local.wait(backend, "run-1", lambda s: bool(s.replicas[0].process_id), "started")
    command = status.replicas[0].process_id
    assert command is not None
    supervisor = supervisors_of(command)[0]  # the one that copies its output
    os.kill(supervisor, signal.SIGSTOP)
    try:
        backend.cancel(CancelRequest("run-1"))
        os.killpg(command, signal.SIGTERM)
        wait_until(lambda: not process_alive(command, None), "ended the command")
    finally:
        os.kill(supervisor, signal.SIGCONT)
    status = local.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.CANCELLED
    assert "last-words" in read_all(backend, "run-1")
    local.assert_gone(status)


def test_output_of_a_command_killed_after_the_grace_period_reaches_its_log(
    local: LocalHarness,
) -> None:
    """The grace period's SIGKILL ends the command, not its supervisor (it passes the kill
    on), which copies what the command wrote into the log."""
    backend = local.make(grace_period=0.5)
    command = "trap '' TERM; echo ready; read line; echo was-pending; sleep 60"
    gate = local.scratch / "fifo"
    os.mkfifo(gate)
    backend.dispatch(request(backend, "run-1", {"command": f"{command} <{gate}"}))
    with open(gate, "w") as writer:
        local.wait_output(backend, "run-1", "ready")
        status = local.wait(backend, "run-1", lambda s: bool(s.replicas[0].process_id), "started")
        command = status.replicas[0].process_id
        assert command is not None
        writer.write("go\n")
    backend.cancel(CancelRequest("run-1"))  # the TERM is ignored; the SIGKILL after 0.5 s
    wait_until(lambda: not process_alive(command, None), "killed the command")
    status = local.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.CANCELLED
    assert "was-pending" in read_all(backend, "run-1")
    local.assert_gone(status)


def test_a_stopped_command_still_gets_its_exit_code_from_the_supervisor(
    local: LocalHarness,
) -> None:
    """A limit's stop (not a cancel) reports how the command ended, so the backend waits for
    the supervisor's exit file there."""
    backend = local.make(grace_period=60.0)
    command = "trap 'exit 7' TERM; echo ready; while true; do sleep 0.01; done"
    # Long enough for the shell to set its trap on a loaded machine (a stop that comes before
    # it ends the shell by SIGTERM instead).
    backend.dispatch(request(backend, "run-1", {"command": command}, max_runtime=2.0))
    local.wait_output(backend, "run-1", "ready")
    status = local.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.FAILED
    assert status.exit_code == 7


def test_kill_9_of_the_command_is_a_failure_by_signal(local: LocalHarness) -> None:
    backend = local.make()
    pid_file = local.scratch / "pid"
    # The pid as this process sees it ($$ is the job's own, in its PID namespace).
    command = f"read -r pid _ </proc/self/stat; echo $pid > {pid_file}; exec sleep 60"
    backend.dispatch(request(backend, "run-1", {"command": command}))
    os.kill(int(wait_for_file(pid_file)), signal.SIGKILL)
    status = local.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.FAILED
    assert status.exit_code == -signal.SIGKILL
    assert "killed by signal 9 (SIGKILL)" in status.message


def test_a_failed_replica_stops_its_siblings(local: LocalHarness) -> None:
    backend = local.make(grace_period=1.0)
    payload = {"command": 'if [ "$FLOTILLA_REPLICA" = 1 ]; then exit 4; fi; exec sleep 60'}
    backend.dispatch(request(backend, "gang", payload, replicas=3))
    status = local.wait_terminal(backend, "gang")
    assert status.state is BackendRunState.FAILED
    assert status.exit_code == 4
    assert status.message == "replica main/1 exited with code 4"
    local.assert_gone(status)


def test_processes_left_behind_by_a_finished_command_are_killed(local: LocalHarness) -> None:
    backend = local.make()
    pid_file = local.scratch / "straggler"
    straggle = f"sh -c 'read -r pid _ </proc/self/stat; echo $pid > {pid_file}; exec sleep 60'"
    command = f"{straggle} & while [ ! -s {pid_file} ]; do sleep 0.01; done"
    backend.dispatch(request(backend, "run-1", {"command": command}))
    status = local.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.SUCCEEDED
    local.assert_gone(status)
    straggler = int(wait_for_file(pid_file))
    assert not process_alive(straggler, None)


@pytest.mark.parametrize("ending", ["exits", "cancelled"])
def test_without_isolation_a_commands_background_child_does_not_outlive_its_run(
    local: LocalHarness, ending: str
) -> None:
    """``isolate: false`` (no cgroup, no PID namespace): a child the command left running in
    the background (``&``, its process group) ends with the run, whether the command exits
    or the run is cancelled."""
    backend = local.make(isolate=False)
    pid_file = local.scratch / "child"
    rest = "exit 0" if ending == "exits" else "echo ready; sleep 1000"
    command = f"sleep 1000 & echo $! > {pid_file}.tmp && mv {pid_file}.tmp {pid_file}; {rest}"
    backend.dispatch(request(backend, "run-1", {"command": command}))
    child = int(wait_for_file(pid_file))
    try:
        if ending == "cancelled":
            local.wait_output(backend, "run-1", "ready")
            backend.cancel(CancelRequest("run-1"))
        status = local.wait_terminal(backend, "run-1")
        expected = BackendRunState.SUCCEEDED if ending == "exits" else BackendRunState.CANCELLED
        assert status.state is expected, status
        assert not process_alive(child, None), "the background child outlived its run"
        local.assert_gone(status)
    finally:  # a failure leaves no sleeper behind
        if process_alive(child, None):
            os.kill(child, signal.SIGKILL)


def test_a_run_whose_process_vanished_while_unwatched_is_lost(local: LocalHarness) -> None:
    first = local.make()
    first.dispatch(request(first, "run-1", local.long()))
    status = local.wait(first, "run-1", lambda s: s.replicas[0].process_id is not None, "started")
    group = status.replicas[0].process_id
    assert group is not None
    local.close_leaving_runs(first)
    # The machine's OOM killer, or a reboot, took it: its command and its supervisor.
    for pid in supervisors_of(group):
        os.kill(pid, signal.SIGKILL)
    # The kernel may have ended the command already: its namespace died with its PID 1.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)
    wait_until(lambda: not group_alive(group), "the killed run's processes to go")

    second = local.make()
    lost = second.status(StatusRequest("run-1"))
    assert lost.state is BackendRunState.LOST
    assert "vanished" in lost.message
    assert [(change.run_id, change.state) for change in second.poll()] == [
        ("run-1", BackendRunState.LOST)
    ]


def test_a_run_that_ended_while_unwatched_keeps_its_outcome(local: LocalHarness) -> None:
    first = local.make()
    payload, gate = local.gated(exit_code=6)
    first.dispatch(request(first, "run-1", payload))
    local.close_leaving_runs(first)
    local.release(gate)
    wait_for_file(local.state_dir / "runs" / "run-1" / "main-0.exit")

    second = local.make()
    status = local.wait_terminal(second, "run-1")
    assert status.state is BackendRunState.FAILED
    assert status.exit_code == 6
    assert "done" in read_all(second, "run-1", LogStream.STDERR)


def test_records_are_json_files_in_the_state_dir(local: LocalHarness) -> None:
    backend = local.make()
    backend.dispatch(request(backend, "run-1", local.quick()))
    local.wait_terminal(backend, "run-1")
    files = sorted(path.name for path in (local.state_dir / "runs" / "run-1").iterdir())
    assert files == [
        "gate",
        "log-usage",
        "main-0.exit",
        "main-0.stderr",
        "main-0.stdout",
        "pids-0",
        "run.json",
        "supervisor-0.log",
    ]
    assert (local.state_dir / "runs" / "run-1" / "gate").read_text() == "go"


def test_a_clean_run_leaves_no_warning_in_its_supervisors_log(local: LocalHarness) -> None:
    """The supervisor's log is where an operator looks when a run misbehaves: noise there
    (Python warning of the C library's reserved signals 32 and 33) hides what matters."""
    backend = local.make()
    backend.dispatch(request(backend, "run-1", local.quick()))
    assert local.wait_terminal(backend, "run-1").state is BackendRunState.SUCCEEDED
    log = (local.state_dir / "runs" / "run-1" / "supervisor-0.log").read_text()
    assert "Warning" not in log, log


def test_load_backend_by_name(tmp_path: Path) -> None:
    backend = load_backend("local", state_dir=str(tmp_path), cluster="dev")
    try:
        assert isinstance(backend, LocalBackend)
        assert backend.inventory().cluster == "dev"
    finally:
        backend.close()
    with pytest.raises(UnknownBackend, match=r"unknown backend 'nomad' \(known: .*local, .*sim"):
        load_backend("nomad")
    with pytest.raises(TypeError, match="colour"):
        load_backend("local", state_dir=str(tmp_path), colour="blue")


def test_a_run_started_by_another_live_backend_is_adopted_on_first_use(
    local: LocalHarness,
) -> None:
    """Two replicas share one state dir; the one that takes over the lease must see, cancel
    and never restart the runs the other started after it loaded."""
    follower = local.make()  # loads an empty state dir
    leader = local.make()
    leader.dispatch(request(leader, "run-1", local.long()))
    local.close_leaving_runs(leader)  # the leader dies; its run goes on

    assert follower.status(StatusRequest("run-1")).state is BackendRunState.RUNNING
    again = follower.dispatch(request(follower, "run-1", local.long()))
    assert again.run_id == "run-1"
    # Its command's pid (its process group), known once its supervisor has started it.
    running = local.wait(
        follower, "run-1", lambda s: s.replicas[0].process_id is not None, "the command's pid"
    )
    group = running.replicas[0].process_id
    assert group is not None and group_alive(group)
    follower.cancel(CancelRequest("run-1", reason="stop"))
    status = local.wait_terminal(follower, "run-1")
    assert status.state is BackendRunState.CANCELLED
    local.assert_gone(status)
    assert len(list((local.state_dir / "runs").iterdir())) == 1


RENDEZVOUS = """
import os, socket, time
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
print(os.environ["LOCAL_RANK"], os.environ["LOCAL_WORLD_SIZE"], world, rank)
if rank == 0:
    server = socket.create_server(address)
    for _ in range(world - 1):
        peer, _ = server.accept()
        print("joined", peer.recv(16).decode())
else:
    while True:  # until rank 0 listens, however long it takes to start (the test bounds it)
        try:
            socket.create_connection(address).sendall(str(rank).encode())
            break
        except OSError:
            time.sleep(0.05)
"""


def test_gang_replicas_rendezvous_at_rank_zeros_address_and_port(local: LocalHarness) -> None:
    """A 2-replica job whose replicas meet as PyTorch's env:// would: rank 1 reaches rank 0 at
    MASTER_ADDR:MASTER_PORT."""
    backend = local.make()
    payload = {"command": ["python3", "-c", RENDEZVOUS]}
    backend.dispatch(request(backend, "run-rdv", payload, replicas=2))
    status = local.wait_terminal(backend, "run-rdv")
    assert status.state is BackendRunState.SUCCEEDED, status.message
    assert read_replica(backend, "run-rdv", "main", 0).split("\n")[:2] == ["0 2 2 0", "joined 1"]
    assert read_replica(backend, "run-rdv", "main", 1) == "1 2 2 1\n"
