"""Where a cancel's time goes: the service's trace lines (``flotilla.stage_trace``) per cancel.

The server under test runs with ``FLOTILLA_STAGE_TRACE`` set to a file; each cancel of a running job
leaves lines for its stages there (API receive → store write → loop wake → backend signal →
process exit observed → state committed). The client adds its own two points, ``sent`` (just
before the POST) and ``seen`` (the GET that first showed ``cancelled``). This module puts them
on one time line per cancel and summarises each step: how long after the previous stage it
happened, p50/p99/max over the cancels.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flotilla.stage_trace import CANCEL_STAGES

STAGES = ("sent", *CANCEL_STAGES, "seen")
"""Every point of one cancel's time line, in order."""


def read_trace(path: Path) -> list[dict[str, Any]]:
    """The trace file's lines (none if the server wrote nothing)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def cancel_timelines(
    lines: Sequence[dict[str, Any]], client: dict[str, tuple[float, float]]
) -> dict[str, dict[str, float]]:
    """Job id → stage → wall time, for every job in ``client`` (job → (sent, seen)).

    A job's ``loop-woken`` is the first wake at or after its ``store-written``; a stage seen
    twice for one job keeps its first time."""
    wakes = sorted(line["at"] for line in lines if line["stage"] == "loop-woken")
    timelines: dict[str, dict[str, float]] = {}
    for job, (sent, seen) in client.items():
        timelines[job] = {"sent": sent, "seen": seen}
    for line in lines:
        job = line.get("job")
        if job in timelines:
            timelines[job].setdefault(line["stage"], line["at"])
    for timeline in timelines.values():
        written = timeline.get("store-written")
        if written is not None:
            woken = next((at for at in wakes if at >= written), None)
            if woken is not None and woken <= timeline["seen"]:
                timeline["loop-woken"] = woken
    return timelines


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))
    return ordered[index]


def step_summary(timelines: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """Per step (a stage after the one before it that the cancel reached), milliseconds:
    p50, p99, max and how many cancels had both points."""
    steps: list[dict[str, Any]] = []
    for earlier, later in itertools.pairwise(STAGES):
        gaps = [
            (timeline[later] - timeline[earlier]) * 1e3
            for timeline in timelines.values()
            if earlier in timeline and later in timeline
        ]
        if gaps:
            steps.append(
                {
                    "step": f"{earlier} → {later}",
                    "count": len(gaps),
                    "p50_ms": _percentile(gaps, 0.5),
                    "p99_ms": _percentile(gaps, 0.99),
                    "max_ms": max(gaps),
                }
            )
    return steps


def per_cancel(timelines: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """Each cancel as milliseconds after its ``sent``, slowest first."""
    rows = [
        {
            "job": job,
            **{
                stage: round((timeline[stage] - timeline["sent"]) * 1e3, 2)
                for stage in STAGES
                if stage in timeline
            },
        }
        for job, timeline in timelines.items()
    ]
    return sorted(rows, key=lambda row: -float(row["seen"]))


def trace_lines(result: dict[str, Any], slowest: int = 5) -> list[str]:
    """The summary and the slowest cancels' time lines, for the console."""
    lines = ["cancel trace, per step (ms after the stage before): p50 / p99 / max (n)"]
    for step in result.get("cancel_steps", []):
        lines.append(
            f"  {step['step']:<36} {step['p50_ms']:8.1f} {step['p99_ms']:8.1f} "
            f"{step['max_ms']:8.1f} ({step['count']})"
        )
    for row in result.get("cancel_traces", [])[:slowest]:
        points = ", ".join(f"{stage} {row[stage]:.1f}" for stage in STAGES[1:] if stage in row)
        lines.append(f"  slow cancel {row['job']}: {points}")
    return lines
