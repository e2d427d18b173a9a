"""What ``--help`` promises is what the command does: ``logs`` said it took an array id."""

from __future__ import annotations

import pytest
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
