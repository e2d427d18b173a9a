"""Fault injection: ``kill -9`` of ``flotilla up`` at a random point, then at most one
restart, over seeded trials on SQLite, PostgreSQL and two replicas (issue 12).

Each trial draws from its seed: how many jobs, how long they run, and where the kill lands —
while jobs are being submitted, while the cycle commits and dispatches them, while cancels
are applied, while jobs run, or between lease renewals. Then the invariants, after at most
one restart:

* **nothing lost**: every job the API accepted is still there;
* **nothing stuck**: every job reaches a terminal state within the limit;
* **nothing run twice**: each job's command ran at most once, a succeeded job exactly once;
* **resources released**: no run record holds a live process, no run is active;
* **history complete**: each job's events chain from submission to its state, no gap.

Who the jobs run as (``FAULT_IDENTITY``): ``root`` (``--run-as`` this user, as these trials
always ran) or ``per-run``: the default of a root deployment, a uid of its own per owner
(per run until issue 37; the name stayed)
(``uid_range``), whose end kills what is left of the run (issue 35: a replica sweeping a run
by uid after that uid went to the next run killed it, and the job ran twice). The jobs then
append to a marks file outside the test's private temporary dir. As root only.

The CI runs ``CI_TRIALS`` (a few seconds each; one with per-run uids). The long run is a
documented command, with its figures in docs/fault-injection.md (``FAULT_KINDS=replicas``
runs only that kind; ``FAULT_SEED_BASE`` is the first seed, 1000 by default, and every report
line names its seed, identity and seed base)::

    FAULT_TRIALS=100 FAULT_IDENTITY=per-run FAULT_SEED_BASE=35000 \\
        .venv/bin/pytest tests/e2e/test_fault_injection.py -q -n 2
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import random
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine

from tests.e2e.service import TERMINAL, Server, Services, job_spec, run_records, wait_for
from tests.postgres_support import postgres_schema_url

PHASES = ("submit", "dispatch", "cancel", "running", "lease")
REPLICA_PHASES = (*PHASES, "pause")
"""Two replicas: also ``pause`` — the leader is stopped (SIGSTOP) mid-dispatch until the
standby has taken the lease and dispatched the leased runs itself, resumed, then killed. Both
dispatch the same runs over one state dir at once: the shape that started a run twice."""
KINDS = tuple(os.environ.get("FAULT_KINDS", "sqlite,postgresql,replicas").split(","))
IDENTITY = os.environ.get("FAULT_IDENTITY", "root")
"""``root`` or ``per-run`` (see the module docstring): who the long run's jobs run as."""
SEED_BASE = int(os.environ.get("FAULT_SEED_BASE", "1000"))
CI_TRIALS = [
    ("sqlite", 1, "root"),
    ("sqlite", 2, "root"),
    ("postgresql", 3, "root"),
    ("replicas", 4, "root"),
    ("replicas", 19, "root"),
    ("replicas", 12, "per-run"),
]
LONG = int(os.environ.get("FAULT_TRIALS", "0"))
TRIALS = (
    [(KINDS[index % len(KINDS)], SEED_BASE + index, IDENTITY) for index in range(LONG)]
    if LONG
    else CI_TRIALS
)
START_LIMIT = 240.0
"""Seconds a server may take to start: a 2-core box shared by many test runs was seen to take
more than the e2e default of 60 s."""
PAUSE_LIMIT = 10.0
"""Seconds the ``pause`` phase waits for the standby to lead while the leader is stopped."""
SETTLE_LIMIT = 120.0
"""Seconds every job has, after the restart, to reach a terminal state."""


def _leader(server: Server) -> bool:
    try:
        scheduler = server.report()["scheduler"]
    except (AssertionError, httpx.HTTPError):
        return False
    return bool(scheduler and scheduler["leader"])


@pytest.fixture
def marks_dir(identity: str, tmp_path: Path) -> Iterator[Path]:
    """Where the jobs append their names: the test's own dir as root; with per-run uids a
    directory every user may reach, holding a marks file any uid may append to — under
    /var/tmp: a job with a uid of its own has a /tmp of its own (SECURITY.md)."""
    if identity == "root":
        yield tmp_path
        return
    if os.geteuid() != 0:
        pytest.skip("per-run uids need the server to run as root")
    directory = Path(tempfile.mkdtemp(prefix="flotilla-marks-", dir="/var/tmp"))
    directory.chmod(0o755)
    marks = directory / "marks"
    marks.touch()
    marks.chmod(0o666)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize(
    ("kind", "seed", "identity"), TRIALS, ids=[f"{k}-{s}-{i}" for k, s, i in TRIALS]
)
def test_kill_9_at_a_random_point_loses_nothing_runs_nothing_twice_leaves_nothing_stuck(
    services: Services,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    kind: str,
    seed: int,
    identity: str,
    marks_dir: Path,
) -> None:
    rng = random.Random(seed)
    phase = rng.choice(REPLICA_PHASES if kind == "replicas" else PHASES)
    count = rng.randint(8, 24)
    sleep = rng.choice([0.0, 0.05, 0.3])
    if kind == "sqlite":
        db = f"sqlite:///{tmp_path / 'flotilla.db'}"
    else:
        admin: tuple[Engine, str] = request.getfixturevalue("postgres_admin")
        db = postgres_schema_url(admin)
    state_dir, marks = tmp_path / "runs", marks_dir / "marks"
    names = ["replica-a", "replica-b"] if kind == "replicas" else ["only"]

    def start(name: str) -> Server:
        extra = ["--cycle-interval", "0.1", "--replica", name, "--lease-ttl", "2"]
        server = services.start(
            db=db,
            state_dir=state_dir,
            workdir=tmp_path / name,
            extra=extra,
            ready=False,
            default_identity=identity == "per-run",
        )
        server.wait_ready(START_LIMIT)
        return server

    servers = [start(name) for name in names]
    leaders: list[Server] = []

    def found_leader() -> bool:
        leaders[:] = [server for server in servers if _leader(server)][:1]
        return bool(leaders)

    wait_for(found_leader, 60, "a leader")
    [victim] = leaders
    command = f'echo "$FLOTILLA_JOB_NAME" >> {marks}; sleep {sleep}'
    specs = [job_spec(f"job-{index}", command, cpu=0.25) for index in range(count)]
    accepted: list[str] = []
    took_over: bool | None = None
    """``pause``: whether the standby led while the leader was stopped."""

    def submit_all() -> None:
        for start_at in range(0, count, 4):
            try:
                accepted.extend(victim.submit(*specs[start_at : start_at + 4]))
            except (AssertionError, httpx.HTTPError):
                return  # the server died under this request: its jobs may or may not exist

    submitter = threading.Thread(target=submit_all)
    submitter.start()
    if phase == "submit":
        time.sleep(rng.uniform(0.0, 0.3))
    else:
        submitter.join()
        if phase == "dispatch":
            time.sleep(rng.uniform(0.0, 0.4))
        elif phase == "cancel":
            for job_id in rng.sample(accepted, len(accepted) // 3):
                victim.http.post(f"/v1/jobs/{job_id}/cancel", json={})
            time.sleep(rng.uniform(0.0, 0.2))
        elif phase == "running":
            wait_for(lambda: marks.exists() and marks.read_text().strip() != "", 60, "a job to run")
        elif phase == "pause":
            time.sleep(rng.uniform(0.0, 0.3))
            took_over = False
            os.kill(victim.process.pid, signal.SIGSTOP)
            try:
                [standby] = [server for server in servers if server is not victim]
                # Stopped inside a fenced write, the leader holds the lease row (PostgreSQL's
                # share lock of the fence) until the server ends its idle transaction, after
                # the term's length (docs/store.md): the standby takes over after that.
                with contextlib.suppress(AssertionError):
                    wait_for(lambda: _leader(standby), PAUSE_LIMIT, "the standby to lead")
                    took_over = True
                time.sleep(rng.uniform(0.0, 0.3))  # its new term dispatches the leased runs
            finally:
                os.kill(victim.process.pid, signal.SIGCONT)
            time.sleep(rng.uniform(0.0, 0.5))  # the old leader goes on with its dispatch
        else:
            time.sleep(rng.uniform(0.3, 2.0))
    victim.kill9()
    submitter.join()

    # At most one restart: the victim comes back (a replica with the same id retakes its
    # lease at once; with two replicas the survivor may have taken it already).
    survivors = [server for server in servers if server is not victim]
    survivors.append(start(names[servers.index(victim)]))
    restarted_at = time.monotonic()
    observer = survivors[0]
    listed: dict[str, dict[str, object]] = {}

    def all_terminal() -> bool:
        response = observer.http.get("/v1/jobs", params={"limit": 1000})
        listed.clear()
        listed.update({job["id"]: job for job in response.json()["jobs"]})
        return all(job["state"] in TERMINAL for job in listed.values())

    wait_for(
        all_terminal,
        SETTLE_LIMIT,
        lambda: (
            f"[{kind} seed {seed} phase {phase} identity {identity}] every job terminal: "
            + str(collections.Counter(str(job["state"]) for job in listed.values()))
        ),
        interval=0.2,
    )
    where = f"{kind} seed {seed} phase {phase} identity {identity}"
    assert set(accepted) <= set(listed), f"[{where}] accepted jobs lost"
    ran = collections.Counter(marks.read_text().split() if marks.exists() else [])
    assert all(times == 1 for times in ran.values()), f"[{where}] ran twice: {ran}"
    for job_id, job in listed.items():
        name = str(job["name"])
        if job["state"] == "succeeded":
            assert ran[name] == 1, f"[{where}] {name} succeeded without running once"
        detail = observer.job(job_id)
        active = [run for run in detail["runs"] if run["state"] in ("leased", "pending", "running")]
        assert not active, f"[{where}] {name} terminal with an active run: {detail['runs']}"
        events = observer.events(job_id)
        state = None
        for event in events:
            if event["from_state"] is not None and event["to_state"] is not None:
                assert event["from_state"] == state or event["from_state"] == event["to_state"], (
                    f"[{where}] {name} history has a gap: {events}"
                )
            if event["to_state"] is not None:
                state = event["to_state"]
        assert state == job["state"], f"[{where}] {name} history ends at {state}: {events}"
    wait_for(
        lambda: all(
            all(replica.get("finished") for replica in record.get("replicas", []))
            for record in run_records(state_dir)
        ),
        30,
        f"[{where}] every run record finished (no process left holding resources)",
    )
    report = os.environ.get("FAULT_REPORT")
    if report:
        states = collections.Counter(str(job["state"]) for job in listed.values())
        line = {
            "kind": kind,
            "seed": seed,
            "seed_base": SEED_BASE if LONG else None,
            "identity": identity,
            "phase": phase,
            "standby_led_during_pause": took_over,
            "submitted": count,
            "accepted": len(accepted),
            "stored": len(listed),
            "states": dict(states),
            "ran_twice": 0,
            "lost": 0,
            "stuck": 0,
            "settled_seconds": round(time.monotonic() - restarted_at, 2),
        }
        with open(report, "a", encoding="utf-8") as file:
            file.write(json.dumps(line) + "\n")
