"""``flotilla simulate --from-server URL [--fleet changed.yaml]``: what-if from the live fleet.

The service's export (``GET /v1/fleet/scenario``) is simulated as it is, and — with
``--fleet`` — with its fleet part replaced by the changed fleet; the two are reported side by
side per queue (docs/scenarios.md, *What-if from the live fleet*).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from flotilla.cli.client import api
from flotilla.files import write_text_safely
from flotilla.model.errors import SpecError


def what_if(
    server: str,
    fleet_file: Path | None,
    until: float | None,
    until_text: str | None,
    output_format: str | None,
    output: Path | None,
    runtimes: str,
) -> None:
    from flotilla.model.fleet_loader import load_fleet
    from flotilla.model.loader import scenario_from_data
    from flotilla.sim.report import build_report
    from flotilla.sim.simulator import SimulationOptions, Simulator, simulate
    from flotilla.whatif.changed import with_changed_fleet
    from flotilla.whatif.compare import outlook, render_html, render_text

    err = Console(stderr=True, soft_wrap=True)
    if output_format == "html" and output is None:
        err.print("[bold red]error:[/] --format html: give the page a file with -o FILE")
        raise typer.Exit(2)
    with api(server) as client:
        exported = client.export_scenario(runtimes)
    options = SimulationOptions(until=until)
    try:
        now = simulate(scenario_from_data(exported, "live export"), options)
        changed: Simulator = now
        if fleet_file is not None:
            changed = simulate(with_changed_fleet(exported, load_fleet(fleet_file)), options)
    except SpecError as error:
        err.print(f"[bold red]error:[/] {error.source or 'what-if'}: invalid", highlight=False)
        for problem in error.problems:
            err.print(f"  {problem}", highlight=False, markup=False)
        raise typer.Exit(2) from None
    horizon = until_text or f"{now.end_time:g}s (until nothing changes)"
    before, after = outlook(now), outlook(changed)
    fmt = output_format or ("table" if sys.stdout.isatty() and output is None else "json")
    if fmt == "html":
        from flotilla.web.simreport import render_simulation_html

        pages = (
            render_simulation_html(now, build_report(now)),
            render_simulation_html(changed, build_report(changed)),
        )
        text = render_html(before, after, horizon, pages)
    elif fmt == "json":
        text = json.dumps(_as_json(before, after, horizon), indent=2) + "\n"
    else:
        text = render_text(before, after, horizon)
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        write_text_safely(output, text)
    except OSError as error:
        err.print(f"[bold red]error:[/] --output: {error}", highlight=False)
        raise typer.Exit(2) from None


def _as_json(before: Any, after: Any, horizon: str) -> dict[str, Any]:
    from dataclasses import asdict

    return {"horizon": horizon, "now": asdict(before), "changed": asdict(after)}
