"""A scheduling round in a child process: same decisions, cancellable, nothing inherited."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from flotilla.framework.snapshot import CycleResult, CycleStats, SchedulingSnapshot
from flotilla.scheduler.runner import AsyncSchedulingRunner, RoundCancelled, RunnerState
from flotilla.service.forked import ForkedRound, ForkedRoundFailed
from flotilla.sim.simulator import Simulator
from tests.builders import cluster, jobs, load, nodes, scenario
from tests.timing import wait_until

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


class ComparingSimulator(Simulator):
    """Decides every cycle twice: in this process and in a forked child; keeps both."""

    compared: list[tuple[CycleResult, CycleResult]]

    def _snapshot(self, now: float) -> SchedulingSnapshot:
        snapshot = super()._snapshot(now)
        if snapshot.queued:
            here = self.algorithm.schedule(snapshot)
            there = ForkedRound(self.algorithm.schedule)(snapshot, threading.Event())
            self.compared.append((here, there))
        return snapshot


def decisions(result: CycleResult) -> list[tuple[str, str, list[str]]]:
    return [(s.job.name, s.assignment.cluster, s.assignment.nodes) for s in result.scheduled]


def test_a_forked_round_decides_what_the_same_round_decides_in_this_process() -> None:
    data = scenario(
        clusters=[cluster("c", nodes(4, cpu=4))],
        jobs=[jobs("small", n=16, cpu=1), jobs("big", n=2, cpu=64)],
    )
    simulator = ComparingSimulator(load(data))
    simulator.compared = []
    simulator.run()
    assert simulator.compared, "no cycle had queued jobs"
    for here, there in simulator.compared:
        assert decisions(there) == decisions(here)
        assert dict(there.pending) == dict(here.pending)
    first_here, first_there = simulator.compared[0]
    assert first_there.stats.scheduled == first_here.stats.scheduled == 16
    assert set(first_there.pending) == {"big-0", "big-1"}


def test_the_round_happens_in_another_process() -> None:
    def where(snapshot: SchedulingSnapshot, cancel: threading.Event) -> CycleResult:
        return CycleResult(time=float(os.getpid()))

    result = ForkedRound(where)(None, threading.Event())  # type: ignore[arg-type]
    assert result.time != float(os.getpid())


def test_the_child_holds_none_of_the_parents_descriptors() -> None:
    """A listening socket (the API's port) must not stay open in a round that outlives us."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        descriptor = listener.fileno()

        def probe(snapshot: SchedulingSnapshot, cancel: threading.Event) -> CycleResult:
            try:
                os.fstat(descriptor)
            except OSError:
                return CycleResult(time=0.0)
            return CycleResult(time=1.0)

        assert ForkedRound(probe)(None, threading.Event()).time == 0.0  # type: ignore[arg-type]


def test_cancelling_kills_the_child_at_once() -> None:
    started = Path(os.environ.get("TMPDIR", "/tmp")) / f"forked-{os.getpid()}-{time.time_ns()}"

    def forever(snapshot: SchedulingSnapshot, cancel: threading.Event) -> CycleResult:
        partial = started.with_suffix(".partial")
        partial.write_text(str(os.getpid()))
        partial.rename(started)
        time.sleep(600)
        return CycleResult(time=0.0)

    cancel = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            ForkedRound(forever)(None, cancel)  # type: ignore[arg-type]
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    wait_until(started.exists, "the child to start", 30, 0.01)
    child = int(started.read_text())
    started.unlink()
    cancel.set()
    thread.join(10)
    assert not thread.is_alive()
    assert [type(error) for error in errors] == [RoundCancelled]
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)  # killed and reaped


def test_an_error_in_the_round_is_raised_in_the_parent() -> None:
    def broken(snapshot: SchedulingSnapshot, cancel: threading.Event) -> CycleResult:
        raise ValueError("plugin x: bad input")

    with pytest.raises(ValueError, match="plugin x: bad input"):
        ForkedRound(broken)(None, threading.Event())  # type: ignore[arg-type]


def test_a_child_that_dies_without_a_result_is_an_error_not_an_empty_round() -> None:
    def killed(snapshot: SchedulingSnapshot, cancel: threading.Event) -> CycleResult:
        os.kill(os.getpid(), signal.SIGKILL)
        return CycleResult(time=0.0)

    with pytest.raises(ForkedRoundFailed, match="ended without a result"):
        ForkedRound(killed)(None, threading.Event())  # type: ignore[arg-type]


def test_the_async_runner_takes_a_forked_rounds_result() -> None:
    def decide(snapshot: SchedulingSnapshot, cancel: threading.Event) -> CycleResult:
        return CycleResult(time=42.0, stats=CycleStats(considered=3))

    runner = AsyncSchedulingRunner(ForkedRound(decide))
    assert runner.trigger(None)  # type: ignore[arg-type]
    wait_until(lambda: runner.state is RunnerState.RESULT_READY, "the round's result", 30, 0.01)
    result = runner.take_result()
    assert result is not None and result.time == 42.0 and result.stats.considered == 3
