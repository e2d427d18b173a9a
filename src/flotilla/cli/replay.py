"""``flotilla replay SCENARIO --server URL``: play a scenario against a live service and
write ``flotilla simulate``'s JSON report of what the service did (``docs/scenarios.md``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from flotilla.cli.client import ServerOption, api, fail
from flotilla.files import write_text_safely
from flotilla.sdk.connection import DEFAULT_SERVER


def replay(
    scenario: Annotated[Path, typer.Argument(help="Scenario file (YAML or JSON).")],
    server: ServerOption = DEFAULT_SERVER,
    speed: Annotated[
        float,
        typer.Option(
            help="Scenario seconds per wall second: 10 plays a 100 s scenario in 10 s.", min=0.001
        ),
    ] = 1.0,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the report here instead of standard output."),
    ] = None,
    replace_fleet: Annotated[
        bool,
        typer.Option(
            "--replace-fleet",
            help="Replace the fleet of a service whose clusters run real engines (its "
            "local, Ray, Slurm or Kubernetes clusters go). Without it such a service is refused.",
        ),
    ] = False,
) -> None:
    """Play a scenario against a live service (admin): apply its fleet as sim clusters,
    submit its jobs and cancel them at their times (each step once the service has done
    what the scenario's simulation had done by then), wait for them to end, and write the
    same JSON report as ``flotilla simulate``, in scenario seconds. The service's fleet is
    replaced: use a service of its own (``flotilla up --db sqlite:///replay.db``); one whose
    clusters run real engines is refused unless ``--replace-fleet``."""
    from rich.console import Console

    from flotilla.model.errors import SpecError
    from flotilla.model.loader import load_scenario
    from flotilla.replay.driver import ReplayError, clusters_it_would_replace
    from flotilla.replay.driver import replay as run_replay
    from flotilla.replay.plan import plan_replay
    from flotilla.replay.report import build_replay_report

    if output is not None and output.is_dir():
        fail(f"--output: {output}: is a directory", code=2)
    try:
        spec = load_scenario(scenario)
    except SpecError as error:
        fail(f"{scenario}: invalid scenario", error.problems, code=2)
    plan = plan_replay(spec, speed)
    err = Console(stderr=True, soft_wrap=True)
    for problem in plan.unsupported:
        err.print(f"[yellow]warning:[/] not replayed: {problem}", highlight=False)
    progress = None
    if err.is_terminal:

        def progress(now: float, done: int, total: int) -> None:
            err.print(f"  t={now:g}s  {done}/{total} jobs done", highlight=False, end="\r")

    with api(server) as client:
        real = clusters_it_would_replace(client)
        if real and not replace_fleet:
            fail(
                f"{server}: replaying would replace this service's fleet, and with it its "
                f"clusters {', '.join(real)}",
                [
                    "use a service of its own: flotilla up --db sqlite:///replay.db --port 8468",
                    "or pass --replace-fleet to replace them",
                ],
                code=2,
            )
        try:
            observed = run_replay(client, plan, progress)
        except ReplayError as error:
            fail(str(error))
    text = json.dumps(build_replay_report(observed), indent=2) + "\n"
    if output is None:
        sys.stdout.write(text)
        return
    try:
        write_text_safely(output, text)
    except OSError as error:
        fail(f"--output: {error}", code=2)


def register(app: typer.Typer) -> None:
    app.command()(replay)
