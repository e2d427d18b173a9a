"""A run of the ``local`` backend has its own ``/tmp``, ``/dev/shm`` and ``/proc`` (issue 35):
what it writes there counts in its memory request and is gone with it, and it sees only its
own processes. Real processes, as root, with a uid of its own per run (``uid_range``)."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from flotilla.backends import BackendRunState, StatusRequest
from flotilla.backends.local.backend import LocalBackend
from tests.backends.local.test_local_identities import uid_of, uids_in_range
from tests.backends.local.test_local_isolation import needs_root
from tests.backends.support import LocalHarness, read_all, request


@pytest.fixture(autouse=True)
def _root() -> None:
    needs_root()


def dynamic(local: LocalHarness, first: int, size: int = 10) -> LocalBackend:
    backend = local.make(working_dir=None, uid_range=uids_in_range(first, size))
    assert isinstance(backend, LocalBackend)
    return backend


def test_files_in_tmp_and_dev_shm_are_the_runs_own_and_gone_with_it(
    local: LocalHarness,
) -> None:
    """Issue 35: eight jobs of 128Mi left 922 MiB in the host's ``/dev/shm``."""
    backend = dynamic(local, 52000)
    tag = uuid.uuid4().hex[:12]
    host_file = Path("/tmp") / f"host-{tag}"
    host_file.write_text("the host's\n")
    os.chmod(host_file, 0o644)
    try:
        command = (
            f"head -c 16777216 /dev/zero > /dev/shm/{tag}-$FLOTILLA_RUN && "
            f"head -c 1048576 /dev/zero > /tmp/{tag}-$FLOTILLA_RUN && "
            f"ls /dev/shm /tmp; cat {host_file} || echo no-host-file; pwd"
        )
        runs = [f"run-{index}" for index in range(8)]
        for run in runs:
            backend.dispatch(
                request(
                    backend,
                    run,
                    {"command": command},
                    resources={"main": {"memory": 128 * 2**20}},
                )
            )
        for run in runs:
            status = local.wait_terminal(backend, run)
            seen = read_all(backend, run)
            assert status.state is BackendRunState.SUCCEEDED, (status.message, seen)
            # Its own files only: none of the other runs', not the host's.
            assert f"{tag}-{run}" in seen
            assert [line for line in seen.split() if tag in line] == [f"{tag}-{run}"] * 2
            assert "no-host-file" in seen
        left = [path for place in ("/dev/shm", "/tmp") for path in Path(place).glob(f"{tag}-*")]
        assert left == [], "a run's files outlived it on the host"
    finally:
        host_file.unlink()


def test_what_a_run_writes_to_dev_shm_counts_in_its_memory_request(
    local: LocalHarness,
) -> None:
    """A 32Mi request cannot keep 128Mi in ``/dev/shm`` (the host's, formerly)."""
    backend = dynamic(local, 52200)
    tag = uuid.uuid4().hex[:12]
    command = f"head -c 134217728 /dev/zero > /dev/shm/{tag} && echo kept-it"
    backend.dispatch(
        request(backend, "run-1", {"command": command}, resources={"main": {"memory": 32 * 2**20}})
    )
    status = local.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.FAILED, status.message
    assert "kept-it" not in read_all(backend, "run-1")
    assert list(Path("/dev/shm").glob(f"{tag}*")) == []


@pytest.fixture
def other_tenant() -> Iterator[str]:
    """A process of another user on the machine, a token in its command line."""
    token = f"other-tenant-{uuid.uuid4().hex[:12]}"
    process = subprocess.Popen(
        ["sh", "-c", f"sleep 600; : {token}"],
        user="nobody",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield token
    finally:
        process.kill()
        process.wait()


def test_a_run_sees_its_own_processes_in_proc_not_the_hosts(
    local: LocalHarness, other_tenant: str
) -> None:
    """Issue 35: every tenant's command lines were in a job's ``/proc``."""
    assert any(other_tenant in path.read_text() for path in Path("/proc").glob("*/cmdline"))
    backend = dynamic(local, 52400)
    command = (
        "cat /proc/[0-9]*/cmdline | tr '\\0' ' '; echo; "
        f"test -e /proc/{os.getpid()}/stat && echo sees the $((1 + 1)) server; "
        "ls -d /proc/[0-9]* | wc -l; exec sleep 60"
    )
    backend.dispatch(request(backend, "run-1", {"command": command}))
    status = local.wait(
        backend, "run-1", lambda _: len(read_all(backend, "run-1").splitlines()) >= 2, "listed"
    )
    seen = read_all(backend, "run-1")
    assert other_tenant not in seen
    assert "sees the 2 server" not in seen
    # The batch's init (its supervisor), the shell, and what the shell ran: a handful.
    assert int(seen.splitlines()[-1]) <= 5, seen
    # The backend still knows the command by its pid on this machine.
    [replica] = backend.status(StatusRequest("run-1")).replicas
    assert replica.process_id is not None and status.state is BackendRunState.RUNNING
    assert uid_of(replica.process_id) >= 52400
    assert "sleep" in Path(f"/proc/{replica.process_id}/cmdline").read_text()
    assert backend.state_dir is not None
    supervisor_log = backend.state_dir / "runs" / "run-1" / "supervisor-0.log"
    assert supervisor_log.read_text() == "", "the supervisor could not make the mounts"
