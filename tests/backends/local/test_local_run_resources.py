"""What a local run used (issue 29, ``flotilla sacct``): its CPU time and peak memory, read
from each replica's cgroup when the replica ends, reported with the run's end and kept on the
run in the store. Real processes and real cgroups: these need root, and run as root in CI,
where they never skip."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from flotilla.backends import BackendRunState, CancelRequest
from flotilla.backends.local.cgroups import CgroupV1, CgroupV2
from flotilla.model import JobSpec
from flotilla.model.run_resources import RunResources
from flotilla.store import JobState, RunReportQuery
from tests.backends.local.test_local_cgroups import _require_isolation
from tests.backends.support import LocalHarness, request
from tests.service.test_service_loop import Service

MIB = 2**20
HOG = (
    "data = b'x' * (56 << 20)\n"  # written, so every page is resident
    "total = sum(i * i for i in range(2_000_000))\n"  # CPU time the cgroup counts
    "print('used', len(data), total > 0)\n"
)


def test_a_local_run_reports_its_peak_memory_and_cpu_time_when_it_ends(
    local: LocalHarness,
) -> None:
    _require_isolation()
    backend = local.make()
    backend.dispatch(request(backend, "hog", {"command": [sys.executable, "-c", HOG]}))
    status = local.wait_terminal(backend, "hog")
    assert status.resources is not None, status
    assert status.resources.memory_peak is not None
    assert status.resources.memory_peak >= 50 * MIB, status.resources
    assert status.resources.cpu_seconds is not None and status.resources.cpu_seconds > 0


def test_a_cancelled_run_is_measured_too(local: LocalHarness) -> None:
    """What a run used until its cancel killed it (sacct shows cancelled jobs' figures)."""
    _require_isolation()
    backend = local.make(grace_period=0.5)
    hold = "import time\ndata = b'x' * (56 << 20)\nprint('ready', flush=True)\ntime.sleep(1000)\n"
    backend.dispatch(request(backend, "held", {"command": [sys.executable, "-c", hold]}))
    local.wait_output(backend, "held", "ready")
    backend.cancel(CancelRequest("held", reason="enough"))
    status = local.wait_terminal(backend, "held")
    assert status.state is BackendRunState.CANCELLED, status
    assert status.resources is not None and status.resources.memory_peak is not None
    assert status.resources.memory_peak >= 50 * MIB, status.resources


def test_the_report_shows_a_real_runs_peak_memory_and_cpu_time(tmp_path: Path) -> None:
    """Through the service: the figures the backend reported are the run's in the store and
    in the report ``flotilla sacct`` prints."""
    _require_isolation()
    service = Service(tmp_path)
    try:
        spec = {
            "name": "hog",
            "queue": "default",
            "tasks": [{"name": "main", "resources": {"cpu": 0.1}}],
            "payload": {"command": [sys.executable, "-c", HOG]},
        }
        (job,) = service.store.submit_jobs([JobSpec.model_validate(spec)])

        def measured() -> bool:
            runs = service.store.runs(job)
            return bool(runs) and runs[-1].memory_peak is not None

        service.cycle_until(
            lambda: service.state(job) in (JobState.SUCCEEDED, JobState.FAILED) and measured()
        )
        assert service.state(job) is JobState.SUCCEEDED
        since = datetime.now(UTC) - timedelta(hours=1)
        [row] = service.store.run_report(RunReportQuery(since=since))
        assert row.job_id == job and row.name == "hog" and row.exit_code == 0
        assert row.memory_peak is not None and row.memory_peak >= 50 * MIB, row
        assert row.cpu_seconds is not None and row.cpu_seconds > 0, row
        assert row.nodes  # the node it ran on
    finally:
        service.close()


def test_v2_usage_reads_cpu_stat_and_memory_peak(tmp_path: Path) -> None:
    """A unified hierarchy (most hosts; not this CI machine, whose controllers are on v1):
    the files ``usage`` reads, on a directory standing in for the hierarchy."""
    leaf = tmp_path / "flotilla" / "local-x.run-1" / "main-0"
    leaf.mkdir(parents=True)
    (leaf / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
    (leaf / "memory.peak").write_text(f"{60 * MIB}\n")
    hierarchy = CgroupV2(tmp_path / "flotilla", frozenset({"memory", "pids"}))
    assert hierarchy.usage("local-x.run-1/main-0") == RunResources(2.5, 60 * MIB)
    (leaf / "memory.peak").unlink()  # a kernel before 5.19
    assert hierarchy.usage("local-x.run-1/main-0") == RunResources(2.5, None)


def test_v1_usage_reads_cpuacct_and_the_memory_high_water_mark(tmp_path: Path) -> None:
    bases = {name: tmp_path / name / "flotilla" for name in ("memory", "pids", "cpuacct")}
    for base in bases.values():
        (base / "run-1" / "main-0").mkdir(parents=True)
    (bases["cpuacct"] / "run-1/main-0/cpuacct.usage").write_text("1500000000\n")
    (bases["memory"] / "run-1/main-0/memory.max_usage_in_bytes").write_text(f"{52 * MIB}\n")
    hierarchy = CgroupV1(bases)
    assert hierarchy.usage("run-1/main-0") == RunResources(1.5, 52 * MIB)
    assert CgroupV1({"pids": bases["pids"]}).usage("run-1/main-0") == RunResources(None, None)


def test_a_runs_figures_are_its_replicas_cpu_summed_and_their_largest_peak() -> None:
    replicas = [RunResources(1.0, 10 * MIB), RunResources(2.5, 70 * MIB), RunResources()]
    assert RunResources.of_replicas(replicas) == RunResources(3.5, 70 * MIB)
    assert not RunResources.of_replicas([RunResources()]).measured
