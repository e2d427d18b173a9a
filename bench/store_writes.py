"""What a scheduling cycle's store calls cost, one call at a time:
``python -m bench.store_writes --database postgresql`` (or ``sqlite``).

Per round, ``--jobs`` jobs go through what the loop does to them: submitted, read back by the
change feed, leased (``record_runs``), moved to pending and to running (``transition_many``),
each write followed by the feed read the loop makes after it; then the same jobs' whole cycle
write at once (``commit_cycle``: pending, running and the next batch's leases, with the feed).
For each call: wall time, this process's CPU time, the PostgreSQL server's CPU time spent on
it (the ``schedstat`` of the database's backend processes: Linux, a server on this machine),
and the statements sent (BEGIN, COMMIT, ROLLBACK and the pool's ping included). Medians over
``--rounds``. With ``--loop``: the scheduling loop's own CPU time for batches of jobs, from
submitted to running (``loop_cpu``). The garbage collector is settled as ``flotilla up``
settles it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import event

from bench.service import _scratch_database
from flotilla.collector import settle_collector
from flotilla.model import JobSpec, QueueSpec
from flotilla.store import JobState, RunRequest, SqlStore, Transition

T = TypeVar("T")


def _server_seconds(database: str | None) -> float:
    """CPU seconds the backends of ``database`` have run (0 when they cannot be read, and
    for SQLite, which runs in this process)."""
    if database is None:
        return 0.0
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if database not in Path(f"/proc/{pid}/cmdline").read_text():
                continue
            total += int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
        except (OSError, ValueError):
            continue
    return total / 1e9


class Meter:
    def __init__(self, store: SqlStore, database: str | None) -> None:
        self._database = database
        self.statements = 0
        self.figures: dict[str, list[tuple[float, float, float, int]]] = defaultdict(list)
        for name in ("before_cursor_execute", "commit", "rollback", "engine_connect"):
            event.listen(store.engine, name, self._count)
        event.listen(store.engine.pool, "checkout", self._count)

    def _count(self, *_: Any) -> None:
        self.statements += 1

    def measure(self, name: str, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        self.statements = 0
        server = _server_seconds(self._database)
        wall, cpu = time.perf_counter(), time.process_time()
        result = call(*args, **kwargs)
        self.figures[name].append(
            (
                time.perf_counter() - wall,
                time.process_time() - cpu,
                _server_seconds(self._database) - server,
                self.statements,
            )
        )
        return result


@contextmanager
def _store(database: str) -> Iterator[tuple[SqlStore, str]]:
    with tempfile.TemporaryDirectory() as tmp, _scratch_database(tmp, database) as url:
        store = SqlStore.open(url)
        try:
            yield store, url.rsplit("/", 1)[-1]
        finally:
            store.close()


def _specs(prefix: str, count: int) -> list[JobSpec]:
    template = JobSpec.model_validate(
        {
            "name": "template",
            "queue": "default",
            "tasks": [{"name": "main", "resources": {"cpu": 1, "memory": "1Gi"}}],
            "payload": {"sim": {"duration": 3600}},
        }
    )
    return [template.model_copy(update={"name": f"{prefix}-{index}"}) for index in range(count)]


def run(database: str, jobs: int, rounds: int) -> dict[str, list[tuple[float, float, float, int]]]:
    with _store(database) as (store, name):
        meter = Meter(store, name if database == "postgresql" else None)
        store.put_queue(QueueSpec(name="default"))
        lease = store.try_acquire_lease("scheduler", "bench", 600)
        assert lease is not None
        serial = 0

        def feed() -> None:
            nonlocal serial
            while page := store.jobs_since(serial):
                serial = page[-1].serial

        def leases(ids: list[str]) -> list[RunRequest]:
            placement = {"placements": [{"task": "main", "replica": 0, "node": "n-1"}]}
            return [RunRequest(job_id, "sim", placement) for job_id in ids]

        for index in range(rounds):
            ids = meter.measure("submit_jobs", store.submit_jobs, _specs(f"a{index}", jobs))
            meter.measure("  jobs_since after submit_jobs", feed)
            meter.measure("jobs_since, nothing new", feed)
            meter.measure("renew_lease", store.renew_lease, lease, 600)
            meter.measure("record_runs", store.record_runs, leases(ids), fence=lease)
            meter.measure("  jobs_since after record_runs", feed)
            for state in (JobState.PENDING, JobState.RUNNING):
                changes = [Transition(job_id, state, "bench") for job_id in ids]
                meter.measure(
                    f"transition_many → {state.value}",
                    store.transition_many,
                    changes,
                    fence=lease,
                    records=False,
                )
                meter.measure(f"  jobs_since after → {state.value}", feed)
            if not hasattr(store, "commit_cycle"):
                continue  # a tree from before it (to measure against)
            from flotilla.store import CycleWrite

            following = store.submit_jobs(_specs(f"b{index}", jobs))
            feed()
            store.record_runs(leases(following), fence=lease)
            feed()
            nextbatch = store.submit_jobs(_specs(f"c{index}", jobs))
            feed()
            write = CycleWrite(
                transitions=[
                    Transition(job_id, state, "bench")
                    for state in (JobState.PENDING, JobState.RUNNING)
                    for job_id in following
                ],
                runs=leases(nextbatch),
            )
            done = meter.measure(
                "commit_cycle (2 transitions + 1 lease per job, feed)",
                store.commit_cycle,
                write,
                since=serial,
                fence=lease,
            )
            serial = done.changes[-1].serial
        return dict(meter.figures)


def loop_cpu(database: str, jobs: int, batches: int) -> tuple[float, float, float]:
    """CPU, wall and database server CPU seconds of the scheduling loop's cycles (no API, no
    other thread) over a
    ``sim`` cluster of 160 × 64 CPUs: per batch, ``jobs`` jobs are submitted to the store and
    two cycles run (the first leases and dispatches them, the second records them running)."""
    from flotilla.app import ServiceConfig, build_service
    from flotilla.backends.sim import SimBackend
    from flotilla.service.loop import LoopSettings

    with _store(database) as (store, name):
        server_of = name if database == "postgresql" else None
        nodes = [{"name": "sim", "count": 160, "resources": {"cpu": 64, "memory": "256Gi"}}]
        backend = SimBackend(cluster="sim", nodes=nodes, default_duration=3600.0)
        config = ServiceConfig(loop=LoopSettings(replica="bench"))  # the loop flotilla up runs
        loop = build_service(config, store=store, backends={"sim": backend}).loop
        try:
            loop.cycle()
            cpu = wall = server = 0.0
            for batch in range(batches):
                store.submit_jobs(_specs(f"b{batch}", jobs))
                for _ in range(2):
                    started, used = time.perf_counter(), time.process_time()
                    served = _server_seconds(server_of)
                    loop.cycle()
                    server += _server_seconds(server_of) - served
                    cpu += time.process_time() - used
                    wall += time.perf_counter() - started
            running = store.count_jobs(states=[JobState.RUNNING])
            if running != jobs * batches:
                raise RuntimeError(f"{running} of {jobs * batches} jobs running")
            return cpu, wall, server
        finally:
            loop.close()
            backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.store_writes")
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--jobs", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--loop",
        action="store_true",
        help="instead: the scheduling loop's CPU for --rounds batches of --jobs jobs",
    )
    arguments = parser.parse_args()
    settle_collector()  # as flotilla up and serve do: the figures are the service's
    if arguments.loop:
        cpu, wall, server = loop_cpu(arguments.database, arguments.jobs, arguments.rounds)
        print(
            f"{arguments.database}: the loop's cycles for {arguments.rounds} × "
            f"{arguments.jobs:,} jobs (submitted → running): {cpu * 1000:,.0f} ms CPU, "
            f"{wall * 1000:,.0f} ms wall, {server * 1000:,.0f} ms database server CPU; "
            f"load average {os.getloadavg()[0]:.1f}"
        )
        return
    figures = run(arguments.database, arguments.jobs, arguments.rounds)
    print(
        f"{arguments.database}, {arguments.jobs:,} jobs per call, medians of "
        f"{arguments.rounds} rounds; load average {os.getloadavg()[0]:.1f}"
    )
    print(f"{'call':55} {'wall ms':>8} {'cpu ms':>8} {'server ms':>9} {'stmts':>6}")
    for name, values in figures.items():
        wall, cpu, server = (statistics.median(v[i] for v in values) * 1000 for i in range(3))
        print(f"{name:55} {wall:8.1f} {cpu:8.1f} {server:9.1f} {values[-1][3]:6d}")


if __name__ == "__main__":
    main()
