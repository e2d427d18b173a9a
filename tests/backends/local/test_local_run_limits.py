"""Limits of a whole ``local`` run, above its replicas' (issue 35): processes (a run of eight
replicas of 4,096 could take a machine's 32,768 pids) and a memory kill of any of its
processes. Real processes, as root."""

from __future__ import annotations

import sys

from flotilla.backends import BackendRunState
from flotilla.backends.local.backend import LocalBackend
from flotilla.backends.local.tree import ProcessTrees, run_pids_default
from tests.backends.local.test_local_cgroups import isolated  # noqa: F401
from tests.backends.support import LocalHarness, read_all, read_replica, request

FORKS = (
    "import os, time\n"
    "def barrier(name):\n"
    "    # Every replica gets there before any goes on (none exits with its processes early,\n"
    "    # none forks before all three are running).\n"
    "    open(f\"{name}-{os.environ['RANK']}\", 'w').close()\n"
    "    for _ in range(3000):\n"
    "        if all(os.path.exists(f'{name}-{rank}') for rank in range(3)):\n"
    "            return\n"
    "        time.sleep(0.01)\n"
    "barrier('running')\n"
    "started = 0\n"
    "for _ in range(30):\n"
    "    try:\n"
    "        child = os.fork()\n"
    "    except OSError:\n"
    "        break\n"
    "    if child == 0:\n"
    "        time.sleep(60)\n"
    "        os._exit(0)\n"
    "    started += 1\n"
    "print('started', started, flush=True)\n"
    "barrier('forked')\n"
)


def test_a_run_s_replicas_together_stop_at_its_max_run_pids(
    isolated: LocalHarness,  # noqa: F811
) -> None:
    """Each replica may have 40 processes, the run 50: three replicas forking 30 each get
    fewer than 50 between them (90 without the run's limit)."""
    backend = isolated.make(max_pids=40, max_run_pids=50)
    payload = {"command": [sys.executable, "-c", FORKS]}
    backend.dispatch(request(backend, "run-1", payload, replicas=3))
    status = isolated.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.SUCCEEDED, status.message
    started = [int(read_replica(backend, "run-1", "main", index).split()[-1]) for index in range(3)]
    assert sum(started) < 50, f"{started} processes started under max_run_pids=50"
    isolated.assert_gone(status)


def test_the_run_limit_defaults_to_half_the_machines_pids(
    isolated: LocalHarness,  # noqa: F811
) -> None:
    backend = isolated.make()
    assert isinstance(backend, LocalBackend)
    trees = ProcessTrees(backend.cluster, backend.state_dir or isolated.state_dir)
    with open("/proc/sys/kernel/pid_max", encoding="ascii") as file:
        assert trees.max_run_pids == run_pids_default() == int(file.read()) // 2


CHILD_OOM = (
    "import os, sys\n"
    "child = os.fork()\n"
    "if child == 0:\n"
    "    hog = b'x' * (512 * 2**20)\n"
    "    os._exit(0)\n"
    "_, status = os.waitpid(child, 0)\n"
    "print('child ended', status, flush=True)\n"
    "sys.exit(0)  # as a careless parent does: the child's fate is not the command's\n"
)


def test_a_child_killed_for_memory_fails_the_run_though_its_command_exited_0(
    isolated: LocalHarness,  # noqa: F811
) -> None:
    """Issue 35: the OOM killer took a child, the command exited 0, and the run succeeded."""
    backend = isolated.make()
    resources = {"main": {"memory": 64 * 2**20}}
    payload = {"command": [sys.executable, "-c", CHILD_OOM]}
    backend.dispatch(request(backend, "run-1", payload, resources=resources))
    status = isolated.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.FAILED, (status.message, read_all(backend, "run-1"))
    assert status.message.startswith("replica main/0 ")
    assert status.message.endswith("exceeded its memory request of 64Mi")
    assert status.over_limit
