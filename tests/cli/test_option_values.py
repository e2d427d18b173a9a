"""Option and argument values are converted as typer converts them, without building typer's
pydantic adapters for the plain ones (``flotilla/cli/coercion.py``): each kind of parameter
Flotilla's commands have, on values typer takes and values it refuses, gives the same value
or the same error message as typer's own conversion."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Any

import pytest
import typer
import typer._coercion
import typer.core
import typer.models
from typer.testing import CliRunner

import flotilla.cli.commands  # noqa: F401 - installs the quick conversion
from flotilla.cli import coercion


class Color(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


def command(annotation: Any, **option: Any) -> typer.Typer:
    """A one-option command that prints the converted value's type and repr."""
    app = typer.Typer()

    def show(value: Any) -> None:
        typer.echo(f"{type(value).__name__} {value!r}")

    show.__annotations__ = {"value": Annotated[annotation, typer.Option(**option)], "return": None}
    app.command()(show)

    @app.command()
    def other() -> None:  # two commands, so ``show`` is named on the command line
        pass

    return app


def outcome(app: typer.Typer, value: str) -> tuple[int, str]:
    done = CliRunner().invoke(app, ["show", "--value", value])
    return done.exit_code, done.output


CASES: list[tuple[Any, dict[str, Any], list[str]]] = [
    (str, {}, ["x", "", " a b ", "-", "é"]),
    (int, {}, ["5", "-3", "05", "-0", " 5", "+5", "5_0", "5.0", "1e3", "x", "", "9" * 25]),
    (int, {"min": 1}, ["1", "0", "-1", "100"]),
    (int, {"min": 0, "max": 65535}, ["0", "65535", "65536", "-1"]),
    (float, {}, ["1", "1.5", "-0", ".5", "5.", "1e3", "inf", "nan", " 1", "x", "1_0"]),
    (float, {"min": 0.05}, ["0.05", "0.04", "1", "0"]),
    (bool, {}, []),
    (Color, {}, ["red", "blue", "RED", "green", ""]),
    (Color, {"case_sensitive": False}, ["RED", "Blue", "green"]),
    (Path, {}, ["a/b", ".", "", "~", "/"]),
    (Path, {"exists": True}, [".", "/no/such/path"]),
    (Path, {"dir_okay": False}, [".", "x"]),
]


@pytest.mark.parametrize(("annotation", "option", "values"), CASES, ids=lambda c: str(c))
def test_each_value_is_converted_as_typer_would(
    annotation: Any, option: dict[str, Any], values: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    quick = [outcome(command(annotation, **option), value) for value in values]
    monkeypatch.setattr(typer.core, "build_runtime_param", typer._coercion.build_runtime_param)
    typed = [outcome(command(annotation, **option), value) for value in values]
    assert quick == typed


def test_lists_and_defaults_are_converted_as_typer_would(monkeypatch: pytest.MonkeyPatch) -> None:
    app = typer.Typer()

    @app.command()
    def show(
        refs: Annotated[list[str], typer.Argument()],
        limit: Annotated[int, typer.Option(min=1)] = 100,
        timeout: Annotated[float, typer.Option(min=0)] = 300,
        tags: Annotated[list[int] | None, typer.Option("--tag")] = None,
        color: Annotated[Color, typer.Option()] = Color.RED,
    ) -> None:
        shown = [refs, limit, timeout, tags, color]
        typer.echo(" ".join(f"{type(v).__name__}:{v!r}" for v in shown))

    @app.command()
    def other() -> None:
        pass

    lines = [
        ["show", "a"],
        ["show", "a", "b", "--limit", "3", "--timeout", "2", "--tag", "1", "--tag", "2"],
        ["show", "a", "--tag", "x"],
        ["show", "a", "--limit", "0"],
        ["show", "a", "--color", "blue"],
    ]
    quick = [CliRunner().invoke(app, line).output for line in lines]
    monkeypatch.setattr(typer.core, "build_runtime_param", typer._coercion.build_runtime_param)
    assert quick == [CliRunner().invoke(app, line).output for line in lines]


def test_plain_values_build_no_pydantic_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[object] = []
    monkeypatch.setattr(typer._coercion, "build_runtime_param", lambda d: built.append(d))
    assert coercion.quick_conversion(int, typer.models.OptionInfo(min=1)) is not None
    done = outcome(command(int, min=1), "7")
    assert done == (0, "int 7\n")


def test_a_typer_without_the_hook_is_left_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """pyproject allows older typers (``typer>=0.12``): without ``build_runtime_param``
    (0.28 and before, which do not convert through pydantic) nothing is installed."""
    monkeypatch.delattr(typer.core, "build_runtime_param")
    coercion.install()
    assert not hasattr(typer.core, "build_runtime_param")
