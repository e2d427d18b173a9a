"""How the ``local`` backend's batch supervisor starts a command where it is PID 1 of a PID
namespace (``_spawn.py``: no Python in the child): the command gets what a command started
by hand gets — no signal blocked or ignored, a session of its own, the job's identity — in its
replica's cgroups and nobody else's, with the same reasons as before when it cannot start."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from flotilla.backends import BackendRunState, StatusRequest
from flotilla.backends.local.backend import LocalBackend
from flotilla.backends.local.tree import ProcessTrees
from tests.backends.local.test_local_cgroups import _bases, isolated  # noqa: F401  (the fixture)
from tests.backends.support import LocalHarness, read_all, request
from tests.timing import wait_until


def _status_fields(text: str) -> dict[str, str]:
    fields = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.strip()
    return fields


@contextlib.contextmanager
def ignoring(*numbers: signal.Signals) -> Iterator[None]:
    """This process (the server) ignores ``numbers`` meanwhile, as ``flotilla up &`` from a
    script does SIGINT and SIGQUIT: an ignored signal survives ``exec``."""
    before = {number: signal.signal(number, signal.SIG_IGN) for number in numbers}
    try:
        yield
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


@pytest.mark.parametrize("run_as", [None, "nobody"])
def test_a_command_starts_with_no_signal_blocked_or_ignored_as_the_jobs_user(
    isolated: LocalHarness,  # noqa: F811
    run_as: str | None,
) -> None:
    """A command that inherited an ignored SIGPIPE or a blocked SIGTERM would misbehave in a
    pipeline or outlive a stop; as ``nobody`` it runs with a ``fork``, as root with a
    ``vfork``: both reset the signals. The server here ignores SIGQUIT and SIGINT, whatever
    the test runner's own (issue 41: the test passed or failed with how it was started)."""
    backend = isolated.make(working_dir=None, run_as=run_as)
    with ignoring(signal.SIGQUIT, signal.SIGINT):
        backend.dispatch(request(backend, "run-1", {"command": ["cat", "/proc/self/status"]}))
        status = isolated.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.SUCCEEDED
    fields = _status_fields(read_all(backend, "run-1"))
    assert int(fields["SigBlk"], 16) == 0 and int(fields["SigIgn"], 16) == 0
    uid = 65534 if run_as == "nobody" else 0
    assert fields["Uid"].split() == [str(uid)] * 4
    assert fields["Groups"].split() == ([] if run_as is None else ["65534"])
    if run_as is None:  # as root, the host's /proc: its pid there, then in its namespace
        host_pid, *inner = fields["NSpid"].split()
        assert inner, "not in a PID namespace of its own batch"
        assert status.replicas[0].process_id == int(host_pid)  # the pid on this machine
    else:  # the /proc of its batch's PID namespace (issue 35): its pid there only, a small one
        assert fields["NSpid"].split() == [fields["Pid"]] and int(fields["Pid"]) <= 3
        assert status.replicas[0].process_id != int(fields["Pid"])  # the pid on this machine


def test_each_replicas_cgroups_hold_its_command_and_nothing_of_the_supervisor(
    isolated: LocalHarness,  # noqa: F811
) -> None:
    """The supervisor joins a replica's cgroups for the fork and goes back to its own."""
    backend = isolated.make(working_dir=None, run_as="nobody")
    assert isinstance(backend, LocalBackend)
    resources = {"main": {"memory": 64 * 2**20}}
    payload = {"command": ["sleep", "1000"]}
    backend.dispatch(request(backend, "run-1", payload, replicas=3, resources=resources))
    wait_until(
        lambda: all(r.process_id for r in backend.status(StatusRequest("run-1")).replicas),
        "started every replica",
    )
    trees = ProcessTrees(backend.cluster, backend.state_dir or Path())
    assert trees.hierarchy is not None
    for replica in backend.status(StatusRequest("run-1")).replicas:
        path = f"{trees.run_path('run-1')}/main-{replica.replica}"
        assert trees.hierarchy.processes(path) == [replica.process_id]
        with open(f"/proc/{replica.process_id}/cgroup", encoding="ascii") as file:
            joined = [line for line in file if line.rstrip().endswith(f"/main-{replica.replica}")]
        assert len(joined) == len(_bases(trees.hierarchy))  # every hierarchy's


def test_a_command_that_cannot_start_says_why_as_before(
    isolated: LocalHarness,  # noqa: F811
    tmp_path: Path,
) -> None:
    closed = tmp_path / "closed"
    (closed / "inside").mkdir(parents=True)
    os.chmod(closed, 0o700)  # root's: nobody may not enter it
    backend = isolated.make(working_dir=None, run_as="nobody", allowed_working_dirs=[str(closed)])
    missing = {"command": ["/no/such/program"]}
    backend.dispatch(request(backend, "no-program", missing, replicas=2))
    inside = {"command": ["pwd"], "working_dir": str(closed / "inside")}
    backend.dispatch(request(backend, "no-entry", inside, replicas=2))
    no_program = isolated.wait_terminal(backend, "no-program")
    no_entry = isolated.wait_terminal(backend, "no-entry")
    assert no_program.state is BackendRunState.FAILED and no_program.exit_code == 127
    # Either replica's reason may come first: the rest of the message is the same.
    assert no_program.message.split(" ", 2)[2] == (
        "could not start '/no/such/program': [Errno 2] No such file or "
        "directory: '/no/such/program'"
    )
    assert no_entry.state is BackendRunState.FAILED and no_entry.exit_code == 127
    assert no_entry.message.split(" ", 2)[2].startswith(
        f"could not start: cannot enter working_dir {str(closed / 'inside')!r} as the job's user"
        " (it runs as "  # and how to let it in
    )
    assert read_all(backend, "no-entry") == ""


def test_a_command_gets_sigquit_at_its_default_from_a_server_that_ignores_it(
    local: LocalHarness,
) -> None:
    """Issue 41: a server started with SIGQUIT ignored passed the ignore on to every job, so
    ``kill -QUIT`` no longer ended it. Without a PID namespace as with one."""
    backend = local.make(working_dir=None)
    with ignoring(signal.SIGQUIT):
        backend.dispatch(request(backend, "run-1", {"command": "kill -QUIT $$; sleep 30"}))
        status = local.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.FAILED
    assert status.replicas[0].exit_code == -signal.SIGQUIT
