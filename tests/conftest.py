"""Suite-wide fixtures: where the shared contract lives, and a PostgreSQL database.

PostgreSQL: one fresh database per test session (per xdist worker), dropped afterwards. When
the server is unreachable its tests are skipped with a reason, except under CI=true, where they
fail: CI never silently skips them.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, make_url
from sqlalchemy.exc import OperationalError

from tests.backends.engines.ray_head import RayHead, ray_executable
from tests.builders import SHARED_DIR
from tests.e2e.service import Services
from tests.postgres_support import POSTGRES_URL, postgres_schema_url
from tests.timing import limit


def _descendants(root: int) -> list[int]:
    """Every live process below ``root`` (by parent pid, from /proc), children first."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    pending = list(children.get(root, []))
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending += children.get(pid, [])
    return found


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Nothing a test started outlives the suite: a test that failed or hung before its own
    clean-up (a ``flotilla up``, a supervisor and its commands, a dispatcher) left processes
    behind (issue 41). Every fixture has been torn down by now, so what is left below this
    process is a leftover: SIGKILL, and say how many."""
    if getattr(session.config.option, "numprocesses", None) and not hasattr(
        session.config, "workerinput"
    ):
        return  # xdist's controller: its children are the workers, each doing this itself
    leftovers = _descendants(os.getpid())
    for pid in leftovers:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    if leftovers:
        print(f"\nkilled {len(leftovers)} process(es) tests left behind", file=sys.stderr)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: Any) -> Iterator[None]:
    """One closing line that tells "my machine is busy" from "main is broken": the failures
    of tests marked ``timing`` (their outcome depends on the machine's load: paced replays,
    a start racing a stop) apart from the others, and how to rerun the first alone."""
    yield  # after pytest's own summary (the short list of failures)
    failed = [
        *terminalreporter.stats.get("failed", []),
        *terminalreporter.stats.get("error", []),
    ]
    if not failed:
        return
    timing = [report for report in failed if "timing" in getattr(report, "keywords", {})]
    others = len(failed) - len(timing)
    terminalreporter.write_line(
        f"{len(failed)} failed: {others} not timing-sensitive"
        + (" (look at these first)" if others else "")
        + f", {len(timing)} timing-sensitive (marked `timing`: load on this machine can fail"
        " them; rerun alone on a quiet one: ./scripts/test -m timing)",
        bold=True,
    )


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Collect once, then freeze what is left, so pytest's own five collections at the end
    (it looks for exceptions raised in finalizers) walk nothing old. A worker's heap after
    hundreds of tests took those passes past five seconds on a loaded machine, and execnet
    sends a worker still busy five seconds after the run ended a SIGINT: the
    ``KeyboardInterrupt`` in Hypothesis's gc callback that ended some runs."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """``../shared`` beside the repository; required in CI, optional on a laptop."""
    scenarios = SHARED_DIR / "scenarios"
    if not scenarios.is_dir():
        message = (
            f"shared scenarios not found at {scenarios.resolve()}: clone the shared contract "
            "beside the repository (../shared)"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return SHARED_DIR


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    """Real ``flotilla up`` processes a test starts (``services.start``); all stopped after it."""
    started = Services(tmp_path)
    try:
        yield started
    finally:
        started.close()


@pytest.fixture(scope="session")
def postgres_admin() -> Iterator[tuple[Engine, str]]:
    """An autocommit engine on a database created for this session, and that database's URL."""
    server = create_engine(make_url(POSTGRES_URL), isolation_level="AUTOCOMMIT")
    try:
        connection = server.connect()
    except OperationalError as error:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL must be reachable in CI at {POSTGRES_URL}: {error}")
        pytest.skip(f"PostgreSQL unreachable at {POSTGRES_URL} (start it to run these)")
    name = f"flotilla_test_{uuid.uuid4().hex[:12]}"
    connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = make_url(POSTGRES_URL).set(database=name)
    database = create_engine(url, isolation_level="AUTOCOMMIT")
    yield database, url.render_as_string(hide_password=False)
    database.dispose()
    connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    connection.close()
    server.dispose()


@pytest.fixture(scope="session")
def ray_head() -> Iterator[RayHead]:
    """A real Ray head for the session (per xdist worker), stopped by PID at the end.

    ``RayHead.start`` tries ``ATTEMPTS`` times; when none starts, the failure (or, outside CI,
    the skip) gives each attempt's reason in Ray's words. Outside CI a machine where Ray is
    missing or cannot start skips the Ray tests; under ``CI=true`` that is a failure, never a
    skip."""
    in_ci = os.environ.get("CI") == "true"
    if ray_executable() is None:
        if in_ci:
            pytest.fail("Ray is not installed: uv sync --all-extras (CI must test it)")
        pytest.skip("Ray is not installed (uv sync --all-extras installs it)")
    head = RayHead(start_limit=limit(60))  # stretched on a busy machine (tests/timing.py)
    try:
        head.start()
    except RuntimeError as error:
        if in_ci:
            pytest.fail(f"the Ray head did not start: {error}")
        pytest.skip(f"the Ray head did not start: {error}")
    try:
        yield head
    finally:
        head.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database of each kind: an SQLite file, or a new PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'flotilla.db'}"
    admin: tuple[Engine, str] = request.getfixturevalue("postgres_admin")
    return postgres_schema_url(admin)
