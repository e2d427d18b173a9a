"""The client commands as a user types them, against the test's ``LiveService`` (the
``live`` fixture of ``tests/cli/conftest.py`` points the CLI's client factory at its app)."""

from __future__ import annotations

from typer.testing import CliRunner, Result

from flotilla.cli.main import app
from tests.timing import limit


def run(*args: str) -> Result:
    """``flotilla ARGS…`` in this process, its output and exit code captured."""
    return CliRunner().invoke(app, list(args))


def patience(seconds: float = 60.0) -> str:
    """A ``--timeout`` for a command that waits on the service (``wait``): ``seconds`` on the
    reference machine, stretched on this one (``tests/timing.py``)."""
    return f"{limit(seconds):.0f}"
