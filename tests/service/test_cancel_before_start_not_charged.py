"""A run cancelled while its cluster still held it pending never ran: it records no start, no
``running`` event, and ``usage`` charges it nothing (issue 36: a cancel while a pod was still
Pending was recorded as started and charged). Real loop and store (SQLite); a sim cluster
whose runs stay pending (a start-up delay on a clock that never moves)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from flotilla.backends.sim import FakeClock, SimBackend
from flotilla.model import JobSpec
from flotilla.store import JobState, SqlStore, UsageQuery
from tests.service_builders import loop_over
from tests.timing import wait_until


def test_a_run_cancelled_while_pending_is_not_charged_and_never_started(tmp_path: Path) -> None:
    store = SqlStore.open(f"sqlite:///{tmp_path / 'flotilla.db'}")
    backend = SimBackend(
        cluster="sim",
        nodes=[{"name": "n", "resources": {"cpu": 4, "memory": "16Gi"}}],
        clock=FakeClock(),
        startup_delay=3600,
    )
    loop = loop_over(store, {"sim": backend}, cycle_interval=0.05)
    try:
        spec = {
            "name": "waits-for-its-image",
            "queue": "default",
            "tasks": [{"name": "main", "resources": {"cpu": 4}}],
            "payload": {"sim": {"duration": 600}},
        }
        [job] = store.submit_jobs([JobSpec.model_validate(spec)])

        def reaches(state: JobState) -> None:
            wait_until(lambda: store.get_job(job).state is state, f"{state}", 30, 0.0, loop.cycle)

        reaches(JobState.PENDING)
        store.cancel(job, "not needed any more")
        reaches(JobState.CANCELLED)

        [run] = store.runs(job)
        assert run.started_at is None, run
        assert "running" not in [event.to_state for event in store.events(job)]
        now = datetime.now(UTC)
        report = store.usage(UsageQuery(since=now - timedelta(hours=1), until=now))
        assert report.total is None or report.total.cpu_hours == 0, report
    finally:
        loop.close()
        backend.close()
        store.close()
