"""The lease survives rounds longer than its TTL (issue 23, item 6).

A round ran inline on the loop's thread in sync mode, and nothing renewed the lease while it
computed: a round slower than the TTL was thrown away at its commit ("lost the scheduling
lease during a cycle"), then the next one too, with one replica and no one else wanting the
lease — ``--lease-ttl 2`` with 8,000 queued jobs scheduled nothing in 2 minutes. The lease is
now renewed by a thread of its own, and a term that ran out anyway goes on while no one took
a newer one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flotilla.backends.sim import SimBackend
from flotilla.model import JobSpec
from flotilla.model.scenario import Mode
from flotilla.scheduler.algorithm import SchedulingAlgorithm
from flotilla.store import JobState
from tests.service_builders import service_over
from tests.timing import wait_until

TTL = 2.0
SLOW_ROUND = 3 * TTL
"""Each round waits this long before it schedules: well past the lease's TTL."""
WAIT = 120.0
"""How long the test waits for something before failing (not a performance bound)."""


def wait_for(predicate: Callable[[], bool], what: str, limit: float = WAIT) -> None:
    wait_until(predicate, what, limit, 0.05)


def job(name: str) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": name,
            "queue": "default",
            "tasks": [{"name": "main", "resources": {"cpu": 1}}],
            "payload": {"sim": {"duration": 3600}},
        }
    )


class Service:
    """One replica's loop on its own thread over a SQLite store and a simulated cluster."""

    def __init__(self, tmp_path: Path, mode: Mode, nodes: int) -> None:
        self.backend = SimBackend(
            cluster="sim",
            nodes=[{"name": f"n{i}", "resources": {"cpu": 64}} for i in range(nodes)],
        )
        self.service = service_over(
            {"sim": self.backend},
            root=tmp_path,
            replica="only",
            cycle_interval=0.1,
            lease_ttl=TTL,
            mode=mode,
        )
        self.store, self.loop = self.service.store, self.service.loop

    def start(self) -> None:
        self.service.start()
        wait_for(lambda: self.loop.lease is not None, "the loop to lead")

    def queued(self) -> int:
        return self.store.count_jobs(states=[JobState.QUEUED])

    def close(self) -> None:
        self.service.stop()
        self.backend.close()


@pytest.fixture
def slow_rounds(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every round waits ``SLOW_ROUND`` seconds (honouring its cancel) before it schedules,
    as the end-to-end tests' ``slow_round_hook`` does; returns each round's seconds."""
    schedule = SchedulingAlgorithm.schedule
    seconds: list[float] = []

    def slow(self: SchedulingAlgorithm, snapshot: Any, *args: Any, **kwargs: Any) -> Any:
        began = time.monotonic()
        cancel = args[0] if args else kwargs.get("cancel")
        deadline = began + SLOW_ROUND
        while time.monotonic() < deadline and not (cancel is not None and cancel.is_set()):
            time.sleep(0.02)
        result = schedule(self, snapshot, *args, **kwargs)
        seconds.append(time.monotonic() - began)
        return result

    monkeypatch.setattr(SchedulingAlgorithm, "schedule", slow)
    return seconds


@pytest.fixture
def make_service(tmp_path: Path) -> Iterator[Callable[[Mode, int], Service]]:
    made: list[Service] = []

    def make(mode: Mode, nodes: int) -> Service:
        service = Service(tmp_path, mode, nodes)
        made.append(service)
        return service

    yield make
    for service in made:
        service.close()


@pytest.mark.parametrize("mode", [Mode.SYNC, Mode.ASYNC])
def test_a_round_longer_than_the_lease_ttl_commits_its_decisions_in_the_same_term(
    make_service: Callable[[Mode, int], Service], slow_rounds: list[float], mode: Mode
) -> None:
    service = make_service(mode, 1)
    service.start()
    assert service.loop.lease is not None
    term = service.loop.lease.token
    service.store.submit_jobs([job(f"job-{i}") for i in range(8)])
    service.loop.wake()
    wait_for(lambda: service.queued() == 0, "the slow round's leases to commit")
    assert slow_rounds and max(slow_rounds) > TTL  # the round that scheduled outlived a TTL
    assert service.loop.lease is not None and service.loop.lease.token == term


def test_one_replica_with_a_2s_lease_schedules_8000_queued_jobs(
    make_service: Callable[[Mode, int], Service],
) -> None:
    """The issue's figure: ``--lease-ttl 2`` and 8,000 queued jobs on a simulated cluster."""
    service = make_service(Mode.SYNC, 130)  # 8,320 cores
    service.store.submit_jobs([job(f"job-{i}") for i in range(8000)])
    service.start()
    assert service.loop.lease is not None
    term = service.loop.lease.token
    wait_for(lambda: service.queued() == 0, "8,000 jobs to be scheduled", limit=600)
    assert service.loop.lease is not None and service.loop.lease.token == term
