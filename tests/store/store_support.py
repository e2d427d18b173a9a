"""Helpers shared by the store tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flotilla.model import JobSpec


class FakeClock:
    """A clock tests move by hand, so lease expiry is exact and never waits."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def job(name: str, queue: str = "team-a", **fields: object) -> JobSpec:
    data: dict[str, object] = {
        "name": name,
        "queue": queue,
        "tasks": [{"name": "main", "resources": {"cpu": 1}}],
    }
    data.update(fields)
    return JobSpec.model_validate(data)
