"""How a batch supervisor that is PID 1 of its PID namespace starts a replica's command with
no Python in the child: ``_posixsubprocess.fork_exec``, the C routine ``subprocess`` uses (a
``vfork`` where no uid/gid/groups change, a plain ``fork`` otherwise: CPython allows ``vfork``
only then), which leads a new session, drops to the run's groups, gid and uid (``setgroups``,
``setregid``, ``setreuid``: real, effective and saved), resets the signals the supervisor
ignores, closes every other descriptor and ``exec``\\ s the command with the job's environment.
Standard library only (imported by path, like ``_job_init``).

What the Python child (``_job_init._child``) did in the child is done once per batch or in the
parent (docs/performance.md, sixth pass):

- the working dir is made and entered as the job's user once per batch (the supervisor takes
  the job's groups, gid and uid as its *effective* ids for it: its real and saved ids stay
  root, so no process of the job may signal or trace it) and is the supervisor's working dir
  while it starts the batch: each command inherits it, so it is entered by the directory, not
  by its path again (a job cannot swap it for a symlink into a place its user may not enter);
- the replica's cgroups: the supervisor joins them itself for the ``fork`` (writing ``0`` to
  each ``cgroup.procs``), so the command is in them from its first instruction, and goes back
  to its own at once (a process's cgroup is its parent's at ``fork``);
- ``PR_SET_PDEATHSIG`` is not needed: when PID 1 of a namespace ends the kernel kills every
  process in it (this path is used only there);
- its pid as this machine sees it and its start time are read by the supervisor
  (``pidfd_open``, ``/proc/self/fdinfo``, ``/proc/PID/stat``), after ``exec``: ``fork_exec``'s
  error pipe says when the command runs, or why it could not start.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from typing import Any

if __package__:
    from flotilla.backends.local import _job_init
else:  # imported by ``_supervise.py`` run as a script: its sibling, by path
    import _job_init  # type: ignore[import-not-found,no-redef]

try:
    import _posixsubprocess

    _FORK_EXEC: Any = getattr(_posixsubprocess, "fork_exec", None)
except ImportError:  # pragma: no cover - every CPython on Linux has it
    _FORK_EXEC = None

_ALLOW_VFORK: list[bool] = []
"""Whether this CPython's ``fork_exec`` takes the ``allow_vfork`` argument (3.11): found at
the first call (a ``TypeError`` then) and kept."""


def available() -> bool:
    """True when this Python has ``fork_exec`` (else the Python child path is used)."""
    return _FORK_EXEC is not None


class Started:
    """A command just started: its pid here and on this machine, its start time, and the
    read end of its error pipe until its ``exec`` is known to be done (``Spawner.check``)."""

    __slots__ = ("errors", "host_pid", "pid", "refusal", "report", "ticks")

    def __init__(self, pid: int, host_pid: int, ticks: int | None, errors: int) -> None:
        self.pid, self.host_pid, self.ticks = pid, host_pid, ticks
        self.errors: int | None = errors
        self.report = b""
        self.refusal: str | None = None


class Refused(Exception):
    """The command did not start: the message is the replica's error (exit code 127)."""


def _mounts() -> list[tuple[str, str]]:
    """(mount point, cgroup path of this process there) of every cgroup hierarchy."""
    own: dict[str, str] = {}
    with open("/proc/self/cgroup", encoding="ascii") as file:
        for line in file:
            _, controllers, where = line.rstrip("\n").split(":", 2)
            own[controllers] = where
    found: list[tuple[str, str]] = []
    with open("/proc/self/mounts", encoding="utf-8") as file:
        for line in file:
            fields = line.split()
            if len(fields) < 4 or fields[2] not in ("cgroup", "cgroup2"):
                continue
            path: str | None
            if fields[2] == "cgroup2":
                path = own.get("")
            else:
                options = set(fields[3].split(","))
                path = next(
                    (
                        place
                        for names, place in own.items()
                        if names and set(names.split(",")) <= options
                    ),
                    None,
                )
            if path is not None:
                found.append((fields[1].rstrip("/"), path))
    return sorted(found, key=lambda item: len(item[0]), reverse=True)


class Spawner:
    """Starts the commands of one batch (``spec``: what its replicas share)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.argv = [os.fsencode(str(argument)) for argument in spec["argv"]]
        uid, gid, groups = spec.get("uid"), spec.get("gid"), spec.get("groups")
        self.uid = None if uid is None else int(uid)
        self.gid = None if uid is None else int(gid if gid is not None else uid)
        self.groups = None if uid is None else [int(group) for group in groups or []]
        self.null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        self._paths: dict[str | None, tuple[bytes, ...]] = {}
        self._homes: dict[str, list[str]] = {}
        self._mounts: list[tuple[str, str]] | None = None

    # --- the working dir, once per batch ------------------------------------------------

    def enter_working_dir(self) -> None:
        """Make (``make_working_dir``) and enter the working dir as the job's user; this
        process's working dir until ``leave_working_dir``. Raises ``Refused``."""
        working_dir = str(self.spec["working_dir"])
        try:
            with self._as_job():
                if self.spec.get("make_working_dir"):
                    os.makedirs(working_dir, exist_ok=True)
                os.chdir(working_dir)
        except OSError:
            with contextlib.suppress(OSError):
                os.chdir("/")
            shown = self.spec.get("shown_working_dir") or working_dir
            hint = self.spec.get("working_dir_hint")
            raise Refused(
                f"could not start: cannot enter working_dir {shown!r} as the job's user"
                + (f" ({hint})" if hint else "")
            ) from None

    @staticmethod
    def leave_working_dir() -> None:
        os.chdir("/")

    @contextlib.contextmanager
    def _as_job(self) -> Any:
        """The job's groups, gid and uid as this process's effective ids (filesystem access
        is checked against them); its real and saved ids stay, and are restored after."""
        if self.uid is None:
            yield
            return
        assert self.gid is not None and self.groups is not None
        groups, egid, euid = os.getgroups(), os.getegid(), os.geteuid()
        try:
            os.setgroups(self.groups)
            os.setegid(self.gid)
            os.seteuid(self.uid)
            yield
        finally:  # whichever step failed: all of them undone (root may set them back)
            os.seteuid(euid)
            os.setegid(egid)
            os.setgroups(groups)

    # --- one command ----------------------------------------------------------------------

    def spawn(self, replica: dict[str, Any], outputs: tuple[int, int]) -> Started:
        """Start ``replica``'s command (its ``env`` and ``cgroups``) writing into ``outputs``.
        Raises ``Refused`` (no process left) or ``OSError`` (the fork)."""
        env = [
            os.fsencode(str(name)) + b"=" + os.fsencode(str(value))
            for name, value in replica["env"].items()
        ]
        executables = self._executables(replica["env"].get("PATH"))
        cgroups = [str(directory) for directory in replica.get("cgroups") or ()]
        error_read, error_write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            homes = self._join(cgroups)
            try:
                pid = self._fork_exec(executables, env, outputs, (error_read, error_write))
            finally:
                self._leave(homes)
        except OSError as error:
            os.close(error_read)
            if isinstance(error, _Joining):
                raise Refused(self._message(error.__cause__)) from None
            raise
        finally:
            os.close(error_write)
        host_pid = _host_pid(pid)
        started = Started(pid, host_pid, _job_init.start_ticks(host_pid), error_read)
        if self.check(started, block=False) is False and started.refusal is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            raise Refused(started.refusal)
        return started

    def check(
        self, started: Started, *, block: bool, forget: Callable[[int], object] | None = None
    ) -> bool | None:
        """Whether ``started``'s command is running (``exec`` done; ``False``: it could not
        start, ``started.refusal`` says why) or, while its child has not come that far and
        not ``block``, ``None``. Its error pipe is closed once known, after ``forget`` (the
        supervisor's unregister from its event watcher): closed first, the pipe would stay
        watched while a child forked meanwhile still holds a copy of it, and its events would
        come under the number a new pipe gets next (issue 35: a blocking read there hung the
        start)."""
        descriptor = started.errors
        if descriptor is None:
            return started.refusal is None
        if block:
            os.set_blocking(descriptor, True)
        try:
            while True:
                chunk = os.read(descriptor, 4096)
                if not chunk:
                    break
                started.report += chunk
                os.set_blocking(descriptor, True)  # it writes its report, then exits
        except BlockingIOError:
            return None
        if forget is not None:
            forget(descriptor)
        os.close(descriptor)
        started.errors = None
        if started.report:
            started.refusal = self._reported(started.report)
            return False
        return True

    def _fork_exec(
        self,
        executables: tuple[bytes, ...],
        env: list[bytes],
        outputs: tuple[int, int],
        errors: tuple[int, int],
    ) -> int:
        arguments: list[Any] = [
            self.argv,
            executables,
            True,  # close_fds
            (errors[1],),
            None,  # cwd: this process's, the working dir
            env,
            self.null,
            -1,
            -1,
            outputs[0],
            -1,
            outputs[1],
            *errors,  # the child closes the read end, keeps the write end until exec
            True,  # restore_signals: SIGPIPE and SIGXFSZ, ignored here, to their default
            True,  # setsid
            -1,  # process group
            self.gid,
            self.groups,
            self.uid,
            -1,  # umask
            None,  # preexec_fn
        ]
        if not _ALLOW_VFORK:
            try:
                pid = int(_FORK_EXEC(*arguments, True))
            except TypeError:
                _ALLOW_VFORK.append(False)
            else:
                _ALLOW_VFORK.append(True)
                return pid
        if _ALLOW_VFORK[0]:
            return int(_FORK_EXEC(*arguments, True))
        return int(_FORK_EXEC(*arguments))

    def _executables(self, path: str | None) -> tuple[bytes, ...]:
        """Where ``exec`` looks for the command, as ``execvpe`` does (the job's ``PATH``)."""
        if path not in self._paths:
            command = self.argv[0]
            if os.path.dirname(command):
                found: tuple[bytes, ...] = (command,)
            else:
                env = {} if path is None else {"PATH": path}
                found = tuple(
                    os.path.join(os.fsencode(directory), command)
                    for directory in os.get_exec_path(env)
                )
            self._paths[path] = found
        return self._paths[path]

    # --- cgroups --------------------------------------------------------------------------

    def _join(self, cgroups: Sequence[str]) -> list[str]:
        """Move this process into ``cgroups``; the ones to go back to (raises ``_Joining``,
        back home already, when one cannot be joined)."""
        homes: list[str] = []
        try:
            for directory in cgroups:
                home = self._home(directory)
                _enter(directory)
                homes.append(home)
        except OSError as error:
            self._leave(homes)
            raise _Joining() from error
        return homes

    def _leave(self, homes: Sequence[str]) -> None:
        for home in homes:
            _enter(home)  # an error here is the supervisor's own: it propagates

    def _home(self, directory: str) -> str:
        """This process's own cgroup in the hierarchy of ``directory``."""
        parent = os.path.dirname(directory)
        if parent not in self._homes:
            if self._mounts is None:
                self._mounts = _mounts()
            for mount, own in self._mounts:
                if parent == mount or parent.startswith(mount + "/"):
                    self._homes[parent] = [mount + own.rstrip("/")]
                    break
            else:
                raise OSError(f"{directory} is in no cgroup hierarchy")
        return self._homes[parent][0]

    # --- messages -------------------------------------------------------------------------

    def _argv0(self) -> str:
        return str(self.spec["argv"][0]) if self.spec.get("argv") else ""

    def _message(self, error: BaseException | None) -> str:
        argv0 = self._argv0()
        if isinstance(error, OSError) and error.strerror:
            return f"could not start {argv0!r}: [Errno {error.errno}] {error.strerror}: {argv0!r}"
        return f"could not start {argv0!r}: {error}"

    def _reported(self, report: bytes) -> str:
        """The message of ``fork_exec``'s error report (``OSError:HEX:`` after ``exec`` was
        tried, with ``noexec`` when a step before it failed)."""
        name, _, rest = report.partition(b":")
        number, _, detail = rest.partition(b":")
        try:
            code = int(number, 16)
        except ValueError:
            code = 0
        if name != b"OSError" or not code:
            return f"could not start {self._argv0()!r}: {report.decode(errors='replace')}"
        error = OSError(code, os.strerror(code))
        if detail == b"noexec":
            return f"could not start {self._argv0()!r}: {error.strerror}"
        return self._message(error)


class _Joining(OSError):
    """A replica's cgroup could not be joined."""


_MEMBERS: dict[str, str] = {}
"""Hierarchy (a cgroup's parent directory) → the file this process joins a cgroup of it by."""


def _enter(directory: str) -> None:
    """Move this (single-threaded) process into the cgroup ``directory``: by its v1 ``tasks``
    file, which moves the calling thread only and so skips the kernel's threadgroup lock
    (``cgroup.procs`` takes it for writing: a grace period of RCU each time when the writes
    are a few ms apart, ~3 ms per replica for five hierarchies, docs/performance.md); by
    ``cgroup.procs`` on v2, which has no ``tasks``."""
    parent = os.path.dirname(directory)
    name = _MEMBERS.get(parent)
    if name is None:
        name = "tasks" if os.path.exists(os.path.join(directory, "tasks")) else "cgroup.procs"
        _MEMBERS[parent] = name
    descriptor = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(descriptor, b"0")
    finally:
        os.close(descriptor)


def _host_pid(pid: int) -> int:
    """``pid`` (of this namespace) as the machine sees it: a pidfd's ``fdinfo`` in the host's
    ``/proc`` (``_job_init.PROC``) names the pid in that ``/proc``'s namespace."""
    try:
        descriptor = os.pidfd_open(pid)
    except OSError:
        return pid
    try:
        with open(f"{_job_init.PROC}/self/fdinfo/{descriptor}", encoding="ascii") as file:
            for line in file:
                if line.startswith("Pid:"):
                    found = int(line.split()[1])
                    return found if found > 0 else pid
    except (OSError, ValueError):
        pass
    finally:
        os.close(descriptor)
    return pid
