"""Whether the service's database is open to its own jobs (issue 35).

A job runs as another uid than the server precisely so that it cannot touch the server's
state. A database that accepts a password-less connection from that uid undoes it: a
PostgreSQL with ``trust`` authentication on ``127.0.0.1`` (the tests' set-up, and many
laptops') lets any local process connect as its superuser and rewrite every job. The check
asks the question as a job would: a child process that has dropped to a job's uid tries to
open the database with no password (no ``PGPASSWORD``, no ``.pgpass``). It needs root (only
root starts jobs as other uids) and costs one connection attempt at start-up.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import make_url
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError

PROBE_SECONDS = 10.0
"""How long the probe may take: a firewalled database must not hold the start-up forever."""

OPEN, CLOSED, UNKNOWN = 0, 1, 2
"""The probe's exit codes."""


@dataclass(frozen=True)
class JobAccount:
    """The uid and gid a job of this server would run as."""

    uid: int
    gid: int


def job_account(run_as: str | None, uid_range: str | None) -> JobAccount | None:
    """The account a local job gets under these options (the first uid of ``uid_range``
    that has no account, as the pool hands out), or ``None`` when jobs run as this user."""
    from flotilla.backends.local.identity import _has_account, parse_uid_range

    if uid_range is not None:
        first, last = parse_uid_range(uid_range)
        for uid in range(first, last + 1):
            if uid != os.getuid() and not _has_account(uid):
                return JobAccount(uid, uid)
        return None
    if run_as is None:
        return None
    found = pwd.getpwuid(int(run_as)) if run_as.isdigit() else pwd.getpwnam(run_as)
    if found.pw_uid == os.getuid():
        return None
    return JobAccount(found.pw_uid, found.pw_gid)


def open_to(db: str, account: JobAccount) -> bool | None:
    """Whether a process running as ``account`` opens ``db`` without a password (``None``:
    the probe could not tell, e.g. it timed out)."""
    try:
        url = make_url(db)
    except ArgumentError:
        return None  # ``open_store`` names what is wrong with it
    attempt = _attempt(url)  # its driver imported here: the job's uid may not read it
    pid = os.fork()
    if pid == 0:  # the child: drop to the job's ids, try, report by exit code
        code = UNKNOWN
        try:
            os.setgroups([])
            os.setgid(account.gid)
            os.setuid(account.uid)
            opened = attempt()
            code = UNKNOWN if opened is None else OPEN if opened else CLOSED
        finally:
            os._exit(code)
    deadline = time.monotonic() + PROBE_SECONDS
    while time.monotonic() < deadline:
        ended, status = os.waitpid(pid, os.WNOHANG)
        if ended:
            code = os.waitstatus_to_exitcode(status)
            return {OPEN: True, CLOSED: False}.get(code)
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def _attempt(url: URL) -> Callable[[], bool | None]:
    """What the probe tries as the job: open the SQLite file, or connect to PostgreSQL with
    no password from anywhere (``None``: an error that says nothing about the database)."""
    if url.get_backend_name() == "sqlite":
        path = url.database

        def read_file() -> bool:
            if path in (None, "", ":memory:"):
                return False
            try:
                os.close(os.open(str(path), os.O_RDONLY))
            except OSError:
                return False
            return True

        return read_file
    from sqlalchemy import create_engine
    from sqlalchemy.exc import DBAPIError
    from sqlalchemy.pool import NullPool

    engine = create_engine(
        url.set(password=None), poolclass=NullPool, connect_args={"connect_timeout": 5}
    )

    def connect() -> bool | None:
        for name in ("PGPASSWORD", "PGSERVICEFILE"):
            os.environ.pop(name, None)
        os.environ["PGPASSFILE"] = "/nonexistent/flotilla-probe"  # none: libpq skips it
        try:
            with engine.connect():
                return True
        except DBAPIError:  # refused: no password given, no such role, no route
            return False
        except Exception:
            return None

    return connect
