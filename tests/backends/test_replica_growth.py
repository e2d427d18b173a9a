"""``ReplicaGrowth``: adding replicas to a running run (a non-strict gang growing), on every
backend that has it (local, sim); the others say they have not, so the service refuses a
gang that would never grow on them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flotilla.backends import available_backends, backend_can_grow
from flotilla.backends.interface import (
    BackendRunState,
    DispatchRejected,
    StatusRequest,
    UnknownRun,
    can_grow,
)

from .support import Harness, LocalHarness, SimHarness, read_replica, request


@pytest.fixture(params=["local", "sim"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    kind = {"local": LocalHarness, "sim": SimHarness}[request.param]
    with kind(tmp_path / "state", scratch) as made:
        yield made


def test_a_running_run_takes_more_replicas_once(harness: Harness) -> None:
    backend = harness.make()
    assert can_grow(backend)
    payload, gate = harness.gated(output="member")
    backend.dispatch(request(backend, "run-1", payload, replicas=2))
    harness.wait(backend, "run-1", lambda s: s.state is BackendRunState.RUNNING, "running")
    grown = request(backend, "run-1", payload, replicas=4)
    result = backend.add_replicas(grown)  # type: ignore[attr-defined]
    assert [(p.task, p.replica) for p in result.placements] == [("main", i) for i in range(4)]
    assert backend.add_replicas(grown) == result  # type: ignore[attr-defined]
    status = backend.status(StatusRequest("run-1"))
    assert [replica.replica for replica in status.replicas] == [0, 1, 2, 3]
    harness.release(gate)
    ended = harness.wait_terminal(backend, "run-1")
    assert ended.state is BackendRunState.SUCCEEDED
    assert len(ended.replicas) == 4
    if harness.name == "local":  # every replica ran its command once
        outputs = [read_replica(backend, "run-1", "main", index) for index in range(4)]
        assert all(output.count("member") == 1 for output in outputs)


def test_growing_an_ended_or_unknown_run_or_moving_a_replica_is_refused(
    harness: Harness,
) -> None:
    backend = harness.make()
    with pytest.raises(UnknownRun):
        backend.add_replicas(request(backend, "nope", harness.quick()))  # type: ignore[attr-defined]
    backend.dispatch(request(backend, "run-1", harness.quick(), replicas=1))
    with pytest.raises(DispatchRejected, match="run_id"):
        backend.add_replicas(  # type: ignore[attr-defined]
            request(backend, "run-1", harness.quick(), replicas=2, job="job-b")
        )
    harness.wait_terminal(backend, "run-1")
    with pytest.raises(DispatchRejected, match="ended"):
        backend.add_replicas(request(backend, "run-1", harness.quick(), replicas=2))  # type: ignore[attr-defined]


def test_which_registered_backends_can_grow_is_known_by_name() -> None:
    grows = {name: backend_can_grow(name) for name in available_backends()}
    assert grows == {
        "kubernetes": False,
        "local": True,
        "ray": False,
        "sim": True,
        "slurm": False,
    }
    assert backend_can_grow("no-such-backend") is False
