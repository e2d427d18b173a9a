"""What a Slurm job used, from Slurm's accounting (``sacct -j``): ``TotalCPU`` (user + system
CPU time of all its steps) and the largest ``MaxRSS`` of its steps, as a run's
``RunResources`` (``flotilla sacct``). Read once, when Flotilla sees the run end.

It needs accounting storage (``AccountingStorageType=accounting_storage/slurmdbd``) and a
gatherer (``JobAcctGatherType=jobacct_gather/linux`` or ``cgroup``); a cluster without them
(``accounting_storage/none``: the job completion log has neither figure) gives none, and the
run's figures stay null (shown as ``-``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from flotilla.model.run_resources import RunResources

FIELDS = "JobID,TotalCPU,MaxRSS"
"""``sacct -o``: one line per job and per step (``123``, ``123.batch``, ``123.0``)."""

_DURATION = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(?:(\d+):)?(\d+(?:\.\d+)?)$")
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([KMGTP]?)$", re.IGNORECASE)
_SCALE = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}


def sacct_arguments(job_ids: Iterable[int]) -> list[str]:
    ids = ",".join(str(job_id) for job_id in sorted(set(job_ids)))
    return ["-j", ids, "-P", "-n", "--noconvert", "-o", FIELDS]


def parse_duration(text: str) -> float | None:
    """Slurm's ``[DD-[HH:]]MM:SS[.mmm]`` (``TotalCPU``, ``Elapsed``) in seconds: ``01:02.5``
    is 62.5, ``1:00:00`` an hour, ``2-03:00:00`` two days and three hours. ``None`` for an
    empty or unreadable field."""
    match = _DURATION.match(text.strip())
    if match is None:
        return None
    days, first, second, seconds = match.groups()
    # With two colons the fields are H:M:S; with one, M:S (Slurm never writes H:M alone).
    hours, minutes = (first, second) if second is not None else (None, first)
    total = float(seconds) + 60 * int(minutes or 0) + 3600 * int(hours or 0)
    return total + 86400 * int(days or 0)


def parse_size(text: str) -> int | None:
    """Slurm's ``MaxRSS`` in bytes: ``51200K``, ``1.50G``, ``0``; a bare number is bytes
    (``--noconvert`` keeps Slurm's own unit, kibibytes on most builds, with its suffix).
    ``None`` for an empty or unreadable field."""
    match = _SIZE.match(text.strip())
    if match is None:
        return None
    return round(float(match.group(1)) * _SCALE[match.group(2).upper()])


def parse_accounting(out: str) -> dict[int, RunResources]:
    """Each job's figures from ``sacct -P -n -o JobID,TotalCPU,MaxRSS`` lines: the job
    line's ``TotalCPU`` (every step's, summed by Slurm; the steps' sum where it is empty) and
    the largest ``MaxRSS`` of its steps (Slurm fills it on step lines only)."""
    cpu: dict[int, float] = {}
    step_cpu: dict[int, float] = {}
    peak: dict[int, int] = {}
    jobs: set[int] = set()
    for line in out.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 3:
            continue
        job, _, step = fields[0].partition(".")
        job = job.split("_")[0].split("+")[0]  # array and heterogeneous job ids
        if not job.isdigit():
            continue
        job_id = int(job)
        jobs.add(job_id)
        seconds = parse_duration(fields[1])
        if seconds is not None:
            if step:
                step_cpu[job_id] = step_cpu.get(job_id, 0.0) + seconds
            else:
                cpu[job_id] = seconds
        size = parse_size(fields[2])
        if size is not None:
            peak[job_id] = max(size, peak.get(job_id, 0))
    return {
        job_id: RunResources(
            cpu_seconds=cpu.get(job_id, step_cpu.get(job_id)), memory_peak=peak.get(job_id)
        )
        for job_id in jobs
    }
