"""Real ``flotilla up`` processes for end-to-end tests, and an HTTP client to drive them.

Each server binds 127.0.0.1 on a free port, runs in its own working directory (its
``.flotilla/``), logs to a file there, and is stopped by the ``services`` fixture: SIGTERM,
then SIGKILL. The local backend's jobs run under supervisors in their own process groups,
which outlive a ``kill -9`` of the server on purpose; ``kill_leftover_runs`` ends them through
the run records in the state dir.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from flotilla.backends.local.processes import start_ticks
from flotilla.runtime import token_for
from tests.timing import deadline, limit, wait_until

FLOTILLA = Path(sys.executable).with_name("flotilla")


def flotilla_for_others() -> list[str]:
    """``flotilla`` as a user other than root can start it: this venv's, unless its Python
    lies where others cannot reach (pyenv's under a 0700 ``/root``); then the system's
    ``python3`` over this venv's packages (the same version: its supervisors start by it)."""
    real = Path(os.path.realpath(sys.executable))
    if all(os.stat(parent).st_mode & 0o001 for parent in real.parents):
        return [str(FLOTILLA)]
    import site

    import flotilla

    path = [str(Path(flotilla.__file__).parents[1]), *site.getsitepackages()]
    main = "from flotilla.cli.main import app; app()"
    return ["env", f"PYTHONPATH={os.pathsep.join(path)}", "/usr/bin/python3", "-c", main]


TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
START_LIMIT = 60.0
"""Seconds a server may take to answer /readyz on the reference machine (about 3 s there when
idle); ``tests/timing.py`` stretches it on a loaded or slower one (at a load average of 26 a
fixed 60 s was not enough)."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_for(
    predicate: Callable[[], bool],
    limit: float,
    what: str | Callable[[], str],
    interval: float = 0.05,
) -> None:
    """Poll ``predicate`` until it holds; fail naming ``what`` after ``limit`` seconds on the
    reference machine, stretched on this one (``tests/timing.py``)."""
    wait_until(predicate, what, limit, interval=interval)


def job_spec(
    name: str,
    command: str | Sequence[str],
    *,
    cpu: float = 0.1,
    queue: str = "default",
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "name": name,
        "queue": queue,
        "tasks": [{"name": "main", "resources": {"cpu": cpu, "memory": "16Mi"}}],
        "payload": {"command": command if isinstance(command, str) else list(command)},
        "labels": dict(labels or {}),
    }


@dataclass
class Server:
    """One ``flotilla up`` process."""

    workdir: Path
    port: int
    args: list[str]
    log: Path
    process: subprocess.Popen[bytes]
    token: str | None = None
    http: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=30.0)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_ready(self, limit: float = START_LIMIT) -> None:
        due = deadline(limit)
        while True:
            if not self.alive():
                raise AssertionError(
                    f"flotilla up exited with {self.process.returncode}:\n{self.output()}"
                )
            try:
                # Ready, and ours: a port another test's server took first answers /readyz
                # too, while this one is still failing to bind it (free_port is a race).
                if (
                    httpx.get(f"{self.url}/readyz", timeout=2.0).status_code == 200
                    and "Flotilla is up" in self.output()
                ):
                    self._use_local_token()
                    return
            except httpx.TransportError:
                pass
            if due.expired():
                waited = f"{due.allowed:.0f}s"
                raise AssertionError(f"flotilla up not ready after {waited}:\n{self.output()}")
            time.sleep(0.1)

    def _use_local_token(self) -> None:
        """Without a token config the server wrote a token for this user (as ``flotilla``
        CLI commands read it); use it unless the test gave a token."""
        if self.token is None and "--auth" not in self.args:
            wait_for(lambda: token_for(self.url) is not None, 10, "the server's token file")
            self.token = token_for(self.url)
            self.http.headers["Authorization"] = f"Bearer {self.token}"

    def kill9(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within 15 s."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=limit(15))
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.http.close()

    # --- the API --------------------------------------------------------------------------

    def submit(self, *specs: dict[str, Any]) -> list[str]:
        body = specs[0] if len(specs) == 1 else {"jobs": list(specs)}
        response = self.http.post("/v1/jobs", json=body)
        assert response.status_code == 201, response.text
        ids: list[str] = response.json()["ids"]
        return ids

    def job(self, job_id: str) -> dict[str, Any]:
        response = self.http.get(f"/v1/jobs/{job_id}")
        assert response.status_code == 200, response.text
        found: dict[str, Any] = response.json()
        return found

    def state(self, job_id: str) -> str:
        return str(self.job(job_id)["state"])

    def events(self, job_id: str) -> list[dict[str, Any]]:
        response = self.http.get(f"/v1/jobs/{job_id}/events")
        assert response.status_code == 200, response.text
        found: list[dict[str, Any]] = response.json()
        return found

    def cancel(self, job_id: str) -> dict[str, Any]:
        response = self.http.post(f"/v1/jobs/{job_id}/cancel", json={})
        assert response.status_code == 200, response.text
        found: dict[str, Any] = response.json()
        return found

    def report(self) -> dict[str, Any]:
        response = self.http.get("/v1/scheduling/report")
        assert response.status_code == 200, response.text
        found: dict[str, Any] = response.json()
        return found

    def logs(self, job_id: str, stream: str = "stdout") -> str:
        """The whole stream of a finished job, following ``next_offset`` until complete."""
        data, offset = [], 0
        for _ in range(100):
            response = self.http.get(
                f"/v1/jobs/{job_id}/logs", params={"stream": stream, "offset": offset}
            )
            assert response.status_code == 200, response.text
            chunk = response.json()
            data.append(chunk["data"])
            offset = chunk["next_offset"]
            if chunk["complete"]:
                return "".join(data)
        raise AssertionError(f"logs of {job_id} never complete")

    def wait_states(
        self,
        ids: Iterable[str],
        states: frozenset[str] = TERMINAL,
        limit: float = 60.0,
        context: Callable[[], str] | None = None,
    ) -> dict[str, str]:
        """Poll until every job is in one of ``states``; return each job's state. A wait that
        times out says where each job stood, the end of the server's log, and ``context``
        (what the engine under it shows), so that a failure on a loaded machine can be read
        from its report alone."""
        pending = list(ids)
        seen: dict[str, str] = {}

        def done() -> bool:
            for job_id in list(pending):
                seen[job_id] = self.state(job_id)
                if seen[job_id] in states:
                    pending.remove(job_id)
            return not pending

        def what() -> str:
            said = f"jobs to reach {sorted(states)}: {seen}"
            tail = "\n".join(self.output().splitlines()[-40:])
            extra = f"\n{context()}" if context is not None else ""
            return f"{said}{extra}\nthe server's log ends:\n{tail}"

        wait_for(done, limit, what, interval=0.1)
        return seen


class Services:
    """Starts servers for one test and stops every one of them, and their runs, at the end."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.servers: list[Server] = []
        self.state_dirs: set[Path] = set()

    def start(
        self,
        *,
        db: str,
        state_dir: Path,
        workdir: Path | None = None,
        extra: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        token: str | None = None,
        ready: bool = True,
        port: int | None = None,
        projection: bool = False,
        default_identity: bool = False,
        as_user: int | None = None,
    ) -> Server:
        """``flotilla up`` with ``extra`` flags. Without ``projection`` (or its own
        ``--projection-interval``) it runs no projection worker: a second Python process,
        niced, that imports the engine, which nothing but the projection's tests reads.
        ``default_identity``: jobs run as ``flotilla up`` runs them by default (as root: a uid
        of their own per owner), not as this user. ``as_user``: ``flotilla up`` runs as this
        uid (and gid), not root (``setpriv``), as a person on their own machine starts it."""
        workdir = workdir or self.root
        if not projection and "--projection-interval" not in extra:
            extra = [*extra, "--projection-interval", "0"]
        workdir.mkdir(parents=True, exist_ok=True)
        port = port or free_port()
        started_as = (
            []
            if as_user is None
            else ["setpriv", f"--reuid={as_user}", f"--regid={as_user}", "--clear-groups", "--"]
        )
        args = [
            *started_as,
            *([str(FLOTILLA)] if as_user is None else flotilla_for_others()),
            "up",
            "--db",
            db,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--state-dir",
            str(state_dir),
            # Jobs here write to the test's own (private) temporary dir: run them as this
            # user unless the test is about who they run as.
            *(
                []
                if default_identity
                or as_user is not None
                or {"--run-as", "--uid-range"} & set(extra)
                else ["--run-as", str(os.getuid())]
            ),
            *extra,
        ]
        self.state_dirs.add(state_dir)
        log = workdir / f"up-{port}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                args,
                cwd=workdir,
                stdout=out,
                stderr=subprocess.STDOUT,
                # The tests' PostgreSQL trusts 127.0.0.1: accepted for servers whose jobs run
                # as uids of their own (tests/cli/test_up_database_exposure.py tests the refusal).
                env={**os.environ, "FLOTILLA_ACCEPT_OPEN_DATABASE": "1", **(env or {})},
            )
        server = Server(workdir, port, args, log, process, token)
        self.servers.append(server)
        if ready:
            server.wait_ready()
        return server

    def close(self) -> None:
        for server in self.servers:
            server.stop()
        for state_dir in self.state_dirs:
            kill_leftover_runs(state_dir)


def run_records(state_dir: Path) -> list[dict[str, Any]]:
    """The local backend's ``run.json`` of every run under ``state_dir``."""
    records = []
    for path in sorted((state_dir / "runs").glob("*/run.json")):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return records


def kill_leftover_runs(state_dir: Path) -> None:
    """SIGKILL the process group of every replica a run record names, if it is still the
    same process (start time checked, so a reused pid is left alone)."""
    for record in run_records(state_dir):
        for replica in record.get("replicas", []):
            pid, ticks = replica.get("pid"), replica.get("start_ticks")
            if not pid or replica.get("finished"):
                continue
            if ticks is not None and start_ticks(pid) != ticks:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


def assert_started_once(server: Server, job_id: str) -> None:
    """Exactly one of the job's runs started, and it succeeded. A kill -9 that lands inside a
    dispatch leaves a run whose process never got the go-ahead: the next leader finds it
    lost and re-queues the job; that run must never have started."""
    runs = server.job(job_id)["runs"]
    started = [run for run in runs if run["started_at"] is not None]
    assert [run["state"] for run in started] == ["succeeded"], runs
    for run in runs:
        if run["started_at"] is None:
            assert run["state"] == "returned", runs
    running = [event for event in server.events(job_id) if event["to_state"] == "running"]
    assert len(running) == 1, running
