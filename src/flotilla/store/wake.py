"""Waking a scheduler in another process when jobs are submitted or cancelled.

In one process the API wakes the loop directly (``SchedulingLoop.wake``). With the API in
``flotilla serve`` and the scheduler in ``flotilla up --no-api`` (or several replicas), the
process that commits a submission is not the one that schedules it: without a signal the
scheduler finds new jobs and cancel requests only at its next cycle. On PostgreSQL a write
that should wake a scheduler sends ``NOTIFY`` on ``CHANNEL`` inside its transaction (the
server delivers it only if, and when, the transaction commits); each scheduler process
``LISTEN``s on a connection of its own and wakes its loop. SQLite has one writer process, so
nothing is sent and ``NoWakes`` listens to nothing.

Contract (``WakeListener``): after ``listen_for_wakes(wake)`` returns, ``wake`` is called on
the listener's thread, soon after any other process's store commits a submission or a
cancel. It is a hint, never the only way work is found: the loop still cycles every
``cycle_interval`` and reads the change feed, so a lost notification (the connection broke,
the server restarted, the listener was still connecting) costs at most one cycle interval.
On an error the listener logs it, waits ``retry_seconds`` and connects again, and calls
``wake`` once connected (something may have been committed while it was not listening).
Notifications sent by the listening store itself are skipped: its process woke the loop in
process already, and a second wake would run an extra cycle. The server keeps notifications
until every listener has read them: a listening process that is stopped (SIGSTOP) rather than
dead holds them in the server's queue (8 GB by default, tens of bytes each) until it runs
again or its connection is closed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

CHANNEL = "flotilla_wake"
"""One channel per database (schemas share it: a wake meant for another schema costs one
empty cycle, nothing else)."""


class WakeListener(Protocol):
    """Calls its ``wake`` when another process committed work for the scheduler."""

    def close(self) -> None:
        """Stop listening (joins the listener's thread)."""


class NoWakes:
    """SQLite, or no other writer process: nothing to listen to."""

    def close(self) -> None:
        pass


def announce(session: Session, origin: str) -> None:
    """Ask every listening scheduler to wake once ``session`` commits (PostgreSQL only;
    ``origin`` lets the sending process's own listener skip it)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            text("SELECT pg_notify(:channel, :origin)"), {"channel": CHANNEL, "origin": origin}
        )


class PostgresWakes:
    """``LISTEN`` on a connection of its own (not the pool's: it is held for the process's
    life), on a daemon thread."""

    def __init__(
        self,
        engine: Engine,
        origin: str,
        wake: Callable[[], None],
        *,
        retry_seconds: float = 1.0,
        poll_seconds: float = 0.5,
    ) -> None:
        self._engine = engine
        self._origin = origin
        self._wake = wake
        self._retry_seconds = retry_seconds
        self._poll_seconds = poll_seconds
        self._closed = threading.Event()
        self.listening = threading.Event()
        """Set while connected and listening (tests wait for it)."""
        self._thread = threading.Thread(target=self._run, name="flotilla-wakes", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=self._poll_seconds * 4)

    def _connect(self) -> Any:
        dialect = self._engine.dialect
        args, params = dialect.create_connect_args(self._engine.url)
        connection = dialect.loaded_dbapi.connect(*args, **params, autocommit=True)
        connection.execute(f"LISTEN {CHANNEL}")
        return connection

    def _run(self) -> None:
        while not self._closed.is_set():
            try:
                with self._connect() as connection:
                    self.listening.set()
                    self._wake()  # anything committed while nobody listened
                    while not self._closed.is_set():
                        for note in connection.notifies(timeout=self._poll_seconds):
                            if note.payload != self._origin:
                                self._wake()
            except Exception:  # the loop still cycles: a lost wake costs one interval
                log.warning(
                    "wake listener lost its PostgreSQL connection; reconnecting in %gs",
                    self._retry_seconds,
                    exc_info=True,
                )
            finally:
                self.listening.clear()
            self._closed.wait(self._retry_seconds)
