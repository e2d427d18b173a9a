"""A preempted job's ``preemption.signal`` and grace on the local backend (issue 28): the
job gets its signal, may save its work within the grace, and is killed only after it."""

from __future__ import annotations

import signal

from flotilla.backends import BackendRunState, CancelRequest
from tests.backends.support import LocalHarness, read_all, request


def test_the_job_gets_its_signal_and_saves_its_work_within_the_grace(
    local: LocalHarness,
) -> None:
    backend = local.make(grace_period=0.2)  # the backend's default: the job's grace wins
    command = (
        "trap 'echo checkpointed; exit 0' USR1; trap 'echo terminated; exit 1' TERM; "
        "echo ready; while true; do sleep 0.05; done"
    )
    backend.dispatch(request(backend, "victim", {"command": command}))
    local.wait_output(backend, "victim", "ready")
    result = backend.cancel(
        CancelRequest("victim", reason="preempted", grace_period=30, signal="SIGUSR1")
    )
    assert result.message == "SIGUSR1 sent to every replica"
    status = local.wait_terminal(backend, "victim")
    assert status.state is BackendRunState.CANCELLED
    output = read_all(backend, "victim")
    assert "checkpointed" in output and "terminated" not in output
    local.assert_gone(status)


def test_a_job_that_ignores_its_signal_is_killed_after_its_grace(local: LocalHarness) -> None:
    backend = local.make(grace_period=60)
    command = "trap '' USR1; echo ready; sleep 60; echo survived"
    backend.dispatch(request(backend, "stubborn", {"command": command}))
    local.wait_output(backend, "stubborn", "ready")
    backend.cancel(CancelRequest("stubborn", grace_period=0.3, signal="SIGUSR1"))
    status = local.wait_terminal(backend, "stubborn")
    assert status.state is BackendRunState.CANCELLED
    assert status.replicas[0].exit_code == -signal.SIGKILL
    assert "survived" not in read_all(backend, "stubborn")
    local.assert_gone(status)
