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

import re
import secrets
import shlex
from pathlib import Path, PurePath
from typing import Annotated, Any

import typer

from flotilla.cli.client import ServerOption, api, fail
from flotilla.cli.output import Output, OutputOption, emit
from flotilla.cli.render import console
from flotilla.lifecycle.states import SUCCESSFUL_STATE_NAMES
from flotilla.sdk.connection import DEFAULT_SERVER

_ARRAY = re.compile(r"^(\d+)(?:%(\d+))?$")
DIRECTIVE = "#FLOTILLA"


def read_script(path: str) -> tuple[list[str], str] | None:
    """The ``#FLOTILLA`` flags and the text of a batch script, or ``None`` when ``path`` is
    not a readable file with such lines in its header (the comments before its first
    command, as sbatch reads ``#SBATCH``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    flags: list[str] = []
    found = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(DIRECTIVE):
            found = True
            try:
                flags += shlex.split(stripped[len(DIRECTIVE) :], comments=True)
            except ValueError as error:
                fail(f"{path}: {line.strip()!r}: {error}", code=2)
        elif stripped and not stripped.startswith("#"):
            break
    return (flags, text) if found else None


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
    """The program's name and a short random suffix: two runs of one program at once must not
    share a name (names are unique among a queue's unfinished jobs)."""
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
) -> dict[str, Any]:
    """The job spec the flags describe (not yet checked)."""
    if not command:
        fail("give the command after the flags: flotilla run [FLAGS] -- COMMAND...", code=2)
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
    if array is not None:
        found = _ARRAY.match(array)
        if found is None:
            fail(f"--array: expected N or N%K (N elements, K at once), got {array!r}", code=2)
        spec["array"] = {"size": int(found.group(1))}
        if found.group(2) is not None:
            spec["array"]["parallelism"] = int(found.group(2))
    return spec


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
            help="Working directory of the command, relative to its run's scratch dir.",
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
    output: OutputOption = Output.TABLE,
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """Submit one job from flags and a command: flotilla run --cpu 2 --gpu 1 -- python train.py"""
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
    )
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
        elif not emit(result, output):
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
