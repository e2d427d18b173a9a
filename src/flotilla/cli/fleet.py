"""``flotilla fleet apply|show``: the fleet file in force (admin)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from flotilla.cli.client import ServerOption, api, fail
from flotilla.cli.render import console
from flotilla.model.quantity import format_quantity
from flotilla.sdk.connection import DEFAULT_SERVER

fleet_app = typer.Typer(
    help="The fleet in force: its clusters and their backends, queues, quotas and settings.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@fleet_app.command("apply")
def fleet_apply(
    file: Annotated[Path, typer.Argument(help="Fleet file (YAML or JSON); see docs/fleet.md.")],
    expected_version: Annotated[
        int | None,
        typer.Option(help="Apply only if the fleet in force is still this version."),
    ] = None,
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """Change the fleet of a running service without a restart (admin): all or nothing."""
    from flotilla.model.fleet_loader import FleetError, load_fleet
    from flotilla.model.loader import parse_document

    try:
        load_fleet(file)  # the file's own problems, named by field, before any request
        data = parse_document(file.read_text(encoding="utf-8"), str(file))
    except FleetError as error:
        fail(f"{file}: invalid fleet", error.problems, code=2)
    with api(server) as client:
        applied = client.apply_fleet(data, expected_version)
    clusters = ", ".join(c["name"] for c in applied["fleet"].get("clusters", []))
    console().print(
        f"fleet {applied['fleet'].get('name', 'fleet')!r} version {applied['version']} in "
        f"force: clusters {clusters}",
        highlight=False,
    )


@fleet_app.command("show")
def fleet_show(
    output_format: Annotated[
        str, typer.Option("--format", help="yaml or json.", case_sensitive=False)
    ] = "yaml",
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """Print the fleet in force (admin); secrets appear as their references, never values."""
    import yaml

    with api(server) as client:
        found = client.fleet()
    if output_format.lower() == "json":
        typer.echo(json.dumps(found["fleet"], indent=2))
        return
    typer.echo(f"# version {found['version']}, applied {found['applied_at']}")
    typer.echo(yaml.safe_dump(readable(found["fleet"]), sort_keys=False).rstrip("\n"))


@fleet_app.command("export")
def fleet_export(
    scenario: Annotated[
        bool,
        typer.Option(
            "--scenario",
            help="Export as a scenario: the fleet and its live workload (the only form so far).",
        ),
    ] = False,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write it here (default: stdout).")
    ] = None,
    runtimes: Annotated[
        str,
        typer.Option(
            help="Runtime estimator: auto (max_runtime, else history), max_runtime, history."
        ),
    ] = "auto",
    output_format: Annotated[
        str, typer.Option("--format", help="yaml or json.", case_sensitive=False)
    ] = "yaml",
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """Write the live fleet and workload as a scenario for `flotilla simulate` (admin):
    running jobs where they run, waiting and held ones in order, each job's runtime
    estimated and its source recorded; payloads and secrets are never exported."""
    import yaml

    from flotilla.files import write_text_safely

    if not scenario:
        fail("fleet export: say what to export: --scenario", code=2)
    with api(server) as client:
        found = client.export_scenario(runtimes)
    if output_format.lower() == "json":
        text = json.dumps(found, indent=2) + "\n"
    else:
        # Quantities in a file's units; placements (``live``) stay in the stored form.
        shown = {key: value if key == "live" else readable(value) for key, value in found.items()}
        text = yaml.safe_dump(shown, sort_keys=False)
    if output is None:
        typer.echo(text, nl=False)
        return
    write_text_safely(output, text)
    jobs = len(found.get("jobs", []))
    console().print(f"wrote {output}: {jobs} job(s) of the live fleet", highlight=False)


def readable(value: Any, key: str = "") -> Any:
    """The stored fleet (quantities in base units) in a file's units: ``memory: 4Gi``, not
    ``memory: 4294967296.0``; whole numbers without ``.0``. JSON keeps the base units."""
    if isinstance(value, dict):
        return {name: readable(item, str(name)) for name, item in value.items()}
    if isinstance(value, list):
        return [readable(item, key) for item in value]
    if isinstance(value, float | int) and not isinstance(value, bool):
        if key.endswith("memory"):
            return format_quantity(key, float(value))
        if isinstance(value, float) and value.is_integer():
            return int(value)
    return value


def register(app: typer.Typer) -> None:
    app.add_typer(fleet_app, name="fleet")
