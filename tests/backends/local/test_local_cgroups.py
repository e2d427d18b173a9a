"""Whole-tree tracking and limits of the ``local`` backend (issue 23, item 3): every process
of a run ends with it, ``setsid`` daemons included, and its memory, process count and CPU
share are what its job asked for. Real processes, real cgroups and PID namespaces: these need
root, and run as root in CI, where they never skip."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from flotilla.backends import Backend, BackendRunState, CancelRequest, StatusRequest
from flotilla.backends.local import cgroups as cgroup_module
from flotilla.backends.local import tree as local_tree
from flotilla.backends.local.backend import LocalBackend
from flotilla.backends.local.cgroups import CgroupV1, CgroupV2, Detected, Limits
from flotilla.backends.local.processes import process_alive
from flotilla.backends.local.tree import ProcessTrees, pid_namespaces_work
from flotilla.model import JobSpec, RetryCause
from flotilla.service.retry import cause_of
from flotilla.store import JobState
from tests.backends.support import WAIT_LIMIT, LocalHarness, read_all, request
from tests.service.test_service_loop import Service
from tests.timing import limit, wait_until


def _require_isolation() -> None:
    """Skip (with the reason) only off CI and not as root; anywhere else a machine that cannot
    isolate jobs fails these tests."""
    detected = cgroup_module.detect()
    if detected.cgroups is not None and pid_namespaces_work():
        return
    why = detected.problem or "no PID namespaces"
    if os.geteuid() != 0 and os.environ.get("CI") != "true":
        pytest.skip(f"cgroups and PID namespaces need root ({why})")
    pytest.fail(f"this machine cannot isolate local jobs: {why}")


@pytest.fixture
def isolated(local: LocalHarness) -> LocalHarness:
    _require_isolation()
    return local


def read_pid(path: Path) -> int:
    wait_until(lambda: path.exists() and path.read_text().strip() != "", f"wrote {path}")
    return int(path.read_text())


def daemon(pid_file: Path) -> str:
    """Shell: start a ``setsid`` daemon (its own session, so no signal to the job's process
    group reaches it) that writes its pid as this process sees it, and wait until it has."""
    mine = f"read -r pid _ </proc/self/stat; echo $pid > {pid_file}"
    return (
        f"setsid sh -c '{mine}; exec sleep 1000' & while [ ! -s {pid_file} ]; do sleep 0.01; done"
    )


@pytest.mark.parametrize("ending", ["exits", "cancelled", "max_runtime"])
def test_no_process_of_a_run_outlives_it_not_even_a_setsid_daemon(
    isolated: LocalHarness, ending: str
) -> None:
    backend = isolated.make(grace_period=2.0)
    pid_file = isolated.scratch / "daemon.pid"
    go = isolated.scratch / "go"
    rest = f"while [ ! -e {go} ]; do sleep 0.01; done" if ending == "exits" else "sleep 1000"
    command = f"{daemon(pid_file)}; echo ready; {rest}"
    run_id, survivor = "run-1", None
    if ending == "max_runtime":
        # The run must outlive its daemon's start to show the daemon ends with it: a machine
        # too slow to start it within the max_runtime is given twice as long, on a new run.
        runtime = limit(1.0)
        for attempt in range(1, 6):
            run_id = f"run-{attempt}"
            backend.dispatch(request(backend, run_id, {"command": command}, max_runtime=runtime))
            survivor = read_pid_unless_ended(backend, run_id, pid_file)
            if survivor is not None:
                break
            runtime *= 2
        assert survivor is not None, "the daemon never started within its run's max_runtime"
    else:
        backend.dispatch(request(backend, run_id, {"command": command}))
        survivor = read_pid(pid_file)
        assert process_alive(survivor, None)
    go.touch()  # "exits": the job's own command ends now, its daemon still running
    if ending == "cancelled":
        isolated.wait_output(backend, run_id, "ready")
        backend.cancel(CancelRequest(run_id))
    status = isolated.wait_terminal(backend, run_id)
    expected = {
        "exits": BackendRunState.SUCCEEDED,
        "cancelled": BackendRunState.CANCELLED,
        "max_runtime": BackendRunState.FAILED,
    }[ending]
    assert status.state is expected, status
    assert not process_alive(survivor, None), "the setsid daemon outlived its run"
    isolated.assert_gone(status)


def read_pid_unless_ended(backend: Backend, run_id: str, path: Path) -> int | None:
    """The pid ``path`` holds once written, or None if the run ended before it was."""

    def written() -> bool:
        return path.exists() and path.read_text().strip() != ""

    wait_until(
        lambda: written() or backend.status(StatusRequest(run_id)).state.terminal,
        f"{path} to be written or {run_id} to end",
    )
    return int(path.read_text()) if written() else None


def test_a_job_over_its_memory_request_is_oom_killed_and_fails_as_the_jobs_fault(
    isolated: LocalHarness,
) -> None:
    backend = isolated.make()
    allocate = "data = b'x' * (1536 << 20); print('allocated', len(data))"
    backend.dispatch(
        request(
            backend,
            "hog",
            {"command": [sys.executable, "-c", allocate]},
            resources={"main": {"memory": 64 * 2**20, "cpu": 1.0}},
        )
    )
    status = isolated.wait_terminal(backend, "hog")
    assert status.state is BackendRunState.FAILED
    assert "exceeded its memory request of 64Mi" in status.message, status
    assert "allocated" not in read_all(backend, "hog")
    assert status.over_limit
    assert cause_of(status) is RetryCause.FAILED  # not node_failure: retry as a job failure
    isolated.assert_gone(status)


def test_an_oom_past_the_request_fails_the_job_and_is_no_node_failure_to_retry(
    tmp_path: Path,
) -> None:
    """Through the service: a retry policy for node failures does not retry it."""
    _require_isolation()
    service = Service(tmp_path)
    try:
        spec = {
            "name": "hog",
            "queue": "default",
            "tasks": [{"name": "main", "resources": {"cpu": 0.1, "memory": "64Mi"}}],
            "payload": {"command": [sys.executable, "-c", "data = b'x' * (1536 << 20)"]},
            "retry": {"limit": 3, "backoff": "none", "on": ["node_failure"]},
        }
        (job,) = service.store.submit_jobs([JobSpec.model_validate(spec)])
        service.cycle_until(lambda: service.state(job) in (JobState.SUCCEEDED, JobState.FAILED))
        assert service.state(job) is JobState.FAILED
        [run] = service.store.runs(job)
        assert "exceeded its memory request of 64Mi" in (run.message or "")
    finally:
        service.close()


def test_a_run_oom_killed_while_no_backend_watched_still_says_why(
    isolated: LocalHarness,
) -> None:
    first = isolated.make()
    gate = isolated.scratch / "gate"
    allocate = (
        f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.01)\n"
        "data = b'x' * (1536 << 20)\n"
    )
    resources = {"main": {"memory": 64 * 2**20}}
    payload = {"command": [sys.executable, "-c", allocate]}
    first.dispatch(request(first, "hog", payload, resources=resources))
    isolated.close_leaving_runs(first)
    gate.touch()
    wait_for = isolated.state_dir / "runs" / "hog" / "main-0.exit"
    wait_until(wait_for.exists, "the supervisor wrote the outcome")

    second = isolated.make()
    status = isolated.wait_terminal(second, "hog")
    assert status.state is BackendRunState.FAILED
    assert "exceeded its memory request of 64Mi" in status.message, status
    assert status.over_limit


def test_a_job_within_its_memory_request_succeeds(isolated: LocalHarness) -> None:
    backend = isolated.make()
    allocate = "data = b'x' * (16 << 20); print('allocated', len(data))"
    resources = {"main": {"memory": 256 * 2**20}}
    payload = {"command": [sys.executable, "-c", allocate]}
    backend.dispatch(request(backend, "fits", payload, resources=resources))
    status = isolated.wait_terminal(backend, "fits")
    assert status.state is BackendRunState.SUCCEEDED, status
    assert not status.over_limit


def test_a_fork_bomb_stops_at_the_clusters_max_pids(isolated: LocalHarness) -> None:
    backend = isolated.make(max_pids=16)
    forks = (
        "import os, time\n"
        "started = 0\n"
        "for _ in range(64):\n"
        "    try:\n"
        "        child = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if child == 0:\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    started += 1\n"
        "print('started', started, flush=True)\n"
    )
    backend.dispatch(request(backend, "bomb", {"command": [sys.executable, "-c", forks]}))
    status = isolated.wait_terminal(backend, "bomb")
    assert status.state is BackendRunState.SUCCEEDED, status
    started = int(read_all(backend, "bomb").split()[-1])
    assert started < 16, f"{started} processes started under max_pids=16"
    isolated.assert_gone(status)  # and the sleepers ended with the run


def test_each_replica_is_in_a_cgroup_of_its_own_with_its_requests(
    isolated: LocalHarness,
) -> None:
    backend = isolated.make(max_pids=100)
    assert isinstance(backend, LocalBackend)
    resources = {"main": {"memory": 128 * 2**20, "cpu": 2.0}}
    payload = {"command": "cat /proc/self/cgroup; sleep 1000"}
    backend.dispatch(request(backend, "run-1", payload, replicas=2, resources=resources))
    isolated.wait_output(backend, "run-1", "flotilla")
    trees = ProcessTrees(backend.cluster, backend.state_dir or Path())
    hierarchy = trees.hierarchy
    assert hierarchy is not None
    run_path = trees.run_path("run-1")
    cpu = "2048" if hierarchy.version == "v1" else "200"  # 2 cores: twice the default
    for index in range(2):
        path = f"{run_path}/main-{index}"
        wait_until(lambda path=path: len(hierarchy.processes(path)) >= 2, "joined its cgroup")
        limits = {name: text.strip() for name, text in limits_of(hierarchy, path).items()}
        assert limits == {"memory": str(128 * 2**20), "pids": "100", "cpu": cpu}
    backend.cancel(CancelRequest("run-1", grace_period=0.5))
    status = isolated.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.CANCELLED
    assert hierarchy.processes(run_path) == []
    wait_until(  # by the monitor thread, off the cancel's path
        lambda: not any((base / run_path).exists() for base in _bases(hierarchy)),
        "removed the run's cgroups",
    )


def _bases(hierarchy: cgroup_module.Cgroups) -> list[Path]:
    if isinstance(hierarchy, CgroupV1):
        return list(hierarchy.bases.values())
    assert isinstance(hierarchy, CgroupV2)
    return [hierarchy.base]


def limits_of(hierarchy: cgroup_module.Cgroups, path: str) -> dict[str, str]:
    """The memory, pids and CPU settings of a cgroup, as the kernel reports them."""
    if isinstance(hierarchy, CgroupV1):
        return {
            "memory": (hierarchy.bases["memory"] / path / "memory.limit_in_bytes").read_text(),
            "pids": (hierarchy.bases["pids"] / path / "pids.max").read_text(),
            "cpu": (hierarchy.bases["cpu"] / path / "cpu.shares").read_text(),
        }
    assert isinstance(hierarchy, CgroupV2)
    at = hierarchy.base / path
    return {
        "memory": (at / "memory.max").read_text(),
        "pids": (at / "pids.max").read_text(),
        "cpu": (at / "cpu.weight").read_text(),
    }


# --- the two implementations, each on its own ---------------------------------------------


@pytest.fixture
def unified(tmp_path: Path) -> Iterator[Path]:
    """A cgroup of this machine's unified (v2) hierarchy, removed afterwards."""
    _require_isolation()
    mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
    points = [Path(fields[1]) for fields in mounts if fields[2] == "cgroup2"]
    if not points:
        if os.environ.get("CI") == "true":
            pytest.fail("no cgroup v2 hierarchy mounted: CI must test cgroup.kill")
        pytest.skip("no cgroup v2 hierarchy mounted here (the v1 tests cover this machine)")
    base = points[0] / f"flotilla-test-{os.getpid()}-{tmp_path.name}"
    base.mkdir()
    try:
        yield base
    finally:
        (base / "cgroup.kill").write_text("1")  # a test that failed half-way
        wait_until(lambda: not CgroupV2(base, frozenset()).processes(""), "emptied")
        for cgroup in sorted(base.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if cgroup.is_dir():
                cgroup.rmdir()
        base.rmdir()


def test_v2_kill_ends_a_tree_that_left_its_session(unified: Path, tmp_path: Path) -> None:
    """``cgroup.kill`` takes every process of the cgroup, whatever its session."""
    hierarchy = CgroupV2(unified, frozenset())
    [directory] = hierarchy.create("run-1/main-0", Limits())
    pid_file = tmp_path / "daemon.pid"
    script = f"echo 0 > {directory}/cgroup.procs; {daemon(pid_file)}; exec sleep 1000"

    leader = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    try:
        survivor = read_pid(pid_file)
        assert {leader.pid, survivor} <= set(hierarchy.processes("run-1"))
        hierarchy.kill("run-1")
        leader.wait(limit(WAIT_LIMIT))
        wait_until(lambda: not process_alive(survivor, None), "killed the daemon")
        wait_until(lambda: hierarchy.processes("run-1") == [], "emptied the cgroup")
    finally:
        leader.kill()
        leader.wait()
    hierarchy.remove("run-1")
    assert not (unified / "run-1").exists()


def test_v2_writes_the_limits_and_enables_the_controllers_on_the_way(tmp_path: Path) -> None:
    """Where v2 has the controllers (most hosts; not this CI machine, whose controllers are
    on v1): the files ``create`` writes, on a directory standing in for the hierarchy."""
    base = tmp_path / "flotilla"
    base.mkdir()
    hierarchy = CgroupV2(base, frozenset({"memory", "pids", "cpu"}))
    [leaf] = hierarchy.create("local-x/run-1/main-0", Limits(memory=2**26, cpu=0.5, pids=64))
    assert leaf == base / "local-x/run-1/main-0"
    assert (leaf / "memory.max").read_text() == str(2**26)
    assert (leaf / "memory.swap.max").read_text() == "0"
    assert (leaf / "memory.oom.group").read_text() == "1"
    assert (leaf / "pids.max").read_text() == "64"
    assert (leaf / "cpu.weight").read_text() == "50"
    for level in (base, base / "local-x", base / "local-x/run-1"):
        assert (level / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    (leaf / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert hierarchy.memory_exceeded("local-x/run-1/main-0")


def test_v2_in_a_cgroup_with_processes_moves_them_to_a_leaf_to_enable_controllers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server in a cgroup of its own (a systemd service): cgroup v2 refuses controllers for
    children of a cgroup holding processes (EBUSY), so they move to a leaf first. A stand-in
    for the kernel's rules, on a directory standing in for the hierarchy."""
    home = tmp_path / "system.slice" / "flotilla.service"
    home.mkdir(parents=True)
    (home / "cgroup.controllers").write_text("cpu io memory pids\n")
    (home / "cgroup.procs").write_text("111\n222\n")

    def enable(directory: Path, controllers: str) -> None:
        if (directory / "cgroup.procs").read_text().strip():
            raise OSError(errno.EBUSY, "Device or resource busy")
        (directory / "cgroup.subtree_control").write_text(controllers)

    def move(pid: int, leaf: Path) -> None:
        procs = (home / "cgroup.procs").read_text().split()
        (home / "cgroup.procs").write_text("".join(f"{p}\n" for p in procs if p != str(pid)))
        with (leaf / "cgroup.procs").open("a") as file:
            file.write(f"{pid}\n")

    monkeypatch.setattr(cgroup_module, "_enable", enable)
    monkeypatch.setattr(cgroup_module, "_move", move)
    found, problem = cgroup_module._v2(tmp_path, "/system.slice/flotilla.service")
    assert problem == "" and isinstance(found, CgroupV2)
    assert found.base == home / "flotilla"
    assert found.enforced == {"memory", "pids", "cpu"}
    assert (home / "flotilla-server" / "cgroup.procs").read_text().split() == ["111", "222"]
    assert (home / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"


def test_without_cgroups_the_notice_says_what_is_not_enforced(tmp_path: Path) -> None:
    trees = ProcessTrees("local", tmp_path, isolate=False)
    notice = trees.notice()
    assert notice is not None and "\n" not in notice
    for what in ("memory", "process count", "CPU share", "setsid"):
        assert what in notice


def test_a_missing_controller_is_named_and_daemons_still_end_with_the_cgroup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    partial = CgroupV1({"memory": tmp_path / "memory", "pids": tmp_path / "pids"})
    monkeypatch.setattr(local_tree, "_detected", lambda: Detected(partial))
    monkeypatch.setattr(local_tree, "pid_namespaces_work", lambda: False)
    trees = ProcessTrees("local", tmp_path)
    assert trees.notice() == (
        "local jobs: not enforced: CPU share, a private /tmp, /dev/shm and /proc per run (no "
        "cpu controller in cgroup v1; no PID or mount namespaces)"
    )


def test_max_pids_is_checked_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_pids"):
        LocalBackend(state_dir=tmp_path, max_pids=0)
