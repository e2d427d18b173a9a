"""The ``Backend`` contract, asserted identically over every backend (``local``, ``sim``,
``kubernetes`` over a fake API server, ``ray`` and ``slurm`` on real engines)."""

from __future__ import annotations

import pytest

from flotilla.backends import (
    Backend,
    BackendClosed,
    BackendRunState,
    CancelOutcome,
    CancelRequest,
    DispatchRejected,
    DispatchRequest,
    LogsRequest,
    ReplicaPlacement,
    StatusRequest,
    UnknownReplica,
    UnknownRun,
)
from tests.timing import wait_until

from .support import Harness, read_all, request


def test_inventory_lists_nodes_with_capacity_and_a_heartbeat(harness: Harness) -> None:
    backend = harness.make()
    assert isinstance(backend, Backend)
    inventory = backend.inventory()
    assert inventory.cluster == backend.cluster
    assert inventory.nodes
    for node in inventory.nodes:
        assert node.capacity["cpu"] > 0
        assert node.capacity["gpu"] == node.gpu_count
    assert inventory.heartbeat > 0
    assert inventory.active_runs == ()


def test_dispatched_run_runs_then_succeeds_with_its_output(harness: Harness) -> None:
    backend = harness.make()
    payload, gate = harness.gated(output="hello-from-run")
    result = backend.dispatch(request(backend, "run-1", payload))
    assert (result.run_id, result.job, result.cluster) == ("run-1", "job-a", backend.cluster)

    running = backend.status(StatusRequest("run-1"))
    assert running.state in (BackendRunState.PENDING, BackendRunState.RUNNING)
    harness.wait(backend, "run-1", lambda s: s.state is BackendRunState.RUNNING, "running")
    assert backend.inventory().active_runs == ("run-1",)

    harness.release(gate)
    status = harness.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.SUCCEEDED
    assert status.exit_code == 0
    assert status.started_at is not None and status.finished_at is not None
    assert status.dispatched_at <= status.started_at <= status.finished_at
    assert [replica.state for replica in status.replicas] == [BackendRunState.SUCCEEDED]
    assert "hello-from-run" in read_all(backend, "run-1")
    assert backend.inventory().active_runs == ()


def test_failing_command_fails_with_its_exit_code(harness: Harness) -> None:
    backend = harness.make()
    backend.dispatch(request(backend, "run-1", harness.quick(exit_code=3)))
    status = harness.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.FAILED
    assert status.exit_code == 3
    assert "3" in status.message
    assert read_all(backend, "run-1", harness.error_stream)


def test_cancel_stops_a_running_run_and_leaves_nothing_behind(harness: Harness) -> None:
    backend = harness.make()
    backend.dispatch(request(backend, "run-1", harness.long()))
    harness.wait(backend, "run-1", lambda s: s.state is BackendRunState.RUNNING, "running")

    result = backend.cancel(CancelRequest("run-1", reason="preempted by job-b"))
    assert result.outcome is CancelOutcome.STOPPING
    status = harness.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.CANCELLED
    assert status.message == "preempted by job-b"
    assert status.exit_code is None
    harness.assert_gone(status)


def test_cancel_is_idempotent(harness: Harness) -> None:
    backend = harness.make()
    backend.dispatch(request(backend, "run-1", harness.long()))
    first = backend.cancel(CancelRequest("run-1"))
    second = backend.cancel(CancelRequest("run-1"))
    assert first.outcome is CancelOutcome.STOPPING
    assert second.outcome in (CancelOutcome.ALREADY_STOPPING, CancelOutcome.ALREADY_FINISHED)
    harness.wait_terminal(backend, "run-1")

    after = backend.cancel(CancelRequest("run-1"))
    assert after.outcome is CancelOutcome.ALREADY_FINISHED
    assert after.status is not None and after.status.state is BackendRunState.CANCELLED


def test_cancel_of_a_finished_run_changes_nothing(harness: Harness) -> None:
    backend = harness.make()
    backend.dispatch(request(backend, "run-1", harness.quick()))
    harness.wait_terminal(backend, "run-1")
    result = backend.cancel(CancelRequest("run-1"))
    assert result.outcome is CancelOutcome.ALREADY_FINISHED
    assert "succeeded" in result.message
    assert backend.status(StatusRequest("run-1")).state is BackendRunState.SUCCEEDED


def test_dispatch_is_idempotent_by_run_id(harness: Harness) -> None:
    backend = harness.make()
    payload, gate = harness.gated(output="once")
    first = backend.dispatch(request(backend, "run-1", payload))
    again = backend.dispatch(request(backend, "run-1", payload))
    assert again == first
    harness.release(gate)
    harness.wait_terminal(backend, "run-1")
    assert backend.dispatch(request(backend, "run-1", payload)) == first
    assert read_all(backend, "run-1").count("once") == 1


def test_a_run_id_reused_for_another_job_is_rejected(harness: Harness) -> None:
    backend = harness.make()
    backend.dispatch(request(backend, "run-1", harness.quick(), job="job-a"))
    with pytest.raises(DispatchRejected, match="run_id"):
        backend.dispatch(request(backend, "run-1", harness.quick(), job="job-b"))


def test_unknown_run_ids(harness: Harness) -> None:
    backend = harness.make()
    with pytest.raises(UnknownRun):
        backend.status(StatusRequest("no-such-run"))
    with pytest.raises(UnknownRun):
        backend.logs(LogsRequest("no-such-run"))
    result = backend.cancel(CancelRequest("no-such-run"))
    assert result.outcome is CancelOutcome.UNKNOWN_RUN
    assert result.status is None
    assert "no-such-run" in result.message


def test_invalid_requests_are_rejected_naming_the_field(harness: Harness) -> None:
    backend = harness.make()
    with pytest.raises(DispatchRejected, match=r"payload\.command"):
        backend.dispatch(request(backend, "run-1", {"command": [], "sim": {"duration": 1}}))
    if harness.name in ("kubernetes", "sim"):  # both run container payloads
        with pytest.raises(DispatchRejected, match=r"payload\.image"):
            backend.dispatch(request(backend, "run-1", {"command": "x"}, job_type="container"))
    else:
        with pytest.raises(DispatchRejected, match=r"type: 'container' jobs do not run on"):
            backend.dispatch(request(backend, "run-1", {"image": "x"}, job_type="container"))
    placement = ReplicaPlacement("main", 0, "no-such-node")
    bad_node = request(backend, "run-1", harness.quick())
    with pytest.raises(DispatchRejected, match=r"placements\[0\]\.node"):
        backend.dispatch(type(bad_node)(**{**vars(bad_node), "placements": (placement,)}))
    with pytest.raises(DispatchRejected, match="cluster"):
        backend.dispatch(type(bad_node)(**{**vars(bad_node), "cluster": "elsewhere"}))
    with pytest.raises(DispatchRejected, match="run_id"):
        backend.dispatch(request(backend, "../escape", harness.quick()))
    with pytest.raises(UnknownRun):
        backend.status(StatusRequest("run-1"))


def test_max_runtime_ends_the_run_as_failed(harness: Harness) -> None:
    backend = harness.make()
    backend.dispatch(request(backend, "run-1", harness.long(), max_runtime=0.2))
    status = harness.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.FAILED
    assert "exceeded max_runtime of 0.2s" in status.message
    harness.assert_gone(status)


def test_a_run_ended_by_max_runtime_reports_the_time_it_ran(harness: Harness) -> None:
    """Usage and fair share charge a run from its engine's start to its end: a run stopped at
    its limit lasted about that long, not 0 s (issue 36: timed-out jobs were free)."""
    backend = harness.make()
    backend.dispatch(request(backend, "run-1", harness.long(), max_runtime=0.5))
    status = harness.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.FAILED
    assert status.started_at is not None and status.finished_at is not None
    assert status.dispatched_at <= status.started_at <= status.finished_at
    ran = status.finished_at - status.started_at
    late_start = status.started_at - status.dispatched_at
    assert ran >= 0.5 - late_start - 0.1, (ran, late_start)


def test_a_run_cancelled_before_it_started_reports_no_start(harness: Harness) -> None:
    """A run stopped while its engine still held it pending (waiting for the CPUs, an image)
    never ran: no start time, so the service records no ``started`` event and usage charges
    nothing for it (issue 36: a cancel while a pod was Pending was charged)."""
    backend = harness.make()
    with harness.held_start(backend):
        backend.dispatch(request(backend, "run-1", harness.long(), resources={"main": {"cpu": 1}}))
        harness.pass_time()
        pending = backend.status(StatusRequest("run-1"))
        assert pending.state is BackendRunState.PENDING, pending
        backend.cancel(CancelRequest("run-1", reason="not needed any more"))
    status = harness.wait_terminal(backend, "run-1")  # what held it pending is gone now
    assert status.state is BackendRunState.CANCELLED
    if harness.starts_cancelled_pending_runs and status.started_at is not None:
        # Ray leaves a stopped PENDING job waiting and starts it when its resources free
        # up: the backend stops it again at once, and it is charged those moments only.
        assert status.finished_at is not None
        assert status.finished_at - status.started_at < 10.0, status
    else:
        assert status.started_at is None, status
    assert all(replica.state is not BackendRunState.RUNNING for replica in status.replicas)


def test_poll_reports_each_change_once(harness: Harness) -> None:
    backend = harness.make()
    payload, gate = harness.gated()
    backend.dispatch(request(backend, "run-1", payload))
    harness.wait(backend, "run-1", lambda s: s.state is BackendRunState.RUNNING, "running")
    assert [status.run_id for status in backend.poll()] == ["run-1"]
    assert backend.poll() == []
    harness.release(gate)
    harness.wait_terminal(backend, "run-1")
    # A backend's poll may follow its engine's watch, a moment behind a direct status read
    # (kubernetes): poll until the end shows, then it shows once.
    seen: list[tuple[str, BackendRunState]] = []

    def ended() -> bool:
        seen.extend((status.run_id, status.state) for status in backend.poll())
        return any(state.terminal for _, state in seen)

    wait_until(ended, "the run's end in a poll")
    assert [change for change in seen if change[1].terminal] == [
        ("run-1", BackendRunState.SUCCEEDED)
    ]
    assert backend.poll() == []


def test_logs_can_be_followed_from_an_offset(harness: Harness) -> None:
    backend = harness.make()
    backend.dispatch(request(backend, "run-1", harness.quick(output="abcdefghij")))
    harness.wait_terminal(backend, "run-1")
    whole = backend.logs(LogsRequest("run-1"))
    assert whole.complete
    pieces, offset = b"", 0
    for _ in range(len(whole.data) + 1):
        chunk = backend.logs(LogsRequest("run-1", offset=offset, limit=4))
        assert chunk.offset == offset
        pieces += chunk.data
        offset = chunk.next_offset
        if chunk.complete:
            break
    assert pieces == whole.data
    assert b"abcdefghij" in pieces


def test_an_offset_far_past_the_end_reads_nothing(harness: Harness) -> None:
    """Issue 23: ``offset=2**62`` (within the API's limit) made a file seek fail (a 500)."""
    backend = harness.make()
    backend.dispatch(request(backend, "run-1", harness.quick(output="abc")))
    harness.wait_terminal(backend, "run-1")
    chunk = backend.logs(LogsRequest("run-1", offset=2**62))
    assert (chunk.data, chunk.offset, chunk.next_offset) == (b"", 2**62, 2**62)
    assert chunk.complete


def test_every_replica_runs_and_has_its_own_logs(harness: Harness) -> None:
    backend = harness.make()
    backend.dispatch(request(backend, "run-1", harness.quick(output="replica-says-hi"), replicas=3))
    status = harness.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.SUCCEEDED
    assert [(r.task, r.replica) for r in status.replicas] == [("main", 0), ("main", 1), ("main", 2)]
    for index in range(3):
        chunk = backend.logs(LogsRequest("run-1", task="main", replica=index))
        assert "replica-says-hi" in chunk.text
    with pytest.raises(UnknownReplica, match="no replica"):  # the API's 404
        backend.logs(LogsRequest("run-1", task="main", replica=7))


def test_a_new_backend_over_the_same_state_knows_finished_runs(harness: Harness) -> None:
    first = harness.make()
    first.dispatch(request(first, "done", harness.quick(output="kept")))
    first.dispatch(request(first, "broken", harness.quick(exit_code=5)))
    done = harness.wait_terminal(first, "done")
    broken = harness.wait_terminal(first, "broken")
    first.close()

    second = harness.make()
    assert second.status(StatusRequest("done")) == done
    assert second.status(StatusRequest("broken")) == broken
    assert "kept" in read_all(second, "done")
    assert second.poll() == []


def test_a_new_backend_adopts_runs_still_going(harness: Harness) -> None:
    first = harness.make()
    payload, gate = harness.gated(output="adopted")
    first.dispatch(request(first, "gated", payload))
    first.dispatch(request(first, "long", harness.long()))
    harness.wait(first, "long", lambda s: s.state is BackendRunState.RUNNING, "running")
    harness.close_leaving_runs(first)
    with pytest.raises(BackendClosed):
        first.status(StatusRequest("long"))

    second: Backend = harness.make()
    assert sorted(status.run_id for status in second.poll()) == ["gated", "long"]
    assert second.status(StatusRequest("long")).state is BackendRunState.RUNNING
    assert sorted(second.inventory().active_runs) == ["gated", "long"]
    assert second.dispatch(request(second, "long", harness.long())).run_id == "long"

    harness.release(gate)
    finished = harness.wait_terminal(second, "gated")
    assert finished.state is BackendRunState.SUCCEEDED
    assert "adopted" in read_all(second, "gated")

    assert second.cancel(CancelRequest("long")).outcome is CancelOutcome.STOPPING
    cancelled = harness.wait_terminal(second, "long")
    assert cancelled.state is BackendRunState.CANCELLED
    harness.assert_gone(cancelled)


def test_a_closed_backend_refuses_calls(harness: Harness) -> None:
    backend = harness.make()
    backend.close()
    backend.close()
    with pytest.raises(BackendClosed):
        backend.inventory()
    with pytest.raises(BackendClosed):
        backend.dispatch(
            DispatchRequest(
                "run-1", "job-a", backend.cluster, (ReplicaPlacement("main", 0, "n"),), None
            )
        )


def test_a_running_run_names_each_replica_as_its_engine_does(harness: Harness) -> None:
    """``flotilla describe`` shows each replica's engine id (Ray submission id, Slurm job id,
    Kubernetes Job name, local process group): what the engine's own tools find it by, never
    a path on the server. The simulator has no engine to name it."""
    backend = harness.make()
    payload, gate = harness.gated(output="named")
    backend.dispatch(request(backend, "run-1", payload))
    # The local backend learns each command's pid from its batch's supervisor just after the
    # run is running: awaited, not assumed.
    running = harness.wait(
        backend,
        "run-1",
        lambda s: (
            s.state is BackendRunState.RUNNING
            and (harness.name == "sim" or all(r.engine_id for r in s.replicas))
        ),
        "running, named by its engine",
    )
    ids = [replica.engine_id for replica in running.replicas]
    harness.release(gate)
    harness.wait_terminal(backend, "run-1")
    if harness.name == "sim":
        assert ids == [None]
        return
    assert all(ids), ids
    assert not any("/" in found for found in ids if found), ids
