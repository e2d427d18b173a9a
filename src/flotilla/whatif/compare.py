"""The live projection and a changed fleet's, side by side: per queue the expected waits of
the jobs waiting now, the queue's mean share over the horizon, and the fleet's utilisation."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

import numpy as np

from flotilla.framework.resources import EPSILON
from flotilla.sim.simulator import Simulator
from flotilla.sim.state import SimJob

_OPEN = "scheduled"
_CLOSE = {"preempted", "succeeded", "failed", "cancelled", "requeued"}


@dataclass(frozen=True)
class QueueOutlook:
    """One queue in one projection."""

    queue: str
    waiting: int
    """Jobs waiting at the export."""
    started: int
    """Of those, started within the horizon."""
    mean_wait: float | None
    """Seconds from now to their start, over those started."""
    p90_wait: float | None
    mean_share: float
    """Its dominant share of the fleet, time-weighted over the projection."""


@dataclass(frozen=True)
class Outlook:
    end_time: float
    queues: dict[str, QueueOutlook]
    utilization: dict[str, float]


def outlook(sim: Simulator) -> Outlook:
    live = sim.scenario.live
    waiting = {e.job for e in live.jobs if e.running is None} if live is not None else set()
    end = sim.end_time
    capacity = sim.capacity
    integral: dict[str, np.ndarray] = {}
    opened: dict[str, float] = {}
    jobs = sim.job_by_name
    for event in sorted(sim.events, key=lambda e: e.time):
        if event.event == _OPEN:
            opened[event.job] = event.time
        elif event.event in _CLOSE and event.job in opened:
            _add(integral, jobs[event.job], event.time - opened.pop(event.job))
    for name, since in opened.items():
        _add(integral, jobs[name], end - since)
    queues: dict[str, QueueOutlook] = {}
    for queue in sim.queues:
        mine = [j for j in sim.jobs if j.job.queue == queue.name and j.name in waiting]
        starts = sorted(j.first_started_at for j in mine if j.first_started_at is not None)
        held = integral.get(queue.name)
        share = 0.0
        if held is not None and end > 0:
            ratio = np.divide(
                held / end, capacity, out=np.zeros_like(held), where=capacity > EPSILON
            )
            share = float(ratio.max(initial=0.0))
        queues[queue.name] = QueueOutlook(
            queue=queue.name,
            waiting=len(mine),
            started=len(starts),
            mean_wait=sum(starts) / len(starts) if starts else None,
            p90_wait=starts[min(len(starts) - 1, math.ceil(0.9 * len(starts)) - 1)]
            if starts
            else None,
            mean_share=share,
        )
    return Outlook(end, queues, sim.utilization())


def _add(integral: dict[str, np.ndarray], job: SimJob, seconds: float) -> None:
    engine = job.job
    held = integral.setdefault(engine.queue, np.zeros(len(engine.total)))
    held += engine.total * max(0.0, seconds)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _pair(now: str, changed: str) -> str:
    return now if now == changed else f"{now} → {changed}"


def comparison_rows(now: Outlook, changed: Outlook) -> list[list[str]]:
    """Header first: one row per queue of either projection."""
    rows = [["QUEUE", "WAITING", "STARTED", "MEAN WAIT", "P90 WAIT", "MEAN SHARE"]]
    for name in dict.fromkeys([*now.queues, *changed.queues]):
        a = now.queues.get(name)
        b = changed.queues.get(name)
        rows.append(
            [
                name,
                _pair(str(a.waiting) if a else "-", str(b.waiting) if b else "-"),
                _pair(str(a.started) if a else "-", str(b.started) if b else "-"),
                _pair(duration(a.mean_wait if a else None), duration(b.mean_wait if b else None)),
                _pair(duration(a.p90_wait if a else None), duration(b.p90_wait if b else None)),
                _pair(f"{a.mean_share:.0%}" if a else "-", f"{b.mean_share:.0%}" if b else "-"),
            ]
        )
    return rows


def utilization_line(now: Outlook, changed: Outlook) -> str:
    names = dict.fromkeys([*now.utilization, *changed.utilization])
    parts = [
        f"{name} "
        + _pair(_percent(now.utilization.get(name)), _percent(changed.utilization.get(name)))
        for name in names
    ]
    return "utilisation: " + (", ".join(parts) or "-")


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def render_text(now: Outlook, changed: Outlook, horizon: str) -> str:
    rows = comparison_rows(now, changed)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        f"what-if over {horizon}: the live fleet → the changed fleet "
        "(waits from now, of the jobs waiting now)"
    ]
    lines += [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows
    ]
    lines.append(utilization_line(now, changed))
    return "\n".join(lines) + "\n"


def render_html(now: Outlook, changed: Outlook, horizon: str, pages: tuple[str, str]) -> str:
    """One offline page: the comparison table, then both simulation reports in full."""
    rows = comparison_rows(now, changed)
    head = "".join(f"<th>{html.escape(cell)}</th>" for cell in rows[0])
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
        for row in rows[1:]
    )
    frames = "".join(
        f'<h2>{html.escape(title)}</h2><iframe sandbox="allow-scripts" '
        f'srcdoc="{html.escape(page, quote=True)}"></iframe>'
        for title, page in zip(("The live fleet", "The changed fleet"), pages, strict=True)
    )
    return (
        '<!doctype html><html><head><meta charset="utf-8"><title>Flotilla what-if</title>'
        "<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
        "td,th{padding:.2em .8em;text-align:left;border-bottom:1px solid #ddd}"
        "iframe{width:100%;height:80vh;border:1px solid #ccc}</style></head><body>"
        f"<h1>What-if over {html.escape(horizon)}</h1>"
        "<p>The live fleet → the changed fleet: waits from now of the jobs waiting now; "
        "each queue's dominant share, time-weighted over the projection.</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        f"<p>{html.escape(utilization_line(now, changed))}</p>{frames}</body></html>"
    )
