"""A Ray job's stop with the job's own signal (issue 28): the relay that becomes its driver.

Ray's ``stop_job`` (2.60, ``job_supervisor.py``) sends ``RAY_JOB_STOP_SIGNAL`` — SIGTERM or
SIGINT, nothing else — to the driver and every process under it, and SIGKILL once
``RAY_JOB_STOP_WAIT_TIME_S`` (whole seconds, read from the job's environment when it is
stopped) has passed. A job that asks ``preemption: {signal: SIGINT}`` or SIGTERM gets it from
Ray itself. For SIGUSR1, SIGUSR2 and SIGHUP the backend makes this relay the driver:

* it starts the job's command with SIGTERM ignored (inherited: Ray's SIGTERM to each of the
  job's processes passes them by, unless the job sets a SIGTERM handler of its own), in the
  driver's own process group, so Ray's fate sharing (a SIGKILL to that group when the job's
  supervisor dies) still ends it;
* on Ray's SIGTERM it sends the job's signal to every other process of its group (not to
  itself, nor to the shell above it that Ray started), and SIGKILL to those still there once
  the grace is over (Ray's own SIGKILL follows at its whole-second wait);
* it enforces ``max_runtime`` in place of ``timeout``, which would forward Ray's SIGTERM to the
  job: the job's signal at the deadline, SIGKILL after the grace, exit 124 (137 when it had to
  kill), as ``timeout`` reports it.

It needs only a ``python3`` with the standard library on the node (every Ray node has one),
and reads ``/proc`` (Linux) to find its group's processes.
"""

from __future__ import annotations

import shlex

RAY_STOP_SIGNALS = ("SIGTERM", "SIGINT")
"""The signals Ray's ``stop_job`` sends itself (``JobSupervisor.VALID_STOP_SIGNALS``)."""

RELAY = """
import os, signal, subprocess, sys, time
name, stop_grace, max_runtime, deadline_grace, command = sys.argv[1:6]
polite, me = getattr(signal, name), os.getpid()
group = os.getpgid(0)


def others():
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/" + entry + "/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
                table[int(entry)] = (int(fields[1]), int(fields[2]), fields[0])
            except (OSError, IndexError, ValueError):
                continue
    mine, pid = set(), me
    while pid in table and pid not in mine:
        mine.add(pid)
        pid = table[pid][0]
    return [
        pid
        for pid, (_, pgrp, state) in table.items()
        if pgrp == group and pid not in mine and state != "Z"
    ]


def send(number):
    for pid in others():
        try:
            os.kill(pid, number)
        except OSError:
            pass


stop = []


def begin(grace, timed_out):
    if not stop:
        stop.append((time.monotonic() + grace, timed_out))
        send(polite)


signal.signal(signal.SIGTERM, signal.SIG_IGN)
job = subprocess.Popen(["/bin/sh", "-c", command])
signal.signal(signal.SIGTERM, lambda *_: begin(float(stop_grace), False))
started, killed = time.monotonic(), False
while True:
    code = job.poll()
    if code is not None and not (stop and others()):
        break
    now = time.monotonic()
    if max_runtime and now - started >= float(max_runtime):
        begin(float(deadline_grace), True)
    if stop and now >= stop[0][0]:
        send(signal.SIGKILL)
        killed = True
    time.sleep(0.05)
if stop and stop[0][1]:
    sys.exit(137 if killed else 124)
sys.exit(code if code >= 0 else 128 - code)
"""


def relay_command(
    command: str,
    signal: str,
    stop_grace: float,
    max_runtime: float | None,
    deadline_grace: float,
) -> str:
    """The driver's shell command that runs ``command`` (shell code) under the relay:
    ``signal`` on a stop, SIGKILL ``stop_grace`` seconds later; the same at ``max_runtime``
    with ``deadline_grace``."""
    return shlex.join(
        [
            "python3",
            "-c",
            RELAY,
            signal,
            f"{stop_grace:g}",
            "" if max_runtime is None else f"{max_runtime:g}",
            f"{deadline_grace:g}",
            command,
        ]
    )
