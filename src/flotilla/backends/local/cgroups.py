"""Control groups for the ``local`` backend: each replica in a cgroup of its own, limited to
what its job asked for, and killed whole when its run ends.

A process can leave its process group and session (``setsid``) but never its cgroup, so the
cgroup is what tracks every process of a replica; its limits are what make a job's request
(``memory: 64Mi``) a bound rather than a hint: ``memory`` (the OOM killer ends the job past
it), ``pids`` (a fork bomb stops at the fleet's ``max_pids``) and ``cpu`` (a share of the
cores by the ``cpu`` request). Slurm's ``task/cgroup`` and a Kubernetes pod do the same.

Two implementations behind one ``Cgroups`` protocol: ``CgroupV2`` on a unified hierarchy whose
``cgroup.controllers`` offers ``memory`` and ``pids`` (most hosts today), ``CgroupV1`` over the
legacy per-controller hierarchies (``memory``, ``pids``, ``cpu``, ``freezer``) otherwise.
``detect()`` picks one, or says why there is none (not root, nothing mounted).

Layout (relative to the server's own cgroup in each hierarchy, so jobs stay inside whatever
limits the server itself runs under): ``flotilla/CLUSTER-HASH.RUN_ID/TASK-REPLICA``. ``HASH``
is of the backend's state dir, so two backends of the same cluster name (tests, two servers)
never share a cgroup.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from flotilla.model.run_resources import RunResources

CONTROLLERS = ("memory", "pids", "cpu")
"""What a cgroup limits for the local backend, in the order a notice names them."""

DEFAULT_MAX_PIDS = 4096
"""Processes and threads one replica may have at once (the ``max_pids`` setting)."""

_MOUNTS = Path("/proc/self/mounts")
_OWN = Path("/proc/self/cgroup")


@dataclass(frozen=True)
class Limits:
    """What one replica may use. ``None``: not limited."""

    memory: int | None = None
    """Bytes (the job's ``memory`` request)."""
    cpu: float | None = None
    """Cores (the job's ``cpu`` request): a weight against other jobs, not a cap."""
    pids: int | None = None


class Cgroups(Protocol):
    """One host's cgroup hierarchy, as the local backend uses it. ``path`` arguments are
    relative to the server's own cgroup (see the module docstring)."""

    version: str
    """``v2`` or ``v1``."""
    enforced: frozenset[str]
    """Which of ``CONTROLLERS`` this host lets it enforce."""

    def create(self, path: str, limits: Limits) -> tuple[Path, ...]:
        """Make the cgroup (and its parents) with ``limits``; the directories whose
        ``cgroup.procs`` a process writes itself into to join it (one per v1 hierarchy).
        Raises ``OSError``."""
        ...

    def processes(self, path: str) -> list[int]:
        """The pids in the cgroup (and below it); empty when it does not exist."""
        ...

    def kill(self, path: str) -> None:
        """SIGKILL every process in the cgroup and below it, forks in flight included."""
        ...

    def memory_exceeded(self, path: str) -> bool:
        """True when the OOM killer killed a process of the cgroup for its memory limit."""
        ...

    def oom_killed(self, path: str) -> bool:
        """True when an out-of-memory kill took a process of the cgroup, whichever (the
        kernel's own count of them: ``oom_kill``; False where it keeps none)."""
        ...

    def usage(self, path: str) -> RunResources:
        """What the cgroup's processes used so far (its descendants included): CPU seconds
        and the peak of its memory, each ``None`` where this host does not count it. Read
        before ``remove``: the figures go with the cgroup."""
        ...

    def remove(self, path: str) -> None:
        """Remove the cgroup and everything below it that no process holds any more."""
        ...

    def listed(self) -> dict[str, float]:
        """The cgroups right below flotilla's own: name → when it was made (seconds since
        the epoch; the earliest over v1's hierarchies)."""
        ...


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _write(path: Path, value: str) -> None:
    with path.open("w") as file:
        file.write(value)


def _pids(text: str) -> list[int]:
    return [int(word) for word in text.split()]


def _keyed(text: str) -> dict[str, int]:
    """``memory.events`` / ``memory.oom_control``: ``key value`` lines."""
    pairs: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            pairs[key] = int(value)
    return pairs


def _number(text: str) -> int | None:
    """A file of one whole number (``memory.peak``, ``cpuacct.usage``); ``None`` when it is
    absent or says something else."""
    text = text.strip()
    return int(text) if text.isdigit() else None


def _subtree(directory: Path) -> list[Path]:
    """``directory`` and every cgroup below it, deepest first (the order rmdir needs)."""
    if not directory.is_dir():
        return []
    found = [Path(root) for root, _, _ in os.walk(directory)]
    return sorted(found, key=lambda path: len(path.parts), reverse=True)


def _made(directories: Iterable[Path]) -> dict[str, float]:
    """Name → when made (a cgroup directory's change time is its creation) of every cgroup
    right below these ``flotilla`` directories."""
    found: dict[str, float] = {}
    for directory in directories:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                if not entry.is_dir(follow_symlinks=False):
                    continue
                made = entry.stat(follow_symlinks=False).st_ctime
            except OSError:
                continue  # removed meanwhile
            found[entry.name] = min(made, found.get(entry.name, made))
    return found


def _remove_tree(directory: Path) -> None:
    for cgroup in _subtree(directory):
        # One still holding a process (exiting) stays: the next removal takes it.
        with contextlib.suppress(OSError):
            cgroup.rmdir()


def _kill_listed(directories: Iterable[Path]) -> int:
    """SIGKILL every pid listed in these cgroups; how many were listed."""
    count = 0
    for directory in directories:
        for pid in _pids(_read(directory / "cgroup.procs")):
            count += 1
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return count


class CgroupV2:
    """The unified hierarchy: one tree, controllers enabled per level in
    ``cgroup.subtree_control``, ``cgroup.kill`` to end a tree at once (Linux ≥ 5.14)."""

    version = "v2"

    def __init__(self, base: Path, enforced: frozenset[str]) -> None:
        self.base = base
        """The server's own cgroup's ``flotilla`` directory, controllers enabled in it."""
        self.enforced = enforced

    def _at(self, path: str) -> Path:
        return self.base / path

    def create(self, path: str, limits: Limits) -> tuple[Path, ...]:
        target = self._at(path)
        enable = " ".join(f"+{name}" for name in sorted(self.enforced))
        current = self.base
        for part in Path(path).parts:
            if enable:
                _enable(current, enable)
            current = current / part
            current.mkdir(exist_ok=True)
        if "memory" in self.enforced and limits.memory is not None:
            _write(target / "memory.max", str(limits.memory))
            _write_if_present(target / "memory.swap.max", "0")
            _write_if_present(target / "memory.oom.group", "1")
        if "pids" in self.enforced and limits.pids is not None:
            _write(target / "pids.max", str(limits.pids))
        if "cpu" in self.enforced and limits.cpu:
            weight = min(10000, max(1, round(limits.cpu * 100)))  # 1 core: the default 100
            _write(target / "cpu.weight", str(weight))
        return (target,)

    def processes(self, path: str) -> list[int]:
        return [pid for cgroup in _subtree(self._at(path)) for pid in _cgroup_procs(cgroup)]

    def kill(self, path: str) -> None:
        target = self._at(path)
        if not target.is_dir():
            return
        try:
            _write(target / "cgroup.kill", "1")
        except OSError:  # a kernel before 5.14: freeze, kill what is listed, thaw
            _frozen_kill(
                lambda: _subtree(target),
                freeze=lambda frozen: _write_if_present(
                    target / "cgroup.freeze", "1" if frozen else "0"
                ),
                is_frozen=lambda: "frozen 1" in _read(target / "cgroup.events"),
            )

    def memory_exceeded(self, path: str) -> bool:
        events = _keyed(_read(self._at(path) / "memory.events"))
        return events.get("oom_kill", 0) > 0 or events.get("oom_group_kill", 0) > 0

    def oom_killed(self, path: str) -> bool:
        return self.memory_exceeded(path)

    def usage(self, path: str) -> RunResources:
        # cpu.stat's usage_usec is there whatever the controllers; memory.peak since 5.19.
        target = self._at(path)
        usec = _keyed(_read(target / "cpu.stat")).get("usage_usec")
        return RunResources(
            cpu_seconds=None if usec is None else usec / 1e6,
            memory_peak=_number(_read(target / "memory.peak")),
        )

    def remove(self, path: str) -> None:
        _remove_tree(self._at(path))

    def listed(self) -> dict[str, float]:
        return _made([self.base])


class CgroupV1:
    """The legacy hierarchies, one per controller: ``memory`` (``memory.limit_in_bytes``, and
    ``memsw`` so swap is no way around it), ``pids``, ``cpu`` (``cpu.shares``), ``cpuacct``
    (the CPU time ``usage`` reads) and ``freezer``, which stops a tree from forking while it
    is killed (v1 has no ``cgroup.kill``)."""

    version = "v1"

    def __init__(self, bases: dict[str, Path]) -> None:
        self.bases = bases
        """Controller (``memory``, ``pids``, ``cpu``, ``cpuacct``, ``freezer``) → the server's own
        cgroup's ``flotilla`` directory in that controller's hierarchy."""
        self.enforced = frozenset(name for name in CONTROLLERS if name in bases)
        # One directory per hierarchy (a hierarchy may carry two controllers: cpu,cpuacct);
        # resolved once, not per replica (10,000 replicas are made in one dispatch).
        self._hierarchies = list({base.resolve(): base for base in bases.values()}.values())

    def _all(self, path: str) -> list[Path]:
        return [base / path for base in self._hierarchies]

    def create(self, path: str, limits: Limits) -> tuple[Path, ...]:
        directories = self._all(path)
        for directory in directories:
            directory.mkdir(parents=True, exist_ok=True)
        if "memory" in self.bases and limits.memory is not None:
            memory = self.bases["memory"] / path
            _write(memory / "memory.limit_in_bytes", str(limits.memory))
            # memsw (memory + swap) must be set after the memory limit it may not undercut.
            _write_if_present(memory / "memory.memsw.limit_in_bytes", str(limits.memory))
        if "pids" in self.bases and limits.pids is not None:
            _write(self.bases["pids"] / path / "pids.max", str(limits.pids))
        if "cpu" in self.bases and limits.cpu:
            shares = max(2, round(limits.cpu * 1024))  # 1 core: the default 1024
            _write(self.bases["cpu"] / path / "cpu.shares", str(shares))
        return tuple(directories)

    def processes(self, path: str) -> list[int]:
        # A replica's processes are in every hierarchy (its init joined them all): one is
        # enough to list them, and the freezer's is the one a kill acts on.
        tracking = next(
            self.bases[name] for name in ("freezer", "pids", "memory", "cpu") if name in self.bases
        )
        return sorted(
            {pid for cgroup in _subtree(tracking / path) for pid in _cgroup_procs(cgroup)}
        )

    def kill(self, path: str) -> None:
        if not self.processes(path):
            return
        freezer = self.bases.get("freezer")
        if freezer is None:  # no freezer: kill what is listed until nothing is
            _frozen_kill(lambda: [cgroup for top in self._all(path) for cgroup in _subtree(top)])
            return
        target = freezer / path
        _frozen_kill(
            lambda: [cgroup for top in self._all(path) for cgroup in _subtree(top)],
            freeze=lambda frozen: _write(
                target / "freezer.state", "FROZEN" if frozen else "THAWED"
            ),
            is_frozen=lambda: _read(target / "freezer.state").strip() == "FROZEN",
        )

    def memory_exceeded(self, path: str) -> bool:
        memory = self.bases.get("memory")
        if memory is None:
            return False
        control = _keyed(_read(memory / path / "memory.oom_control"))
        if "oom_kill" in control:  # Linux ≥ 4.13
            return control["oom_kill"] > 0
        return int(_read(memory / path / "memory.failcnt").strip() or 0) > 0

    def oom_killed(self, path: str) -> bool:
        memory = self.bases.get("memory")
        if memory is None:
            return False
        # Not memory.failcnt: hitting the limit is not a kill (the kernel may reclaim).
        return _keyed(_read(memory / path / "memory.oom_control")).get("oom_kill", 0) > 0

    def usage(self, path: str) -> RunResources:
        # cpuacct.usage: nanoseconds (its own hierarchy, or one it shares with cpu).
        accounting = self.bases.get("cpuacct") or self.bases.get("cpu")
        nanoseconds = (
            None if accounting is None else _number(_read(accounting / path / "cpuacct.usage"))
        )
        memory = self.bases.get("memory")
        peak = (
            None if memory is None else _number(_read(memory / path / "memory.max_usage_in_bytes"))
        )
        return RunResources(
            cpu_seconds=None if nanoseconds is None else nanoseconds / 1e9, memory_peak=peak
        )

    def remove(self, path: str) -> None:
        for directory in self._all(path):
            _remove_tree(directory)

    def listed(self) -> dict[str, float]:
        return _made(self._hierarchies)


FREEZE_SECONDS = 1.0
"""How long a kill waits for a freeze to take before killing anyway."""


def _frozen_kill(
    listing: Callable[[], Sequence[Path]],
    freeze: Callable[[bool], None] | None = None,
    is_frozen: Callable[[], bool] | None = None,
) -> None:
    """Freeze (when there is a freezer), SIGKILL every process listed, thaw so the kills are
    delivered; without a freezer, repeat until nothing is listed (a fork in flight)."""
    if freeze is not None and is_frozen is not None:
        try:
            freeze(True)
            deadline = time.monotonic() + FREEZE_SECONDS
            while not is_frozen() and time.monotonic() < deadline:
                time.sleep(0.001)
            _kill_listed(listing())
        finally:
            with contextlib.suppress(OSError):
                freeze(False)
        return
    for _ in range(100):
        if _kill_listed(listing()) == 0:
            return
        time.sleep(0.001)


def _cgroup_procs(directory: Path) -> list[int]:
    return _pids(_read(directory / "cgroup.procs"))


def _write_if_present(path: Path, value: str) -> None:
    try:
        _write(path, value)
    except FileNotFoundError:
        pass
    except OSError as error:
        if error.errno not in (errno.EINVAL, errno.EACCES, errno.EPERM):
            raise


def _enable(directory: Path, enable: str) -> None:
    """Enable controllers for the children of ``directory`` (a no-op when they are)."""
    if set(enable.replace("+", "").split()) <= set(
        _read(directory / "cgroup.subtree_control").split()
    ):
        return
    _write(directory / "cgroup.subtree_control", enable)


# --- detection ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Detected:
    """What ``detect`` found: the hierarchy to use, or why there is none."""

    cgroups: Cgroups | None
    problem: str = ""


def _mounts() -> list[tuple[str, Path, set[str]]]:
    """(filesystem type, mount point, options) of every cgroup mount."""
    found = []
    for line in _read(_MOUNTS).splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] in ("cgroup", "cgroup2"):
            found.append((fields[2], Path(fields[1]), set(fields[3].split(","))))
    return found


def _own_cgroups() -> dict[str, str]:
    """Controller (``""`` for the unified hierarchy) → this process's cgroup path in it."""
    own: dict[str, str] = {}
    for line in _read(_OWN).splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            own[controller] = path
    return own


SERVER_LEAF = "flotilla-server"
"""Where ``_v2`` moves the processes of the server's own cgroup (see there)."""


def _move(pid: int, leaf: Path) -> None:
    try:
        _write(leaf / "cgroup.procs", str(pid))
    except ProcessLookupError:
        pass  # exited meanwhile
    except OSError as error:
        if error.errno != errno.ESRCH:
            raise


def _v2(mount: Path, own: str) -> tuple[Cgroups | None, str]:
    """The server's own v2 cgroup, readied to hold the runs' cgroups.

    Controllers can be handed to children only from a cgroup with no process of its own (the
    root excepted): a server in a cgroup of its own (a systemd service with ``Delegate=yes``,
    a container) first moves that cgroup's processes — itself, supervisors of an earlier
    start — into a leaf, ``flotilla-server``, as systemd asks of a delegated service."""
    home = mount / own.lstrip("/")
    offered = set(_read(home / "cgroup.controllers").split())
    wanted = frozenset(name for name in CONTROLLERS if name in offered)
    if not {"memory", "pids"} <= wanted:
        return None, f"cgroup v2 at {mount} offers no memory and pids controllers"
    enable = " ".join(f"+{name}" for name in sorted(wanted))
    try:
        try:
            _enable(home, enable)
        except OSError as error:
            if error.errno != errno.EBUSY:
                raise
            leaf = home / SERVER_LEAF
            leaf.mkdir(exist_ok=True)
            for pid in _cgroup_procs(home):
                _move(pid, leaf)
            _enable(home, enable)
        base = home / "flotilla"
        base.mkdir(exist_ok=True)
    except OSError as error:
        return None, f"cannot enable {', '.join(sorted(wanted))} in {home}: {error.strerror}"
    return CgroupV2(base, wanted), ""


def _v1(mounts: list[tuple[str, Path, set[str]]], own: dict[str, str]) -> Cgroups | None:
    bases: dict[str, Path] = {}
    for kind, point, options in mounts:
        if kind != "cgroup":
            continue
        for controller in ("memory", "pids", "cpu", "cpuacct", "freezer"):
            if controller in options and controller in own:
                base = point / own[controller].lstrip("/") / "flotilla"
                try:
                    base.mkdir(exist_ok=True)
                except OSError:
                    continue
                bases[controller] = base
    if not ({"memory", "pids"} & set(bases)):
        return None
    return CgroupV1(bases)


def detect() -> Detected:
    """The hierarchy this machine lets the backend use: v2 where a usable unified hierarchy is
    mounted, the v1 controllers otherwise, or none (with the reason)."""
    if os.geteuid() != 0:
        return Detected(None, "the server does not run as root")
    mounts = _mounts()
    own = _own_cgroups()
    problems = []
    for kind, point, _ in mounts:
        if kind == "cgroup2" and "" in own:
            found, problem = _v2(point, own[""])
            if found is not None:
                return Detected(found)
            problems.append(problem)
    v1 = _v1(mounts, own)
    if v1 is not None:
        return Detected(v1)
    problems.append("no cgroup v1 memory or pids hierarchy is mounted")
    return Detected(None, "; ".join(problems))
