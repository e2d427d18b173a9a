"""Each run's GPU use as its backend reported it (``run_gpu_use``, migration 0009): written
when a poll brings new figures, read with the run (``describe``), and summed over runs for
``usage`` (GPU-hours used next to those held) and ``/metrics``.

A row holds the run's figures so far (they only grow, except the memory held now): a report
replaces the row, so a repeated or late report costs nothing but a rewrite.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from flotilla.model.gpu_use import GpuUse
from flotilla.store.jobs import chunks
from flotilla.store.schema import RunGpuUse


def record_gpu_use(session: Session, uses: Mapping[str, GpuUse]) -> None:
    """Replace the rows of these runs with their new figures."""
    for part in chunks(list(uses)):
        session.execute(delete(RunGpuUse).where(RunGpuUse.run_id.in_(part)))
    session.add_all(_row(run_id, use) for run_id, use in uses.items())


def _row(run_id: str, use: GpuUse) -> RunGpuUse:
    return RunGpuUse(
        run_id=run_id,
        memory_used=use.memory_used,
        memory_peak=use.memory_peak,
        utilization=use.utilization,
        held_gpu_seconds=use.held_gpu_seconds,
        used_gpu_seconds=use.used_gpu_seconds,
        samples=use.samples,
        sampled_at=(
            None if use.sampled_at is None else datetime.fromtimestamp(use.sampled_at, UTC)
        ),
    )


def gpu_use_of(session: Session, run_ids: Iterable[str]) -> dict[str, GpuUse]:
    """The recorded use of each of these runs that has one."""
    found: dict[str, GpuUse] = {}
    for part in chunks(list(run_ids)):
        for row in session.scalars(select(RunGpuUse).where(RunGpuUse.run_id.in_(part))):
            found[row.run_id] = GpuUse(
                memory_used=row.memory_used,
                memory_peak=row.memory_peak,
                utilization=row.utilization,
                held_gpu_seconds=row.held_gpu_seconds,
                used_gpu_seconds=row.used_gpu_seconds,
                sampled_at=None if row.sampled_at is None else row.sampled_at.timestamp(),
                samples=row.samples,
            )
    return found
