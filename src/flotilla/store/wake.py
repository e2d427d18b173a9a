"""Waking a scheduler in another process when jobs are submitted or cancelled.

In one process the API wakes the loop directly (``SchedulingLoop.wake``). With the API in
``flotilla serve`` and the scheduler in ``flotilla up --no-api`` (or several replicas), the
process that commits a submission is not the one that schedules it: without a signal the
scheduler finds new jobs and cancel requests only at its next cycle. On PostgreSQL a write
that should wake a scheduler sends ``NOTIFY`` on ``CHANNEL`` inside its transaction (the
server delivers it only if, and when, the transaction commits); each scheduler process
``LISTEN``s on a connection of its own and wakes its loop. On SQLite (a database file that
several processes of one machine share) each listening scheduler binds a Unix datagram socket
and registers it in a directory beside the file (``flotilla.db.wakes/``), and a store sends
one byte to every registered socket once such a write has committed (``SocketWakes``,
``SocketWakeSender``); on Linux the sockets are in the abstract namespace, so processes in
different network namespaces (containers sharing only the file) do not reach each other and
find work at their next cycle. An in-memory database listens to nothing (``NoWakes``).

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

import hashlib
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
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
    """Nothing to listen to: an in-memory SQLite database (no other process shares it), or
    a database file whose socket path would be too long."""

    def close(self) -> None:
        pass


def announce(session: Session, origin: str) -> None:
    """Ask every listening scheduler to wake once ``session`` commits (PostgreSQL only;
    ``origin`` lets the sending process's own listener skip it)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            text("SELECT pg_notify(:channel, :origin)"), {"channel": CHANNEL, "origin": origin}
        )


class _Listener:
    """A daemon thread that listens on a channel of its own and calls ``wake`` for what it
    hears; after an error it logs, waits ``retry_seconds`` and listens again (the contract
    above). Subclasses open the channel and say what one wait of ``poll_seconds`` heard."""

    def __init__(
        self, wake: Callable[[], None], *, retry_seconds: float, poll_seconds: float
    ) -> None:
        self._wake = wake
        self._retry_seconds = retry_seconds
        self._poll_seconds = poll_seconds
        self._closed = threading.Event()
        self.listening = threading.Event()
        """Set while listening (tests wait for it)."""
        self._thread = threading.Thread(target=self._run, name="flotilla-wakes", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=self._poll_seconds * 4)

    def _open(self) -> AbstractContextManager[Any]:
        """The channel, connected and listening."""
        raise NotImplementedError

    def _heard(self, channel: Any) -> bool:
        """Wait up to ``poll_seconds``: whether another process's write was heard."""
        raise NotImplementedError

    def _stopped_listening(self) -> None:
        """After the channel is closed (an error, or ``close``)."""

    def _run(self) -> None:
        while not self._closed.is_set():
            try:
                with self._open() as channel:
                    self.listening.set()
                    self._wake()  # anything committed while nobody listened
                    while not self._closed.is_set():
                        if self._heard(channel):
                            self._wake()
            except Exception:  # the loop still cycles: a lost wake costs one interval
                log.warning(
                    "%s failed; listening again in %gs", self, self._retry_seconds, exc_info=True
                )
            finally:
                self.listening.clear()
                self._stopped_listening()
            self._closed.wait(self._retry_seconds)


class PostgresWakes(_Listener):
    """``LISTEN`` on a connection of its own (not the pool's: it is held for the process's
    life)."""

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
        super().__init__(wake, retry_seconds=retry_seconds, poll_seconds=poll_seconds)

    def __str__(self) -> str:
        return "the PostgreSQL wake listener"

    def _open(self) -> Any:
        dialect = self._engine.dialect
        args, params = dialect.create_connect_args(self._engine.url)
        connection = dialect.loaded_dbapi.connect(*args, **params, autocommit=True)
        connection.execute(f"LISTEN {CHANNEL}")
        return connection

    def _heard(self, channel: Any) -> bool:
        notes = channel.notifies(timeout=self._poll_seconds)
        return any(note.payload != self._origin for note in notes)


LISTENER_SUFFIX = ".wake"

MAX_SOCKET_PATH = 107
"""Bytes a Unix socket's path may have (``sun_path`` is 108 with its terminating zero)."""


def socket_directory(database: str | None) -> Path | None:
    """Where the listeners of SQLite database file ``database`` register; ``None`` for an
    in-memory database (no other process can share it)."""
    if not database or database == ":memory:" or database.startswith("file::memory:"):
        return None
    path = Path(database).absolute()
    return path.with_name(path.name + ".wakes")


def _listener_file(directory: Path, origin: str) -> Path:
    return directory / f"{origin}{LISTENER_SUFFIX}"


def _address(listener_file: Path) -> str:
    """The socket address of the listener registered as ``listener_file``. On Linux a name
    in the abstract namespace (no length limit from the directory's path, nothing left on
    disk but the registration); elsewhere the file is the socket itself."""
    if sys.platform == "linux":
        digest = hashlib.sha256(os.fsencode(listener_file)).hexdigest()[:32]
        return f"\0flotilla-wake-{digest}"
    return str(listener_file)


def can_listen(directory: Path, origin: str) -> bool:
    """Whether a listener for ``directory`` has an address it can bind."""
    listener_file = _listener_file(directory, origin)
    return sys.platform == "linux" or len(os.fsencode(listener_file)) <= MAX_SOCKET_PATH


class SocketWakeSender:
    """Sends a committed submission's or cancel's wake to every scheduler registered for the
    same SQLite file, except this store's own (``origin``). Never raises: a wake is a hint.
    A registration whose socket nobody is bound to (its process died) is removed; a listener
    whose queue is full already has wakes to read."""

    def __init__(self, directory: Path, origin: str) -> None:
        self._directory = directory
        self._own = _listener_file(directory, origin).name

    def send(self) -> None:
        try:
            listeners = [
                Path(entry.path)
                for entry in os.scandir(self._directory)
                if entry.name.endswith(LISTENER_SUFFIX) and entry.name != self._own
            ]
        except OSError:
            return  # no listener ever registered
        if not listeners:
            return
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            sender.setblocking(False)
            for listener_file in listeners:
                try:
                    sender.sendto(b"w", _address(listener_file))
                except ConnectionRefusedError:
                    listener_file.unlink(missing_ok=True)  # its listener died
                except OSError:
                    pass  # gone meanwhile, or its queue is full: it has wakes to read


class SocketWakes(_Listener):
    """Registers ``<directory>/<origin>.wake`` and binds its socket; datagrams queued together
    make one wake. The registration is removed when it stops listening; one left behind by a
    process that died is removed by the next sender."""

    def __init__(
        self,
        directory: Path,
        origin: str,
        wake: Callable[[], None],
        *,
        retry_seconds: float = 1.0,
        poll_seconds: float = 0.5,
    ) -> None:
        self._file = _listener_file(directory, origin)
        super().__init__(wake, retry_seconds=retry_seconds, poll_seconds=poll_seconds)

    def __str__(self) -> str:
        return f"the wake listener {self._file}"

    def _open(self) -> socket.socket:
        self._file.parent.mkdir(parents=True, exist_ok=True)
        self._file.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            listener.bind(_address(self._file))
            if sys.platform == "linux":
                self._file.touch()  # registered once bound: a sender never finds it unbound
        except OSError:
            listener.close()
            raise
        listener.settimeout(self._poll_seconds)
        return listener

    def _heard(self, channel: socket.socket) -> bool:
        try:
            channel.recv(64)
        except TimeoutError:
            return False
        channel.setblocking(False)
        _drain(channel)
        channel.settimeout(self._poll_seconds)
        return True

    def _stopped_listening(self) -> None:
        self._file.unlink(missing_ok=True)


def _drain(listener: socket.socket) -> None:
    """Read what else is queued (non-blocking): a burst of submissions makes one wake."""
    try:
        while True:
            listener.recv(64)
    except BlockingIOError:
        pass
