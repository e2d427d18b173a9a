"""``flotilla usage``: accounting (``sacct``/``sreport``) — resource-hours over a range."""

from __future__ import annotations

import csv
import io
import json
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flotilla.cli.client import ServerOption, api
from flotilla.cli.render import console
from flotilla.sdk.connection import DEFAULT_SERVER

if TYPE_CHECKING:
    from rich.table import Table

FIGURES = (
    "jobs",
    "runs",
    "elapsed_hours",
    "cpu_hours",
    "memory_gib_hours",
    "gpu_hours",
    "gpu_used_hours",
    "gpu_efficiency",
)
KEYS = {"queue": ("queue",), "owner": ("owner",), "job": ("job", "name", "queue", "owner")}
HEADERS = {
    "elapsed_hours": "ELAPSED-H",
    "cpu_hours": "CPU-H",
    "memory_gib_hours": "MEM-GIB-H",
    "gpu_hours": "GPU-H",
    "gpu_used_hours": "GPU-H USED",
    "gpu_efficiency": "GPU-EFF",
}


class Grouping(StrEnum):
    QUEUE = "queue"
    OWNER = "owner"
    JOB = "job"


class UsageFormat(StrEnum):
    TABLE = "table"
    JSON = "json"
    CSV = "csv"


def usage(
    since: Annotated[
        str, typer.Option(help="Start: a duration ago (90m, 12h, 7d, 2w) or an ISO 8601 time.")
    ] = "7d",
    until: Annotated[
        str | None, typer.Option(help="End, in the same forms as --since. Default: now.")
    ] = None,
    by: Annotated[Grouping, typer.Option(help="Group by queue, owner or job.")] = Grouping.QUEUE,
    output: Annotated[
        UsageFormat, typer.Option("--format", "--output-format", help="table, json or csv.")
    ] = UsageFormat.TABLE,
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """CPU-, memory- and GPU-hours that runs held over a time range (running ones up to now),
    per queue, owner or job; only the jobs you may read."""
    with api(server) as client:
        report = client.usage(since, until, by.value)
    if output is UsageFormat.JSON:
        typer.echo(json.dumps(report, indent=2))
    elif output is UsageFormat.CSV:
        typer.echo(to_csv(report), nl=False)
    else:
        console().print(to_table(report))


def to_csv(report: dict[str, Any]) -> str:
    """One header line, then one line per group; figures unrounded."""
    keys = KEYS[report["by"]]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*keys, *FIGURES])
    for row in report["rows"]:
        figures = [_unset(row.get(name)) for name in FIGURES]
        writer.writerow([row.get(key) or "" for key in keys] + figures)
    return buffer.getvalue()


def to_table(report: dict[str, Any]) -> Table:
    from rich.table import Table

    keys = KEYS[report["by"]]
    title = f"usage from {report['since'][:19]}Z to {report['until'][:19]}Z"
    table = Table(title=title, box=None, pad_edge=False, header_style="bold", show_footer=True)
    total = report["total"]
    for index, key in enumerate(keys):
        table.add_column(key.upper(), footer="TOTAL" if index == 0 else "")
    for name in FIGURES:
        table.add_column(
            HEADERS.get(name, name.upper()), justify="right", footer=_cell(name, total.get(name))
        )
    for row in report["rows"]:
        cells = [str(row.get(key) or "-") for key in keys]
        table.add_row(*cells, *(_cell(name, row.get(name)) for name in FIGURES))
    return table


def _unset(value: Any) -> Any:
    return "" if value is None else value


def _cell(name: str, value: float | int | None) -> str:
    if value is None:
        return "-"
    if name == "gpu_efficiency":
        return f"{value:.0%}"
    return str(value) if isinstance(value, int) else f"{value:,.2f}"


def register(app: typer.Typer) -> None:
    app.command()(usage)
