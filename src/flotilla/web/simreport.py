"""Pictures of a simulation: ``flotilla simulate FILE --format html`` writes one page.

The page is self-contained: the chart script, the page script, the style and the data are
inlined, so it opens from a file with the network off and can be mailed or attached to a
ticket. What it draws is replayed from the simulator's event log (the same log as the JSON
report's ``events``):

- utilisation per cluster and resource over time (each job holds its full request from
  ``scheduled`` until the event that ends its run);
- each queue's dominant share of the fleet against its fair share (its weight over the
  weights of the queues that want something at that moment), over time;
- the distribution of wait times (submission to first scheduling) per queue;
- for small scenarios, a Gantt of jobs on nodes, with preemptions marked.

Long scenarios are thinned to at most ``MAX_POINTS`` points per series (the state at the end
of each time bucket), so a 100,000-job trace still gives a page a browser opens quickly.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from flotilla.sim.simulator import Simulator

MAX_POINTS = 1500
GANTT_MAX_ROWS = 64
GANTT_MAX_BARS = 4000
_ENDS_NOTHING = frozenset({"submitted", "started", "expanded", "scheduled"})
_REQUEUES = frozenset({"preempted", "requeued"})


@dataclass
class _Series:
    points: list[list[float]] = field(default_factory=list)

    def add(self, time: float, value: float) -> None:
        value = round(float(value), 5)
        if self.points and self.points[-1][0] == time:
            self.points[-1][1] = value
        elif not self.points or self.points[-1][1] != value:
            self.points.append([time, value])


def _thin(points: list[list[float]], end: float) -> list[list[float]]:
    """At most MAX_POINTS: the last value of each time bucket (a step chart stays true)."""
    if len(points) <= MAX_POINTS or end <= 0:
        return points
    bucket = end / MAX_POINTS
    kept: dict[int, list[float]] = {}
    for time, value in points:
        kept[int(time // bucket)] = [time, value]
    return list(kept.values())


def simulation_pictures(sim: Simulator, report: dict[str, Any]) -> dict[str, Any]:
    """The data the page draws, JSON-ready."""
    space = sim.space
    by_name = {job.name: job for job in sim.jobs}
    weights = {queue.name: float(queue.weight) for queue in sim.queues}
    cluster_capacity = {cluster.name: cluster.total_capacity() for cluster in sim.clusters}
    fleet = sum(cluster_capacity.values(), start=np.zeros(len(space)))
    held: dict[str, tuple[str, list[str], float]] = {}  # job -> cluster, nodes, since
    allocated = {name: np.zeros(len(space)) for name in cluster_capacity}
    queue_allocated = {name: np.zeros(len(space)) for name in weights}
    running = dict.fromkeys(weights, 0)
    queued = dict.fromkeys(weights, 0)
    waiting: set[str] = set()
    utilisation: dict[str, dict[str, _Series]] = {
        cluster: {space.names[d]: _Series() for d in range(len(space)) if capacity[d] > 0}
        for cluster, capacity in cluster_capacity.items()
    }
    shares = {name: _Series() for name in weights}
    fair = {name: _Series() for name in weights}
    bars: list[dict[str, Any]] = []
    preemptions: list[dict[str, Any]] = []

    def release(job_name: str, at: float, preempted: bool) -> None:
        cluster, nodes, since = held.pop(job_name)
        job = by_name[job_name]
        allocated[cluster] -= job.job.total
        queue_allocated[job.job.queue] -= job.job.total
        running[job.job.queue] -= 1
        for node in nodes:
            bars.append(
                {
                    "row": f"{cluster}/{node}",
                    "start": since,
                    "end": at,
                    "label": job_name,
                    "group": job.job.queue,
                    "preempted": preempted,
                }
            )

    def record(at: float) -> None:
        for cluster, series in utilisation.items():
            capacity = cluster_capacity[cluster]
            for name, line in series.items():
                d = space.index[name]
                line.add(at, allocated[cluster][d] / capacity[d])
        wanting = [q for q in weights if running[q] or queued[q]]
        total_weight = sum(weights[q] for q in wanting)
        for queue in weights:
            mask = fleet > 0
            share = float((queue_allocated[queue][mask] / fleet[mask]).max(initial=0.0))
            shares[queue].add(at, share)
            wants = queue in wanting and total_weight > 0
            fair[queue].add(at, weights[queue] / total_weight if wants else 0.0)

    events = report["events"]
    for index, event in enumerate(events):
        at, name, kind = float(event["time"]), event["job"], event["event"]
        job = by_name.get(name)
        if job is None:
            continue
        queue = job.job.queue
        if kind == "submitted":
            waiting.add(name)
            queued[queue] += 1
        elif kind == "scheduled":
            if name in waiting:
                waiting.discard(name)
                queued[queue] -= 1
            held[name] = (event["cluster"], list(event.get("nodes") or []), at)
            allocated[event["cluster"]] += job.job.total
            queue_allocated[queue] += job.job.total
            running[queue] += 1
        elif kind not in _ENDS_NOTHING:
            if name in held:
                release(name, at, kind == "preempted")
            if kind == "preempted":
                preemptions.append({"time": at, "job": name, "queue": queue})
            if kind in _REQUEUES and name not in waiting:
                waiting.add(name)
                queued[queue] += 1
            elif kind not in _REQUEUES and name in waiting:
                waiting.discard(name)
                queued[queue] -= 1
        if index + 1 == len(events) or float(events[index + 1]["time"]) != at:
            record(at)
    end = float(report["end_time"])
    for name in list(held):
        release(name, end, False)
    record(end)
    waits: dict[str, list[float]] = {queue: [] for queue in weights}
    for job in sim.jobs:
        if job.first_scheduled_at is not None:
            waits[job.job.queue].append(round(job.first_scheduled_at - job.spec.submit_at, 3))
    rows = sorted({bar["row"] for bar in bars})
    small = len(rows) <= GANTT_MAX_ROWS and len(bars) <= GANTT_MAX_BARS
    return {
        "end_time": end,
        "utilisation": {
            cluster: {name: _thin(line.points, end) for name, line in series.items()}
            for cluster, series in utilisation.items()
        },
        "shares": {queue: _thin(line.points, end) for queue, line in shares.items()},
        "fair": {queue: _thin(line.points, end) for queue, line in fair.items()},
        "waits": waits,
        "preemptions": preemptions,
        "gantt": {"rows": rows, "bars": bars, "groups": list(weights)} if small else None,
        "gantt_skipped": None
        if small
        else f"{len(rows)} nodes and {len(bars)} job runs: too many to draw one by one",
    }


def _static(name: str) -> str:
    return (resources.files("flotilla.web") / "static" / name).read_text(encoding="utf-8")


def _script_safe(text: str) -> str:
    """Inlined JSON or script must not close its <script> element early."""
    return text.replace("</", "<\\/")


def render_simulation_html(sim: Simulator, report: dict[str, Any]) -> str:
    """One page, everything inlined; opens with the network off."""
    data = {
        "scenario": report["scenario"],
        "summary": report["summary"],
        "queues": report["queues"],
        "clusters": report["clusters"],
        "pictures": simulation_pictures(sim, report),
    }
    title = html.escape(f"Flotilla simulation: {report['scenario']}")
    # In JSON "<" only occurs inside strings, where \u003c means the same: no "</script>"
    # or "<!--" can appear in the data block, whatever the scenario's names say.
    payload = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n"
        f"<title>{title}</title>\n<style>\n{_static('style.css')}\n{_static('report.css')}\n"
        "</style>\n</head>\n<body>\n"
        f'<header class="top"><span class="brand">{title}</span></header>\n'
        '<main id="main" class="report"></main>\n'
        f'<script type="application/json" id="report-data">{payload}</script>\n'
        f"<script>\n{_script_safe(_static('charts.js'))}\n</script>\n"
        f"<script>\n{_script_safe(_static('report.js'))}\n</script>\n"
        "</body>\n</html>\n"
    )
