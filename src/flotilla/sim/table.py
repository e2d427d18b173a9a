"""The human summary of a simulation: what a person reads first."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from flotilla.model.quantity import format_quantity

MAX_QUEUED_SHOWN = 20


def _resources(values: dict[str, Any]) -> str:
    return ", ".join(f"{k} {format_quantity(k, float(v))}" for k, v in values.items()) or "-"


def render_table(report: dict[str, Any], console: Console) -> None:
    summary = report["summary"]
    states = ", ".join(f"{count} {state}" for state, count in sorted(summary["states"].items()))
    header = Text.assemble(
        (f"Scenario {report['scenario']}", "bold"),
        f" — ended at t={report['end_time']} ({summary['end_reason']}), "
        f"{summary['cycles']} cycles, {summary['jobs']} jobs: {states}; "
        f"mean wait {summary['mean_wait']}s; simulated in {summary['wall_seconds']}s",
    )

    queues = Table(title="Queues", title_justify="left")
    for column in (
        "queue",
        "weight",
        "running",
        "queued",
        "allocated",
        "dominant share",
        "mean wait",
    ):
        queues.add_column(column, justify="left" if column in ("queue", "allocated") else "right")
    for queue in report["queues"]:
        queues.add_row(
            queue["name"],
            str(queue["weight"]),
            str(queue["running"]),
            str(queue["queued"]),
            _resources(queue["allocated"]),
            f"{queue['dominant_share']:.1%}",
            "-" if queue["mean_wait"] is None else f"{queue['mean_wait']:g}s",
        )

    clusters = Table(
        title="Clusters (allocation at the end; utilisation over the run)", title_justify="left"
    )
    for column in ("cluster", "state", "nodes", "allocated / capacity"):
        clusters.add_column(column)
    for cluster in report["clusters"]:
        parts = []
        for name, capacity in cluster["capacity"].items():
            used = cluster["allocated"].get(name, 0)
            share = used / capacity if capacity else 0.0
            amounts = f"{format_quantity(name, used)}/{format_quantity(name, capacity)}"
            parts.append(f"{name} {amounts} ({share:.0%})")
        clusters.add_row(cluster["name"], cluster["state"], str(cluster["nodes"]), ", ".join(parts))
    utilization = ", ".join(f"{k} {v:.1%}" for k, v in summary["utilization"].items())

    waiting = [job for job in report["jobs"] if job["state"] == "queued"]
    blocks: list[Any] = [
        header,
        Text(""),
        queues,
        clusters,
        Text(f"Fleet utilisation over the run: {utilization}"),
    ]
    if waiting:
        table = Table(title=f"Jobs still queued ({len(waiting)})", title_justify="left")
        table.add_column("job")
        table.add_column("queue")
        table.add_column("why it waits", overflow="fold")
        for job in waiting[:MAX_QUEUED_SHOWN]:
            table.add_row(job["name"], job["queue"], job["reason"] or "not considered yet")
        blocks.append(table)
        if len(waiting) > MAX_QUEUED_SHOWN:
            blocks.append(Text(f"… and {len(waiting) - MAX_QUEUED_SHOWN} more (see --format json)"))
    else:
        blocks.append(Text("No job is left queued."))
    console.print(Group(*blocks))
