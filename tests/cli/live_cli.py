"""The client commands as a user types them, against the test's ``LiveService`` (the
``live`` fixture of ``tests/cli/conftest.py`` points the CLI's client factory at its app)."""

from __future__ import annotations

from typer.testing import CliRunner, Result

from flotilla.cli.main import app


def run(*args: str) -> Result:
    """``flotilla ARGS…`` in this process, its output and exit code captured."""
    return CliRunner().invoke(app, list(args))
