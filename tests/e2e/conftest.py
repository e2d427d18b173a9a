"""Fixtures for the end-to-end tests: started servers are always stopped, runs always ended."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine

from tests.postgres_support import postgres_schema_url


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database of each kind: an SQLite file, or a new PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'flotilla.db'}"
    admin: tuple[Engine, str] = request.getfixturevalue("postgres_admin")
    return postgres_schema_url(admin)
