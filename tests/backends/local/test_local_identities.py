"""A uid of its own per run of the ``local`` backend (``uid_range``; issue 23): runs cannot
read, write or signal each other, and a uid is reused only once every process of its run is
gone, across restarts of the backend. These switch users: they run as root (CI must)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from flotilla.backends import (
    BackendRunState,
    BackendUnavailable,
    CancelRequest,
    RunBusy,
    StatusRequest,
)
from flotilla.backends.local.backend import LocalBackend
from flotilla.backends.local.identity import CLAIMS, parse_uid_range
from flotilla.backends.local.run_lock import RunLocks
from tests.backends.local.test_local_isolation import needs_root
from tests.backends.support import LocalHarness, read_all, request
from tests.timing import limit, wait_until


@pytest.fixture(autouse=True)
def _root() -> None:
    needs_root()


def uids_in_range(first: int, size: int) -> str:
    """A range of its own for each test (several test processes share the machine's claims:
    they must not wait on each other's uids)."""
    base = first + (os.getpid() % 50) * 20
    return f"{base}-{base + size - 1}"


def uid_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for {pid}")


def processes_of(uid: int) -> list[int]:
    """Pids of the processes running as ``uid`` that can still run (not zombies)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields["Uid"].split()[0]) == uid and fields["State"].split()[0] not in "ZX":
            found.append(int(entry.name))
    return found


def dynamic(local: LocalHarness, uid_range: str, **config: object) -> LocalBackend:
    backend = local.make(working_dir=None, uid_range=uid_range, **config)
    assert isinstance(backend, LocalBackend)
    return backend


def test_runs_get_uids_of_their_own_and_cannot_read_write_or_kill_each_other(
    local: LocalHarness,
) -> None:
    """Issue 23: under one shared ``nobody``, job A read job B's decrypted secret from
    ``/proc/PID/environ``, wrote into B's 0700 scratch dir, and ``kill -9 -1`` killed B."""
    uid_range = uids_in_range(57000, 10)
    first, last = parse_uid_range(uid_range)
    backend = dynamic(local, uid_range)
    victim = {
        "command": "echo ready; pwd; exec sleep 60",
        "env": {"B_SECRET": "b-secret-value"},
    }
    backend.dispatch(request(backend, "run-b", victim))
    local.wait(backend, "run-b", lambda _: len(read_all(backend, "run-b").split()) == 2, "ready")
    _, b_scratch = read_all(backend, "run-b").split()
    b_pid = backend.status(StatusRequest("run-b")).replicas[0].process_id  # as this machine sees it

    attack = (
        "id -u; id -G; "
        f"cat /proc/{b_pid}/environ && echo read-environ; "
        f"touch {b_scratch}/from-a && echo wrote-scratch; "
        "kill -9 -1; echo still-here"
    )
    backend.dispatch(request(backend, "run-a", {"command": attack}))
    status = local.wait_terminal(backend, "run-a")
    seen = read_all(backend, "run-a")
    assert status.state is BackendRunState.SUCCEEDED, (status.message, seen)
    a_uid, a_groups, *_ = seen.split("\n")
    b_uid = uid_of(int(b_pid))
    assert first <= int(a_uid) <= last and first <= b_uid <= last
    assert int(a_uid) != b_uid
    assert a_groups == a_uid, "a run's only group is its own (none of root's)"
    assert "b-secret-value" not in seen and "read-environ" not in seen
    assert "wrote-scratch" not in seen and not Path(b_scratch, "from-a").exists()
    assert "still-here" in seen
    assert backend.status(StatusRequest("run-b")).state is BackendRunState.RUNNING
    assert os.path.exists(f"/proc/{b_pid}"), "A's kill -9 -1 killed B"
    assert uid_of(int(b_pid)) == b_uid
    assert os.stat(b_scratch).st_uid == b_uid and os.stat(b_scratch).st_mode & 0o777 == 0o700


def test_a_uid_is_given_back_only_once_every_process_of_its_run_is_gone(
    local: LocalHarness,
) -> None:
    """A daemon that left the run's process group (``setsid``) still runs as the run's uid:
    it is killed when the run ends, and only then may another run get that uid. The run ends
    even though the daemon still holds its output pipe."""
    uid_range = uids_in_range(58000, 1)
    backend = dynamic(local, uid_range)
    daemon = "setsid sleep 300 & echo started; id -u"
    backend.dispatch(request(backend, "run-1", {"command": daemon}))
    status = local.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.SUCCEEDED, status.message
    uid = int(read_all(backend, "run-1").split()[-1])
    assert str(uid) == uid_range.split("-")[0]

    wait_until(lambda: processes_of(uid) == [], "killed the run's daemon")
    wait_until(lambda: not (CLAIMS / str(uid)).exists(), "gave the uid back")
    backend.dispatch(request(backend, "run-2", {"command": "id -u"}))
    assert local.wait_terminal(backend, "run-2").state is BackendRunState.SUCCEEDED
    assert int(read_all(backend, "run-2")) == uid, "the only uid of the range was reused"


def test_a_restarted_backend_never_hands_out_a_uid_its_running_run_holds(
    local: LocalHarness,
) -> None:
    """The claim outlives the server: with one uid in the range and a run holding it, the
    next backend over the state dir refuses to dispatch (retried later: unavailable, not
    rejected), and hands it out again once that run has ended."""
    uid_range = uids_in_range(59000, 1)
    first = dynamic(local, uid_range)
    first.dispatch(request(first, "run-1", local.long()))
    local.wait(first, "run-1", lambda s: s.state is BackendRunState.RUNNING, "running")
    local.close_leaving_runs(first)

    second = dynamic(local, uid_range)
    with pytest.raises(BackendUnavailable, match=rf"every uid of uid_range {uid_range} is held"):
        second.dispatch(request(second, "run-2", {"command": "id -u"}))
    second.cancel(CancelRequest("run-1", grace_period=0.0))
    assert local.wait_terminal(second, "run-1").state is BackendRunState.CANCELLED
    wait_until(lambda: not (CLAIMS / uid_range.split("-")[0]).exists(), "gave the uid back")
    second.dispatch(request(second, "run-2", {"command": "id -u"}))
    assert local.wait_terminal(second, "run-2").state is BackendRunState.SUCCEEDED
    assert read_all(second, "run-2").strip() == uid_range.split("-")[0]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("1000", "must be FIRST-LAST"),
        ("9-3", "1 <= FIRST <= LAST"),
        ("0-10", "1 <= FIRST <= LAST"),
        ([1, "x"], "must be FIRST-LAST"),
    ],
)
def test_a_bad_uid_range_is_refused_naming_the_setting(
    tmp_path: Path, value: object, problem: str
) -> None:
    with pytest.raises(ValueError, match=rf"uid_range: .*{problem}"):
        LocalBackend(state_dir=tmp_path, uid_range=value)  # type: ignore[arg-type]


def test_run_as_and_uid_range_exclude_each_other(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"uid_range: set either run_as .* or uid_range"):
        LocalBackend(state_dir=tmp_path, uid_range="62000-62009", run_as="nobody")


def test_a_local_cluster_of_a_root_server_gives_each_run_a_uid_unless_its_settings_say(
    tmp_path: Path,
) -> None:
    """``flotilla up`` as root hands its uid range to every local cluster whose settings name
    nobody to run as (it used to make every job ``nobody``); a cluster's own ``run_as`` or
    ``uid_range`` wins."""
    from flotilla.model.fleet_loader import fleet_from_data
    from flotilla.service.fleet import FleetRuntime
    from flotilla.store import SqlStore
    from tests.fleet.support import fleet_data

    store = SqlStore.open(f"sqlite:///{tmp_path / 'f.db'}")
    uid_range = uids_in_range(57500, 5)
    runtime = FleetRuntime(
        store,
        {},
        local_state_dir=tmp_path / "state",
        local_uid_range=uid_range,
        local_working_dirs=("/srv/projects",),  # `up --allow-working-dir`
    )
    fleet = fleet_from_data(
        fleet_data(
            {"name": "here", "backend": "local", "settings": {"stop_runs_on_close": True}},
            {
                "name": "fixed",
                "backend": "local",
                "settings": {"run_as": "nobody", "state_dir": str(tmp_path / "fixed")},
            },
        )
    )
    try:
        runtime.install(fleet, 1)
        assert runtime.problems == {}
        here, fixed = runtime.backends["here"], runtime.backends["fixed"]
        assert isinstance(here, LocalBackend) and isinstance(fixed, LocalBackend)
        assert (here.uid_range, here.run_as) == (uid_range, None)
        assert (fixed.uid_range, fixed.run_as) == (None, "nobody")
        # Each owner's uid of the range is the store's (issue 37); a cluster naming no
        # allowed_working_dirs takes up's --allow-working-dir.
        assert here.owner_uids is store and fixed.owner_uids is None
        assert list(here.allowed_working_dirs) == ["/srv/projects"]
        here.dispatch(request(here, "run-1", {"command": "id -u"}, owner="ana"))
        wait_until(lambda: here.status(StatusRequest("run-1")).state.terminal, "run-1 to end")
        first, last = parse_uid_range(uid_range)
        assert first <= int(read_all(here, "run-1")) <= last
        assert store.owner_uids() == {"ana": int(read_all(here, "run-1"))}
    finally:
        runtime.close()
        store.close()


def test_a_uid_released_before_a_crash_is_never_swept_again_once_another_run_has_it(
    local: LocalHarness,
) -> None:
    """The backend gave a run's uid back but died before recording it; another run has that
    uid now. The restarted backend must not sweep the uid again (it would kill the new run):
    the claim is gone, so it only records the release."""
    uid_range = uids_in_range(58500, 1)
    first = dynamic(local, uid_range)
    first.dispatch(request(first, "run-1", {"command": "true"}))
    assert local.wait_terminal(first, "run-1").state is BackendRunState.SUCCEEDED
    uid = uid_range.split("-")[0]
    wait_until(lambda: not (CLAIMS / uid).exists(), "gave the uid back")
    first.dispatch(request(first, "run-2", {"command": "echo started; exec sleep 60"}))
    local.wait(first, "run-2", lambda _: read_all(first, "run-2").strip() != "", "started")
    pid = first.status(StatusRequest("run-2")).replicas[0].process_id  # as this machine sees it
    assert pid is not None
    local.close_leaving_runs(first)
    record = local.state_dir / "runs" / "run-1" / "run.json"
    data = json.loads(record.read_text())
    data["identity_released"] = False  # as if the backend died before recording it
    record.write_text(json.dumps(data))

    second = dynamic(local, uid_range)
    wait_until(lambda: json.loads(record.read_text())["identity_released"], "recorded it")
    assert second.status(StatusRequest("run-2")).state is BackendRunState.RUNNING
    assert os.path.exists(f"/proc/{pid}") and uid_of(pid) == int(uid)


def test_the_end_of_a_run_kills_its_own_processes_and_no_other_process_of_its_uid(
    local: LocalHarness,
) -> None:
    """Issue 35: the sweep of an ended run was ``kill -9 -1`` as its uid, so a second server
    over the state dir sweeping the run late killed the uid's next run (a job then ran
    twice), and a uid shared by several runs would end them all. Now only what is in the
    run's cgroups is killed: its ``setsid`` daemon goes, a process of the same uid outside
    the run (here one the test starts as that uid) stays, and the uid is still given back."""
    uid_range = uids_in_range(56000, 1)
    uid = int(uid_range.split("-")[0])
    backend = dynamic(local, uid_range)
    daemon = "setsid sleep 300 & echo started"
    backend.dispatch(request(backend, "run-1", {"command": f"{daemon}; exec sleep 60"}))
    local.wait(backend, "run-1", lambda _: "started" in read_all(backend, "run-1"), "started")
    outsider = subprocess.Popen(
        ["sleep", "300"], user=uid, group=uid, extra_groups=[], start_new_session=True
    )
    try:
        wait_until(lambda: uid_of(outsider.pid) == uid, "the outsider to run as the uid")
        run_processes = [pid for pid in processes_of(uid) if pid != outsider.pid]
        assert run_processes, "the run's command and daemon run as its uid"
        backend.cancel(CancelRequest("run-1", grace_period=0.0))
        assert local.wait_terminal(backend, "run-1").state is BackendRunState.CANCELLED
        wait_until(lambda: not (CLAIMS / str(uid)).exists(), "gave the uid back")
        assert processes_of(uid) == [outsider.pid], "the run's daemon is gone, nothing else"
        assert outsider.poll() is None, "the sweep killed a process that is not the run's"
    finally:
        outsider.kill()
        outsider.wait()


def test_a_backend_started_while_another_starts_a_run_with_a_uid_comes_up(
    local: LocalHarness,
) -> None:
    """Issue 35: a second server over the state dir, starting while the first held a run's
    lock (starting it), crashed with ``RunBusy``: giving back stale uid claims asked about
    that run. The claim is then taken as held; the run is adopted once free."""
    uid_range = uids_in_range(56500, 2)
    first = dynamic(local, uid_range)
    first.dispatch(request(first, "run-1", local.long()))
    local.wait(first, "run-1", lambda s: s.state is BackendRunState.RUNNING, "running")
    local.close_leaving_runs(first)
    record = local.state_dir / "runs" / "run-1" / "run.json"
    uid = json.loads(record.read_text())["identity"]["uid"]
    busy = RunLocks()
    busy.take(local.state_dir / "runs" / "run-1")  # as a process starting it would
    try:
        second = dynamic(local, uid_range)
        with pytest.raises(RunBusy):
            second.status(StatusRequest("run-1"))
    finally:
        busy.release(local.state_dir / "runs" / "run-1")
    assert second.status(StatusRequest("run-1")).state is BackendRunState.RUNNING
    second.cancel(CancelRequest("run-1", grace_period=0.0))
    assert local.wait_terminal(second, "run-1").state is BackendRunState.CANCELLED
    wait_until(lambda: not (CLAIMS / str(uid)).exists(), "gave the uid back")


def test_a_uid_per_run_is_refused_where_no_cgroup_can_end_a_run(tmp_path: Path) -> None:
    """Without cgroups nothing but the uid would say which processes are the run's: the
    backend refuses ``uid_range`` rather than sweep by uid (issue 35)."""
    with pytest.raises(ValueError, match=r"uid_range: a uid per owner needs cgroups"):
        LocalBackend(state_dir=tmp_path, uid_range=uids_in_range(55500, 2), isolate=False)


_PREPARES_THEN_DIES = textwrap.dedent(
    """
    import os, signal, sys
    from flotilla.backends import DispatchRequest, ReplicaPlacement
    from flotilla.backends.local import starting as local_starting
    from flotilla.backends.local.backend import LocalBackend

    def die(*_args, **_kwargs):  # killed between the uid's claim and the run's record
        os.kill(os.getpid(), signal.SIGKILL)

    local_starting.record_run = die
    backend = LocalBackend(state_dir=sys.argv[1], uid_range=sys.argv[2], working_dir=None)
    node = backend.inventory().nodes[0].name
    placement = ReplicaPlacement("main", 0, node)
    payload = {"command": "true"}
    run = sys.argv[3]
    backend.dispatch(DispatchRequest(run, "job-a", backend.cluster, (placement,), payload))
    """
)


def test_a_run_prepared_again_after_a_crash_leaves_no_claim_or_scratch_dir_behind(
    local: LocalHarness,
) -> None:
    """Issue 35: a replica killed while it prepared a run (its uid claimed and its scratch dir
    made, its record not yet written) left both behind when the other replica prepared the
    same run: a claim nobody gave back until a restart a minute later, a scratch dir for
    ever. The run's second preparation takes over the first one's claim and removes its
    scratch dir."""
    uid_range = uids_in_range(55000, 4)
    run = f"run-crashed-prepare-{os.getpid()}-{time.monotonic_ns()}"  # its own scratch names
    died = subprocess.run(
        [sys.executable, "-c", _PREPARES_THEN_DIES, str(local.state_dir), uid_range, run],
        capture_output=True,
        text=True,
        timeout=limit(60),
    )
    assert died.returncode == -signal.SIGKILL, died.stderr
    first, last = parse_uid_range(uid_range)

    def claims_of_the_run() -> list[Path]:
        """This run's claim files (other tests' runs may hold uids of the range too)."""
        return [
            claim
            for uid in range(first, last + 1)
            for claim in (CLAIMS / str(uid)).glob(f"*.{run}")
        ]

    assert len(claims_of_the_run()) == 1, "the crashed preparation claimed a uid"
    left = set(Path(tempfile.gettempdir()).glob(f"flotilla-local-{run}-*"))
    assert len(left) == 1, "the crashed preparation made a scratch dir"
    backend = dynamic(local, uid_range)
    backend.dispatch(request(backend, run, {"command": "pwd"}))
    assert local.wait_terminal(backend, run).state is BackendRunState.SUCCEEDED
    scratch = read_all(backend, run).strip()
    wait_until(lambda: not claims_of_the_run(), "the run's uid given back")
    leftovers = set(Path(tempfile.gettempdir()).glob(f"flotilla-local-{run}-*"))
    assert leftovers <= {Path(scratch)}, f"the crashed preparation's scratch dir is left: {left}"
