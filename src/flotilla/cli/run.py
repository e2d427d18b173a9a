"""``flotilla run [resource flags] -- COMMAND``: one job from the command line, no file.

What ``sbatch --wrap``, ``srun`` and ``ray job submit -- …`` give a Slurm or Ray user: the
resources as flags, the command after them. Several words after the flags are the program
and its arguments, run as they are; one word is a shell command line (``/bin/sh -c``, as
``--wrap``), so ``flotilla run -- 'python train.py | tee log'`` keeps its pipe. Options end
at the first word of the command, so the command's own flags are its own. The job is checked
as a job file is (a bad flag is exit 2 naming it) and submitted; ``--wait`` then waits for
it as ``flotilla wait`` does, and ``--dry-run`` prints the job file it would submit.

A batch script, as ``sbatch script.sh``: when the command is a file whose header has
``#FLOTILLA`` lines (``#FLOTILLA --cpu 2 --mem 4Gi``, like ``#SBATCH``), those lines are
flags too — the command line's win — and the script's text travels with the job (run by its
``#!`` interpreter, else ``/bin/sh``), so the node needs no copy of the file.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
from pathlib import Path, PurePath
from typing import Annotated, Any

import typer

from flotilla.cli.client import ServerOption, api, fail
from flotilla.cli.output import Output, OutputOption, emit
from flotilla.cli.render import console
from flotilla.cli.sbatch import DIRECTIVE as SLURM_DIRECTIVE
from flotilla.cli.sbatch import dependencies, output_wrapper, translate
from flotilla.cli.where import parse_export, place_here, server_is_here
from flotilla.lifecycle.states import SUCCESSFUL_STATE_NAMES
from flotilla.sdk.connection import DEFAULT_SERVER

_ARRAY = re.compile(r"^(\d+)(?:%(\d+))?$")
DIRECTIVE = "#FLOTILLA"


def read_script(path: str) -> tuple[list[str], str] | None:
    """The flags of a batch script's header and its text, or ``None`` when ``path`` is not a
    readable file with ``#FLOTILLA`` or ``#SBATCH`` lines in its header. The header
    is the comments before its first command, as sbatch reads it: ``#SBATCH`` lines translated
    (``sbatch.py``; each one ignored named in a warning), then ``#FLOTILLA`` lines, which win."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    flags: list[str] = []
    slurm: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith(DIRECTIVE):
            try:
                flags += shlex.split(stripped[len(DIRECTIVE) :], comments=True)
            except ValueError as error:
                fail(f"{path}: {line.strip()!r}: {error}", code=2)
        elif stripped.startswith(SLURM_DIRECTIVE):
            slurm.append((number, stripped[len(SLURM_DIRECTIVE) :]))
        elif stripped and not stripped.startswith("#"):
            break
    if not flags and not slurm:
        return None  # a program like any other: run by its path
    translated = translate(slurm, path)
    for warning in translated.warnings:
        typer.echo(f"warning: {warning}", err=True)
    return [*translated.flags, *flags], text


def script_command(path: str, text: str, arguments: list[str]) -> list[str]:
    """Run the script's text by its ``#!`` interpreter (else ``/bin/sh``); ``$0`` is its
    name and ``$1``… its arguments, as if the file were run."""
    first = text.splitlines()[0] if text else ""
    interpreter = shlex.split(first[2:]) if first.startswith("#!") else ["/bin/sh"]
    return [*(interpreter or ["/bin/sh"]), "-c", text, path, *arguments]


def with_directives(ctx: typer.Context, flags: list[str], given: dict[str, Any]) -> dict[str, Any]:
    """``given`` with the script's flags in place of the options left at their defaults (the
    flags are parsed by this very command, so they are the command line's flags exactly)."""
    try:
        parsed = ctx.command.make_context(
            ctx.info_name, [*flags, "--", "script"], parent=ctx.parent
        )
    except Exception as error:  # typer's own click: its usage errors say what was wrong
        format_message = getattr(error, "format_message", None)
        said = format_message() if callable(format_message) else str(error)
        fail(f"{DIRECTIVE} line: {said}", code=2)

    def defaulted(context: Any, key: str) -> bool:
        source = context.get_parameter_source(key)
        return source is None or source.name == "DEFAULT"

    merged = dict(given)
    for key in given:
        if defaulted(ctx, key) and not defaulted(parsed, key):
            merged[key] = parsed.params[key]
    return merged


def default_name(command: list[str]) -> str:
    """The program's name and a short random suffix: two runs of one program are told apart
    by name (a name may be used again: it then means the newest job of it)."""
    words = command[0].split() if command else []
    program = PurePath(words[0]).name if words else "run"
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", program).strip("-._") or "run"
    return f"{stem[:40]}-{secrets.token_hex(3)}"


def _pairs(flag: str, pairs: list[str] | None) -> dict[str, str]:
    found: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"{flag}: expected KEY=VALUE, got {pair!r}", code=2)
        found[key] = value
    return found


def job_from_flags(
    command: list[str],
    *,
    name: str | None,
    queue: str,
    cpu: float,
    memory: str | None,
    gpu: int,
    replicas: int,
    max_runtime: str | None,
    labels: dict[str, str],
    env: dict[str, str],
    working_dir: str | None,
    array: str | None,
    priority: int | None,
    hold_if_unfit: bool,
    stdout: str | None = None,
    stderr: str | None = None,
    dependency: str | None = None,
    signal: str | None = None,
    requeue: bool = False,
) -> dict[str, Any]:
    """The job spec the flags describe (not yet checked)."""
    if not command:
        fail("give the command after the flags: flotilla run [FLAGS] -- COMMAND...", code=2)
    if stdout or stderr:
        words = ["/bin/sh", "-c", command[0]] if len(command) == 1 else list(command)
        command = [*output_wrapper(stdout, stderr), *words]
    resources: dict[str, Any] = {"cpu": cpu}
    if memory is not None:
        resources["memory"] = memory
    if gpu:
        resources["gpu"] = gpu
    payload: dict[str, Any] = {"command": command[0] if len(command) == 1 else list(command)}
    if env:
        payload["env"] = env
    if working_dir is not None:
        payload["working_dir"] = working_dir
    spec: dict[str, Any] = {
        "name": name or default_name(command),
        "queue": queue,
        "tasks": [{"name": "main", "replicas": replicas, "resources": resources}],
        "payload": payload,
    }
    if max_runtime is not None:
        from flotilla.model.durations import seconds

        try:
            spec["max_runtime"] = seconds(max_runtime)
        except ValueError as error:
            fail(f"--max-runtime: {error}", code=2)
    if labels:
        spec["labels"] = labels
    if priority is not None:
        spec["priority"] = priority
    if hold_if_unfit:
        spec["hold_if_unfit"] = True
    if dependency:
        try:
            spec["depends_on"] = dependencies(dependency)
        except ValueError as error:
            fail(f"--dependency: {error}", code=2)
    if signal:
        spec["preemption"] = _signal(signal)
    if requeue:
        spec["retry"] = {"limit": 5, "on": ["lost", "node_failure"], "backoff": "none"}
    if array is not None:
        found = _ARRAY.match(array)
        if found is None:
            fail(f"--array: expected N or N%K (N elements, K at once), got {array!r}", code=2)
        spec["array"] = {"size": int(found.group(1))}
        if found.group(2) is not None:
            spec["array"]["parallelism"] = int(found.group(2))
    return spec


def _signal(value: str) -> dict[str, Any]:
    """``--signal SIG[@SECONDS]`` (Slurm's, a name or a number) as the job's ``preemption``."""
    import signal as signals

    name, _, grace = value.partition("@")
    try:
        number = int(name) if name.isdigit() else None
        found = (
            signals.Signals(number)
            if number is not None
            else signals.Signals[name if name.startswith("SIG") else f"SIG{name}"]
        )
    except (KeyError, ValueError):
        fail(f"--signal: {value!r}: give SIG[@SECONDS], e.g. USR1@60", code=2)
    preemption: dict[str, Any] = {"signal": found.name}
    if grace:
        if not grace.isdigit() or int(grace) == 0:
            fail(f"--signal: {value!r}: the seconds after @ must be a whole number > 0", code=2)
        preemption["grace"] = int(grace)
    return preemption


def run(
    ctx: typer.Context,
    command: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="-- COMMAND...",
            help="The program and its arguments; one word is a shell command line.",
            show_default=False,
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", "-J", help="Job name (default: the program's).")
    ] = None,
    queue: Annotated[str, typer.Option("--queue", "-p", help="Queue (Slurm's partition).")] = (
        "default"
    ),
    cpu: Annotated[float, typer.Option("--cpu", "-c", help="Cores per replica.", min=0)] = 1.0,
    memory: Annotated[
        str | None, typer.Option("--memory", "--mem", help="Memory per replica: 512Mi, 4Gi.")
    ] = None,
    gpu: Annotated[int, typer.Option("--gpu", "--gpus", help="GPUs per replica.", min=0)] = 0,
    replicas: Annotated[
        int, typer.Option("--replicas", "-n", help="Replicas, started together (a gang).", min=1)
    ] = 1,
    max_runtime: Annotated[
        str | None,
        typer.Option("--max-runtime", "--time", "-t", help="Stop it after: 90, 30m, 2h, 1:30:00."),
    ] = None,
    label: Annotated[
        list[str] | None, typer.Option("--label", "-l", help="KEY=VALUE; repeat for more.")
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE for the command; repeat.")
    ] = None,
    working_dir: Annotated[
        str | None,
        typer.Option(
            "--chdir",
            "-D",
            help="Working directory of the command (default: this one, when the server is on "
            "this machine; else its run's scratch dir, which a relative one is under then).",
        ),
    ] = None,
    array: Annotated[
        str | None, typer.Option("--array", "-a", help="N elements, or N%K: K at once.")
    ] = None,
    priority: Annotated[int | None, typer.Option(help="Priority (higher runs first).")] = None,
    hold_if_unfit: Annotated[
        bool, typer.Option("--hold-if-unfit", help="Queue it even if no cluster can hold it.")
    ] = False,
    wait: Annotated[
        bool, typer.Option("--wait", "-W", help="Wait for it to end; exit as `wait` does.")
    ] = False,
    timeout: Annotated[
        float, typer.Option(help="With --wait: give up after this many seconds (exit 3).", min=0)
    ] = 3600.0,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the job file it would submit; send nothing.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the job id.")] = False,
    stdout: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="Write the command's output (and errors, without --error) to this file of "
            "its working dir, as Slurm's -o (%j: job id, %x: name, %a: array index).",
        ),
    ] = None,
    stderr: Annotated[
        str | None, typer.Option("--error", help="Write the command's errors to this file.")
    ] = None,
    dependency: Annotated[
        str | None,
        typer.Option(
            "--dependency",
            "-d",
            help="afterok:JOB[:JOB] (also afterany, afternotok; comma-separated): start once "
            "those ended so. A JOB is an id or a name (its newest job).",
        ),
    ] = None,
    signal: Annotated[
        str | None,
        typer.Option(
            "--signal", help="SIG[@SECONDS]: the signal and grace a preempted run is stopped with."
        ),
    ] = None,
    requeue: Annotated[
        bool,
        typer.Option("--requeue", help="Run it again (up to 5 times) if its node fails."),
    ] = False,
    export: Annotated[
        str,
        typer.Option(
            "--export",
            help="ALL (default), NONE or VAR[,VAR=value…]: the submitter's environment the "
            "job gets, as Slurm's (ALL leaves out credentials and the session's own).",
        ),
    ] = "ALL",
    output_format: OutputOption = Output.TABLE,
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """Submit one job from flags and a command: flotilla run --cpu 2 --gpu 1 -- python train.py

    When the server is on this machine the job runs in this directory (--chdir to change it)
    with this shell's environment (--export), as sbatch does."""
    words = list(command or [])
    given: dict[str, Any] = {
        "name": name,
        "queue": queue,
        "cpu": cpu,
        "memory": memory,
        "gpu": gpu,
        "replicas": replicas,
        "max_runtime": max_runtime,
        "label": label,
        "env": env,
        "working_dir": working_dir,
        "array": array,
        "priority": priority,
        "hold_if_unfit": hold_if_unfit,
        "stdout": stdout,
        "stderr": stderr,
        "dependency": dependency,
        "signal": signal,
        "requeue": requeue,
        "export": export,
    }
    script = read_script(words[0]) if words else None
    if script is not None:
        flags, text = script
        given = with_directives(ctx, flags, given)
        given["name"] = given["name"] or default_name(words)
        words = script_command(words[0], text, words[1:])
    spec = job_from_flags(
        words,
        name=given["name"],
        queue=given["queue"],
        cpu=given["cpu"],
        memory=given["memory"],
        gpu=given["gpu"],
        replicas=given["replicas"],
        max_runtime=given["max_runtime"],
        labels=_pairs("--label", list(given["label"] or [])),
        env=_pairs("--env", list(given["env"] or [])),
        working_dir=given["working_dir"],
        array=given["array"],
        priority=given["priority"],
        hold_if_unfit=given["hold_if_unfit"],
        stdout=given["stdout"],
        stderr=given["stderr"],
        dependency=given["dependency"],
        signal=given["signal"],
        requeue=given["requeue"],
    )
    payload = spec["payload"]
    if server_is_here(server) and payload.get("working_dir"):
        payload["working_dir"] = os.path.abspath(payload["working_dir"])  # sbatch -D's
    place_here(payload, server=server, export=parse_export(given["export"]))
    from flotilla.sdk.errors import InvalidSpec
    from flotilla.sdk.jobfile import checked

    try:
        body = checked(spec, "")
    except InvalidSpec as invalid:
        fail(invalid.message, invalid.problems, code=2)
    if dry_run:
        import yaml

        typer.echo(yaml.safe_dump(spec, sort_keys=False), nl=False)
        return
    with api(server) as client:
        result = client.submit(body)
        ids = [job.id for job in result.jobs]
        if quiet:
            typer.echo("\n".join(ids))
        elif not emit(result, output_format):
            array_id = result.jobs[0].array_id if result.jobs else None
            shown = array_id or ids[0]
            what = f"array of {len(ids)}" if array_id else "job"
            console().print(f"submitted {what} {shown} ({result.jobs[0].name})", highlight=False)
        if not wait:
            return
        from flotilla.cli.arrays import element_ids
        from flotilla.sdk.errors import WaitTimeout

        try:
            ended = client.wait_all(element_ids(client, ids), timeout)
        except WaitTimeout as timed_out:
            console().print(timed_out.message, highlight=False)
            raise typer.Exit(3) from None
    for job in ended:
        console().print(f"{job.id} {job.state}", highlight=False)
    if any(job.state not in SUCCESSFUL_STATE_NAMES for job in ended):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command(context_settings={"allow_interspersed_args": False})(run)
