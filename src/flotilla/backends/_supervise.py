"""The tiny parent of every local replica: records the command's exit status in a file.

Run as ``python -I -S _supervise.py EXIT_FILE GATE_FILE [--user NAME] [--cgroup DIR]...
[--pid-namespace] -- ARGV...`` (standard library only, so it starts fast and needs no
environment). With ``--user`` the command runs as that user, with its groups (the supervisor
keeps its own identity: it must write the exit file, which the command must not be able to
forge). With ``--cgroup`` (one per hierarchy) and ``--pid-namespace`` the command runs under
an init of its own, in those cgroups and its own PID namespace (``_job_init.py``): every
process it starts ends with it.

Start gate: the command runs only once the run's gate file says ``go``. The backend writes it
after every replica's pid is on disk; a backend restarted after a crash in between claims
``abandon`` instead, and so does the supervisor itself after ``GATE_SECONDS`` without an
answer. Whoever creates the file first decides (exclusive create), so a run whose start was
interrupted is either fully tracked or never runs at all — never run twice.

It leads the replica's process group, so a SIGTERM to the group reaches the command
directly; the supervisor itself outlives SIGTERM to write down how the command ended. The
file is what lets a restarted backend report the outcome of a run that finished while no
backend was watching. A supervisor killed with SIGKILL writes nothing; the backend then knows
the outcome from its own records (it sent the kill, or it stopped the run for a cancel and
saw the command end: it then kills the supervisor without waiting for the file) or reports
the run lost.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time


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
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump(outcome, file)
        if durable:
            file.flush()
            os.fsync(file.fileno())
    os.replace(temporary, path)


GATE_SECONDS = 30.0


def claim_gate(path: str, decision: str) -> str:
    """Create the gate file with ``decision`` unless it exists; return the decision in force."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
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


def _await_gate(path: str) -> str:
    deadline = time.monotonic() + GATE_SECONDS
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return claim_gate(path, "abandon")
        time.sleep(0.005)
    return claim_gate(path, "abandon")


def _start(argv: list[str], user: str | None) -> subprocess.Popen[bytes]:
    """Start the command, as ``user`` (name or uid) with its groups when given."""
    if user is None:
        return subprocess.Popen(argv)
    import pwd

    entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    groups = os.getgrouplist(entry.pw_name, entry.pw_gid)
    return subprocess.Popen(argv, user=entry.pw_uid, group=entry.pw_gid, extra_groups=groups)


USAGE = (
    "usage: _supervise.py EXIT_FILE GATE_FILE [--user NAME] [--cgroup DIR]... "
    "[--pid-namespace] -- ARGV..."
)


def _in_own_tree(
    argv: list[str], user: str | None, cgroups: list[str], namespace: bool
) -> dict[str, object]:
    """Run the command under an init of its own (``_job_init.py``, next to this file: ``-I``
    leaves this directory off ``sys.path``)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _job_init  # type: ignore[import-not-found]

    outcome: dict[str, object] = _job_init.run(
        lambda: _start(argv, user), argv[0], cgroups, namespace
    )
    return outcome


def main(arguments: list[str]) -> int:
    exit_file, gate_file, *rest = arguments
    user = None
    if rest[:1] == ["--user"] and len(rest) > 1:
        user, rest = rest[1], rest[2:]
    # --- whole-tree tracking (cgroups, PID namespace): _job_init.py ---
    cgroups: list[str] = []
    namespace = False
    while rest[:1] in (["--cgroup"], ["--pid-namespace"]):
        if rest[0] == "--pid-namespace":
            namespace, rest = True, rest[1:]
        elif len(rest) > 1:
            cgroups.append(rest[1])
            rest = rest[2:]
        else:
            break
    # --- end of whole-tree tracking options ---
    separator, *argv = rest or [""]
    if separator != "--" or not argv:
        print(USAGE, file=sys.stderr)
        return 2
    # A handler (not SIG_IGN) keeps the supervisor alive; exec resets it in the command.
    stopped: list[int] = []
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda number, _: stopped.append(number))
    if _await_gate(gate_file) != "go":
        _write(exit_file, {"exit_code": None, "abandoned": True})
        return 0
    if cgroups or namespace:
        outcome = _in_own_tree(argv, user, cgroups, namespace)
        _write(exit_file, outcome, durable=not stopped)
        code = outcome["exit_code"]
        assert isinstance(code, int)
        return code if code >= 0 else 128 - code
    try:
        command = _start(argv, user)
    except (OSError, KeyError) as error:
        _write(exit_file, {"exit_code": 127, "error": f"could not start {argv[0]!r}: {error}"})
        return 127
    while True:
        try:
            code = command.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries, kept for clarity
            continue
    # A command someone stopped (the backend's SIGTERM for a cancel or a limit) is written
    # without fsync: the cancel waits on it, and the outcome is already settled elsewhere —
    # the backend ends a cancelled run as soon as its command is gone, from its own record
    # (``local_ending.py``), and the loop ends a job whose cancel was requested cancelled even if
    # its run is reported lost. Only a power loss in the next seconds can lose the file.
    _write(exit_file, {"exit_code": code}, durable=not stopped)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
