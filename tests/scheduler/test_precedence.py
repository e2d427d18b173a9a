"""Work someone waits for goes before a scheduling round: the round pauses between jobs while it
is under way, never for long, and decides exactly as it would have without pausing."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from flotilla.framework.snapshot import QueueInfo, SchedulingConfig, SchedulingSnapshot
from flotilla.scheduler.algorithm import SchedulingAlgorithm
from flotilla.scheduler.precedence import Precedence
from flotilla.server.requests_first import RequestsFirst
from tests.builders import cluster, fleet, jobs, nodes, scenario
from tests.timing import limit


class ScriptedClock:
    """Answers the times given, one per reading; says how many are left."""

    def __init__(self, *times: float) -> None:
        self.times = list(times)

    def __call__(self) -> float:
        return self.times.pop(0)


def test_a_round_waits_at_its_checkpoint_until_the_urgent_work_is_done() -> None:
    precedence = Precedence(max_pause=600.0)
    passed = threading.Event()

    def run() -> None:
        precedence.checkpoint()
        passed.set()

    precedence.checkpoint()  # nothing urgent: no wait at all
    with precedence.urgent():
        thread = threading.Thread(target=run)
        thread.start()
        assert not passed.wait(0.2)  # still waiting: the urgent work is not done
    thread.join(timeout=limit(30))
    assert passed.is_set()


def test_after_a_pause_the_round_computes_at_least_as_long_before_it_pauses_again() -> None:
    # Readings: a pause from 0 to 10 ms; a checkpoint at 15 ms; one at 20 ms, pausing to 30.
    clock = ScriptedClock(0.0, 0.010, 0.015, 0.020, 0.030)
    precedence = Precedence(max_pause=0.0, clock=clock)
    with precedence.urgent():  # a flood of requests: always something urgent
        precedence.checkpoint()  # pauses (read twice: before and after)
        precedence.checkpoint()  # 5 ms of computing after a 10 ms pause: goes on (read once)
        assert clock.times == [0.020, 0.030]
        precedence.checkpoint()  # 10 ms after the pause: pauses again
    assert clock.times == []


def _snapshot() -> SchedulingSnapshot:
    built = fleet(
        scenario(
            clusters=[cluster("c", nodes(4, cpu=8))],
            queues=["a", "b"],
            jobs=[jobs("a", n=30, queue="a", cpu=1), jobs("b", n=30, queue="b", cpu=2)],
        )
    )
    return SchedulingSnapshot(
        time=0.0,
        clusters=built.clusters,
        queues=[QueueInfo("a", order=0), QueueInfo("b", order=1)],
        queued=list(built.jobs.values()),
    )


def _decisions(result: Any) -> list[tuple[str, str]]:
    return [(s.job.name, repr(s.assignment.placements)) for s in result.scheduled]


def test_a_round_that_yields_decides_exactly_as_one_that_does_not() -> None:
    config = SchedulingConfig(assignment_strategy="resource-aware")
    plain = SchedulingAlgorithm(config).schedule(_snapshot())
    precedence = Precedence(max_pause=0.001)
    with precedence.urgent():  # urgent the whole time: the round pauses at every job it can
        yielding = SchedulingAlgorithm(config).schedule(_snapshot(), precedence=precedence)
    assert _decisions(yielding) == _decisions(plain)
    assert len(_decisions(plain)) > 0
    assert yielding.pending == plain.pending


def test_a_request_is_urgent_until_its_response_starts_not_while_it_streams() -> None:
    precedence = Precedence()
    seen: list[tuple[str, bool]] = []

    async def streaming_app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(("handling", precedence.pending))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        seen.append(("streaming", precedence.pending))
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def send(message: Any) -> None:
        return None

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    asyncio.run(RequestsFirst(streaming_app, precedence)({"type": "http"}, receive, send))
    assert seen == [("handling", True), ("streaming", False)]
    assert not precedence.pending


def test_a_request_that_fails_before_answering_leaves_nothing_urgent() -> None:
    precedence = Precedence()

    async def failing_app(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("boom")

    async def nothing(*_: Any) -> Any:
        return None

    with pytest.raises(RuntimeError, match="boom"):
        asyncio.run(RequestsFirst(failing_app, precedence)({"type": "http"}, nothing, nothing))
    assert not precedence.pending


def _paced_in_thread(precedence: Precedence) -> tuple[threading.Thread, threading.Event]:
    passed = threading.Event()

    def run() -> None:
        precedence.pace()
        passed.set()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, passed


def test_bulk_work_waits_at_its_pace_while_a_read_is_under_way() -> None:
    precedence = Precedence(max_pause=600.0)
    precedence.pace()  # nothing urgent: no wait at all
    with precedence.urgent():  # a GET, on another thread than the bulk work
        thread, passed = _paced_in_thread(precedence)
        assert not passed.wait(0.2)
    thread.join(timeout=limit(30))
    assert passed.is_set()


def test_bulk_work_does_not_wait_for_bulk_work_but_the_round_does() -> None:
    precedence = Precedence(max_pause=600.0)
    with precedence.urgent(bulk=True):  # a large submission
        assert precedence.pending and not precedence.prompt_pending
        thread, passed = _paced_in_thread(precedence)  # the loop's sync, another submission
        assert passed.wait(30)
        thread.join(timeout=limit(30))
        round_passed = threading.Event()
        checkpoint = threading.Thread(target=lambda: (precedence.checkpoint(), round_passed.set()))
        checkpoint.start()
        assert not round_passed.wait(0.2)  # a scheduling round still yields to a submission
    checkpoint.join(timeout=limit(30))
    assert round_passed.is_set() and not precedence.pending


def test_a_thread_never_waits_at_its_pace_for_its_own_urgent_work() -> None:
    precedence = Precedence(max_pause=600.0)
    with precedence.urgent():  # the loop applying a cancel, then converting jobs
        precedence.pace()  # returns at once (it would wait ten minutes otherwise)
        thread, passed = _paced_in_thread(precedence)
        assert not passed.wait(0.2)  # another thread does wait
    thread.join(timeout=limit(30))


def test_after_a_pace_the_thread_works_at_least_as_long_before_it_paces_again() -> None:
    clock = ScriptedClock(0.0, 0.010, 0.015, 0.020, 0.030)
    precedence = Precedence(max_pause=0.0, clock=clock)
    with precedence.urgent():
        thread = threading.Thread(
            target=lambda: [precedence.pace() for _ in range(3)]  # as the checkpoint's test
        )
        thread.start()
        thread.join(timeout=limit(30))
    assert clock.times == []


def _request(app: Any, precedence: Precedence, scope: dict[str, Any]) -> None:
    async def nothing(*_: Any) -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    asyncio.run(RequestsFirst(app, precedence)({"type": "http", **scope}, nothing, nothing))


def test_a_large_submission_is_bulk_a_small_one_and_a_read_are_not() -> None:
    precedence = Precedence()
    seen: list[bool] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert precedence.pending  # the round yields to every request
        seen.append(precedence.prompt_pending)

    large = [(b"content-length", b"200000")]
    _request(app, precedence, {"method": "POST", "path": "/v1/jobs", "headers": large})
    small = [(b"content-length", b"400")]
    _request(app, precedence, {"method": "POST", "path": "/v1/jobs", "headers": small})
    _request(app, precedence, {"method": "GET", "path": "/v1/jobs/x", "headers": []})
    _request(app, precedence, {"method": "POST", "path": "/v1/jobs/x/cancel", "headers": large})
    assert seen == [False, True, True, True]
    assert not precedence.pending and not precedence.prompt_pending
