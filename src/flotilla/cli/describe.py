"""Client commands that explain one job: describe (spec, gang, placements, runs, events) and
why (its reason, place in its queue and quota)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from flotilla.cli.client import ServerOption, api
from flotilla.cli.jobs import JobArgument, JobOrArrayArgument
from flotilla.cli.output import Output, OutputOption, emit
from flotilla.cli.render import (
    age,
    clock,
    console,
    duration,
    resources,
    run_elapsed,
    simulated_clusters,
    state_text,
    time_limit,
)
from flotilla.model.quantity import format_quantity
from flotilla.sdk.connection import DEFAULT_SERVER

if TYPE_CHECKING:
    from rich.table import Table

    from flotilla.api.schemas import EngineIds, Event, JobDetail, Run
    from flotilla.sdk import Client


def _facts(job: JobDetail) -> Table:
    from rich.table import Table

    from flotilla.cli.arrays import retry_and_array_rows

    spec = job.spec
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    facts.add_row("Job", f"{job.name}  ({job.id})")
    facts.add_row("Queue", job.queue)
    facts.add_row("State", state_text(job.state, job.cancel_requested))
    facts.add_row("Priority", str(job.priority))
    facts.add_row("Owner", job.owner or "-")
    facts.add_row(
        "Submitted", f"{job.submitted_at:%Y-%m-%d %H:%M:%S} ({age(job.submitted_at)} ago)"
    )
    elapsed = run_elapsed(job.run)
    limit = job.max_runtime
    timing = f"{time_limit(limit)} limit, {clock(elapsed)} elapsed"
    if limit is not None and elapsed is not None and job.run and job.run.finished_at is None:
        timing += f", {clock(max(0.0, limit - elapsed))} remaining"
    facts.add_row("Time", timing)
    if job.labels:
        facts.add_row("Labels", ", ".join(f"{k}={v}" for k, v in job.labels.items()))
    facts.add_row("Type", spec.get("type", "command"))
    command = (spec.get("payload") or {}).get("command")
    if command is not None:
        facts.add_row("Command", command if isinstance(command, str) else " ".join(command))
    for task in spec["tasks"]:
        facts.add_row(
            f"Task {task['name']}", f"{task.get('replicas', 1)} × {resources(task['resources'])}"
        )
    gang = spec.get("gang")
    if gang:
        facts.add_row("Gang", gang_text(gang))
    if job.members is not None:
        facts.add_row("Replicas", f"{job.members.placed} of {job.members.wanted} placed")
        if job.members.waiting:
            facts.add_row("Growing", job.members.waiting)
    for name, value in retry_and_array_rows(job):
        facts.add_row(name, value)
    for dependency in job.dependencies:
        facts.add_row(
            "Depends on", f"{dependency.job} ({dependency.job_id[:8]}) {dependency.condition}"
        )
    if job.pending_reason:
        facts.add_row("Waiting", job.pending_reason)
    elif job.reason:
        facts.add_row("Reason", job.reason)
    if job.estimated_start is not None:
        facts.add_row("Start", job.estimated_start.summary)
    elif job.start_unknown is not None:
        facts.add_row("Start", job.start_unknown)
    return facts


def gang_text(gang: dict[str, Any]) -> str:
    """``strict, min 4 members, timeout 600s, group g``."""
    parts = [str(gang.get("mode", "strict"))]
    if gang.get("min_member") is not None:
        parts.append(f"min {gang['min_member']} members")
    parts.append(f"timeout {gang.get('timeout', 600):g}s")
    if gang.get("name"):
        parts.append(f"group {gang['name']}")
    return ", ".join(parts)


def _titled(*columns: str, title: str) -> Table:
    from rich.table import Table

    return Table(*columns, title=title, box=None, header_style="bold", title_justify="left")


def _runs(runs: list[Run], simulated: frozenset[str] = frozenset()) -> Table:
    """The job's runs; one on a simulated cluster says so: its command never executed."""
    table = _titled(
        "RUN",
        "ATTEMPT",
        "CLUSTER",
        "STATE",
        "STARTED",
        "FINISHED",
        "EXIT",
        "CPU",
        "MAXRSS",
        title="Runs",
    )
    for run in runs:
        table.add_row(
            run.id,
            str(run.attempt),
            run.cluster + (" (simulated)" if run.cluster in simulated else ""),
            run.state,
            "-" if run.started_at is None else f"{run.started_at:%H:%M:%S}",
            "-" if run.finished_at is None else f"{run.finished_at:%H:%M:%S}",
            "-" if run.exit_code is None else str(run.exit_code),
            duration(run.cpu_seconds),  # measured when it ended (``flotilla runs``)
            "-" if run.memory_peak is None else format_quantity("memory", run.memory_peak),
        )
    return table


def _gpu_use(runs: list[Run]) -> Table:
    """What each sampled run did with its GPUs (``seff``-like efficiency: used over held)."""
    table = _titled(
        "ATTEMPT", "GPU MEM", "PEAK", "UTIL", "GPU-H HELD", "GPU-H USED", "EFF", title="GPU use"
    )
    for run in runs:
        use = run.gpu
        if use is None:
            continue
        table.add_row(
            str(run.attempt),
            format_quantity("memory", use.memory_used),
            format_quantity("memory", use.memory_peak),
            "-" if use.utilization is None else f"{use.utilization:.0f}%",
            f"{use.gpu_hours_held:.3f}",
            f"{use.gpu_hours_used:.3f}",
            "-" if use.efficiency is None else f"{use.efficiency:.0%}",
        )
    return table


def _engine_ids(client: Client, job: JobDetail) -> EngineIds | None:
    """The engine's ids of the latest run, when its engine still knows it and this server
    runs the scheduler (``flotilla serve`` alone answers 404): describe goes on without."""
    from flotilla.sdk.errors import NotFound, ServerError

    if job.run is None:
        return None
    try:
        return client.engine_ids(job.id)
    except (NotFound, ServerError):
        return None


def _engine_table(engine: EngineIds) -> Table:
    table = _titled(
        "TASK", "REPLICA", "NODE", "ENGINE ID", title=f"Engine ids (attempt {engine.attempt})"
    )
    for replica in engine.replicas:
        table.add_row(replica.task, str(replica.replica), replica.node, replica.engine_id or "-")
    return table


def _placements(run: Run) -> Table:
    """Where each replica of the latest run went: node and GPU devices."""
    from flotilla.framework.assignment_record import AssignmentRecord

    table = _titled("TASK", "REPLICA", "NODE", "GPUS", title=f"Placement (attempt {run.attempt})")
    for placement in AssignmentRecord.unmarshal(run.assignment).placements:
        table.add_row(
            placement.task or "-",
            str(placement.replica),
            placement.node or "-",
            ",".join(str(gpu) for gpu in placement.gpus) or "-",
        )
    return table


def _events(events: list[Event]) -> Table:
    table = _titled("TIME", "EVENT", "STATE", "REASON", title="Events")
    for event in events:
        moved = event.to_state or ""
        if event.from_state and event.from_state != event.to_state:
            moved = f"{event.from_state} → {moved}"
        table.add_row(f"{event.time:%Y-%m-%d %H:%M:%S}", event.kind, moved, event.reason)
    return table


def describe(
    job_ref: JobOrArrayArgument,
    output: OutputOption = Output.TABLE,
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """A job in full: spec summary, gang, where each replica runs, runs, history, and why
    it waits."""
    from rich.console import Group

    from flotilla.api.schemas import ArrayDetail
    from flotilla.cli.arrays import job_or_array, print_array
    from flotilla.framework.assignment_record import AssignmentRecord

    with api(server) as client:
        named = job_or_array(client, job_ref)
        if isinstance(named, ArrayDetail):
            if not emit(named, output):
                print_array(named)
            return
        job = named
        events = list(client.events(job.id))
        engine = _engine_ids(client, job)
        tabled = output in (Output.TABLE, Output.WIDE)
        simulated = simulated_clusters(client, [job]) if tabled else frozenset()
    if emit({"job": job, "events": events, "engine_ids": engine}, output):
        return
    parts: list[Any] = [_facts(job)]
    if job.run is not None and AssignmentRecord.unmarshal(job.run.assignment).placements:
        parts.append(_placements(job.run))
    if job.runs:
        parts.append(_runs(job.runs, simulated))
    if any(run.gpu is not None for run in job.runs):
        parts.append(_gpu_use(job.runs))
    if engine is not None and any(r.engine_id for r in engine.replicas):
        parts.append(_engine_table(engine))
    parts.append(_events(events))
    console().print(Group(*parts))


def why(
    job_ref: JobArgument,
    output: OutputOption = Output.TABLE,
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """Why a job waits: its reason, its place in its queue, and its queue's quota."""
    with api(server) as client:
        answer = client.why(job_ref)
    if emit(answer, output):
        return
    console().print(answer.summary, highlight=False)
    if answer.estimated_start is not None:
        console().print(f"  {answer.estimated_start.summary}", highlight=False)
    elif answer.start_unknown is not None:
        console().print(f"  start {answer.start_unknown}", highlight=False)
    for dependency in answer.waiting_for:
        console().print(
            f"  depends on {dependency.job} ({dependency.job_id[:8]}): needs "
            f"{dependency.condition}, is {dependency.state or 'unknown'}",
            highlight=False,
        )
    for level in answer.quota:
        ceiling = resources(level.max) if level.max is not None else "none"
        console().print(f"  quota {level.name}: min {resources(level.min)}; max {ceiling}")
    if answer.queue_running is not None:
        console().print(f"  queue {answer.queue} runs {answer.queue_running} job(s)")


def register(app: typer.Typer) -> None:
    for command in (describe, why):
        app.command()(command)
