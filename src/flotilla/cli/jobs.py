"""Client commands about jobs: submit, jobs, describe, why, cancel, logs, watch."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Group
from rich.live import Live
from rich.table import Table

from flotilla.cli.arrays import (
    cancel_ids,
    element_ids,
    job_or_array,
    print_array,
    retry_and_array_rows,
)
from flotilla.cli.client import Api, ServerOption, api, fail
from flotilla.cli.render import age, console, jobs_table, resources, state_text

TERMINAL = {"succeeded", "failed", "cancelled"}


def load_job_file(path: Path) -> dict[str, Any]:
    """The submission body for a job file: one job, a list of jobs, or ``{jobs: [...]}``.

    Checked here with the server's own rules, so a bad file fails (exit 2) before any
    request, with every problem named by its field.
    """
    from flotilla.server.errors import ApiError
    from flotilla.server.submission import parse_submission

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        fail(f"{path}: cannot read: {error.strerror or error}", code=2)
    except yaml.YAMLError as error:
        fail(f"{path}: not valid YAML or JSON: {error}", code=2)
    body: dict[str, Any] = {"jobs": data} if isinstance(data, list) else data
    try:
        parse_submission(body)
    except ApiError as error:
        fail(f"{path}: {error.message}", error.problems, code=2)
    return body


def submit(
    file: Annotated[Path, typer.Argument(help="Job file (YAML or JSON): one job or a list.")],
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print only the job ids, one per line.")
    ] = False,
    server: ServerOption = "http://127.0.0.1:8467",
) -> None:
    """Submit the jobs of a file, all or nothing."""
    body = load_job_file(file)
    with api(server) as client:
        result = client.post("/v1/jobs", json=body)
    if quiet:
        for job in result["jobs"]:
            typer.echo(job["id"])
        return
    table = Table("ID", "NAME", "QUEUE", box=None, header_style="bold")
    for job in result["jobs"]:
        table.add_row(job["id"], job["name"], job["queue"])
    count = len(result["jobs"])
    console().print(f"submitted {count} job{'s' if count != 1 else ''}")
    console().print(table)
    for array_id in dict.fromkeys(job["array_id"] for job in result["jobs"] if job.get("array_id")):
        console().print(f"array {array_id}: describe, wait or cancel it as one", highlight=False)


def _list_params(
    queue: str | None, state: list[str] | None, owner: str | None, label: list[str] | None
) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if queue:
        params["queue"] = queue
    if state:
        params["state"] = state
    if owner:
        params["owner"] = owner
    if label:
        params["label"] = label
    return params


def fetch_jobs(client: Api, params: dict[str, Any], limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` jobs, following cursors."""
    found: list[dict[str, Any]] = []
    after: int | None = None
    while len(found) < limit:
        page_params = {**params, "limit": min(1000, limit - len(found))}
        if after is not None:
            page_params["after"] = after
        page = client.get("/v1/jobs", params=page_params)
        found.extend(page["jobs"])
        after = page["next_cursor"]
        if after is None:
            break
    return found


QueueFilter = Annotated[str | None, typer.Option("--queue", "-q", help="Only this queue.")]
StateFilter = Annotated[
    list[str] | None, typer.Option("--state", "-s", help="Only these states (repeat).")
]
OwnerFilter = Annotated[str | None, typer.Option("--owner", help="Only this owner's jobs.")]
LabelFilter = Annotated[
    list[str] | None, typer.Option("--label", "-l", help="key=value; repeat: all must match.")
]


def jobs(
    queue: QueueFilter = None,
    state: StateFilter = None,
    owner: OwnerFilter = None,
    label: LabelFilter = None,
    limit: Annotated[int, typer.Option(help="Show at most this many.", min=1)] = 100,
    server: ServerOption = "http://127.0.0.1:8467",
) -> None:
    """List jobs in submission order."""
    with api(server) as client:
        found = fetch_jobs(client, _list_params(queue, state, owner, label), limit)
    if not found:
        console().print("no jobs")
        return
    console().print(jobs_table(found))


def wait(
    job_ids: Annotated[
        list[str], typer.Argument(metavar="JOB...", help="Job ids or array ids (every element).")
    ],
    timeout: Annotated[
        float, typer.Option(help="Give up after this many seconds (exit 3).", min=0)
    ] = 300.0,
    server: ServerOption = "http://127.0.0.1:8467",
) -> None:
    """Wait until the jobs end; exit 0 if all succeeded, 1 if any did not, 3 on timeout."""
    deadline = time.monotonic() + timeout
    states: dict[str, str] = {}
    with api(server) as client:
        job_ids = element_ids(client, job_ids)
        while True:
            for job_id in job_ids:
                if states.get(job_id) not in TERMINAL:
                    states[job_id] = client.get(f"/v1/jobs/{job_id}")["state"]
            if all(state in TERMINAL for state in states.values()):
                break
            if time.monotonic() > deadline:
                waiting = ", ".join(f"{j} ({s})" for j, s in states.items() if s not in TERMINAL)
                console().print(f"timed out after {timeout:g}s waiting for {waiting}")
                raise typer.Exit(3)
            time.sleep(0.2)
    for job_id, state in states.items():
        typer.echo(f"{job_id} {state}")
    if any(state != "succeeded" for state in states.values()):
        raise typer.Exit(1)


def describe(
    job_id: Annotated[str, typer.Argument(metavar="JOB", help="Job id (or array id).")],
    server: ServerOption = "http://127.0.0.1:8467",
) -> None:
    """A job in full: spec summary, runs, history, and why it waits (an array: its
    elements and their counts by state)."""
    with api(server) as client:
        found, array = job_or_array(client, job_id)
        if found is None:
            assert array is not None
            print_array(array)
            return
        job = found
        events = client.get(f"/v1/jobs/{job_id}/events")
    spec = job["spec"]
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    facts.add_row("Job", f"{job['name']}  ({job['id']})")
    facts.add_row("Queue", job["queue"])
    facts.add_row("State", state_text(job["state"], job["cancel_requested"]))
    facts.add_row("Priority", str(job["priority"]))
    facts.add_row("Owner", job.get("owner") or "-")
    facts.add_row("Submitted", f"{job['submitted_at']} ({age(job['submitted_at'])} ago)")
    if job["labels"]:
        facts.add_row("Labels", ", ".join(f"{k}={v}" for k, v in job["labels"].items()))
    facts.add_row("Type", spec.get("type", "command"))
    command = (spec.get("payload") or {}).get("command")
    if command is not None:
        facts.add_row("Command", command if isinstance(command, str) else " ".join(command))
    for task in spec["tasks"]:
        facts.add_row(
            f"Task {task['name']}", f"{task.get('replicas', 1)} × {resources(task['resources'])}"
        )
    for name, value in retry_and_array_rows(job):
        facts.add_row(name, value)
    if job["pending_reason"]:
        facts.add_row("Waiting", job["pending_reason"])
    elif job["reason"]:
        facts.add_row("Reason", job["reason"])
    parts: list[Any] = [facts]
    if job["runs"]:
        runs = Table(
            "RUN",
            "ATTEMPT",
            "CLUSTER",
            "STATE",
            "STARTED",
            "FINISHED",
            "EXIT",
            title="Runs",
            box=None,
            header_style="bold",
            title_justify="left",
        )
        for run in job["runs"]:
            exit_code = run["exit_code"]
            runs.add_row(
                run["id"],
                str(run["attempt"]),
                run["cluster"],
                run["state"],
                run["started_at"] or "-",
                run["finished_at"] or "-",
                "-" if exit_code is None else str(exit_code),
            )
        parts.append(runs)
    history = Table(
        "TIME",
        "EVENT",
        "STATE",
        "REASON",
        title="Events",
        box=None,
        header_style="bold",
        title_justify="left",
    )
    for event in events:
        moved = event["to_state"] or ""
        if event["from_state"] and event["from_state"] != event["to_state"]:
            moved = f"{event['from_state']} → {moved}"
        history.add_row(event["time"], event["kind"], moved, event["reason"])
    parts.append(history)
    console().print(Group(*parts))


def why(
    job_id: Annotated[str, typer.Argument(metavar="JOB", help="Job id.")],
    server: ServerOption = "http://127.0.0.1:8467",
) -> None:
    """Why a job waits: its reason, its place in its queue, and its queue's quota."""
    with api(server) as client:
        answer = client.get(f"/v1/jobs/{job_id}/why")
    console().print(answer["summary"], highlight=False)
    for level in answer["quota"]:
        ceiling = resources(level["max"]) if level["max"] is not None else "none"
        console().print(f"  quota {level['name']}: min {resources(level['min'])}; max {ceiling}")
    if answer["queue_running"] is not None:
        console().print(f"  queue {answer['queue']} runs {answer['queue_running']} job(s)")


def cancel(
    job_ids: Annotated[
        list[str] | None,
        typer.Argument(metavar="JOB...", help="Job ids or array ids (every element)."),
    ] = None,
    queue: Annotated[str | None, typer.Option("--queue", "-q", help="Every job of it.")] = None,
    label: LabelFilter = None,
    reason: Annotated[str, typer.Option(help="Recorded in the job's history.")] = (
        "cancelled by user"
    ),
    server: ServerOption = "http://127.0.0.1:8467",
) -> None:
    """Cancel jobs by id, or every unfinished job of a queue and/or with labels."""
    if not job_ids and queue is None and not label:
        fail("name jobs to cancel, or give --queue and/or --label", code=2)
    if job_ids and (queue is not None or label):
        fail("give job ids or --queue/--label, not both", code=2)
    labels: dict[str, str] = {}
    for pair in label or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"--label: expected key=value, got {pair!r}", code=2)
        labels[key] = value
    with api(server) as client:
        if job_ids:
            done = [job for job_id in job_ids for job in cancel_ids(client, job_id, reason)]
        else:
            body = {"queue": queue, "labels": labels, "reason": reason}
            done = client.post("/v1/jobs/cancel", json=body)["cancelled"]
    if not done:
        console().print("nothing to cancel")
    for job in done:
        what = "cancelled" if job["state"] == "cancelled" else "cancel requested"
        if job["state"] in TERMINAL and job["state"] != "cancelled":
            what = f"already {job['state']}"
        console().print(f"{job['id']} {job['name']}: {what}", highlight=False)


def logs(
    job_id: Annotated[str, typer.Argument(metavar="JOB", help="Job id.")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new output.")] = (
        False
    ),
    stderr: Annotated[bool, typer.Option("--stderr", help="Standard error, not output.")] = False,
    task: Annotated[str | None, typer.Option(help="Task name (default: the first).")] = None,
    replica: Annotated[int | None, typer.Option(help="Replica index.", min=0)] = None,
    server: ServerOption = "http://127.0.0.1:8467",
) -> None:
    """Print a job's output (its latest run). With -f, follow it until the run ends."""
    params: dict[str, Any] = {"stream": "stderr" if stderr else "stdout", "offset": 0}
    if task is not None:
        params["task"] = task
    if replica is not None:
        params["replica"] = replica
    with api(server) as client:
        try:
            while True:
                chunk = client.get(f"/v1/jobs/{job_id}/logs", params=params)
                sys.stdout.write(chunk["data"])
                sys.stdout.flush()
                params["offset"] = chunk["next_offset"]
                if not follow or chunk["complete"]:
                    return
                if not chunk["data"]:
                    time.sleep(1.0)
        except KeyboardInterrupt:
            return


MIN_INTERVAL = 0.5


def watch(
    queue: QueueFilter = None,
    state: StateFilter = None,
    owner: OwnerFilter = None,
    label: LabelFilter = None,
    interval: Annotated[
        float, typer.Option(help=f"Seconds between refreshes (at least {MIN_INTERVAL}).")
    ] = 2.0,
    limit: Annotated[int, typer.Option(help="Rows shown (the oldest matching jobs).", min=1)] = 50,
    iterations: Annotated[
        int | None, typer.Option(help="Stop after this many refreshes (default: until Ctrl-C).")
    ] = None,
    server: ServerOption = "http://127.0.0.1:8467",
) -> None:
    """A live table of jobs, refreshed every --interval seconds; Ctrl-C stops."""
    params = _list_params(queue, state, owner, label)
    pause = max(MIN_INTERVAL, interval)
    with api(server) as client:
        shown = 0
        try:
            with Live(console=console(), auto_refresh=False) as live:
                while iterations is None or shown < iterations:
                    found = fetch_jobs(client, params, limit)
                    title = f"{len(found)} job(s) — every {pause:g}s, Ctrl-C to stop"
                    live.update(jobs_table(found, title=title), refresh=True)
                    shown += 1
                    if iterations is None or shown < iterations:
                        time.sleep(pause)
        except KeyboardInterrupt:
            return


def register(app: typer.Typer) -> None:
    for command in (submit, jobs, describe, why, wait, cancel, logs, watch):
        app.command()(command)
