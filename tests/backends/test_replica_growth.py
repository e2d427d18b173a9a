"""``ReplicaGrowth``: adding replicas to a running run (a non-strict gang growing), on every
backend that has it (local, sim, kubernetes over the API-server double, ray on a real head);
the others say they have not, so the service refuses a gang that would never grow on them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flotilla.backends import available_backends, backend_can_grow
from flotilla.backends.interface import (
    BackendRunState,
    CancelRequest,
    DispatchRejected,
    StatusRequest,
    UnknownRun,
    can_grow,
)

from .ray_support import RayHarness
from .support import (
    Harness,
    KubernetesHarness,
    LocalHarness,
    SimHarness,
    read_replica,
    request,
)


@pytest.fixture(params=["local", "sim", "kubernetes", "ray"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    made: Harness
    if request.param == "ray":  # one xdist group: see conftest.py
        made = RayHarness(tmp_path / "state", scratch, request.getfixturevalue("ray_head"))
    else:
        kind = {"local": LocalHarness, "sim": SimHarness, "kubernetes": KubernetesHarness}
        made = kind[request.param](tmp_path / "state", scratch)
    with made:
        yield made


RUNS_PROCESSES = ("local", "kubernetes", "ray")
"""The harnesses whose replicas are real processes with output of their own."""


def test_a_running_run_takes_more_replicas_once(harness: Harness) -> None:
    backend = harness.make()
    assert can_grow(backend)
    payload, gate = harness.gated(output="member")
    payload["command"] = payload["command"].replace(
        "echo member", 'echo "member rank=$RANK world=$WORLD_SIZE"'
    )
    backend.dispatch(request(backend, "run-1", payload, replicas=2))
    harness.wait(backend, "run-1", lambda s: s.state is BackendRunState.RUNNING, "running")
    grown = request(backend, "run-1", payload, replicas=4)
    result = backend.add_replicas(grown)  # type: ignore[attr-defined]
    assert [(p.task, p.replica) for p in result.placements] == [("main", i) for i in range(4)]
    assert backend.add_replicas(grown) == result  # type: ignore[attr-defined]
    status = backend.status(StatusRequest("run-1"))
    assert [replica.replica for replica in status.replicas] == [0, 1, 2, 3]
    harness.wait(
        backend,
        "run-1",
        lambda s: [r.state for r in s.replicas] == [BackendRunState.RUNNING] * 4,
        "running with 4 replicas",
    )
    harness.release(gate)
    ended = harness.wait_terminal(backend, "run-1")
    assert ended.state is BackendRunState.SUCCEEDED
    assert [replica.state for replica in ended.replicas] == [BackendRunState.SUCCEEDED] * 4
    if harness.name in RUNS_PROCESSES:  # every replica ran its command once, with its rank
        outputs = [read_replica(backend, "run-1", "main", index) for index in range(4)]
        assert all(output.count("member") == 1 for output in outputs), outputs
        # A grown replica sees the run's new size, except on kubernetes: a Job's pod template
        # is immutable, so its grown pods see the size the run started with (docs/backends.md).
        world = 2 if harness.name == "kubernetes" else 4
        said = [line for output in outputs for line in output.splitlines() if "member" in line]
        assert said == [
            "member rank=0 world=2",
            "member rank=1 world=2",
            f"member rank=2 world={world}",
            f"member rank=3 world={world}",
        ]


def test_cancel_stops_the_grown_replicas_too(harness: Harness) -> None:
    backend = harness.make()
    backend.dispatch(request(backend, "run-1", harness.long(), replicas=2))
    harness.wait(backend, "run-1", lambda s: s.state is BackendRunState.RUNNING, "running")
    backend.add_replicas(request(backend, "run-1", harness.long(), replicas=4))  # type: ignore[attr-defined]
    harness.wait(
        backend,
        "run-1",
        lambda s: [r.state for r in s.replicas] == [BackendRunState.RUNNING] * 4,
        "running with 4 replicas",
    )
    backend.cancel(CancelRequest("run-1", reason="no longer wanted", grace_period=1.0))
    ended = harness.wait_terminal(backend, "run-1")
    assert ended.state is BackendRunState.CANCELLED
    assert len(ended.replicas) == 4  # each stopped (what a SIGTERM'd process reports)
    assert all(replica.state.terminal for replica in ended.replicas)
    harness.assert_gone(ended)


def test_a_new_backend_object_adopts_the_grown_run(harness: Harness) -> None:
    """After a restart (or a failover) the run is known with every replica it grew to."""
    first = harness.make()
    payload, gate = harness.gated(output="member")
    first.dispatch(request(first, "run-1", payload, replicas=2))
    harness.wait(first, "run-1", lambda s: s.state is BackendRunState.RUNNING, "running")
    first.add_replicas(request(first, "run-1", payload, replicas=4))  # type: ignore[attr-defined]
    harness.close_leaving_runs(first)
    second = harness.make()
    status = second.status(StatusRequest("run-1"))
    assert [replica.replica for replica in status.replicas] == [0, 1, 2, 3]
    assert "run-1" in second.inventory().active_runs
    grown = request(second, "run-1", payload, replicas=4)
    assert [p.replica for p in second.add_replicas(grown).placements] == [0, 1, 2, 3]  # type: ignore[attr-defined]
    harness.release(gate)
    ended = harness.wait_terminal(second, "run-1")
    assert ended.state is BackendRunState.SUCCEEDED
    assert len(ended.replicas) == 4


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
        "kubernetes": True,
        "local": True,
        "ray": True,
        "sim": True,
        "slurm": False,
    }
    assert backend_can_grow("no-such-backend") is False


def test_kubernetes_in_kueue_mode_says_it_cannot_grow(kube: KubernetesHarness) -> None:
    """Kueue suspends a Job whose size changes: the backend says it cannot grow (the service
    then records no growth there) and refuses new placements."""
    backend = kube.make(mode="kueue", queue_name="team-a")
    assert not can_grow(backend)
    assert can_grow(kube.make())  # native mode grows
    backend.dispatch(request(backend, "run-1", kube.long(), replicas=2))
    same = request(backend, "run-1", kube.long(), replicas=2)
    assert len(backend.add_replicas(same).placements) == 2  # type: ignore[attr-defined]
    with pytest.raises(DispatchRejected, match="mode kueue"):
        backend.add_replicas(request(backend, "run-1", kube.long(), replicas=4))  # type: ignore[attr-defined]
