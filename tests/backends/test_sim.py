"""What only the ``sim`` backend does: fake nodes, fake time, synthetic output."""

from __future__ import annotations

from pathlib import Path

import pytest

from flotilla.backends import (
    BackendRunState,
    CancelRequest,
    DispatchRejected,
    LogsRequest,
    LogStream,
    StatusRequest,
    UnknownRun,
    load_backend,
)
from flotilla.backends.sim import FakeClock, SimBackend
from flotilla.model.cluster import NodeGroup
from flotilla.model.node_info import node_infos

from .support import SimHarness, request


def test_nodes_come_from_scenario_style_groups() -> None:
    backend = SimBackend(
        nodes=[
            {"name": "gpu", "count": 2, "resources": {"cpu": 32, "memory": "256Gi", "gpu": 8}},
            {"name": "cpu", "resources": {"cpu": 4, "memory": "8Gi"}, "labels": {"zone": "a"}},
        ]
    )
    nodes = backend.inventory().nodes
    assert [node.name for node in nodes] == ["gpu-0", "gpu-1", "cpu"]
    assert nodes[0].gpu_count == 8
    assert nodes[0].capacity["memory"] == 256 * 2**30
    assert nodes[2].labels == {"zone": "a"}


def test_nodes_are_the_ones_the_simulator_builds_from_the_same_group() -> None:
    """A fleet's ``sim`` cluster and ``flotilla simulate`` see one node alike, GPU memory too."""
    group = {"name": "a100", "resources": {"cpu": 32}, "gpus": {"count": 4, "memory": "80Gi"}}
    [node] = SimBackend(nodes=[group]).inventory().nodes
    assert node == node_infos(NodeGroup.model_validate(group))[0]
    assert node.capacity["gpu_memory"] == 4 * 80 * 2**30


def test_a_run_ends_after_its_duration_on_the_injected_clock(sim: SimHarness) -> None:
    backend = sim.make(startup_delay=1.0)
    payload = {"sim": {"duration": 2.5, "exit_code": 0}}
    backend.dispatch(request(backend, "run-1", payload))
    assert backend.status(StatusRequest("run-1")).state is BackendRunState.PENDING
    sim.clock.advance(1.0)
    assert backend.status(StatusRequest("run-1")).state is BackendRunState.RUNNING
    sim.clock.advance(2.4)
    assert backend.status(StatusRequest("run-1")).state is BackendRunState.RUNNING
    sim.clock.advance(0.1)
    status = backend.status(StatusRequest("run-1"))
    assert status.state is BackendRunState.SUCCEEDED
    assert status.finished_at == status.dispatched_at + 3.5


def test_a_run_without_a_sim_section_lasts_the_default_duration(sim: SimHarness) -> None:
    backend = sim.make(default_duration=5.0)
    backend.dispatch(request(backend, "run-1", None))
    sim.clock.advance(4.9)
    assert backend.status(StatusRequest("run-1")).state is BackendRunState.RUNNING
    sim.clock.advance(0.1)
    assert backend.status(StatusRequest("run-1")).state is BackendRunState.SUCCEEDED


def test_a_slow_exit_after_sigterm_is_killed_at_the_end_of_the_grace(sim: SimHarness) -> None:
    backend = sim.make(grace_period=2.0)
    payload = {"sim": {"duration": 60, "sigterm_delay": 30}}
    backend.dispatch(request(backend, "run-1", payload, max_runtime=10))
    sim.clock.advance(10.0)
    stopping = backend.status(StatusRequest("run-1"))
    assert stopping.state is BackendRunState.RUNNING
    assert stopping.message == "stopping: exceeded max_runtime of 10s"
    assert backend.cancel(CancelRequest("run-1")).outcome.value == "already-stopping"
    sim.clock.advance(2.0)
    status = backend.status(StatusRequest("run-1"))
    assert (status.state, status.exit_code) == (BackendRunState.FAILED, -9)


def test_cancelling_a_pending_run_cancels_it_at_once(sim: SimHarness) -> None:
    backend = sim.make(startup_delay=5.0)
    backend.dispatch(request(backend, "run-1", {"sim": {"duration": 1}}))
    backend.cancel(CancelRequest("run-1", reason="queue deleted"))
    status = backend.status(StatusRequest("run-1"))
    assert (status.state, status.started_at, status.message) == (
        BackendRunState.CANCELLED,
        None,
        "queue deleted",
    )


def test_logs_grow_with_time(sim: SimHarness) -> None:
    backend = sim.make()
    backend.dispatch(request(backend, "run-1", {"sim": {"duration": 3, "output": ["step one"]}}))
    first = backend.logs(LogsRequest("run-1"))
    assert first.text.splitlines()[1:] == ["step one"]
    assert not first.complete
    sim.clock.advance(3.0)
    rest = backend.logs(LogsRequest("run-1", offset=first.next_offset))
    assert rest.complete
    assert rest.text.splitlines()[-1].endswith("exited with code 0")
    assert "running for 2s" in rest.text
    assert backend.logs(LogsRequest("run-1", stream=LogStream.STDERR)).data == b""


def test_an_invalid_sim_section_is_rejected_naming_the_field(sim: SimHarness) -> None:
    backend = sim.make()
    with pytest.raises(DispatchRejected, match=r"payload\.sim\.duration"):
        backend.dispatch(request(backend, "run-1", {"sim": {"duration": "long"}}))


def test_without_a_state_dir_runs_live_in_memory() -> None:
    clock = FakeClock()
    backend = SimBackend(clock=clock)
    backend.dispatch(request(backend, "run-1", {"sim": {"duration": 1}}))
    clock.advance(1)
    assert backend.status(StatusRequest("run-1")).state is BackendRunState.SUCCEEDED


def test_load_backend_by_name(tmp_path: Path) -> None:
    backend = load_backend("sim", cluster="demo", state_dir=str(tmp_path), grace_period=1)
    assert isinstance(backend, SimBackend)
    assert backend.inventory().cluster == "demo"


def test_only_the_most_recent_finished_runs_stay_in_memory_once_reported() -> None:
    """Memory follows the active runs: a finished run, once a poll reported it, is kept
    among the last ``finished_runs_kept`` only (without a state dir an older one is
    unknown); a run still going is always known."""
    clock = FakeClock()
    backend = SimBackend(clock=clock, finished_runs_kept=2)
    for index in range(5):
        backend.dispatch(request(backend, f"short-{index}", {"sim": {"duration": 1}}))
    backend.dispatch(request(backend, "long", {"sim": {"duration": 100}}))
    backend.poll()  # they started
    clock.advance(1)
    reported = {status.run_id: status.state for status in backend.poll()}
    assert reported == {f"short-{index}": BackendRunState.SUCCEEDED for index in range(5)}
    assert backend.poll() == []  # reported once
    for index in (3, 4):
        assert backend.status(StatusRequest(f"short-{index}")).state is BackendRunState.SUCCEEDED
    for index in (0, 1, 2):
        with pytest.raises(UnknownRun):
            backend.status(StatusRequest(f"short-{index}"))
    assert backend.status(StatusRequest("long")).state is BackendRunState.RUNNING
    assert backend.inventory().active_runs == ("long",)


def test_a_finished_run_dropped_from_memory_is_read_back_from_the_state_dir(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    backend = SimBackend(clock=clock, state_dir=tmp_path, finished_runs_kept=0)
    backend.dispatch(request(backend, "run-1", {"sim": {"duration": 1, "exit_code": 3}}))
    backend.poll()
    clock.advance(1)
    assert [status.state for status in backend.poll()] == [BackendRunState.FAILED]
    status = backend.status(StatusRequest("run-1"))
    assert status.state is BackendRunState.FAILED and status.exit_code == 3
    assert backend.poll() == []  # reading it back is not news
