"""Tables and small formatting helpers shared by the client commands."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from flotilla.model import format_quantity

PIPED_WIDTH = 200


def console() -> Console:
    """Standard output as a console, made per command (so it follows a redirected stdout):
    a terminal's own width, or wide when piped so that ids and reasons are never cut."""
    terminal = Console()
    return terminal if terminal.is_terminal else Console(width=PIPED_WIDTH)


STATE_STYLES = {
    "queued": "yellow",
    "leased": "cyan",
    "pending": "cyan",
    "running": "green",
    "succeeded": "bold green",
    "failed": "bold red",
    "cancelled": "dim",
    "preempted": "magenta",
}


def state_text(state: str, cancel_requested: bool = False) -> str:
    style = STATE_STYLES.get(state, "")
    label = f"{state} (cancelling)" if cancel_requested else state
    return f"[{style}]{label}[/]" if style else label


def age(timestamp: str | None, now: datetime | None = None) -> str:
    """``2026-01-01T10:00:00Z`` → ``5m`` (how long ago), for tables."""
    if not timestamp:
        return "-"
    then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def resources(data: dict[str, Any]) -> str:
    """``{"cpu": 2, "memory": 4294967296}`` → ``cpu=2, memory=4Gi``."""
    parts = [f"{name}={format_quantity(name, float(amount))}" for name, amount in data.items()]
    return ", ".join(parts) or "-"


def jobs_table(jobs: list[dict[str, Any]], title: str | None = None) -> Table:
    table = Table(title=title, box=None, pad_edge=False, header_style="bold")
    for column in ("ID", "NAME", "QUEUE", "STATE", "PRIO", "OWNER", "AGE", "REASON"):
        table.add_column(column, overflow="fold" if column == "REASON" else "ellipsis")
    for job in jobs:
        table.add_row(
            job["id"],
            job["name"],
            job["queue"],
            state_text(job["state"], job.get("cancel_requested", False)),
            str(job["priority"]),
            job.get("owner") or "-",
            age(job.get("submitted_at")),
            job.get("reason", ""),
        )
    return table
