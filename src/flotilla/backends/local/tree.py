"""Whole-tree tracking and limits of the ``local`` backend's replicas.

Each replica runs in a cgroup of its own (``cgroups.py``: its memory, pids and CPU share
limited to what its job asked for; ``max_pids`` is per replica, so a run of 10,000 replicas is
not refused by its own limit), killed when the replica is found over, and in the PID namespace
of its batch (up to ``local_starting.BATCH`` replicas of the run), whose PID 1 is the batch's
supervisor: when it ends, or is killed, every process of the namespace goes (``_supervise.py``).
So cancel, finish and ``max_runtime`` end every process a job started, ``setsid`` daemons
included, and a job asking ``memory: 64Mi`` that allocates more is OOM-killed and fails with
"exceeded its memory request of 64Mi" — a failure of the job, not of the node, for retries.

Where this machine allows neither (the server is not root, no cgroup controllers mounted), the
backend runs jobs as before and ``notice()`` says, in one line, what is then not enforced.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from flotilla.backends.interface import DispatchRequest
from flotilla.backends.local import cgroups
from flotilla.backends.local.records import Replica, Run
from flotilla.model.quantity import format_quantity

log = logging.getLogger(__name__)


@functools.cache
def pid_namespaces_work() -> bool:
    """True when a process of this server may make a PID namespace (root, a kernel with
    them): tried once, in a child process."""
    return _unshare_works(0x20000000)


@functools.cache
def mount_namespaces_work() -> bool:
    """True when a process of this server may make a mount namespace and mount in it (root):
    tried once, in a child process (a batch's own ``/tmp``, ``/dev/shm`` and ``/proc``,
    ``_private_mounts.py``)."""
    return _unshare_works(0x00020000)


def _unshare_works(flags: int) -> bool:
    probe = (
        f"import ctypes; raise SystemExit(ctypes.CDLL(None, use_errno=True).unshare({flags}) != 0)"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", probe],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


PID_MAX = Path("/proc/sys/kernel/pid_max")


def run_pids_default() -> int:
    """Half of this machine's ``pid_max`` (32,768 on many): a run may not take more, so that
    one run alone never exhausts the machine's processes (issue 35: an 8-replica run could,
    4,096 per replica)."""
    try:
        machine = int(PID_MAX.read_text().strip())
    except (OSError, ValueError):
        machine = 32768
    return max(1, machine // 2)


@functools.cache
def _detected() -> cgroups.Detected:
    return cgroups.detect()


def cgroups_problem() -> str | None:
    """Why this machine gives the local backend no cgroups (``None``: it does). A uid of its
    own per run needs them (``LocalBackend``: a run's end kills what its cgroups hold)."""
    detected = _detected()
    return None if detected.cgroups is not None else detected.problem or "no cgroups"


def memory_message(request: float) -> str:
    """The reason a replica OOM-killed in its cgroup fails with."""
    return f"exceeded its memory request of {format_quantity('memory', request)}"


def oom_message(request: float | None) -> str:
    """The reason a replica fails with when the out-of-memory killer took one of its
    processes, not its command (which may have exited 0)."""
    if request is None:
        return "had a process killed by the out-of-memory killer"
    return (
        "had a process killed by the out-of-memory killer: exceeded its memory request of "
        f"{format_quantity('memory', request)}"
    )


LEFTOVER_AGE = 300.0
"""Seconds a run's cgroup must have existed before a sweep of leftovers may remove it (when
no process is in it): one just made for a run that is starting, by a server of its own, is
empty too until the run's processes join it."""

RUN_CGROUP = re.compile(r"^.+-[0-9a-f]{12}\.[A-Za-z0-9._-]+$")
"""The name of a run's cgroup (``ProcessTrees.run_path``): ``CLUSTER-HASH.RUN_ID``."""


def sweep_leftovers(
    hierarchy: cgroups.Cgroups | None = None,
    *,
    older_than: float | None = None,
    now: float | None = None,
) -> int:
    """Remove the run cgroups that no process holds and that were made more than
    ``older_than`` (``LEFTOVER_AGE``) seconds ago: what a server killed with ``kill -9``
    leaves behind when it never starts again over its state dir (a server that does
    removes its own runs'). Of every server of this machine under the same cgroup, not only
    this one's. How many were removed (``hierarchy``: this machine's, by default)."""
    if hierarchy is None:
        hierarchy = _detected().cgroups
        if hierarchy is None:
            return 0
    now = time.time() if now is None else now
    older_than = LEFTOVER_AGE if older_than is None else older_than
    removed = 0
    for name, made in sorted(hierarchy.listed().items()):
        if not RUN_CGROUP.match(name) or now - made < older_than:
            continue
        if hierarchy.processes(name):
            continue  # a run still going (or its processes still exiting)
        hierarchy.remove(name)
        if name not in hierarchy.listed():
            removed += 1
    if removed:
        log.info("removed %d leftover run cgroup(s)", removed)
    return removed


@dataclass
class ProcessTrees:
    """The local backend's cgroups and PID namespaces (``isolate=False``: neither)."""

    cluster: str
    state_dir: Path
    max_pids: int = cgroups.DEFAULT_MAX_PIDS
    isolate: bool = True
    max_run_pids: int | None = None
    """Processes and threads one run may have at once, all its replicas together (its cgroup
    above theirs); ``None``: half of this machine's ``pid_max`` (``run_pids_default``)."""
    hierarchy: cgroups.Cgroups | None = field(init=False, default=None)
    problem: str = field(init=False, default="")
    """Why there are no cgroups (empty when there are)."""
    pid_namespace: bool = field(init=False, default=False)
    private_mounts: bool = field(init=False, default=False)
    """Whether each batch gets its own ``/tmp``, ``/dev/shm`` and ``/proc`` (a mount
    namespace, in its PID namespace: ``_private_mounts.py``) when its job runs as a user other
    than root."""
    _removable: list[str] = field(init=False, default_factory=list)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if isinstance(self.max_pids, bool) or not isinstance(self.max_pids, int):
            raise ValueError(f"max_pids: must be a whole number, not {self.max_pids!r}")
        if not 1 <= self.max_pids <= 4_194_304:
            raise ValueError(f"max_pids: must be between 1 and 4194304, not {self.max_pids}")
        if self.max_run_pids is None:
            self.max_run_pids = run_pids_default()
        elif isinstance(self.max_run_pids, bool) or not isinstance(self.max_run_pids, int):
            raise ValueError(f"max_run_pids: must be a whole number, not {self.max_run_pids!r}")
        elif not 1 <= self.max_run_pids <= 4_194_304:
            raise ValueError(
                f"max_run_pids: must be between 1 and 4194304, not {self.max_run_pids}"
            )
        if not self.isolate:
            self.problem = "isolation is off for this cluster"
            return
        found = _detected()
        self.hierarchy, self.problem = found.cgroups, found.problem
        self.pid_namespace = pid_namespaces_work()
        self.private_mounts = self.pid_namespace and mount_namespaces_work()
        notice = self.notice()
        if notice:  # info: ``flotilla up`` shows it, once, as a line of its start
            log.info("cluster %s: %s", self.cluster, notice)

    def run_path(self, run_id: str) -> str:
        """The run's cgroup, right below the server's ``flotilla`` one: the cluster, a hash of
        the state dir (two backends of one cluster name never share it) and the run id. No
        level of the backend's own, which a backend that dies would leave behind empty."""
        digest = hashlib.sha256(str(self.state_dir).encode()).hexdigest()[:12]
        name = re.sub(r"[^A-Za-z0-9._-]", "_", self.cluster)[:64]  # one directory, whatever
        return f"{name}-{digest}.{run_id}"

    def path(self, run: Run, replica: Replica | None = None) -> str:
        run_path = self.run_path(run.run_id)
        if replica is None:
            return run_path
        return f"{run_path}/{replica.placement.task}-{replica.placement.replica}"

    def not_enforced(self) -> list[str]:
        """What a job's request does not bound here, in words. Daemons end with their job
        when either the namespace or the cgroup (killed when the replica ends) is there."""
        enforced = self.hierarchy.enforced if self.hierarchy is not None else frozenset()
        names = {"memory": "memory", "pids": "process count", "cpu": "CPU share"}
        missing = [names[name] for name in cgroups.CONTROLLERS if name not in enforced]
        if self.hierarchy is None and not self.pid_namespace:
            missing.append("ending setsid daemons with their job")
        if not self.private_mounts:
            missing.append("a private /tmp, /dev/shm and /proc per run")
        return missing

    def notice(self) -> str | None:
        """One line for ``flotilla up`` when something is not enforced, else ``None``."""
        missing = self.not_enforced()
        if not missing:
            return None
        if self.hierarchy is None:
            why = self.problem
        else:
            absent = [name for name in cgroups.CONTROLLERS if name not in self.hierarchy.enforced]
            reasons = []
            if absent:
                reasons.append(
                    f"no {', '.join(absent)} controller in cgroup {self.hierarchy.version}"
                )
            if not self.private_mounts:
                reasons.append("no PID or mount namespaces")
            why = "; ".join(reasons)
        return f"local jobs: not enforced: {', '.join(missing)} ({why})"

    def prepare_run(self, run: Run) -> None:
        """Make the run's cgroup, above its replicas', with its ``max_run_pids``: one run's
        replicas together cannot exhaust the machine's pids (each replica's ``max_pids`` bounds
        it alone). Raises ``OSError`` when it cannot be made."""
        if self.hierarchy is not None:
            self.hierarchy.create(self.path(run), cgroups.Limits(pids=self.max_run_pids))

    def prepare(self, run: Run, replica: Replica, request: DispatchRequest) -> tuple[Path, ...]:
        """The cgroup directories the replica joins (made now, with its limits). Raises
        ``OSError`` when its cgroup cannot be made."""
        if self.hierarchy is None:
            return ()
        wanted = request.resources.get(replica.placement.task, {})
        memory = wanted.get("memory")
        cpu = wanted.get("cpu")
        limits = cgroups.Limits(
            memory=int(memory) if memory else None,
            cpu=float(cpu) if cpu else None,
            pids=self.max_pids,
        )
        if memory and "memory" in self.hierarchy.enforced:
            replica.memory_request = float(memory)
        return self.hierarchy.create(self.path(run, replica), limits)

    def ended(self, run: Run, replica: Replica) -> None:
        """``replica`` was just found over: kill whatever of it is left in its cgroup (the
        namespace's end already did, unless there is none), keep the CPU time and peak memory
        it used (``flotilla sacct``), and say so when it failed for exceeding its memory
        request."""
        if self.hierarchy is None:
            return
        path = self.path(run, replica)
        self.hierarchy.kill(path)
        used = self.hierarchy.usage(path)  # before the cgroup goes (``settled``, ``sweep``)
        replica.cpu_seconds, replica.memory_peak = used.cpu_seconds, used.memory_peak
        request = replica.memory_request
        if request is not None and not replica.succeeded and self.hierarchy.memory_exceeded(path):
            replica.error, replica.over_memory = memory_message(request), True
        elif replica.error is None and not replica.vanished and self.hierarchy.oom_killed(path):
            # Any process of it, not only its command (issue 35: a child killed for memory
            # left a command that exited 0, and the run "succeeded"); v2's memory.oom.group
            # kills the whole replica then, v1 only the child.
            replica.error = oom_message(request)
            replica.over_memory = request is not None

    def end_run(self, run: Run) -> bool:
        """Kill whatever is left of ``run`` in its cgroups (a process never leaves its
        cgroup: ``setsid`` daemons included) and nothing else; True once none of its
        processes is left. ``False`` without cgroups: nothing here can tell."""
        if self.hierarchy is None:
            return False
        path = self.path(run)
        self.hierarchy.kill(path)
        return not self.hierarchy.processes(path)

    def settled(self, run: Run) -> None:
        """The run is over: its cgroups go at the next ``sweep``, off the cancel's path
        (removing a memory cgroup takes the kernel milliseconds)."""
        if self.hierarchy is not None:
            with self._lock:
                self._removable.append(self.path(run))

    def sweep(self) -> None:
        """Remove the cgroups of the runs settled since the last sweep (the monitor thread,
        outside the backend's lock)."""
        with self._lock:
            paths, self._removable = self._removable, []
        if self.hierarchy is not None:
            for path in paths:
                self.hierarchy.remove(path)

    def close(self) -> None:
        """Remove what is left to remove (the runs still going keep theirs, for a
        successor)."""
        self.sweep()
