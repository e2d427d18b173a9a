"""Decayed fair share in the service (``settings.usage_half_life``): a restarted scheduler
starts from the usage in run history, not from zero (``store.decayed_usage``), and rounds
run in a child process still feed the scheduler's ledger."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from flotilla.framework.snapshot import SchedulingConfig
from flotilla.model import JobSpec
from flotilla.model.scenario import Mode
from flotilla.service.loop import LoopSettings, SchedulingLoop
from flotilla.store import JobState, SqlStore
from tests.live_service import local_loop
from tests.timing import wait_until

SETTINGS = LoopSettings(
    cycle_interval=0.05,
    replica="replica-a",
    scheduling=SchedulingConfig(usage_half_life=3600.0),
)


def submit(store: SqlStore, name: str, command: str) -> str:
    spec = JobSpec.model_validate(
        {
            "name": name,
            "queue": "default",
            "tasks": [{"name": "main", "resources": {"cpu": 0.5}}],
            "payload": {"command": ["sh", "-c", command]},
        }
    )
    return store.submit_jobs([spec])[0]


def cycle_until(loop: SchedulingLoop, done: Callable[[], bool], limit: float = 30.0) -> None:
    wait_until(done, "the loop to get there", limit, 0.05, loop.cycle)


def test_a_restarted_scheduler_remembers_the_queues_usage(tmp_path: Path) -> None:
    store, backend, loop = local_loop(tmp_path, SETTINGS)
    busy = submit(store, "busy", "sleep 0.5")
    cycle_until(loop, lambda: store.get_job(busy).state is JobState.SUCCEEDED)
    loop.close()
    backend.close()
    store.close()

    store, backend, loop = local_loop(tmp_path, SETTINGS)
    try:
        # One round, for a job that queues no usage of its own yet: the ledger it orders by
        # starts from history (busy held 0.5 cpu from its run's start to its end, as the
        # engine reported them: about the 0.5 s of its sleep).
        [run] = store.runs(busy)
        assert run.started_at is not None and run.finished_at is not None
        held = (run.finished_at - run.started_at).total_seconds()
        assert held > 0.4
        later = submit(store, "later", "true")
        cycle_until(loop, lambda: store.get_job(later).state is not JobState.QUEUED)
        ledger = loop.algorithm.usage
        assert ledger is not None
        assert ledger.usage()["default"][0] >= 0.5 * held * 0.99  # decayed by seconds of 1 h
    finally:
        loop.close()
        backend.close()
        store.close()


def test_rounds_in_a_child_process_keep_the_ledger_in_the_scheduler(tmp_path: Path) -> None:
    # algorithm_process: each round runs in a forked child, whose copy of the engine is lost;
    # the ledger must advance in the scheduler's own process.
    settings = replace(SETTINGS, mode=Mode.ASYNC, algorithm_process=True)
    store, backend, loop = local_loop(tmp_path, settings)
    try:
        busy = submit(store, "busy", "sleep 0.5")
        cycle_until(loop, lambda: store.get_job(busy).state is JobState.SUCCEEDED)
        later = submit(store, "later", "true")
        cycle_until(loop, lambda: store.get_job(later).state is not JobState.QUEUED)
        [run] = store.runs(busy)
        assert run.started_at is not None and run.finished_at is not None
        held = (run.finished_at - run.started_at).total_seconds()
        assert held > 0.4
        ledger = loop.algorithm.usage
        assert ledger is not None
        assert ledger.usage().get("default", [0.0])[0] >= 0.5 * held * 0.99
    finally:
        loop.close()
        backend.close()
        store.close()
