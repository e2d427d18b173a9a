"""The tiny parent of every local replica: starts the command, copies its output into the
run's logs (capped), and records its exit status in a file.

Run as ``python -I -S _supervise.py`` (standard library only, so it starts fast and needs no
environment) with its launch spec, a JSON object, on stdin; its own stdout and stderr are the
replica's log files. Nothing of the job is ever the supervisor's own (issue 23): the spec
travels on stdin, not in its arguments (``/proc/PID/cmdline`` is readable by every user) nor
in its environment (``LD_PRELOAD`` there would run a job's library in a process of the
server's, root's when the server is root); the supervisor's working dir is ``/``. The job's
environment, working dir and identity are applied only in the job's own process: it drops to
the spec's ``uid``/``gid``/``groups`` first, then changes into ``working_dir`` as that user
(creating it there when ``make_working_dir``), and its ``env`` takes effect at ``exec``. The
supervisor keeps the server's identity: it must write the exit file, which the command must
not be able to forge.

Start gate: the command runs only once the run's gate file says ``go``. The backend writes it
after every replica's pid is on disk, then closes the write end of a pipe whose read end every
supervisor of the run inherits (``gate_fd``), so all of them wake at once. A backend that dies
before closes it too (the kernel does): a supervisor woken while no gate file exists claims
``abandon``, and so does a backend restarted after a crash in between. Whoever creates the file
first decides (exclusive create), so a run whose start was interrupted is either fully
tracked or never runs at all — never run twice. No timeout: a dispatch of many replicas may
take long, and a supervisor that gave up early would lose its replica.

It leads the replica's process group, so a SIGTERM to the group reaches the command
directly; the supervisor itself outlives SIGTERM to write down how the command ended. The
file is what lets a restarted backend report the outcome of a run that finished while no
backend was watching. A supervisor killed with SIGKILL writes nothing; the backend then knows
the outcome from its own records (it sent the kill, or it stopped the run for a cancel and
saw the command end: it then kills the supervisor without waiting for the file) or reports
the run lost.

Logs: the command writes into pipes; the supervisor appends what it reads to its stdout and
stderr, within the run's budget of ``log_limit`` bytes over all its replicas and streams
(a counter in ``log_usage_file``, under ``flock``). Past it, output is read and dropped, and
the stream that first lost some gets ``log_note`` as its last line.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import stat
import subprocess
import sys
import time
from typing import Any

CHUNK = 65536


def _write(path: str, outcome: dict[str, object], *, durable: bool = True) -> None:
    """Write-then-rename, as ``flotilla.files`` does (this file may import nothing of
    Flotilla): a device or FIFO at ``path`` is written in place, never replaced. Not
    ``durable``: no fsync (see ``main``)."""
    try:
        special = not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        special = False
    if special:
        with open(path, "w", encoding="utf-8") as file:
            json.dump(outcome, file)
        return
    temporary = f"{path}.tmp"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        json.dump(outcome, file)
        if durable:
            file.flush()
            os.fsync(file.fileno())
    os.replace(temporary, path)


def claim_gate(path: str, decision: str) -> str:
    """Create the gate file with ``decision`` unless it exists; return the decision in force."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        for _ in range(200):  # the winner may not have written its word yet
            with open(path, encoding="utf-8") as file:
                text = file.read().strip()
            if text:
                return text
            time.sleep(0.005)
        return "abandon"
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(decision)
        file.flush()
        os.fsync(file.fileno())
    return decision


GATE_CHECK_SECONDS = 1.0
"""How often a waiting supervisor also looks for the gate file itself (in case the pipe's
write end lives on in a process forked from the server's)."""


def _await_gate(path: str, gate_fd: int | None) -> str:
    """Wait until the backend has decided (the pipe ends, or the gate file exists)."""
    while not os.path.exists(path):
        if gate_fd is None:
            time.sleep(0.005)
            continue
        readable, _, _ = select.select([gate_fd], [], [], GATE_CHECK_SECONDS)
        if readable:
            break  # the write end is closed: the backend decided, or died
    if gate_fd is not None:
        os.close(gate_fd)
    return claim_gate(path, "abandon")


class _Budget:
    """The run's log budget, shared by all its supervisors through a counter file."""

    def __init__(self, path: str | None, limit: int | None) -> None:
        self.limit = limit
        self.exhausted = False
        self._fd = (
            None if path is None or limit is None else os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        )

    def take(self, wanted: int) -> int:
        """How many of ``wanted`` bytes may still be written (all of them without a limit)."""
        if self.limit is None or self._fd is None:
            return wanted
        if self.exhausted:
            return 0
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            raw = os.pread(self._fd, 8, 0)
            used = int.from_bytes(raw, "little") if len(raw) == 8 else 0
            granted = max(0, min(wanted, self.limit - used))
            if granted:
                os.pwrite(self._fd, (used + granted).to_bytes(8, "little"), 0)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        if granted < wanted:
            self.exhausted = True
        return granted


class _Stream:
    """One of the command's output pipes and the log it is copied into."""

    def __init__(self, source: int, target: int) -> None:
        self.source, self.target = source, target
        self.last = b"\n"
        self.noted = False

    def copy(self, data: bytes, budget: _Budget, note: str) -> None:
        granted = budget.take(len(data))
        if granted:
            _write_all(self.target, data[:granted])
            self.last = data[granted - 1 : granted]
        if granted < len(data) and not self.noted:
            self.noted = True
            _write_all(self.target, (b"" if self.last == b"\n" else b"\n") + note.encode() + b"\n")


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(descriptor, view)
        except OSError:
            return  # the log cannot be written (disk full): the command's outcome still counts
        view = view[written:]


def _pump(
    command: subprocess.Popen[bytes] | _Init, streams: list[_Stream], spec: dict[str, Any]
) -> int:
    """Copy the command's output into the logs until it exits; its return code."""
    budget = _Budget(spec.get("log_usage_file"), spec.get("log_limit"))
    note = str(spec.get("log_note") or "[log capped]")
    by_source = {stream.source: stream for stream in streams}
    try:
        exited: int | None = os.pidfd_open(command.pid)
    except (AttributeError, OSError):  # not Linux, or an old kernel: poll the command
        exited = None
    while True:
        watched = [*by_source, *([exited] if exited is not None else [])]
        readable, _, _ = select.select(watched, [], [], None if exited is not None else 0.1)
        if (exited is not None and exited in readable) or command.poll() is not None:
            break
        for source in readable:
            data = os.read(source, CHUNK)
            if data:
                by_source[source].copy(data, budget, note)
            else:  # the command closed it; it may still run
                os.close(source)
                del by_source[source]
    # The command has exited: copy what is already in the pipes, without waiting for
    # processes it left behind that still hold them.
    for source, stream in by_source.items():
        os.set_blocking(source, False)
        while True:
            try:
                data = os.read(source, CHUNK)
            except BlockingIOError:
                break
            if not data:
                break
            stream.copy(data, budget, note)
        os.close(source)
    if exited is not None:
        os.close(exited)
    return command.wait()


STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
"""What the supervisor outlives (a handler) and the command must not (the default). SIGUSR1
and SIGUSR2: a preempted job's ``preemption.signal``, sent to the whole group before the kill."""


def _enter(working_dir: str, make: bool) -> None:
    """In the command's process, after it dropped privileges: the default action for a stop
    (one that came while it was being started is pending: it ends the command now, as it
    would have), then its working dir, as itself."""
    for number in STOPS:
        signal.signal(number, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
    if make:
        os.makedirs(working_dir, exist_ok=True)
    os.chdir(working_dir)


def _start(spec: dict[str, Any], stdout: int, stderr: int) -> subprocess.Popen[bytes]:
    """Start the command as the spec's identity, in its working dir, with its environment."""
    uid, gid, groups = spec.get("uid"), spec.get("gid"), spec.get("groups")
    working_dir, make = str(spec["working_dir"]), bool(spec.get("make_working_dir"))
    # Blocked from the fork to the command's ``_enter``: a stop meanwhile would otherwise run
    # the supervisor's handler in the command's process, and be lost to it.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    try:
        return subprocess.Popen(
            [str(argument) for argument in spec["argv"]],
            env={str(name): str(value) for name, value in spec["env"].items()},
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            user=uid,
            group=gid,
            extra_groups=None if uid is None else list(groups or []),
            preexec_fn=lambda: _enter(working_dir, make),  # after the identity is dropped
            close_fds=True,
        )
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)


class _Refused(Exception):
    """The command could not be started; ``refusal`` is the whole message."""

    def __init__(self, refusal: str) -> None:
        super().__init__(refusal)
        self.refusal = refusal


def _refusal(spec: dict[str, Any], error: BaseException) -> str:
    if isinstance(error, subprocess.SubprocessError):  # the preexec step: the working dir
        shown = spec.get("shown_working_dir") or spec["working_dir"]
        return f"could not start: cannot enter working_dir {shown!r} as the job's user"
    argv0 = spec["argv"][0] if spec.get("argv") else ""
    return f"could not start {argv0!r}: {error}"


class _Init:
    """The replica's init (``_job_init.py``) seen as ``_pump`` sees a command."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.status: int | None = None

    def poll(self) -> int | None:
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.status = status
        return None if self.status is None else os.waitstatus_to_exitcode(self.status)

    def wait(self) -> int:
        while self.status is None:
            try:
                _, self.status = os.waitpid(self.pid, 0)
            except InterruptedError:  # pragma: no cover - PEP 475 retries
                continue
        return os.waitstatus_to_exitcode(self.status)


def _in_own_tree(
    spec: dict[str, Any], cgroups: list[str], pipes: tuple[int, int, int, int]
) -> dict[str, object]:
    """Run the command under an init of its own (``_job_init.py``, next to this file: ``-I``
    leaves this directory off ``sys.path``), in ``cgroups`` and, when the spec says so, its
    own PID namespace, copying its output into the logs as ``main`` does; its outcome."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _job_init  # type: ignore[import-not-found]

    out_read, out_write, err_read, err_write = pipes

    def start() -> subprocess.Popen[bytes]:  # in the init: its copies of the pipes go after
        try:
            return _start(spec, out_write, err_write)
        except (OSError, KeyError, ValueError, subprocess.SubprocessError) as error:
            raise _Refused(_refusal(spec, error)) from error
        finally:
            for descriptor in pipes:
                os.close(descriptor)

    argv0 = str(spec["argv"][0]) if spec.get("argv") else ""
    started = _job_init.spawn(start, argv0, cgroups, bool(spec.get("pid_namespace")))
    os.close(out_write)
    os.close(err_write)
    if isinstance(started, dict):
        os.close(out_read)
        os.close(err_read)
        return started
    child, reading = started
    init = _Init(child)
    _pump(init, [_Stream(out_read, 1), _Stream(err_read, 2)], spec)
    assert init.status is not None
    outcome: dict[str, object] = _job_init.finish(reading, init.status)
    return outcome


def main() -> int:
    try:
        spec = json.loads(_read_stdin())
    except ValueError as error:
        print(f"_supervise.py: no launch spec on stdin: {error}", file=sys.stderr)
        return 2
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    exit_file = str(spec["exit_file"])
    # A handler (not SIG_IGN) keeps the supervisor alive; exec resets it in the command.
    stopped: list[int] = []
    for number in STOPS:
        signal.signal(number, lambda number, _: stopped.append(number))
    if _await_gate(str(spec["gate_file"]), spec.get("gate_fd")) != "go":
        _write(exit_file, {"exit_code": None, "abandoned": True})
        return 0
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    cgroups = [str(directory) for directory in spec.get("cgroups") or ()]
    if cgroups or spec.get("pid_namespace"):
        # --- whole-tree tracking (cgroups, PID namespace): _job_init.py ---
        outcome = _in_own_tree(spec, cgroups, (out_read, out_write, err_read, err_write))
        _write(exit_file, outcome, durable=not stopped)
        code = outcome["exit_code"]
        assert isinstance(code, int)
        return code if code >= 0 else 128 - code
    try:
        command = _start(spec, out_write, err_write)
    except (OSError, KeyError, ValueError, subprocess.SubprocessError) as error:
        _write(exit_file, {"exit_code": 127, "error": _refusal(spec, error)})
        return 127
    finally:
        os.close(out_write)
        os.close(err_write)
    code = _pump(command, [_Stream(out_read, 1), _Stream(err_read, 2)], spec)
    # A command someone stopped (the backend's SIGTERM for a cancel or a limit) is written
    # without fsync: the cancel waits on it, and the outcome is already settled elsewhere —
    # the backend ends a cancelled run as soon as its command is gone, from its own record
    # (``local_ending.py``), and the loop ends a job whose cancel was requested cancelled even if
    # its run is reported lost. Only a power loss in the next seconds can lose the file.
    _write(exit_file, {"exit_code": code}, durable=not stopped)
    return code if code >= 0 else 128 - code


def _read_stdin() -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = os.read(0, CHUNK)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


if __name__ == "__main__":
    sys.exit(main())
