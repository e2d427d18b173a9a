"""The longest task name the local backend holds (``model/names.py``) is one it can run, at
the largest replica index; one longer is rejected at dispatch, naming the field, rather than
lost and re-queued forever (issue 35). Real processes."""

from __future__ import annotations

import pytest

from flotilla.backends import (
    Backend,
    BackendRunState,
    DispatchRejected,
    DispatchRequest,
    ReplicaPlacement,
)
from flotilla.model.names import MAX_TASK_NAME, REPLICA_INDEX_MAX, TASK_NAME_LIMITS
from tests.backends.support import LocalHarness, node_of, read_replica


def one_replica(backend: Backend, run_id: str, task: str) -> DispatchRequest:
    placement = ReplicaPlacement(task, REPLICA_INDEX_MAX, node_of(backend))
    payload = {"command": 'echo "$FLOTILLA_TASK"'}
    return DispatchRequest(run_id, "job-a", backend.cluster, (placement,), payload)


def test_the_longest_task_name_runs_at_the_largest_replica_index(local: LocalHarness) -> None:
    backend = local.make()
    task = "t" * TASK_NAME_LIMITS["local"]
    backend.dispatch(one_replica(backend, "run-1", task))
    status = local.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.SUCCEEDED, status.message
    assert read_replica(backend, "run-1", task, REPLICA_INDEX_MAX) == f"{task}\n"


def test_a_longer_task_name_is_rejected_at_dispatch(local: LocalHarness) -> None:
    backend = local.make()
    length = TASK_NAME_LIMITS["local"] + 1
    with pytest.raises(DispatchRejected, match=rf"placements\[0\]\.task: a task name of {length}"):
        backend.dispatch(one_replica(backend, "run-1", "t" * length))


def test_every_backend_holds_the_limit_the_api_gives() -> None:
    assert MAX_TASK_NAME == min(TASK_NAME_LIMITS.values()) == 100
