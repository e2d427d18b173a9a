"""How a run's supervisor (``_supervise.py``) starts one replica's command where it is not
PID 1 of a PID namespace (``_spawn.py`` does it there, with no Python in the child): by
``fork`` from itself — no interpreter of its own per replica — then, in the child, everything
that makes it the job's and nothing else's (standard library only: the supervisor imports it
by path). Also where PID namespaces work: ``new_pid_namespace``, ``die_with_parent``.

The child, still the server's identity for a moment: restores the default action of every
signal, leads a session (hence a process group) of its own, dies with the supervisor
(``PR_SET_PDEATHSIG``), joins the replica's cgroups (every process it starts is then in them:
a process can leave its session, never its cgroup), reports its pid as this machine sees it,
then drops to the run's uid/gid/groups, creates and enters the working dir as that user, and
``exec``\\ s the command with the job's environment — the only place that environment ever
takes effect. A failure of any step is reported on the supervisor's refusal pipe (one line,
written atomically) and the child exits 127.

The supervisor is PID 1 of the batch's PID namespace (``new_pid_namespace``): when it ends —
its replicas are over, or it is killed — the kernel kills every process left in the namespace,
``setsid`` daemons included.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal's own, without the enums
import contextlib
import ctypes
import json
import os
import signal
from collections.abc import Sequence
from typing import Any

CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
RESET = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGRTMIN,
    signal.SIGCHLD,
    signal.SIGPIPE,
    signal.SIGXFSZ,
)
"""The signals the supervisor handles or ignores (Python ignores SIGPIPE and SIGXFSZ): the
command gets their default action (every other one has it already: the supervisor puts back
the default of any signal it inherited as ignored, ``_supervise._default_dispositions``)."""

EVERY = frozenset(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}
"""What is blocked across a fork (as plain numbers: ``_signal.pthread_sigmask`` takes and
gives them so, where ``signal``'s makes an enum of each, twice per replica)."""

PROC = "/proc"
"""Where this process reads the host's ``/proc``: ``/proc`` itself, unless the supervisor
mounted its PID namespace's own there (``_private_mounts``), and reads the host's through a
descriptor it kept (``/proc/self/fd/N``)."""

PIPE_LINE = 3800
"""A refusal line stays below ``PIPE_BUF`` (4096), so lines of many children never mix."""


_LIBC: list[Any] = []


def _libc() -> Any:
    """The C library, loaded once (a fork's child uses the parent's: no ``dlopen`` each)."""
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def new_pid_namespace() -> bool:
    """Make the next child of this process PID 1 of a new namespace; False where the kernel
    refuses (no privilege, no namespaces)."""
    return bool(_libc().unshare(CLONE_NEWPID) == 0)


def die_with_parent(number: int = signal.SIGKILL) -> None:
    """Have the kernel send ``number`` to this process when its parent exits."""
    _libc().prctl(PR_SET_PDEATHSIG, int(number), 0, 0, 0)


def _join(cgroups: Sequence[str]) -> None:
    for directory in cgroups:
        # This process (single-threaded: a fork's child); the command and its children
        # follow it. By v1's ``tasks`` where there is one: ``cgroup.procs`` takes the kernel's
        # threadgroup lock, an RCU grace period each (see ``_spawn._enter``).
        name = "tasks" if os.path.exists(os.path.join(directory, "tasks")) else "cgroup.procs"
        with open(os.path.join(directory, name), "w", encoding="ascii") as file:
            file.write("0")


def _host_pid() -> int:
    """This process's pid as the server sees it (``/proc`` is the host's: its ``self`` link
    names the pid in the host's namespace, not the 2 or 3 this process is in its own)."""
    try:
        return int(os.readlink(f"{PROC}/self"))
    except (OSError, ValueError):
        return os.getpid()


def _refuse(descriptor: int, index: int, message: str) -> None:
    line = json.dumps({"index": index, "error": message[:PIPE_LINE]}) + "\n"
    with contextlib.suppress(OSError):
        os.write(descriptor, line.encode())


def start_command(
    spec: dict[str, Any],
    replica: dict[str, Any],
    index: int,
    outputs: tuple[int, int],
    reports: tuple[int, int],
) -> int:
    """Fork the command of ``replica`` (its ``env`` and ``cgroups``; ``spec`` holds what the
    run's replicas share: ``argv``, identity, working dir); its pid in this process's
    namespace. ``outputs``: the write ends of its stdout and stderr pipes; ``reports``: the
    write ends of the supervisor's started pipe (``index pid ticks`` lines) and refusal pipe.
    Raises ``OSError`` when the fork itself fails. Call from a single-threaded process."""
    parent = os.getpid()
    # Blocked across the fork: a stop passed on before the child leads its group (sent to
    # its pid then) waits until it has the default action, and ends it then.
    before = _signal.pthread_sigmask(signal.SIG_BLOCK, EVERY)
    try:
        child = os.fork()
    except OSError:
        _signal.pthread_sigmask(signal.SIG_SETMASK, before)
        raise
    if child:
        _signal.pthread_sigmask(signal.SIG_SETMASK, before)
        return child
    code = 127  # pragma: no cover - runs in the child, which coverage does not follow
    try:  # pragma: no cover
        _child(spec, replica, index, outputs, reports, parent)
    except BaseException as error:  # pragma: no cover
        _refuse(reports[1], index, _refusal(spec, error))
    finally:  # pragma: no cover
        os._exit(code)


class _WorkingDir(Exception):
    """The command's working dir cannot be made or entered as the job's user."""


def _refusal(spec: dict[str, Any], error: BaseException) -> str:
    if isinstance(error, _WorkingDir):
        shown = spec.get("shown_working_dir") or spec["working_dir"]
        hint = spec.get("working_dir_hint")
        return f"could not start: cannot enter working_dir {shown!r} as the job's user" + (
            f" ({hint})" if hint else ""
        )
    argv0 = spec["argv"][0] if spec.get("argv") else ""
    if isinstance(error, OSError) and error.strerror:
        return f"could not start {argv0!r}: [Errno {error.errno}] {error.strerror}: {argv0!r}"
    return f"could not start {argv0!r}: {error}"


def _child(
    spec: dict[str, Any],
    replica: dict[str, Any],
    index: int,
    outputs: tuple[int, int],
    reports: tuple[int, int],
    parent: int,
) -> None:  # pragma: no cover - runs in the child
    signal.set_wakeup_fd(-1)
    for number in RESET:
        _signal.signal(number, _signal.SIG_DFL)
    os.setsid()
    _signal.pthread_sigmask(signal.SIG_SETMASK, ())
    die_with_parent()
    if os.getppid() != parent:  # the supervisor is gone already
        os._exit(137)
    _join([str(directory) for directory in replica.get("cgroups") or ()])
    pid = _host_pid()
    ticks = start_ticks(pid)
    os.write(reports[0], f"{index} {pid} {ticks}\n".encode())
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(outputs[0], 1)
    os.dup2(outputs[1], 2)
    refusals = os.dup(reports[1])  # above 2: closed by exec (O_CLOEXEC), kept until then
    os.closerange(3, refusals)
    os.closerange(refusals + 1, 1 << 20)
    try:
        _become_the_job(spec, replica)
    except BaseException as error:
        _refuse(refusals, index, _refusal(spec, error))
        os._exit(127)


def _become_the_job(spec: dict[str, Any], replica: dict[str, Any]) -> None:  # pragma: no cover
    """Drop to the job's identity, enter its working dir, ``exec`` its command."""
    uid, gid, groups = spec.get("uid"), spec.get("gid"), spec.get("groups")
    if uid is not None:
        os.setgroups([int(group) for group in groups or []])
        os.setgid(int(gid if gid is not None else uid))
        os.setuid(int(uid))
    working_dir = str(spec["working_dir"])
    try:
        if spec.get("make_working_dir"):
            os.makedirs(working_dir, exist_ok=True)
        os.chdir(working_dir)
    except OSError as error:
        raise _WorkingDir() from error
    env = {str(name): str(value) for name, value in replica["env"].items()}
    argv = [str(argument) for argument in spec["argv"]]
    os.execvpe(argv[0], argv, env)


def start_ticks(pid: int) -> int | None:
    try:
        with open(f"{PROC}/{pid}/stat", encoding="ascii") as file:
            text = file.read()
    except OSError:
        return None
    return int(text[text.rfind(")") + 2 :].split()[19])
