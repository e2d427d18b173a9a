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

import os
import signal
import subprocess
import time
from typing import Any

from flotilla.backends import processes
from flotilla.backends.common import read_json
from flotilla.backends.local_records import Replica, Run, Stop

REAP_SECONDS = 0.05
"""How long a refresh waits for a SIGKILLed supervisor to exit (usually about a millisecond)
before leaving it to the next refresh: a run is reported ended only once nothing of it is
left running."""


DRAIN_SECONDS = 5.0
"""How long a stopped replica's supervisor has, once its command is over, to copy what is
left in the pipes into the logs (milliseconds, as a rule) before it is killed too."""


def signal_replicas(run: Run, signum: signal.Signals) -> None:
    """Send ``signum`` to the process group of every replica of ``run`` still going."""
    for replica in run.replicas:
        if not replica.finished and replica.pid is not None:
            processes.signal_group(replica.pid, signum)


def read_checkpoint(run: Run, now: float) -> bool:
    """Read the time of the run's checkpoint file (``flotilla.checkpoint()`` touches it) into
    ``run.last_checkpoint_at``; True when it is newer than the one held. The job owns the
    file, so the link itself is read (never followed) and the time held within the run's
    start and now."""
    path = run.checkpoint_file()
    if path is None or run.started_at is None:
        return False
    try:
        touched = os.lstat(path).st_mtime
    except OSError:
        return False
    touched = min(max(touched, run.started_at), now)
    if run.last_checkpoint_at is not None and touched <= run.last_checkpoint_at:
        return False
    run.last_checkpoint_at = touched
    return True


def stop_due(run: Run, now: float, grace_period: float) -> Stop | None:
    """The stop ``run`` needs now that nobody asked for: a replica failed while others still
    run, or the run exceeded its ``max_runtime``; ``None`` when it may go on."""
    failed = next((r for r in run.replicas if r.finished and not r.succeeded), None)
    unfinished = any(not replica.finished for replica in run.replicas)
    if failed is not None and unfinished:
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
    for replica in run.replicas:
        if not replica.finished and replica.pid is not None:
            processes.signal_followers(replica.pid, signal.SIGKILL)
    return True


def reap(run: Run, replica: Replica, reaping: list[subprocess.Popen[bytes]]) -> bool:
    """True when ``replica`` has just been found finished (its whole group gone, or its
    command over and the group killed: ``finish_early``, which may leave its supervisor in
    ``reaping`` for ``reap_supervisors``)."""
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
