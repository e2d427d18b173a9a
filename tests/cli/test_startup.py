"""``flotilla up``/``serve`` before they serve: a port in use, a database that cannot be opened,
a fresh database's ``default`` queue, the hint to reach the server, and what a stop says."""

from __future__ import annotations

import socket
import stat
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from typer.testing import CliRunner, Result

from flotilla.cli.draining import shut_down
from flotilla.cli.main import app
from flotilla.cli.startup import open_store_or_fail, submit_hint
from flotilla.model import JobSpec, QueueSpec
from flotilla.store import JobState, SqlStore
from tests.server.api_support import spec


def run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def taken_port() -> Iterator[int]:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    yield holder.getsockname()[1]
    holder.close()


@pytest.mark.parametrize("command", ["up", "serve"])
def test_a_port_in_use_is_one_line_before_anything_is_opened(
    command: str, taken_port: int, tmp_path: Path
) -> None:
    db = tmp_path / "db" / "flotilla.db"
    extra = ["--state-dir", str(tmp_path / "state")] if command == "up" else []
    result = run(command, "--port", str(taken_port), "--db", f"sqlite:///{db}", *extra)
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        f"error: port {taken_port} on 127.0.0.1 is in use (another flotilla up or serve?): "
        "stop it or choose another with --port"
    ]
    assert not db.parent.exists() and not (tmp_path / "state").exists()


def test_a_missing_postgresql_database_is_one_line_saying_how_to_create_it(
    postgres_admin: tuple[Engine, str],
) -> None:
    name = f"flotilla_absent_{uuid.uuid4().hex[:8]}"
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    result = run("serve", "--port", "0", "--db", url)
    assert result.exit_code == 2
    (line,) = result.output.splitlines()
    assert line.startswith(f"error: --db {url}: ")
    assert f'database "{name}" does not exist' in line
    assert line.endswith(f"create it with: createdb -h 127.0.0.1 -U postgres {name}")


def test_an_sqlite_path_that_cannot_be_a_database_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    under_a_file = f"sqlite:///{tmp_path}/a-file/db/flotilla.db"
    result = run("serve", "--port", "0", "--db", under_a_file)
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        f"error: --db {under_a_file}: cannot create {tmp_path}/a-file/db: Not a directory"
    ]
    a_directory = f"sqlite:///{tmp_path}"
    result = run("serve", "--port", "0", "--db", a_directory)
    assert result.exit_code == 2
    (line,) = result.output.splitlines()
    assert line.startswith(f"error: --db {a_directory}: cannot open the SQLite file {tmp_path}")
    assert line.endswith("(is its directory writable?)")


def test_a_new_sqlite_database_is_readable_by_the_servers_user_alone(tmp_path: Path) -> None:
    """Issue 23: ``--db`` made a world-readable file (and so its ``-wal``)."""
    path = tmp_path / "new" / "flotilla.db"
    store = open_store_or_fail(f"sqlite:///{path}")
    try:
        store.put_queue(QueueSpec(name="q"))
        files = [path, *path.parent.glob("flotilla.db-*")]
        assert {file.name: stat.S_IMODE(file.stat().st_mode) for file in files} == {
            file.name: 0o600 for file in files
        }
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    finally:
        store.close()


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (["--uid-range", "9-3"], "--uid-range: '9-3' must satisfy 1 <= FIRST <= LAST"),
        (["--uid-range", "lots"], "--uid-range: 'lots' must be FIRST-LAST"),
        (["--uid-range", "60000-60009", "--run-as", "nobody"], "--uid-range: give either"),
        (["--run-as", "no-such-user-x"], "--run-as: no such user 'no-such-user-x'"),
    ],
)
def test_up_refuses_who_jobs_cannot_run_as_in_one_line_naming_the_option(
    tmp_path: Path, options: list[str], problem: str
) -> None:
    db = f"sqlite:///{tmp_path}/flotilla.db"
    result = run("up", "--port", "0", "--db", db, *options)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: {problem}")
    assert not (tmp_path / "flotilla.db").exists(), "a refused start touched the database"


def test_serve_on_a_fresh_database_makes_a_default_queue_once(
    served: list[dict[str, Any]], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path}/flotilla.db"
    first = run("serve", "--port", "0", "--db", db)
    assert first.exit_code == 0, first.output
    assert "queue 'default' created" in first.output
    again = run("serve", "--port", "0", "--db", db)
    assert again.exit_code == 0 and "created" not in again.output
    store = SqlStore.open(db)
    assert [queue.name for queue in store.list_queues()] == ["default"]
    store.close()


def test_up_hints_the_server_option_when_the_cli_would_not_find_it(
    served: list[dict[str, Any]], tmp_path: Path
) -> None:
    result = run(
        "up",
        "--port",
        "0",
        "--db",
        f"sqlite:///{tmp_path}/flotilla.db",
        "--state-dir",
        str(tmp_path / "state"),
    )
    assert result.exit_code == 0, result.output
    port = served[0]["port"]
    assert f"try: flotilla submit --server http://127.0.0.1:{port} examples/jobs/hello.yaml" in (
        result.output
    )
    assert "http://127.0.0.1:0" not in result.output


def test_the_hint_for_the_default_address_needs_no_option() -> None:
    assert submit_hint("127.0.0.1", 8467) == "try: flotilla submit examples/jobs/hello.yaml"
    assert "--server http://127.0.0.1:9000 " in submit_hint("0.0.0.0", 9000)
    assert "--server http://[::1]:8467 " in submit_hint("::1", 8467)


def test_up_help_names_the_local_gpus_variable() -> None:
    assert "FLOTILLA_LOCAL_GPUS" in run("up", "--help").output


class FakeLoop:
    def __init__(self) -> None:
        self.draining = False

    def drain(self) -> None:
        self.draining = True


def running_store(tmp_path: Path) -> tuple[SqlStore, str]:
    store = SqlStore.open(f"sqlite:///{tmp_path}/flotilla.db")
    store.put_queue(QueueSpec(name="team-a"))
    (job_id,) = store.submit_jobs([JobSpec.model_validate(spec("train"))])
    store.record_run(job_id, "local", {})
    store.transition(job_id, JobState.RUNNING, "started")
    return store, job_id


def test_stopping_says_that_running_jobs_keep_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, _job = running_store(tmp_path)
    loop = FakeLoop()
    shut_down(store, loop, drain=False)
    assert not loop.draining
    assert "1 running job(s) keep running and the next `flotilla up`" in capsys.readouterr().out
    store.close()


def test_draining_stops_scheduling_and_waits_for_the_running_jobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, job_id = running_store(tmp_path)
    loop = FakeLoop()

    def finish_later() -> None:
        time.sleep(1.0)
        store.transition(job_id, JobState.SUCCEEDED, "done")

    finisher = threading.Thread(target=finish_later)
    finisher.start()
    shut_down(store, loop, drain=True)
    finisher.join()
    out = capsys.readouterr().out
    assert loop.draining
    assert "waiting for 1 running job(s) to end" in out
    assert out.rstrip().endswith("drained: every job has ended; stopping")
    assert store.get_job(job_id).state is JobState.SUCCEEDED
    store.close()
