"""PostgreSQL for tests: where the server is, and a fresh schema per test.

The session database itself comes from the ``postgres_admin`` fixture in ``tests/conftest.py``
(one per test session and xdist worker, dropped afterwards).
"""

from __future__ import annotations

import os
import uuid

from sqlalchemy import Engine, make_url

POSTGRES_URL = os.environ.get(
    "FLOTILLA_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def postgres_schema_url(admin: tuple[Engine, str]) -> str:
    """A URL whose connections live in a brand-new schema of the session database."""
    engine, url = admin
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with engine.connect() as connection:
        connection.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    return (
        make_url(url)
        .set(query={"options": f"-csearch_path={schema}"})
        .render_as_string(hide_password=False)
    )
