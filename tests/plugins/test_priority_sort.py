"""priority-sort: higher priority first, then earlier submission, then file order."""

from __future__ import annotations

from flotilla.plugins.priority_sort import PrioritySort
from tests.builders import cluster, fleet, job, scenario


def test_priority_then_submission_then_sequence() -> None:
    f = fleet(
        scenario(
            clusters=[cluster("c")],
            jobs=[
                job("old-low", submit_at=0, priority=0),
                job("new-high", submit_at=5, priority=3),
                job("old-high", submit_at=1, priority=3),
                job("twin-a", submit_at=2, priority=1),
                job("twin-b", submit_at=2, priority=1),
            ],
        )
    )
    ordered = sorted(f.jobs.values(), key=PrioritySort().sort_key)
    assert [j.name for j in ordered] == ["old-high", "new-high", "twin-a", "twin-b", "old-low"]
