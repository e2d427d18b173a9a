"""Issue 35: ``flotilla up`` does not start jobs as other uids that could open its database
without a password (a job could rewrite Flotilla's state), unless told to accept the risk.

As root (the deployment where jobs get uids of their own). The PostgreSQL of the tests
accepts password-less connections from 127.0.0.1 (trust authentication): exactly the set-up
the refusal is for.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, inspect
from typer.testing import CliRunner, Result

from flotilla.cli.main import app
from tests.postgres_support import postgres_schema_url

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="jobs run as other uids only as root")


def up(*args: str) -> Result:
    return CliRunner().invoke(app, ["up", "--port", "0", *args])


def test_a_trusting_postgresql_is_refused_before_it_is_touched(
    postgres_admin: tuple[Engine, str], tmp_path: Path, served: list[dict[str, Any]]
) -> None:
    url = postgres_schema_url(postgres_admin)
    result = up("--db", url, "--state-dir", str(tmp_path / "state"))
    assert result.exit_code == 2, result.output
    first, *advice = result.output.splitlines()
    assert first.startswith("error: --db postgresql+psycopg://postgres@127.0.0.1")
    assert "a job (uid 60000) can open this database without a password" in first
    assert any("--accept-open-database" in line for line in advice)
    assert any("--run-as 0" in line for line in advice)
    assert served == []
    schema = url.split("search_path%3D")[-1] if "%3D" in url else url.split("search_path=")[-1]
    assert inspect(postgres_admin[0]).get_table_names(schema=schema) == [], "it migrated"


def test_accepting_the_risk_starts_with_a_warning(
    postgres_admin: tuple[Engine, str], tmp_path: Path, served: list[dict[str, Any]]
) -> None:
    url = postgres_schema_url(postgres_admin)
    result = up("--db", url, "--state-dir", str(tmp_path / "state"), "--accept-open-database")
    assert result.exit_code == 0, result.output
    assert "warning: --db" in result.output
    assert "(accepted: --accept-open-database)" in result.output
    assert len(served) == 1


def test_jobs_as_the_servers_own_user_need_no_check(
    postgres_admin: tuple[Engine, str], tmp_path: Path, served: list[dict[str, Any]]
) -> None:
    url = postgres_schema_url(postgres_admin)
    result = up("--db", url, "--state-dir", str(tmp_path / "state"), "--run-as", "0")
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output


@pytest.fixture
def open_directory() -> Iterator[Path]:
    """A directory every user may enter (pytest's own temporary dirs are 0700)."""
    path = Path(tempfile.mkdtemp(prefix="flotilla-exposure-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_an_sqlite_file_a_job_can_read_is_refused(
    open_directory: Path, served: list[dict[str, Any]]
) -> None:
    shared = open_directory / "shared.db"
    shared.touch(mode=0o644)
    result = up("--db", f"sqlite:///{shared}", "--state-dir", str(open_directory / "state"))
    assert result.exit_code == 2, result.output
    assert "can open this database without a password" in result.output
    assert served == []


def test_the_default_private_sqlite_file_starts(
    open_directory: Path, served: list[dict[str, Any]]
) -> None:
    db = open_directory / "private" / "flotilla.db"
    result = up("--db", f"sqlite:///{db}", "--state-dir", str(open_directory / "state"))
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output
