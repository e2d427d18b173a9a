"""``--format json|yaml|wide``: every read command prints a table by default, ``wide`` adds
columns and full ids, ``json`` and ``yaml`` print the API's objects whole (full ids).

Not ``-o``: that is Slurm's ``--output`` (the file a batch job's standard output goes to),
which ``run`` and ``#SBATCH``/``#FLOTILLA`` lines take as such (issue 37)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any

import typer


class Output(StrEnum):
    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"


OutputOption = Annotated[
    Output,
    typer.Option(
        "--format",
        "--output-format",
        help="table, wide (more columns, full ids), json or yaml (the API's objects whole).",
        case_sensitive=False,
    ),
]


def plain(data: Any) -> Any:
    """Models and lists of models as JSON-ready data."""
    from pydantic import BaseModel

    if isinstance(data, BaseModel):
        return data.model_dump(mode="json")
    if isinstance(data, Sequence) and not isinstance(data, str):
        return [plain(item) for item in data]
    if isinstance(data, dict):
        return {key: plain(value) for key, value in data.items()}
    return data


def emit(data: Any, output: Output) -> bool:
    """Print ``data`` as JSON or YAML if ``output`` asks for it; ``False`` for a table."""
    if output is Output.JSON:
        typer.echo(json.dumps(plain(data), indent=2))
        return True
    if output is Output.YAML:
        import yaml

        typer.echo(yaml.safe_dump(plain(data), sort_keys=False).rstrip("\n"))
        return True
    return False
