"""How the replicas of a ``local`` run end: stopping them and finding them over.

A stop (a cancel, ``max_runtime``, a failed sibling) sends SIGTERM to every replica's process
group, and SIGKILL once the grace period is over. A replica is over when its supervisor's
whole group is gone, or earlier when its outcome is known and the group is killed
(``finish_early``); how it ended comes from the supervisor's exit file when there is one.
The backend calls these under its lock and records the result (``local.py``).

What a stopped command wrote before it ended reaches its log (issue 23: output still in the
pipes when a cancel killed the run was lost): the supervisor is never killed together with
its command. The grace period's SIGKILL goes to the rest of the group, and a cancelled run
ends once the supervisor has copied what was left in the pipes and written the exit file —
or, should it not within ``DRAIN_SECONDS`` of the command's end, it is killed then.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from typing import Any

from flotilla.backends.common import read_json, reported_checkpoint
from flotilla.backends.local import processes
from flotilla.backends.local._supervise import KILL
from flotilla.backends.local.records import Replica, Run, Stop, Supervisor

REAP_SECONDS = 0.05
"""How long a refresh waits for a SIGKILLed supervisor to exit (usually about a millisecond)
before leaving it to the next refresh: a run is reported ended only once nothing of it is
left running."""


DRAIN_SECONDS = 5.0
"""How long a stopped replica's supervisor has, once its command is over, to copy what is
left in the pipes into the logs (milliseconds, as a rule) before it is killed too."""


def signal_replicas(run: Run, signum: signal.Signals) -> None:
    """Send ``signum`` to the process group of every replica of ``run`` still going: through
    the supervisor of its batch, which passes it on to each of its commands' groups (SIGKILL
    as ``KILL``: the supervisor stays to write down how each ended), or directly to a replica
    with a supervisor of its own (started by an earlier version)."""
    going = [replica for replica in run.replicas if not replica.finished]
    signal_supervisors(run, going, signum)
    for replica in going:
        if replica.supervisor is None and replica.pid is not None:
            processes.signal_group(replica.pid, signum)


def signal_supervisors(run: Run, replicas: list[Replica], signum: signal.Signals) -> None:
    """Send ``signum`` (SIGKILL as ``KILL``) to the supervisors of ``replicas`` still alive,
    once each: they pass it on to their commands' groups."""
    for number in {replica.supervisor for replica in replicas if replica.supervisor is not None}:
        supervisor = run.supervisors[number]
        if supervisor_alive(supervisor):
            with contextlib.suppress(ProcessLookupError):
                os.kill(supervisor.pid, KILL if signum == signal.SIGKILL else signum)


def supervisor_alive(supervisor: Supervisor) -> bool:
    """True while ``supervisor`` runs (reaping it when it is this backend's child)."""
    if supervisor.process is not None:
        return supervisor.process.poll() is None
    return processes.process_alive(supervisor.pid, supervisor.start_ticks)


SETTLING_NS = 2_000_000_000
"""How long after a change of a run's directory its exit files are still all looked at: a
file renamed in within the same tick of the coarse clock as the last look leaves the
directory's mtime as it was."""


LISTING_SECONDS_PER_REPLICA = 0.00005
"""How often at most the exit files of a run whose replicas are ending are listed: every
monitor tick up to 1,000 replicas, every 0.5 s at 10,000. A listing of the run's directory
reads every replica's logs and exit file (40,000 names at 10,000 replicas), so one per tick
while they end was quadratic in the replicas (issue 23); their ends are found that much
later, a cancel's included."""


def listing_due(run: Run) -> bool:
    """Whether the run's directory may be listed for exit files now (see
    ``LISTING_SECONDS_PER_REPLICA``); notes the listing when it is."""
    now = time.monotonic()
    if now - run.listed_at < len(run.replicas) * LISTING_SECONDS_PER_REPLICA:
        return False
    run.listed_at = now
    return True


def exit_files_changed(run: Run) -> bool:
    """Whether an exit file may have appeared in ``run``'s directory since the last look (a
    rename changes the directory's mtime): a refresh of a run of 10,000 replicas then looks
    at no file of theirs while none ended."""
    try:
        mtime = os.stat(run.directory).st_mtime_ns
    except OSError:
        return True
    changed = mtime != run.seen_directory or time.time_ns() - mtime < SETTLING_NS
    run.seen_directory = mtime
    return changed


def learn_pids(run: Run) -> None:
    """Take the pids of the commands the run's supervisors started from their pids files
    (written once a supervisor has started its batch), for those not known yet."""
    for number, supervisor in enumerate(run.supervisors):
        if supervisor.pids_loaded:
            continue
        data = read_json(run.pids_file(number))
        if data is None:
            continue
        supervisor.pids_loaded = True
        for index, known in (data.get("pids") or {}).items():
            position = supervisor.members[int(index)]
            replica = run.replicas[position]
            if replica.pid is None:
                replica.pid, replica.start_ticks = int(known[0]), known[1]


def maybe_ended(run: Run, alive: list[bool]) -> list[int]:
    """The replicas (positions in ``run.replicas``) of the run's batches that may have ended
    since the last look: those whose exit file appeared since (one listing of the run's
    directory, not a look per replica: a run of 10,000 replicas is refreshed every monitor
    tick while they end), and every unfinished one of a supervisor that is gone (``alive``:
    each supervisor's liveness, looked at just before)."""
    if len(run.exit_names) != len(run.replicas):  # new, or grown (``add_replicas``)
        run.exit_names = {
            run.exit_file(replica).name: position for position, replica in enumerate(run.replicas)
        }
    try:
        names = set(os.listdir(run.directory))
    except OSError:
        names = set(run.exit_names)
    found = names - run.seen_exits
    ended = {run.exit_names[name] for name in found if name in run.exit_names}
    for number, running in enumerate(alive):
        if not running:
            ended.update(run.supervisors[number].members)
    # Seen for good: what is no exit file, and the exit files of replicas already over (one
    # found now is looked at again until its replica is).
    run.seen_exits |= {
        name
        for name in found
        if name not in run.exit_names or run.replicas[run.exit_names[name]].finished
    }
    replicas = run.replicas
    return sorted(
        i for i in ended if not replicas[i].finished and replicas[i].supervisor is not None
    )


def reap_supervised(run: Run, replica: Replica, alive: bool | None = None) -> bool:
    """True when ``replica`` (started by a batch's supervisor) has just been found finished:
    its exit file is there, or its supervisor is gone without writing one (killed: its
    commands died with its PID namespace; one left over without a namespace is killed).
    ``alive``: whether its supervisor was alive, looked at just before (``None``: look)."""
    assert replica.supervisor is not None
    supervisor = run.supervisors[replica.supervisor]
    if alive is None:
        alive = supervisor_alive(supervisor)
    outcome = read_json(run.exit_file(replica))  # after the look at the supervisor: no race
    if outcome is None:
        if alive:
            return False
        learn_pids(run)
        if replica.pid is not None and processes.process_alive(replica.pid, replica.start_ticks):
            processes.signal_group(replica.pid, signal.SIGKILL)
            return False  # the next refresh finds it gone
        # A stop's signal: the supervisor's own end (killed by it) is the replica's.
        ended = supervisor.process.returncode if supervisor.process is not None else None
        code = ended if ended is not None and ended < 0 and run.stop is not None else None
        if code is None and run.stop is not None and run.stop.killed:
            code = -int(signal.SIGKILL)
        finish(replica, None, code, stopped=run.stop is not None and run.stop.kind == "cancel")
    else:
        if isinstance(outcome.get("pid"), int):
            replica.pid = int(outcome["pid"])
        finish(replica, outcome, None)
    replica.ended_at = exit_time(run, replica)
    return True


def read_checkpoint(run: Run, now: float) -> bool:
    """Read the time of the run's checkpoint file (``flotilla.checkpoint()`` touches it) into
    ``run.last_checkpoint_at`` (``common.reported_checkpoint``); True when it is newer than
    the one held."""
    touched = reported_checkpoint(run.checkpoint_file(), run.started_at, now)
    if touched is None:
        return False
    if run.last_checkpoint_at is not None and touched <= run.last_checkpoint_at:
        return False
    run.last_checkpoint_at = touched
    return True


def stop_due(run: Run, now: float, grace_period: float) -> Stop | None:
    """The stop ``run`` needs now that nobody asked for: a replica failed while others still
    run, or the run exceeded its ``max_runtime``; ``None`` when it may go on."""
    unfinished = not run.all_finished
    failed = None
    if run.failures_unchecked and unfinished:  # only once replicas ended since the last look
        run.failures_unchecked = False
        failed = next((r for r in run.replicas if r.finished and not r.succeeded), None)
    if failed is not None:
        message = f"replica {failed.placement.label} {failed.outcome()}"
        return Stop("replica-failed", message, now, grace_period, exit_code=failed.exit_code)
    if unfinished and over_time(run, now):
        # Only a run still going can exceed its limit: one whose replicas all ended (maybe
        # while no backend watched, found on restart) keeps its outcome.
        message = f"exceeded max_runtime of {run.max_runtime:g}s"
        return Stop("max-runtime", message, now, grace_period)
    return None


def over_time(run: Run, now: float) -> bool:
    limit, started = run.max_runtime, run.started_at
    return limit is not None and started is not None and now - started >= limit


def kill_overdue(run: Run, now: float) -> bool:
    """SIGKILL what is left of a stopping run once its grace period is over; True when it did
    (once per stop). Not the supervisors: each copies what its command left in the pipes
    into the logs, then writes the exit file and exits. One still there ``DRAIN_SECONDS``
    later is killed with the rest of its group."""
    stop = run.stop
    if stop is None or now < stop.at + stop.grace_period:
        return False
    if stop.killed:
        if now >= stop.at + stop.grace_period + DRAIN_SECONDS:
            signal_replicas(run, signal.SIGKILL)
        return False
    stop.killed = True
    batched = [r for r in run.replicas if not r.finished and r.supervisor is not None]
    if batched:  # their supervisors SIGKILL the commands, then copy the pipes' rest
        signal_supervisors(run, batched, signal.SIGKILL)
    for replica in run.replicas:
        if not replica.finished and replica.supervisor is None and replica.pid is not None:
            processes.signal_followers(replica.pid, signal.SIGKILL)
    return True


def reap(run: Run, replica: Replica, reaping: list[subprocess.Popen[bytes]]) -> bool:
    """True when ``replica`` has just been found finished (its whole group gone, or its
    command over and the group killed: ``finish_early``, which may leave its supervisor in
    ``reaping`` for ``reap_supervisors``)."""
    if replica.supervisor is not None:
        return reap_supervised(run, replica)
    if replica.pid is None:  # the earlier backend died between record and start
        replica.finish(exit_code=None, vanished=True)
        return True
    process: subprocess.Popen[bytes] | None = replica.process
    if process is not None:
        code = process.poll()
        if code is None:
            return finish_early(run, replica, process, reaping)
    elif processes.process_alive(replica.pid, replica.start_ticks):
        return False
    else:
        code = None
    # The supervisor is gone; leave no stragglers of the command behind.
    if processes.group_alive(replica.pid):
        processes.signal_group(replica.pid, signal.SIGKILL)
        if processes.group_alive(replica.pid):
            return False
    outcome = read_json(run.exit_file(replica))
    if outcome is None and code is None and run.stop is not None and run.stop.killed:
        code = -int(signal.SIGKILL)
    finish(replica, outcome, code)
    replica.ended_at = exit_time(run, replica)
    return True


def gate_open(run: Run) -> bool:
    """Whether the run's gate says ``go``: its commands were let run."""
    try:
        return run.gate_file().read_text().strip() == "go"
    except OSError:
        return False


def exit_time(run: Run, replica: Replica) -> float | None:
    """When the supervisor wrote the command's exit file (right after the command exited):
    the file's modification time, which also serves supervisors started by older versions."""
    try:
        return run.exit_file(replica).stat().st_mtime
    except OSError:
        return None


def finish_early(
    run: Run,
    replica: Replica,
    process: subprocess.Popen[bytes],
    reaping: list[subprocess.Popen[bytes]],
) -> bool:
    """True when the replica is over although its supervisor is still alive.

    For a cancel (whose outcome does not depend on the exit code): as soon as the command
    has exited and the supervisor has copied what was left in the pipes into the logs (its
    exit file is there), without waiting for the supervisor to exit — on a loaded machine
    that was most of a cancel's delay (``docs/performance.md``, *Third pass: cancel*); or
    ``DRAIN_SECONDS`` after the command's end, should the supervisor not get there. The
    group is killed (the supervisor and any stragglers: nothing in it runs again) and the
    supervisor put in ``reaping``, for the monitor thread to reap later.
    Otherwise: once the supervisor has written the command's outcome (the exit file appears
    by rename, so it is complete) and has only its own exit left; the group is killed and
    the replica reported ended once it is gone."""
    assert replica.pid is not None
    cancelled = run.stop is not None and run.stop.kind == "cancel"
    if not cancelled and not run.exit_file(replica).exists():
        return False  # still running: the common case, every refresh of every run
    outcome = read_json(run.exit_file(replica))
    if cancelled:
        ended = (True, None) if outcome is not None else processes.command_ended(replica.pid)
        if ended is None or not ended[0]:
            return False
        if outcome is None and not _drain_over(replica):
            return False  # the supervisor is copying what is left in the pipes
        code = ended[1]
        if code is None and outcome is None and run.stop is not None and run.stop.killed:
            # Its SIGKILL took the supervisor and the command's init at once: the init was
            # re-parented and reaped elsewhere before the supervisor showed it as a zombie.
            code = -int(signal.SIGKILL)
        processes.signal_group(replica.pid, signal.SIGKILL)
        reaping.append(process)
        finish(replica, outcome, code, stopped=True)
        return True
    if outcome is None:
        return False
    processes.signal_group(replica.pid, signal.SIGKILL)
    if not processes.wait_reaped(process, REAP_SECONDS):
        return False  # the next refresh finds it gone, and the outcome in the exit file
    if processes.group_alive(replica.pid):
        return False  # stragglers still running: the next refresh settles it
    finish(replica, outcome, None)
    return True


def _drain_over(replica: Replica) -> bool:
    """Whether the supervisor of ``replica``, whose command is over, has had its
    ``DRAIN_SECONDS`` to copy the pipes' rest into the logs (counted from the first ask)."""
    now = time.monotonic()
    if replica.drain_until is None:
        replica.drain_until = now + DRAIN_SECONDS
    return now >= replica.drain_until


def reap_supervisors(
    reaping: list[subprocess.Popen[bytes]],
) -> list[subprocess.Popen[bytes]]:
    """Reap the supervisors ``finish_early`` killed (no zombies left behind); the ones still
    to reap."""
    return [process for process in reaping if process.poll() is None]


def finish(
    replica: Replica, outcome: dict[str, Any] | None, code: int | None, *, stopped: bool = False
) -> None:
    """Record how ``replica`` ended: from its supervisor's exit file when there is one, else
    from the exit code known otherwise. ``None``: unknown — the replica vanished, unless
    ``stopped`` (a cancel ended it, seen before its supervisor wrote the code down)."""
    if outcome is not None and outcome.get("abandoned"):
        replica.finish(exit_code=None, vanished=True)  # never ran: safe to run again
    elif outcome is not None:
        error = outcome.get("error")
        replica.finish(int(outcome["exit_code"]), str(error) if error else None)
    elif code is not None or stopped:
        replica.finish(code)
    else:
        replica.finish(exit_code=None, vanished=True)
