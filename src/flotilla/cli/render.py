"""Tables and small formatting helpers shared by the client commands (rich is imported by
the helpers that print, docs/performance.md, CLI start-up)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from flotilla.lifecycle.states import TERMINAL_STATE_NAMES, JobState
from flotilla.model.quantity import format_quantity

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from flotilla.api.schemas import Job, Run
    from flotilla.sdk import Client

PIPED_WIDTH = 200


def console() -> Console:
    """Standard output as a console, made per command (so it follows a redirected stdout):
    a terminal's own width, or wide when piped so that ids and reasons are never cut."""
    from rich.console import Console

    terminal = Console()
    return terminal if terminal.is_terminal else Console(width=PIPED_WIDTH)


STATE_STYLES: dict[str, str] = {
    JobState.QUEUED: "yellow",
    JobState.HELD: "dark_orange",
    JobState.LEASED: "cyan",
    JobState.PENDING: "cyan",
    JobState.RUNNING: "green",
    JobState.SUCCEEDED: "bold green",
    JobState.FAILED: "bold red",
    JobState.CANCELLED: "dim",
    JobState.PREEMPTED: "magenta",
    JobState.SKIPPED: "dim cyan",
}
"""Each job state's colour in tables (a new state of the lifecycle core needs one: the test
``tests/lifecycle/test_state_sets.py`` says so)."""


ENDED_STATES = TERMINAL_STATE_NAMES


def state_text(state: str, cancel_requested: bool = False) -> str:
    """A job's state for a table; "(cancelling)" only while a requested cancel has not yet
    ended the job (an ended job keeps its request flag, but nothing is still happening)."""
    style = STATE_STYLES.get(state, "")
    cancelling = cancel_requested and state not in ENDED_STATES
    label = f"{state} (cancelling)" if cancelling else state
    return f"[{style}]{label}[/]" if style else label


def age(timestamp: datetime | str | None, now: datetime | None = None) -> str:
    """A time (or ``2026-01-01T10:00:00Z``) → ``5m`` (how long ago), for tables."""
    if not timestamp:
        return "-"
    then = (
        timestamp
        if isinstance(timestamp, datetime)
        else datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    )
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def resources(data: dict[str, Any]) -> str:
    """``{"cpu": 2, "memory": 4294967296}`` → ``cpu=2, memory=4Gi``."""
    parts = [f"{name}={format_quantity(name, float(amount))}" for name, amount in data.items()]
    return ", ".join(parts) or "-"


SHORT_ID = 8
"""Characters of an id shown in tables; any unambiguous prefix names the job."""


def short_id(job_id: str) -> str:
    return job_id[:SHORT_ID]


def shown_id(job: Job, wide: bool = False) -> str:
    """How a table names a job: its short id (any command takes it), or for an array's
    element ``ARRAY_INDEX`` (Slurm's ``JOBID_TASKID``), which every command takes too."""
    if job.array_id is not None and job.array_index is not None:
        array = job.array_id if wide else short_id(job.array_id)
        return f"{array}_{job.array_index}"
    return job.id if wide else short_id(job.id)


def job_reason(job: Job) -> str:
    """Why a waiting job waits (the scheduler's live reason), else why it is where it is."""
    return job.pending_reason or job.reason


def simulated_clusters(client: Client, jobs: Sequence[Job]) -> frozenset[str]:
    """The clusters of these jobs' runs whose runs are simulated (``flotilla.io/simulated``):
    a job that "succeeded" there never ran. No question asked when no job has a run."""
    from flotilla.model.cluster import SIMULATED_LABEL

    if not any(job.run is not None for job in jobs):
        return frozenset()
    return frozenset(
        cluster.name
        for cluster in client.clusters()
        if cluster.labels.get(SIMULATED_LABEL) == "true"
    )


def jobs_table(
    jobs: Sequence[Job],
    title: str | None = None,
    wide: bool = False,
    simulated: frozenset[str] = frozenset(),
    starts: bool = False,
) -> Table:
    """Jobs as rows: short ids, or with ``wide`` full ids, the cluster and the labels. A job
    whose run is on a ``simulated`` cluster says so beside its state."""
    from rich.table import Table

    table = Table(title=title, box=None, pad_edge=False, header_style="bold")
    columns = ["ID", "NAME", "QUEUE", "STATE", "PRIO", "OWNER", "AGE", "TIME", "TIME_LIMIT"]
    if wide:
        columns += ["CLUSTER", "LABELS"]
    if starts:
        columns.append("START")
    for column in [*columns, "REASON"]:
        table.add_column(column, overflow="fold" if column == "REASON" else "ellipsis")
    for job in jobs:
        row = [
            shown_id(job, wide),
            job.name,
            job.queue,
            state_text(job.state, job.cancel_requested)
            + (" (simulated)" if job.run is not None and job.run.cluster in simulated else ""),
            str(job.priority),
            job.owner or "-",
            age(job.submitted_at),
            clock(run_elapsed(job.run)),
            time_limit(job.max_runtime),
        ]
        if wide:
            labels = ", ".join(f"{key}={value}" for key, value in job.labels.items())
            row += [job.run.cluster if job.run else "-", labels or "-"]
        if starts:
            row.append(start_text(job))
        table.add_row(*row, job_reason(job))
    return table


def start_text(job: Job) -> str:
    """squeue --start's START: the expected start (local time), ``N/A (why)`` when there is
    none, ``-`` for a job that does not wait."""
    found = job.estimated_start
    if found is not None:
        if found.start is None:
            return f"N/A (not within {round(found.horizon_seconds / 86400)} d)"
        return found.start.astimezone().strftime("%Y-%m-%dT%H:%M:%S")
    if job.start_unknown is not None:
        return "N/A (" + job.start_unknown.removeprefix("unknown: ") + ")"
    return "-"


def run_elapsed(run: Run | None, now: datetime | None = None) -> float | None:
    """Seconds the run has run (to its end, or to now while it runs); ``None`` before it
    started."""
    if run is None or run.started_at is None:
        return None
    end = run.finished_at or now or datetime.now(UTC)
    return max(0.0, (end - run.started_at).total_seconds())


def clock(seconds: float | None) -> str:
    """squeue's TIME: ``M:SS``, ``H:MM:SS``, ``D-HH:MM:SS``; ``0:00`` before a start."""
    if seconds is None:
        return "0:00"
    days, hours, minutes, secs = _parts(seconds)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def _parts(seconds: float) -> tuple[int, int, int, int]:
    """Whole days, hours, minutes and seconds of ``seconds``."""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return days, hours, minutes, secs


def time_limit(seconds: float | None) -> str:
    """squeue's TIME_LIMIT: the job's ``max_runtime`` as a clock, or ``UNLIMITED``."""
    return "UNLIMITED" if seconds is None else clock(seconds)


def duration(seconds: float | None) -> str:
    """``-``; under a second ``4ms`` and under a minute ``12.3s`` (a short job's CPU time is
    not ``0:00:00``); else ``H:MM:SS``, and ``D-HH:MM:SS`` past a day, as sacct writes it."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    days, hours, minutes, secs = _parts(seconds)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{hours}:{minutes:02d}:{secs:02d}"
