"""The supervisor of a batch of a ``local`` run's replicas (up to ``local_starting.BATCH``):
starts each replica's command by ``fork`` from itself, copies their output into the run's logs
(capped), and records each exit status in a file.

Run as ``python -I -S _supervise.py`` (standard library only, so it starts fast and needs no
environment) with its launch spec, a JSON object, on stdin: what the batch's replicas share
(``argv``, identity, working dir, gate, log cap) and, per replica, its ``env``, log files,
exit file and cgroups. Nothing of the job is ever the supervisor's own (issue 23): the spec
travels on stdin, not in its arguments (``/proc/PID/cmdline`` is readable by every user) nor
in its environment (``LD_PRELOAD`` there would run a job's library in a process of the
server's, root's when the server is root); its working dir is ``/``, but while it starts a
batch's commands as PID 1 of their namespace (``_spawn.py``), when it is the job's working dir,
entered as the job's user (every path the supervisor opens is absolute). The job's
environment and identity are applied only in the child that becomes the command: in C, by
``fork_exec`` (``_spawn.py``), or, without a namespace, in Python (``_job_init.py``, which also
changes into ``working_dir`` as that user); its ``env`` takes effect at ``exec``. The
supervisor keeps the server's identity: it writes the exit files, which a command must not
forge.

Start gate: no command starts until the run's gate file says ``go``. The backend writes it
after every supervisor's pid is on disk, then closes the write end of a pipe whose read end
every supervisor of the run inherits (``gate_fd``), so all of them wake at once. A backend that
dies before closes it too (the kernel does): a supervisor woken while no gate file exists
claims ``abandon``, and so does a backend restarted after a crash in between. Whoever creates
the file first decides (exclusive create), so a run whose start was interrupted is either fully
tracked or never runs at all — never run twice. No timeout: a start of many replicas may take
long, and a supervisor that gave up early would lose its replicas.

Once ``go``, where PID namespaces work, the supervisor forks a copy of itself that is PID 1 of
a new namespace and does the rest there (starting each command with no Python in the child,
``_spawn.py``) (this one passes stops on to it and waits): every
command of the batch lives in that namespace and dies with it (and with its supervisor:
``PR_SET_PDEATHSIG``), so a recorded supervisor accounts for every command. Each command leads
a process group of its own. A stop (SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2) to the
supervisor is passed on to every command's group; ``KILL`` (SIGRTMIN) SIGKILLs them, and the
supervisor stays to write down how each ended. A stop before a command started means it
never starts.

Exit files: ``{"exit_code": N, "pid": P}`` (with ``error`` when the command could not start,
``abandoned`` when the gate said so), written once the command's pipes are drained and the
rest of its group killed, made durable with one ``syncfs`` per round unless the batch was
stopped (the backend then settles the outcome from its own record). A supervisor killed with
SIGKILL writes nothing; the backend then knows the outcome from its own records (it sent the
kill, or stopped the run for a cancel) or reports the replicas lost.

Logs: the commands write into pipes; the supervisor appends what it reads to their log files,
within the run's budget of ``log_limit`` bytes over all its replicas and streams (a counter in
``log_usage_file``, under ``flock``, shared with the run's other supervisors). Past it, output
is read and dropped, and the stream that first lost some gets ``log_note`` as its last line.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import selectors
import signal
import sys
import time
from typing import Any

if __package__:
    from flotilla.backends.local import _job_init, _outputs, _private_mounts, _spawn
else:  # run as a script (``python -I -S``): its siblings, by path
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _job_init  # type: ignore[import-not-found,no-redef]
    import _outputs  # type: ignore[import-not-found,no-redef]
    import _private_mounts  # type: ignore[import-not-found,no-redef]
    import _spawn  # type: ignore[import-not-found,no-redef]

CHUNK = 65536


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


STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
"""What the supervisor outlives (a handler): each is passed on to every replica's group.
SIGUSR1/SIGUSR2 are what a job may ask to get first when preempted (``preemption.signal``)."""

KILL = signal.SIGRTMIN
"""The backend's word for "SIGKILL every replica now" (the grace period is over): the
supervisor then still writes each one's outcome. A real-time signal, so that no signal a job
may ask for (``preemption.signal``) is taken."""

START_SLICE = 64
"""Replicas started between two looks at the pipes, the stop signals and the ended children,
so a long start neither fills a pipe nor delays a stop."""


def _nofile_limit() -> None:
    """As many descriptors as the hard limit allows: two pipes and two logs per replica."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class _Replica:
    """One replica of the batch: its command's pipes, its logs, how it ended."""

    def __init__(self, index: int, spec: dict[str, Any]) -> None:
        self.index, self.spec = index, spec
        self.pid: int | None = None
        """Its command's pid in this process's namespace (``None``: not started)."""
        self.host_pid: int | None = None
        self.ticks: int | None = None
        self.streams: dict[int, _outputs.Stream] = {}
        self.refusal: str | None = None
        self.done = False
        self.starting: _spawn.Started | None = None
        """Spawned, its ``exec`` not yet known to be done: no stop is sent to it until then
        (its child may still have the supervisor's handlers, which would swallow it)."""


class _Batch:
    """The replicas of one supervisor: starting them, pumping their output, writing down how
    each ended. Runs as PID 1 of the batch's PID namespace when there is one."""

    def __init__(self, spec: dict[str, Any], stopping: int | None, namespace: bool) -> None:
        self.spec = spec
        self.spawner = _spawn.Spawner(spec) if namespace and _spawn.available() else None
        """Commands started with no Python in the child (``_spawn.py``): only as PID 1 of a
        namespace, whose end is every command's (``fork`` and ``_job_init`` otherwise)."""
        self.replicas = [_Replica(index, item) for index, item in enumerate(spec["replicas"])]
        self.budget = _outputs.Budget(spec.get("log_usage_file"), spec.get("log_limit"))
        self.note = str(spec.get("log_note") or "[log capped]")
        self.by_pid: dict[int, _Replica] = {}
        self.by_source: dict[int, tuple[_Replica, _outputs.Stream]] = {}
        self.stop: int | None = stopping
        self.kill = False
        self.stopped = stopping is not None
        self.passed: int | None = None
        """The last stop passed on: sent to each command when its ``exec`` is known done."""
        self.starting: dict[int, _Replica] = {}
        """Error pipe → the spawned replica whose ``exec`` is not yet known to be done."""
        self.outcomes: list[tuple[str, dict[str, object]]] = []
        self.all_started = False
        self.pids_written = False
        self.selector = selectors.DefaultSelector()
        self.wake_read, self.wake_write = os.pipe()
        self.started_read, self.started_write = os.pipe()
        self.refused_read, self.refused_write = os.pipe()
        for descriptor in (self.wake_read, self.wake_write, self.started_read, self.refused_read):
            os.set_blocking(descriptor, False)
        self.pending = {"started": b"", "refused": b""}
        self.selector.register(self.wake_read, selectors.EVENT_READ)
        self.selector.register(self.started_read, selectors.EVENT_READ)
        self.selector.register(self.refused_read, selectors.EVENT_READ)
        signal.set_wakeup_fd(self.wake_write, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        for number in STOPS:
            signal.signal(number, self._on_stop)
        signal.signal(KILL, self._on_kill)

    # --- signals: set flags only; the loop acts on them ---------------------------------

    def _on_stop(self, number: int, _frame: object) -> None:
        self.stop, self.stopped = number, True

    def _on_kill(self, _number: int, _frame: object) -> None:
        self.kill, self.stopped = True, True

    def run(self) -> int:
        refusal = self._enter_working_dir()
        for started, replica in enumerate(self.replicas, start=1):
            if self.stop is not None or self.kill:
                break
            if refusal is not None:
                self._finish(replica, {"exit_code": 127, "error": refusal})
                continue
            self._start(replica)
            if started % START_SLICE == 0:
                self._service(0.0)
        if self.spawner is not None:
            self.spawner.leave_working_dir()
        for replica in self.replicas:
            if replica.pid is None and not replica.done:  # stopped before its start
                code = -int(signal.SIGKILL if self.kill else (self.stop or signal.SIGTERM))
                self._finish(replica, {"exit_code": code})
        self._write_outcomes()
        self.all_started = True
        self._write_pids()
        while not all(replica.done for replica in self.replicas):
            self._service(None)
        self._write_pids()
        return 0

    def _enter_working_dir(self) -> str | None:
        """With a spawner: enter the working dir as the job's user, once for the batch
        (``_spawn.Spawner.enter_working_dir``); why no command may start, else ``None``."""
        if self.spawner is None:
            return None
        try:
            self.spawner.enter_working_dir()
        except _spawn.Refused as refusal:
            return str(refusal)
        return None

    def _start(self, replica: _Replica) -> None:
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        try:
            if self.spawner is not None:
                started = self.spawner.spawn(replica.spec, (out_write, err_write))
                replica.pid, replica.host_pid, replica.ticks = (
                    started.pid,
                    started.host_pid,
                    started.ticks,
                )
                if started.errors is not None:
                    replica.starting = started
                    self.starting[started.errors] = replica
                    self.selector.register(started.errors, selectors.EVENT_READ)
                    if len(self.starting) >= START_SLICE:  # bounded descriptors
                        self._started(next(iter(self.starting.values())), block=True)
            else:
                replica.pid = _job_init.start_command(
                    self.spec,
                    replica.spec,
                    replica.index,
                    (out_write, err_write),
                    (self.started_write, self.refused_write),
                )
        except _spawn.Refused as refusal:
            for descriptor in (out_read, err_read):
                os.close(descriptor)
            self._finish(replica, {"exit_code": 127, "error": str(refusal)})
            return
        except OSError as error:
            for descriptor in (out_read, err_read):
                os.close(descriptor)
            self._finish(replica, {"exit_code": 127, "error": f"could not start: {error}"})
            return
        finally:
            os.close(out_write)
            os.close(err_write)
        self.by_pid[replica.pid] = replica
        logs = (str(replica.spec["stdout"]), str(replica.spec["stderr"]))
        for source, path in zip((out_read, err_read), logs, strict=True):
            os.set_blocking(source, False)  # no read may hold up the loop (issue 35)
            stream = _outputs.Stream(source, path)
            replica.streams[source] = stream
            self.by_source[source] = (replica, stream)
            self.selector.register(source, selectors.EVENT_READ)

    def _service(self, timeout: float | None) -> None:
        """Copy what is readable, pass stops on, settle the children that ended."""
        for key, _ in self.selector.select(timeout):
            descriptor = key.fd
            if descriptor == self.wake_read:
                with contextlib.suppress(BlockingIOError):
                    os.read(descriptor, CHUNK)
            elif descriptor in (self.started_read, self.refused_read):
                self._read_reports()
            elif descriptor in self.starting:
                self._started(self.starting[descriptor], block=False)
            elif descriptor in self.by_source:
                replica, stream = self.by_source[descriptor]
                try:
                    data = os.read(descriptor, CHUNK)
                except BlockingIOError:
                    continue  # nothing after all: the watcher reports it again when there is
                if data:
                    stream.copy(data, self.budget, self.note)
                else:
                    self._close_stream(replica, stream)
        self._pass_stops()
        self._reap()
        self._write_outcomes()
        self._write_pids()

    def _started(self, replica: _Replica, *, block: bool) -> None:
        """If ``replica``'s spawned command has come as far as ``exec`` (or failed before):
        stop tracking its error pipe, and pass on a stop it missed meanwhile."""
        started = replica.starting
        if started is None or self.spawner is None:
            return
        descriptor = started.errors
        if self.spawner.check(started, block=block, forget=self.selector.unregister) is None:
            return
        assert descriptor is not None
        del self.starting[descriptor]
        replica.starting = None
        replica.refusal = started.refusal
        if self.passed is not None and started.refusal is None and replica.pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(replica.pid, self.passed)

    def _pass_stops(self) -> None:
        if self.stop is None and not self.kill:
            return
        number = signal.SIGKILL if self.kill else self.stop
        self.stop, self.kill = None, False
        assert number is not None
        if self.passed != signal.SIGKILL:
            self.passed = number
        for pid, replica in self.by_pid.items():
            if replica.starting is not None:
                continue  # not yet its own command: it gets the stop once it is (_started)
            if not replica.done:
                try:
                    os.killpg(pid, number)
                except ProcessLookupError:  # not leading its group yet: it gets it blocked
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, number)
                except PermissionError:
                    pass

    def _read_reports(self) -> None:
        for name, descriptor in (("started", self.started_read), ("refused", self.refused_read)):
            while True:
                try:
                    data = os.read(descriptor, CHUNK)
                except BlockingIOError:
                    break
                if not data:
                    break
                self.pending[name] += data
            *lines, self.pending[name] = self.pending[name].split(b"\n")
            for line in lines:
                if name == "started":
                    index, pid, ticks = line.decode().split()
                    started = self.replicas[int(index)]
                    started.host_pid = int(pid)
                    started.ticks = None if ticks == "None" else int(ticks)
                else:
                    refusal = json.loads(line)
                    self.replicas[int(refusal["index"])].refusal = str(refusal["error"])

    def _reap(self) -> None:
        """Settle every child that has exited: its output copied, its group's stragglers
        killed while its pid is still held (a zombie's pid is never reused), its outcome
        written, then it is reaped."""
        while True:
            try:
                ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if ended is None or ended.si_pid == 0:
                return
            pid = ended.si_pid
            replica = self.by_pid.pop(pid, None)
            if replica is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)  # the group's stragglers
            _, status = os.waitpid(pid, 0)
            if replica is None:
                continue  # an orphan this init adopted
            self._read_reports()
            self._started(replica, block=True)  # it exited: its error pipe is closed
            for stream in list(replica.streams.values()):
                self._drain(replica, stream)
            code = os.waitstatus_to_exitcode(status)
            if replica.refusal is not None and self.spawner is not None:
                code = 127  # ``fork_exec``'s child exits 255 when it cannot ``exec``
            outcome: dict[str, object] = {"exit_code": code}
            if replica.refusal is not None and code == 127:
                outcome["error"] = replica.refusal
            self._finish(replica, outcome)

    def _drain(self, replica: _Replica, stream: _outputs.Stream) -> None:
        """Copy what is already in a pipe without waiting for processes that still hold it."""
        while True:
            try:
                data = os.read(stream.source, CHUNK)
            except BlockingIOError:
                break
            if not data:
                break
            stream.copy(data, self.budget, self.note)
        self._close_stream(replica, stream)

    def _close_stream(self, replica: _Replica, stream: _outputs.Stream) -> None:
        self.selector.unregister(stream.source)
        del self.by_source[stream.source]
        del replica.streams[stream.source]
        stream.close()

    def _finish(self, replica: _Replica, outcome: dict[str, object]) -> None:
        """Note how ``replica`` ended; its exit file is written at the end of the round
        (``_write_outcomes``)."""
        if replica.host_pid is not None:
            outcome["pid"] = replica.host_pid
        self.outcomes.append((str(replica.spec["exit_file"]), outcome))
        replica.done = True

    def _write_outcomes(self) -> None:
        """Write the exit files of the replicas that ended in this round: each complete on
        disk (one ``syncfs`` for all of them, not an fsync each: 10,000 replicas of ``true``
        end together) before it appears by rename. A command someone stopped is written
        without it: the backend settles a stop from its own record, and only a power loss
        in the next seconds can lose the file."""
        outcomes, self.outcomes = self.outcomes, []
        if not outcomes:
            return
        for path, outcome in outcomes:
            _outputs.write(path, outcome, durable=False, rename=False)
        if not self.stopped:
            _outputs.sync_filesystem(outcomes[0][0])
        for path, _ in outcomes:
            with contextlib.suppress(OSError):
                os.replace(f"{path}.tmp", path)

    def _write_pids(self) -> None:
        """Every started command's pid as the server sees it, once all are started (the
        backend shows them and kills a group left behind when this supervisor is gone)."""
        path = self.spec.get("pids_file")
        if not path or not self.all_started or self.pids_written:
            return
        self._read_reports()
        reported = (r.host_pid is not None or r.pid is None or r.done for r in self.replicas)
        if not all(reported) and not all(r.done for r in self.replicas):
            return  # once the last one started reported its pid
        self.pids_written = True
        pids = {
            str(replica.index): [replica.host_pid, replica.ticks]
            for replica in self.replicas
            if replica.host_pid is not None
        }
        _outputs.write(str(path), {"pids": pids}, durable=False)


def _supervise(spec: dict[str, Any], stopping: int | None, namespace: bool) -> int:
    """Start and watch every replica of the batch (in the namespace's PID 1 when
    ``namespace``: its end is that of every process in it)."""
    if namespace:
        _job_init.die_with_parent()  # the outer supervisor, killed: the whole batch goes
        if spec.get("private_mounts"):
            _private(spec)
    _nofile_limit()
    batch = _Batch(spec, stopping, namespace)  # its handlers set: the stops blocked since main
    if batch.spawner is not None:  # may come; the commands inherit the mask: none blocked
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (*STOPS, KILL))
    return batch.run()


def _private(spec: dict[str, Any]) -> None:
    """The batch's own ``/tmp``, ``/dev/shm`` and ``/proc`` (``_private_mounts.py``); where
    the kernel refuses, the batch runs without them and this supervisor's log says why."""
    try:
        host_proc = _private_mounts.set_up(spec.get("keep_paths") or (), spec.get("tmpfs_size"))
    except OSError as error:
        print(f"_supervise.py: no private /tmp, /dev/shm and /proc: {error}", file=sys.stderr)
        return
    _job_init.PROC = f"/proc/self/fd/{host_proc}"


def _default_dispositions() -> None:
    """Every signal this process inherited as ignored back to its default action. An ignored
    signal survives ``exec``: a server started as ``flotilla up &`` from a script (SIGINT and
    SIGQUIT ignored), under ``nohup`` (SIGHUP) or after ``trap '' QUIT`` passed it on to every
    command, which then could not be stopped by it (issue 41). SIGPIPE and SIGXFSZ stay
    ignored here, as Python sets them; the commands get their defaults at ``exec``."""
    for number in signal.valid_signals():
        if number in (signal.SIGKILL, signal.SIGSTOP, signal.SIGPIPE, signal.SIGXFSZ):
            continue
        with contextlib.suppress(OSError, ValueError):
            if signal.getsignal(number) is signal.SIG_IGN:
                signal.signal(number, signal.SIG_DFL)


def main() -> int:
    _default_dispositions()
    try:
        spec = json.loads(_read_stdin())
    except ValueError as error:
        print(f"_supervise.py: no launch spec on stdin: {error}", file=sys.stderr)
        return 2
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    # A handler (not SIG_IGN) keeps the supervisor alive; the commands get the default.
    stopped: list[int] = []
    for number in (*STOPS, KILL):
        signal.signal(number, lambda number, _: stopped.append(number))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (*STOPS, KILL))  # blocked by the backend
    if _await_gate(str(spec["gate_file"]), spec.get("gate_fd")) != "go":
        for replica in spec["replicas"]:
            _outputs.write(str(replica["exit_file"]), {"exit_code": None, "abandoned": True})
        return 0
    signal.pthread_sigmask(signal.SIG_BLOCK, (*STOPS, KILL))  # until someone passes them on
    stopping = None
    if stopped:
        stopping = int(signal.SIGKILL if KILL in stopped else stopped[0])
    namespace = bool(spec.get("pid_namespace")) and _job_init.new_pid_namespace()
    if not namespace:
        return _supervise(spec, stopping, False)
    # PID 1 of the new namespace is a fork of this process; this one passes stops on to it.
    inner = os.fork()
    if inner == 0:  # pragma: no cover - the namespace's init, which coverage does not follow
        code = 1
        try:
            code = _supervise(spec, stopping, True)
        finally:
            os._exit(code)
    for number in (*STOPS, KILL):
        signal.signal(number, lambda number, _: _pass_on(inner, number))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (*STOPS, KILL))
    while True:
        try:
            _, status = os.waitpid(inner, 0)
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            continue
    return os.waitstatus_to_exitcode(status) & 0xFF


def _pass_on(pid: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, number)


def _read_stdin() -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = os.read(0, CHUNK)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


if __name__ == "__main__":
    sys.exit(main())
