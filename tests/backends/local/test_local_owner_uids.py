"""A uid of each owner's own (issue 37): with ``owner_uids`` (the server's store), every run
of one owner runs as that owner's uid of the range, so its runs share files; another owner's
runs get another uid and cannot read them. Each run keeps its own cgroups: the end of one run
kills what is left of it, never the owner's other running runs, and the uid's claim stays
until the owner's last run is over. These switch users: they run as root (CI must)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from flotilla.backends import BackendRunState, BackendUnavailable, CancelRequest
from flotilla.backends.local.backend import LocalBackend
from flotilla.backends.local.identity import claim_owner, claims_directory
from flotilla.model.owner_uids import OwnerUidRequest
from flotilla.store import SqlStore
from tests.backends.local.test_local_identities import processes_of, uids_in_range
from tests.backends.local.test_local_isolation import needs_root
from tests.backends.support import LocalHarness, read_all, request
from tests.timing import wait_until


@pytest.fixture(autouse=True)
def _root() -> None:
    needs_root()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    store = SqlStore.open(f"sqlite:///{tmp_path}/flotilla.db")
    try:
        yield store
    finally:
        store.close()


def claim_name(backend: LocalBackend, run_id: str) -> str:
    return f"{claim_owner(backend.state_dir or Path())}.{run_id}"


def test_runs_of_one_owner_share_its_uid_and_another_owner_cannot_read_their_files(
    local: LocalHarness, store: SqlStore, tmp_path: Path
) -> None:
    uid_range = uids_in_range(56000, 10)
    backend = local.make(working_dir=None, uid_range=uid_range, owner_uids=store)
    assert isinstance(backend, LocalBackend)
    shared = Path("/var/tmp") / f"flotilla-owner-test-{os.getpid()}"
    shared.mkdir(mode=0o777, exist_ok=True)
    os.chmod(shared, 0o1777)
    data = shared / "step1.out"
    try:
        step1 = f"umask 077; echo one > {data}; id -u"
        backend.dispatch(request(backend, "run-1", {"command": step1}, owner="alice"))
        assert local.wait_terminal(backend, "run-1").state is BackendRunState.SUCCEEDED
        backend.dispatch(
            request(backend, "run-2", {"command": f"echo two >> {data}; id -u"}, owner="alice")
        )
        status = local.wait_terminal(backend, "run-2")
        assert status.state is BackendRunState.SUCCEEDED, (
            status.message,
            read_all(backend, "run-2"),
        )
        assert data.read_text() == "one\ntwo\n"
        alice = int(read_all(backend, "run-1").split()[-1])
        assert int(read_all(backend, "run-2").split()[-1]) == alice
        assert store.owner_uids()["alice"] == alice

        backend.dispatch(request(backend, "run-3", {"command": f"id -u; cat {data}"}, owner="bob"))
        status = local.wait_terminal(backend, "run-3")
        seen = read_all(backend, "run-3")
        assert status.state is BackendRunState.FAILED, seen
        assert "one" not in seen and int(seen.split()[0]) != alice
    finally:
        data.unlink(missing_ok=True)
        shared.rmdir()


def test_the_end_of_one_run_leaves_the_owners_other_runs_and_their_claim(
    local: LocalHarness, store: SqlStore
) -> None:
    """Today's sweep kills what is left in the ended run's cgroups only: a daemon of the ended
    run goes, the owner's running run (same uid) stays, and so does the uid's claim."""
    uid_range = uids_in_range(55000, 10)
    backend = local.make(working_dir=None, uid_range=uid_range, owner_uids=store)
    assert isinstance(backend, LocalBackend)
    backend.dispatch(request(backend, "run-long", {"command": "exec sleep 60"}, owner="ann"))
    running = local.wait(
        backend,
        "run-long",
        lambda s: s.state is BackendRunState.RUNNING and s.replicas[0].process_id is not None,
        "running",
    )
    long_pid = running.replicas[0].process_id
    assert long_pid is not None
    daemon = "setsid sleep 300 & id -u"
    backend.dispatch(request(backend, "run-short", {"command": daemon}, owner="ann"))
    assert local.wait_terminal(backend, "run-short").state is BackendRunState.SUCCEEDED
    uid = int(read_all(backend, "run-short").split()[-1])
    wait_until(lambda: processes_of(uid) == [int(long_pid)], "killed only the ended run's daemon")
    claim = claims_directory(backend.state_dir or Path()) / str(uid)
    wait_until(
        lambda: os.listdir(claim) == [claim_name(backend, "run-long")], "run-short's claim gone"
    )
    backend.cancel(CancelRequest("run-long"))
    assert local.wait_terminal(backend, "run-long").state is not BackendRunState.RUNNING
    wait_until(lambda: not claim.exists(), "gave the uid's claim back after its last run")
    assert store.owner_uids()["ann"] == uid, "the owner keeps its uid for its next runs"


def test_a_held_uid_is_never_given_to_an_owner_and_one_held_elsewhere_waits(
    local: LocalHarness, store: SqlStore
) -> None:
    """A uid a run of another server holds (or a run of a uid per run) is not given to a new
    owner; an owner whose uid another server's run holds waits for it (the dispatch is
    retried) rather than run beside that other owner's run."""
    uid_range = uids_in_range(54000, 10)
    first = int(uid_range.split("-")[0])
    backend = local.make(working_dir=None, uid_range=uid_range, owner_uids=store)
    assert isinstance(backend, LocalBackend)
    claims = claims_directory(backend.state_dir or Path())
    held, old = claims / str(first), claims / str(first + 1)
    held.mkdir(mode=0o700)
    (held / "0123456789abcdef.run-elsewhere").touch()
    old.mkdir(mode=0o700)  # a run of this server's from before owners had uids of their own
    (old / claim_name(backend, "run-old")).touch()
    try:
        backend.dispatch(request(backend, "run-a", {"command": "id -u"}, owner="cy"))
        assert local.wait_terminal(backend, "run-a").state is BackendRunState.SUCCEEDED
        assert int(read_all(backend, "run-a")) == first + 2 == store.owner_uids()["cy"]
        store.owner_uid(OwnerUidRequest("dee", first, first))  # dee's uid: the held one
        with pytest.raises(BackendUnavailable, match="held by a run of another Flotilla"):
            backend.dispatch(request(backend, "run-b", {"command": "id -u"}, owner="dee"))
        assert os.listdir(held) == ["0123456789abcdef.run-elsewhere"]
    finally:
        (held / "0123456789abcdef.run-elsewhere").unlink()
        (old / claim_name(backend, "run-old")).unlink()
        held.rmdir()
        old.rmdir()
