"""Fixtures for the end-to-end tests: started servers are always stopped, runs always ended."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from tests.e2e.service import Services
from tests.postgres_support import postgres_schema_url


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    started = Services(tmp_path)
    try:
        yield started
    finally:
        started.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database of each kind: an SQLite file, or a new PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'flotilla.db'}"
    admin: tuple[Engine, str] = request.getfixturevalue("postgres_admin")
    return postgres_schema_url(admin)
