"""A run that takes long to start holds up no one (issue 23: a ``replicas: 10000`` job made
dispatch take minutes inside the scheduling loop; nothing else was scheduled, and cancels
hung). The ``local`` backend records the run and starts its replicas on a thread of its own.

Here the start of the big run is held (its ``start_replicas`` waits for the test), which is
what a long start looks like from the loop: meanwhile another queue's job is scheduled, runs
and succeeds, and the big job's cancel reaches the backend; released, the big run's replicas
never start and the job ends cancelled. On the old code the loop was stuck in the dispatch
until the hold timed out."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flotilla.backends import StatusRequest
from flotilla.backends.local import starting as local_starting
from flotilla.model import JobSpec, QueueSpec
from flotilla.store import JobState
from tests.service.test_service_loop import Service

HOLD_SECONDS = 30.0
"""How long the big run's start is held at most (the old code: the loop waits this long)."""


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    running = Service(tmp_path)
    running.store.put_queue(QueueSpec(name="batch"))
    running.store.put_queue(QueueSpec(name="interactive"))
    yield running
    running.close()


def job(name: str, queue: str, command: str, replicas: int = 1) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": name,
            "queue": queue,
            "tasks": [{"name": "main", "replicas": replicas, "resources": {"cpu": 0.01}}],
            "payload": {"command": ["sh", "-c", command]},
        }
    )


def test_other_queues_are_scheduled_and_cancels_answered_while_a_big_run_starts(
    service: Service, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    entered, release = threading.Event(), threading.Event()
    held_out = threading.Event()
    """Set when the hold ran out instead of being released: the loop waited for it."""
    original = local_starting.start_replicas
    big_id: list[str] = []

    def held_start(run: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        if big_id and request.job == big_id[0]:
            entered.set()
            if not release.wait(HOLD_SECONDS):
                held_out.set()
        return original(run, request, *args, **kwargs)

    monkeypatch.setattr(local_starting, "start_replicas", held_start)
    started = tmp_path / "big-started"
    started.mkdir()
    big_id.append(
        service.store.submit_jobs(
            [job("big", "batch", f'touch {started}/"$FLOTILLA_REPLICA"; sleep 600', 50)]
        )[0]
    )
    service.cycle_until(lambda: entered.is_set())

    other = service.store.submit_jobs([job("quick", "interactive", "echo done")])[0]
    service.cycle_until(lambda: service.state(other) is JobState.SUCCEEDED)
    service.store.cancel(big_id[0], "not needed after all")
    big_run = service.store.get_job(big_id[0]).run
    assert big_run is not None
    service.cycle_until(  # the loop's cancel reached the backend while the run starts
        lambda: service.backend.status(StatusRequest(big_run.id)).message.startswith("stopping")
    )
    assert not held_out.is_set(), "the loop waited for the big run's start"

    release.set()
    service.cycle_until(lambda: service.state(big_id[0]) is JobState.CANCELLED)
    assert list(started.iterdir()) == []  # cancelled before its gate: no replica ever ran
