"""Engines at arm's length (issue 36): a black-holed engine (it accepts a connection and never
answers) or a refusing one costs the other clusters nothing, is said unreachable in one log
line, and a fleet with no reachable cluster neither spins nor fails its cycles.

The loop runs on its thread as in ``flotilla up``; the tests wait for states and count cycles
and log lines, never time them."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from bench.dead_engines import (
    BlackHole,
    RemoteBackend,
    declare_clusters,
    refusing_address,
    remote_cluster_spec,
)

from flotilla.app.clusters import register_clusters
from flotilla.backends.interface import (
    Backend,
    BackendUnavailable,
    DispatchRequest,
    DispatchResult,
    Inventory,
    RunStatus,
)
from flotilla.model import JobSpec
from flotilla.service.engines import (
    ClusterEngine,
    ClusterUnreachable,
    EngineSettings,
    NoAnswerYet,
    first_answers,
)
from flotilla.store import JobState
from tests.live_service import local_backend
from tests.service_builders import service_over
from tests.timing import wait_until


def _job(name: str, cpu: float = 0.1) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": name,
            "queue": "default",
            "tasks": [{"name": "main", "resources": {"cpu": cpu}}],
            "payload": {"command": ["sh", "-c", "sleep 30"]},
        }
    )


@pytest.fixture
def dead_engines() -> Iterator[tuple[tuple[str, int], tuple[str, int]]]:
    """A black hole's address and a refusing one."""
    with BlackHole() as hole, refusing_address() as refused:
        yield hole.address, refused


def _unreachable_lines(caplog: pytest.LogCaptureFixture, cluster: str) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.getMessage().startswith(f"cluster {cluster} is unreachable")
    ]


def test_a_local_job_starts_beside_a_black_holed_and_a_refusing_cluster(
    tmp_path: Path,
    dead_engines: tuple[tuple[str, int], tuple[str, int]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The remote backends ask with no timeout of their own (the worst client): on the
    round's path the first cycle never ends; at arm's length the local job runs, and each
    dead cluster is said unreachable once however many cycles pass."""
    caplog.set_level(logging.DEBUG, logger="flotilla")
    hole, refused = dead_engines
    local = local_backend(tmp_path)
    backends: dict[str, Backend] = {
        "local": local,
        "ray": RemoteBackend("ray", hole),
        "slurm": RemoteBackend("slurm", refused),
    }
    service = service_over(
        backends,
        root=tmp_path,
        register=False,
        engines=EngineSettings(timeout=0.5),
        cycle_interval=0.05,
        heartbeat_timeout=600,
    )
    store = service.store
    register_clusters(store, {"local": local})
    for name in ("ray", "slurm"):  # known from before, as ``connect`` left them at start
        store.upsert_cluster(remote_cluster_spec(name))
        store.set_cluster_state(name, "unreachable", reason="its backend did not answer")
    try:
        job = store.submit_jobs([_job("hello")])[0]
        service.start()
        wait_until(
            lambda: store.get_job(job).state is JobState.RUNNING,
            lambda: f"the local job running (it is {store.get_job(job).state.value})",
            seconds=20,
        )
        wait_until(
            lambda: _unreachable_lines(caplog, "ray") != [],
            "the black hole said unreachable",
            seconds=20,
        )
        cycles = service.loop.last_cycle().number
        wait_until(
            lambda: service.loop.last_cycle().number >= cycles + 40,
            "40 more cycles",
            seconds=20,
        )
    finally:
        service.stop()
        local.close()
    for cluster in ("ray", "slurm"):
        assert len(_unreachable_lines(caplog, cluster)) == 1, _unreachable_lines(caplog, cluster)
    warned = [
        r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("flotilla")
    ]
    assert all(r.exc_info is None for r in warned), [r.getMessage() for r in warned]
    assert len(warned) <= 4, [r.getMessage() for r in warned]


def test_no_reachable_cluster_with_a_job_queued_waits_with_a_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The fleet's one cluster refuses and never gave its nodes: the job's reason says so, no
    cycle fails, the loop cycles at its interval, not as fast as it can (on main: ~200
    failed cycles a second, a traceback each), and the cluster is said unreachable once."""
    caplog.set_level(logging.INFO, logger="flotilla")
    with refusing_address() as refused:
        backends = {"slurm": RemoteBackend("slurm", refused)}
        service = service_over(backends, root=tmp_path, register=False, cycle_interval=0.2)
        store = service.store
        declare_clusters(store, {"slurm": "slurm"})  # as a fleet apply: no nodes, unreachable
        try:
            job = store.submit_jobs([_job("waits", cpu=1)])[0]
            service.start()
            wait_until(
                lambda: service.loop.pending_reason(job) is not None,
                "the job's reason",
                seconds=20,
            )
            cycles = service.loop.last_cycle().number
            window = 1.0
            time.sleep(window)  # a window to count cycles in, not a time asserted
            counted = service.loop.last_cycle().number - cycles
            reason = service.loop.pending_reason(job)
        finally:
            service.stop()
    assert reason is not None and "no cluster has capacity" in reason
    assert store.get_job(job).state is JobState.QUEUED
    assert counted <= window / 0.2 + 3
    failed = [r for r in caplog.records if "cycle failed" in r.getMessage()]
    assert failed == []
    assert len(_unreachable_lines(caplog, "slurm")) == 1
    assert len(caplog.records) <= 10, [r.getMessage() for r in caplog.records]


class _Flaky:
    """A backend that does not answer while ``down`` (counting the calls that reach it)."""

    name = "flaky"
    cluster = "flaky"

    def __init__(self) -> None:
        self.down = True
        self.calls = 0

    def inventory(self) -> Inventory:
        self.calls += 1
        if self.down:
            raise BackendUnavailable("connection refused\nsecond line of a raw client error")
        return Inventory("flaky", (), time.time())

    def poll(self) -> list[RunStatus]:
        return []

    def close(self) -> None:
        pass


def test_an_unreachable_cluster_is_asked_with_backoff_and_said_back_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """However often the loop asks, an unreachable engine is probed after a backoff only;
    one line when it goes, one when it answers again."""
    caplog.set_level(logging.INFO, logger="flotilla")
    now = [0.0]
    inner = _Flaky()
    engine = ClusterEngine(
        cast(Backend, inner),  # the calls it needs
        EngineSettings(answer_within=5.0, backoff=1.0, max_backoff=4.0),
        clock=lambda: now[0],
    )
    try:
        for _ in range(100):  # a hundred cycles within the first backoff
            with pytest.raises(BackendUnavailable):
                engine.inventory()
        assert inner.calls == 1
        for step in range(1, 40):  # 20 s of cycles every 0.5 s: probes at 1, 3, 7, 11, 15, 19
            now[0] = step * 0.5
            with contextlib.suppress(ClusterUnreachable):
                engine.inventory()
            wait_until(lambda: engine._refresh is None or engine._refresh.done.is_set(), "probe")
        assert 4 <= inner.calls <= 8
        inner.down = False
        with pytest.raises(ClusterUnreachable):
            engine.inventory()  # back, but not asked before its probe is due
        now[0] += 5.0
        assert engine.inventory().cluster == "flaky"  # the probe's answer
        assert engine.reachable
    finally:
        engine.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "flotilla.service.engines"]
    assert lines == [
        "cluster flaky is unreachable: connection refused (asked again every 4 s at most)",
        "cluster flaky answers again",
    ]


def test_a_cycle_that_keeps_failing_backs_off_instead_of_spinning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each failure in a row doubles the wait before the next try (from one interval):
    over a window the loop tries a handful of times, not thousands (on main: at once)."""
    service = service_over({}, root=tmp_path, register=False, cycle_interval=0.05)
    tries: list[float] = []

    def failing() -> None:
        tries.append(time.monotonic())
        raise RuntimeError("the database is gone")

    service.loop.cycle = failing  # type: ignore[method-assign]
    try:
        service.start()
        wait_until(lambda: len(tries) >= 3, "three tries", seconds=20)
        time.sleep(1.0)  # a window to count tries in, not a time asserted
        counted = len(tries)
    finally:
        service.stop()
    assert 3 <= counted <= 10  # tries at 0, 0.05, 0.15, 0.35, 0.75, 1.55, 3.15 s…
    failed = [r for r in caplog.records if "cycle failed" in r.getMessage()]
    assert len(failed) >= 3 and all("retrying in" in r.getMessage() for r in failed)


class _Slow:
    """A backend whose dispatch waits for ``release`` (an engine slow to answer)."""

    name = "slow"
    cluster = "slow"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.dispatched = 0

    def dispatch(self, request: DispatchRequest) -> DispatchResult:
        self.release.wait()
        self.dispatched += 1
        return DispatchResult(request.run_id, request.job, "slow", 1.0, request.placements)

    def close(self) -> None:
        pass


def test_a_dispatch_answered_late_wakes_the_loop_and_its_repeat_takes_the_outcome() -> None:
    """The round does not wait for a slow engine: the dispatch goes on on the cluster's
    worker, its answer wakes the loop, and the loop's repeat (idempotent by run id) takes that
    answer without asking the engine again."""
    inner = _Slow()
    woken = threading.Event()
    engine = ClusterEngine(
        cast(Backend, inner), EngineSettings(answer_within=0.0), on_late_answer=woken.set
    )
    request = DispatchRequest("run-1", "job-1", "slow", (), None)
    try:
        with pytest.raises(NoAnswerYet):
            engine.dispatch(request)
        assert not woken.is_set()
        inner.release.set()
        wait_until(woken.is_set, "the late answer's wake")
        assert engine.dispatch(request).run_id == "run-1"
        assert inner.dispatched == 1
    finally:
        engine.close()


class _Unhurried(_Flaky):
    """An engine that answers, after ``answer`` is set (slower than ``answer_within``)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.answer = threading.Event()
        self.asked = threading.Event()

    def inventory(self) -> Inventory:
        self.asked.set()
        self.answer.wait()
        return super().inventory()


def test_at_start_a_slow_engine_is_waited_for_and_not_called_unreachable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``flotilla up`` asks every engine at once and waits for their first answers (the
    round never does): one that answers later than a round would wait is connected."""
    inner = _Unhurried()
    engine = ClusterEngine(cast(Backend, inner), EngineSettings(answer_within=0.0))
    threading.Timer(0.2, inner.answer.set).start()
    try:
        first_answers({"flaky": engine}, seconds=30)
        assert engine.inventory().cluster == "flaky"
    finally:
        inner.answer.set()
        engine.close()
    assert engine.reachable and not caplog.records


def test_a_call_that_never_returns_makes_its_cluster_unreachable_and_is_left_behind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A black hole (the client has no timeout of its own): past ``timeout`` the cluster is
    unreachable, in one line, and a probe after the backoff runs on a fresh worker thread
    instead of queueing behind the hung call."""
    caplog.set_level(logging.INFO, logger="flotilla")
    now = [0.0]
    inner = _Unhurried()  # its first call hangs until ``answer`` is set
    engine = ClusterEngine(
        cast(Backend, inner),
        EngineSettings(answer_within=0.0, probe_within=0.0, timeout=10.0, backoff=1.0),
        clock=lambda: now[0],
    )
    try:
        with pytest.raises(NoAnswerYet):
            engine.inventory()  # asked; no answer yet
        wait_until(inner.asked.is_set, "the call under way")
        now[0] = 11.0
        with pytest.raises(ClusterUnreachable, match="no answer in 10 s"):
            engine.inventory()
        assert not engine.reachable
        calls = inner.calls
        inner.answer.set()  # the engine answers again (the hung call returns too, late)
        now[0] = 13.0  # past the backoff: the probe goes to a new worker thread
        probe = engine.ask()
        assert probe is not None
        wait_until(probe.is_set, "the probe's answer")
        assert engine.inventory().cluster == "flaky"
        assert inner.calls > calls
    finally:
        inner.answer.set()
        engine.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "flotilla.service.engines"]
    assert lines == [
        "cluster flaky is unreachable: no answer in 10 s (asked again every 30 s at most)",
        "cluster flaky answers again",
    ]
