"""What ``--help`` promises is what the command does: ``logs`` said it took an array id."""

from __future__ import annotations

import collections
import re

import pytest
import typer.main
from typer.testing import CliRunner

from flotilla.cli.main import app


def help_of(command: str) -> str:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", ["logs", "why", "reprioritize"])
def test_commands_of_one_job_do_not_claim_to_take_an_array_id(command: str) -> None:
    assert "array" not in help_of(command)


@pytest.mark.parametrize("command", ["describe", "wait", "cancel"])
def test_commands_that_take_an_array_id_say_so(command: str) -> None:
    assert "array" in help_of(command)


def command_paths() -> list[list[str]]:
    """Every command and command group, as the words that name it (the root: none)."""
    found: list[list[str]] = []

    def walk(command: object, prefix: list[str]) -> None:
        found.append(prefix)
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            walk(sub, [*prefix, name])

    walk(typer.main.get_command(app), [])
    return found


def words(text: str) -> collections.Counter[str]:
    return collections.Counter(word for word in re.split(r"[\s│╭╮╰╯─]+", text) if word)


@pytest.mark.parametrize("path", command_paths(), ids=lambda path: " ".join(path) or "flotilla")
def test_help_is_whole_and_fits_80_columns(path: list[str]) -> None:
    """At 80 columns no line is longer and nothing is cut: the same words as on a wide
    terminal (rich's panels cut ``--algorithm-process`` to ``--algorithm-proc…``)."""
    narrow = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    wide = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "300"})
    assert narrow.exit_code == 0, narrow.output
    too_long = [line for line in narrow.output.splitlines() if len(line) > 80]
    assert too_long == []
    assert words(narrow.output) == words(wide.output)
