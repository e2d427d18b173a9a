"""``flotilla`` — the command line. Exit codes: 0 ok, 1 a ``--check`` failed or the API refused,
2 bad input.

``simulate`` is defined here; every other command lives in a module of its own, imported
when the command line names it (``commands.py``), and each imports what it runs when it runs
(the simulator, the SDK, rich): docs/performance.md, CLI start-up."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from flotilla import __version__
from flotilla.cli.commands import RootGroup

if TYPE_CHECKING:
    from rich.console import Console

    from flotilla.model.scenario import Scenario

app = typer.Typer(
    cls=RootGroup,
    help="Flotilla: a batch job scheduler for ML and HPC platforms.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class OutputFormat(StrEnum):
    JSON = "json"
    TABLE = "table"
    HTML = "html"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"flotilla {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """Flotilla: a batch job scheduler for ML and HPC platforms."""


def _until(value: str | None) -> float | None:
    if value is None:
        return None
    from flotilla.model.durations import seconds

    try:
        found = seconds(value)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    return found


@app.command()
def simulate(
    scenario: Annotated[
        Path | None,
        typer.Argument(help="Scenario file (YAML or JSON); not with --from-server."),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(
            help="Stop after the cycle at this virtual time: seconds, or e.g. 90m, 24h, 7d."
        ),
    ] = None,
    output_format: Annotated[
        OutputFormat | None,
        typer.Option(
            "--format",
            help="json, table, or html: one self-contained page of charts (needs -o FILE). "
            "Default: table on a terminal, else json.",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the report here instead of standard output."),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 if any of the scenario's expect entries fails.")
    ] = False,
    fleet_file: Annotated[
        Path | None,
        typer.Option(
            "--fleet", help="A fleet file: replaces the scenario's clusters, queues and settings."
        ),
    ] = None,
    from_server: Annotated[
        str | None,
        typer.Option(
            "--from-server",
            help="What-if from a live service (admin): simulate its fleet and workload now "
            "(`flotilla fleet export --scenario`) and, with --fleet, a changed fleet beside "
            "it; the report compares the two per queue.",
        ),
    ] = None,
    runtimes: Annotated[
        str,
        typer.Option(
            help="With --from-server: the runtime estimator, auto (max_runtime, else "
            "history), max_runtime or history."
        ),
    ] = "auto",
) -> None:
    """Run a scenario through the scheduling engine in virtual time and report what happened."""
    until_seconds = _until(until)
    if from_server is not None:
        from flotilla.cli.whatif import what_if

        if scenario is not None:
            raise typer.BadParameter("give a scenario file or --from-server, not both")
        shown = output_format.value if output_format is not None else None
        what_if(from_server, fleet_file, until_seconds, until, shown, output, runtimes)
        return
    if scenario is None:
        raise typer.BadParameter("give a scenario file (or --from-server URL)")
    from rich.console import Console

    from flotilla.files import write_text_safely
    from flotilla.model.errors import SpecError
    from flotilla.sim.report import build_report, check_expectations
    from flotilla.sim.simulator import SimulationOptions
    from flotilla.sim.simulator import simulate as run_simulation
    from flotilla.sim.table import render_table

    # soft_wrap: one line per problem whatever the terminal's width (rich would fold them).
    err = Console(stderr=True, soft_wrap=True)
    if output is not None and output.is_dir():  # say so before a long simulation, not after
        err.print(f"[bold red]error:[/] --output: {output}: is a directory", highlight=False)
        raise typer.Exit(2)
    if output_format is OutputFormat.HTML and output is None:
        err.print("[bold red]error:[/] --format html: give the page a file with -o FILE")
        raise typer.Exit(2)
    try:
        spec = _load(scenario, fleet_file)
        options = SimulationOptions(until=until_seconds, progress=_progress(err))
        sim = run_simulation(spec, options)
    except SpecError as error:
        what = f"{error.source}: invalid fleet" if error.source == str(fleet_file) else None
        err.print(f"[bold red]error:[/] {what or f'{scenario}: invalid scenario'}", highlight=False)
        for problem in error.problems:
            err.print(f"  {problem}", highlight=False, markup=False)
        raise typer.Exit(2) from None
    report = build_report(sim)
    fmt = output_format or (
        OutputFormat.TABLE if sys.stdout.isatty() and output is None else OutputFormat.JSON
    )
    if fmt is OutputFormat.HTML:
        from flotilla.web.simreport import render_simulation_html

        text = render_simulation_html(sim, report)
    elif fmt is OutputFormat.JSON:
        text = json.dumps(report, indent=2) + "\n"
        if output is None:
            typer.echo(text, nl=False)
    else:
        if output is None:
            render_table(report, Console())
        else:
            buffer = io.StringIO()
            render_table(report, Console(file=buffer, width=120))
            text = buffer.getvalue()
    if output is not None:
        try:
            write_text_safely(output, text)
        except OSError as error:
            err.print(f"[bold red]error:[/] --output: {error}", highlight=False)
            raise typer.Exit(2) from None
    if check:
        failures = check_expectations(sim)
        total = len(spec.expect)
        if failures:
            for failure in failures:
                err.print(f"[red]FAILED[/] {failure}", highlight=False)
            err.print(f"{total - len(failures)} of {total} expectations hold", highlight=False)
            raise typer.Exit(1)
        err.print(f"[green]all {total} expectations hold[/]", highlight=False)


def _load(scenario: Path, fleet_file: Path | None) -> Scenario:
    """The scenario, with its fleet part taken from ``fleet_file`` if given."""
    from flotilla.model.errors import SpecError
    from flotilla.model.loader import load_scenario

    if fleet_file is None:
        return load_scenario(scenario)
    from flotilla.model.fleet_loader import load_fleet, scenario_with_fleet
    from flotilla.model.loader import parse_document

    fleet = load_fleet(fleet_file)
    try:
        text = scenario.read_text(encoding="utf-8")
    except OSError as error:
        raise SpecError([f"cannot read file: {error.strerror}"], str(scenario)) from None
    return scenario_with_fleet(
        parse_document(text, str(scenario)), fleet, str(scenario), str(fleet_file)
    )


def _progress(console: Console) -> Callable[[float, int, int], None] | None:
    if not console.is_terminal:
        return None

    def show(now: float, done: int, total: int) -> None:
        console.print(f"  t={now:g}s  {done}/{total} jobs done", highlight=False, end="\r")

    return show


if __name__ == "__main__":  # pragma: no cover
    app()
