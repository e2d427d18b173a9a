"""Bulk row writes: one statement for a whole batch, whatever its size.

On PostgreSQL a batch is sent as one JSON document of rows that the server turns back into a
relation (``json_to_recordset``): ``INSERT … SELECT … FROM json_to_recordset(…)`` and ``UPDATE …
FROM json_to_recordset(…)`` are one statement, one plan and one round trip for a thousand rows.
An executemany sends a thousand statements, each bound, planned and executed on its own (and
one array per column, ``unnest``, costs the client more than the JSON: psycopg quotes each
element in Python). On SQLite, where a statement is an in-process call, rows go through
executemany.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, TypeVar, cast

from sqlalchemy import (
    JSON,
    ColumnElement,
    CursorResult,
    Table,
    Text,
    bindparam,
    func,
    insert,
    select,
    update,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.orm import Session

from flotilla.store.errors import ConflictError

CHUNK = 500
"""Rows per executemany statement on SQLite (one IN list, one VALUES list): well under its
bound-parameter limit."""

T = TypeVar("T")


def is_postgresql(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def batches(session: Session, values: Sequence[T]) -> Iterator[Sequence[T]]:
    """``values`` in as few lookups as the database allows: all at once on PostgreSQL (one
    array parameter, ``among``), ``CHUNK`` at a time on SQLite (one parameter each)."""
    size = max(1, len(values)) if is_postgresql(session) else CHUNK
    for start in range(0, len(values), size):
        yield values[start : start + size]


def among(
    session: Session, column: ColumnElement[Any], values: Sequence[Any]
) -> ColumnElement[bool]:
    """``column IN values``. On PostgreSQL the values travel as one JSON array parameter: the
    statement's text is the same for every batch (an IN list of a thousand parameters is a
    new statement for each length, which the driver parses again), and encoding it costs
    the client less than an array parameter (psycopg quotes each element in Python)."""
    if is_postgresql(session):
        document = bindparam(None, json.dumps(list(values)), type_=Text)
        return column.in_(select(func.json_array_elements_text(sql_cast(document, JSON))))
    return column.in_(values)


def _encode(value: object) -> object:
    """JSON for what ``json`` cannot encode itself: times (as ISO 8601, with their offset)."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use UTC-aware datetimes")
        return value.isoformat()
    raise TypeError(f"cannot store {type(value).__name__} in a bulk row")


def _recordset(
    session: Session, table: Table, rows: Sequence[dict[str, Any]], columns: Sequence[str]
) -> tuple[str, str]:
    """The rows as one JSON document, and the ``json_to_recordset`` that reads it back with
    each key typed as its column (``columns``: the column of each key, in the rows' order)."""
    dialect = session.get_bind().dialect
    keys = list(rows[0])
    types = ", ".join(
        f'"{key}" {table.c[column].type.compile(dialect=dialect)}'
        for key, column in zip(keys, columns, strict=True)
    )
    document = json.dumps(rows, default=_encode)
    relation = f"json_to_recordset(%(rows)s::json) AS v({types})"
    return document, relation


def insert_rows(session: Session, table: Table, rows: Sequence[dict[str, Any]]) -> None:
    """Insert ``rows`` (dicts with the same keys, column names)."""
    if not rows:
        return
    if not is_postgresql(session):
        for start in range(0, len(rows), CHUNK):
            session.execute(insert(table), [dict(row) for row in rows[start : start + CHUNK]])
        return
    names = list(rows[0])
    document, relation = _recordset(session, table, rows, names)
    columns = ", ".join(f'"{name}"' for name in names)
    session.connection().exec_driver_sql(
        f'INSERT INTO "{table.name}" ({columns}) SELECT {columns} FROM {relation}',
        {"rows": document},
    )


def update_rows(
    session: Session,
    table: Table,
    rows: Sequence[dict[str, Any]],
    *,
    key: str,
    expected: str | None = None,
) -> None:
    """Update rows by ``key``: every other key of a row is a column to set. With
    ``expected`` (a key that is no column, e.g. ``expected_state``), a row is only updated
    while ``state`` is that value, and a batch in which any row is not updated raises
    ``ConflictError`` (the caller's transaction then writes nothing)."""
    if not rows:
        return
    guard = "state" if expected is not None else None
    names = [name for name in rows[0] if name not in (key, expected)]
    if not is_postgresql(session):
        _update_many(session, table, rows, key, expected, guard, names)
        return
    columns = [guard if name == expected and guard else name for name in rows[0]]
    document, relation = _recordset(session, table, rows, columns)
    assignments = ", ".join(f'"{name}" = v."{name}"' for name in names)
    where = f'"{table.name}"."{key}" = v."{key}"'
    if expected is not None and guard is not None:
        where += f' AND "{table.name}"."{guard}" = v."{expected}"'
    result = session.connection().exec_driver_sql(
        f'UPDATE "{table.name}" SET {assignments} FROM {relation} WHERE {where}',
        {"rows": document},
    )
    if guard and result.rowcount != len(rows):
        raise ConflictError("a job changed under its row lock; nothing was written")


def _update_many(
    session: Session,
    table: Table,
    rows: Sequence[dict[str, Any]],
    key: str,
    expected: str | None,
    guard: str | None,
    names: Sequence[str],
) -> None:
    statement = update(table).where(table.c[key] == bindparam(f"b_{key}"))
    if expected is not None and guard is not None:
        statement = statement.where(table.c[guard] == bindparam(f"b_{expected}"))
    statement = statement.values({name: bindparam(f"b_{name}") for name in names})
    check = session.get_bind().dialect.supports_sane_multi_rowcount and expected is not None
    parameters = [{f"b_{name}": value for name, value in row.items()} for row in rows]
    for start in range(0, len(parameters), CHUNK):
        part = parameters[start : start + CHUNK]
        result = session.execute(statement, part)
        if check and cast(CursorResult[Any], result).rowcount != len(part):
            raise ConflictError("a job changed under its row lock; nothing was written")
