"""A client command imports what it runs and nothing more (docs/performance.md, CLI
start-up): parsing a command line and printing help need neither the HTTP client nor rich
nor the specs' models, and no client command loads the server side (store, engine, API
server, backends, simulator). Checked in a fresh interpreter, by the modules it loaded, not
by how long it took."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from flotilla.cli.commands import COMMANDS

UNREACHABLE = "http://127.0.0.1:9"

SERVER_SIDE = (
    "sqlalchemy",
    "alembic",
    "fastapi",
    "starlette",
    "uvicorn",
    "numpy",
    "cryptography",  # the secret box: the server seals and the scheduler opens
    "flotilla.app",
    "flotilla.store",
    "flotilla.server",
    "flotilla.service",
    "flotilla.scheduler",
    "flotilla.framework.node_table",
    "flotilla.jobdb",
    "flotilla.backends",
    "flotilla.plugins",
    "flotilla.strategies",
    "flotilla.sim",
    "flotilla.web",
    "flotilla.whatif",
)
"""What ``flotilla up`` and ``serve`` run, and no client command needs."""

PARSING_ONLY = (
    "httpx",
    "rich",
    "yaml",
    "flotilla.sdk.client",
    "flotilla.api",
    "flotilla.model.job",
    "flotilla.model.scenario",
)
"""What a command line that only asks for help has no use for."""

RUN = """
import json, sys
from flotilla.cli.main import app
try:
    app(sys.argv[2:], prog_name="flotilla")
except SystemExit as exit:
    code = exit.code
with open(sys.argv[1], "w") as out:
    loaded = [name for name, module in sys.modules.items() if module is not None]
    json.dump({"code": code, "modules": sorted(loaded)}, out)
"""


def loaded(tmp_path: Path, *words: str) -> tuple[int, list[str]]:
    """Run ``flotilla WORDS`` in a fresh interpreter: its exit code and the modules loaded."""
    report = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(report), *words],
        capture_output=True,
        text=True,
        check=False,
    )
    assert report.exists(), done.stderr
    found = json.loads(report.read_text())
    return found["code"], found["modules"]


def among(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == n or m.startswith(f"{n}.") for n in names)]


@pytest.mark.parametrize(
    "words",
    [["--help"], ["jobs", "--help"], ["submit", "--help"], ["describe", "--help"]],
    ids=" ".join,
)
def test_help_loads_neither_the_client_nor_rich_nor_the_specs(
    tmp_path: Path, words: list[str]
) -> None:
    code, modules = loaded(tmp_path, *words)
    assert code == 0
    assert among(modules, SERVER_SIDE + PARSING_ONLY) == []


def test_a_command_against_no_server_loads_the_client_and_no_server_side(tmp_path: Path) -> None:
    code, modules = loaded(tmp_path, "jobs", "--server", UNREACHABLE)
    assert code == 1  # cannot reach the server, said on one line
    assert "flotilla.sdk.client" in modules
    assert among(modules, (*SERVER_SIDE, "rich", "flotilla.model.job")) == []
    # httpx's own command line (click, rich, pygments), which the CLI never runs
    assert among(modules, ("httpx._main", "click", "pygments")) == []
    # and of the commands' modules, only the one that holds ``jobs``
    others = {f"flotilla.cli.{module}" for module in COMMANDS.values()} - {"flotilla.cli.jobs"}
    assert among(modules, tuple(sorted(others))) == []


def test_submit_dry_run_checks_the_file_without_the_http_client_or_the_server(
    tmp_path: Path,
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: a\nqueue: default\ntasks: [{name: main, resources: {cpu: 1}}]\n")
    code, modules = loaded(tmp_path, "submit", "--dry-run", str(job))
    assert code in (0, None)
    assert "flotilla.api.submission" in modules  # the server's own rules, client-side
    assert among(modules, (*SERVER_SIDE, "httpx", "flotilla.sdk.client")) == []


@pytest.mark.parametrize(
    "words",
    [
        ["jobs", "--limit", "5", "--server", UNREACHABLE],  # int with a minimum, str
        ["wait", "a", "b", "--timeout", "0", "--server", UNREACHABLE],  # list, float
        ["queues", "--format", "json", "--server", UNREACHABLE],  # a choice
        ["logs", "a", "--replica", "0", "--server", UNREACHABLE],
    ],
    ids=" ".join,
)
def test_option_values_are_converted_without_pydantic_adapters(
    tmp_path: Path, words: list[str]
) -> None:
    """typer's conversion through pydantic (``typer._adapters``, a ``TypeAdapter`` per
    parameter) is for values the quick conversion leaves to it (``cli/coercion.py``)."""
    code, modules = loaded(tmp_path, *words)
    assert code == 1  # they reached the request: cannot reach the server
    assert among(modules, ("typer._adapters",)) == []


def test_a_file_argument_is_converted_without_pydantic_adapters(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: a\nqueue: default\ntasks: [{name: main, resources: {cpu: 1}}]\n")
    code, modules = loaded(tmp_path, "submit", "--dry-run", str(job))
    assert code in (0, None)
    assert among(modules, ("typer._adapters",)) == []


def test_a_refused_value_is_still_said_in_typers_words(tmp_path: Path) -> None:
    code, modules = loaded(tmp_path, "jobs", "--limit", "0", "--server", UNREACHABLE)
    assert code == 2
    assert "typer._adapters" in modules  # the message is typer's adapter's


def test_a_job_file_with_a_secret_is_checked_without_the_secret_box(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: a\nqueue: default\ntasks: [{name: main, resources: {cpu: 1}}]\n"
        "payload: {command: [env], env: {TOKEN: {secret: hunter22}}}\n"
    )
    code, modules = loaded(tmp_path, "submit", "--dry-run", str(job))
    assert code in (0, None)
    assert among(modules, ("cryptography",)) == []
