"""Slurm's command-line clients, called with a private ``SLURM_CONF`` and parsed into records.

Every call has a timeout; a client that cannot reach slurmctld (or is missing) raises
``BackendUnavailable`` with one line naming the controller's configuration, never a traceback.
The JSON of ``squeue --json`` / ``sinfo --json`` (Slurm 22.05 and later) is read, not the
human tables; jobs that left ``squeue`` (after ``MinJobAge``) are read from the job completion
log with ``sacct -c`` (it reads ``JobCompLoc`` of a ``jobcomp/filetxt`` cluster).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from flotilla.backends.interface import BackendUnavailable
from flotilla.backends.slurm.accounting import parse_accounting, sacct_arguments
from flotilla.model.run_resources import RunResources


class SlurmRefused(Exception):
    """A client answered and refused the request (sbatch: "Requested node configuration is
    not available"); the message is Slurm's own line."""


@dataclass(frozen=True)
class SlurmJob:
    """One job as ``squeue --json`` (or the completion log) shows it.

    ``exit_code``: the raw wait status (``768`` for exit 3, ``9`` for SIGKILL), or ``None``.
    Times are seconds since the epoch; ``start_time``/``end_time`` are only facts once the job
    started/ended (Slurm fills them with estimates before).
    """

    job_id: int
    name: str
    comment: str
    state: str
    exit_code: int | None
    submit_time: float
    start_time: float | None
    end_time: float | None
    nodes: str
    reason: str


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str
    flags: tuple[str, ...]
    cpus: int
    memory_mib: int
    gres: str
    features: tuple[str, ...]
    partitions: tuple[str, ...]
    reason: str


class SlurmClients:
    """Runs ``sbatch``, ``squeue``, ``sinfo``, ``scontrol``, ``scancel`` and ``sacct``."""

    def __init__(self, slurm_conf: str | None, bin_dir: str | None, timeout: float) -> None:
        self.slurm_conf = slurm_conf
        self.bin_dir = bin_dir
        self.timeout = timeout
        environment = dict(os.environ)
        if slurm_conf:
            environment["SLURM_CONF"] = slurm_conf
        self._environment = environment

    @property
    def where(self) -> str:
        return f"SLURM_CONF={self.slurm_conf}" if self.slurm_conf else "the default SLURM_CONF"

    def _program(self, name: str) -> str:
        return str(Path(self.bin_dir) / name) if self.bin_dir else name

    def run(self, name: str, arguments: Sequence[str], stdin: str | None = None) -> str:
        """The client's stdout; ``BackendUnavailable`` when it cannot talk to slurmctld,
        ``SlurmRefused`` when it answered with an error of the request."""
        command = [self._program(name), *arguments]
        if self.slurm_conf and not os.path.isfile(self.slurm_conf):
            # The clients would retry for a minute before saying so.
            raise BackendUnavailable(f"slurm: slurm_conf {self.slurm_conf} does not exist")
        try:
            result = subprocess.run(
                command,
                input=stdin,
                capture_output=True,
                text=True,
                env=self._environment,
                timeout=self.timeout,
                check=False,
            )
        except FileNotFoundError:
            raise BackendUnavailable(
                f"slurm: {command[0]} not found (install the Slurm clients or set bin_dir)"
            ) from None
        except subprocess.TimeoutExpired:
            raise BackendUnavailable(
                f"slurm: {name} did not answer within {self.timeout:g}s ({self.where})"
            ) from None
        if result.returncode != 0:
            message = _first_line(result.stderr) or _first_line(result.stdout) or "no message"
            if _unreachable(result.stderr):
                raise BackendUnavailable(
                    f"slurm: slurmctld does not answer ({self.where}): {message}"
                )
            raise SlurmRefused(f"{name}: {message}")
        return result.stdout

    def jobs(self) -> list[SlurmJob]:
        """Every job slurmctld still knows (active, and finished within ``MinJobAge``)."""
        data = _json(self.run("squeue", ["--json"]), "squeue", self.where)
        return [_job(item) for item in data.get("jobs", [])]

    def nodes(self) -> list[SlurmNode]:
        data = _json(self.run("sinfo", ["--json"]), "sinfo", self.where)
        return [_node(item) for item in data.get("nodes", [])]

    def submit(self, script: str, options: Sequence[str]) -> int:
        out = self.run("sbatch", ["--parsable", *options], stdin=script).strip()
        try:
            return int(out.split(";")[0])
        except ValueError:
            raise SlurmRefused(f"sbatch: unexpected answer {out!r}") from None

    def set_comment(self, job_id: int, comment: str) -> None:
        self.run("scontrol", ["update", f"JobId={job_id}", f"Comment={comment}"])

    def cancel(self, job_id: int, signal: str | None = None) -> None:
        """``scancel`` (the job ends now; Slurm's SIGTERM, then SIGKILL after KillWait), or
        one signal to the job's steps, the replicas' processes (a job that cannot take a
        signal — it has not started — is cancelled instead).

        A polite signal (TERM, USR1…) goes to the steps only: with ``--full`` it would reach
        the batch shell's ``srun`` too, which answers SIGTERM by SIGKILLing its step ("forcing
        job termination"), so a replica's TERM trap never ran and its grace was lost. KILL
        goes to each step by its id: ``scancel --signal=KILL JOBID`` is a plain cancel, whose
        SIGKILL comes only after Slurm's KillWait; a step's KILL is immediate, and the batch
        shell then reports the steps' codes and ends the job. A job with no step yet (its
        ``srun`` still starting) is cancelled."""
        if signal == "KILL":
            steps = self.steps(job_id)
            if steps:
                try:
                    self._scancel(["--signal=KILL", *steps])
                    return
                except SlurmRefused:
                    pass  # the job as a whole, then
            self._scancel([str(job_id)])
            return
        try:
            self._scancel([*([f"--signal={signal}"] if signal else []), str(job_id)])
        except SlurmRefused:
            if not signal:
                raise
            self.cancel(job_id)

    def accounting(self, job_ids: Sequence[int]) -> dict[int, RunResources]:
        """What these jobs used (``TotalCPU``, ``MaxRSS``) from Slurm's accounting
        (``accounting.py``); empty where the cluster keeps none (``accounting_storage/none``
        answers with an error) or its controller does not answer: figures, never a failure."""
        if not job_ids:
            return {}
        try:
            out = self.run("sacct", sacct_arguments(job_ids))
        except (SlurmRefused, BackendUnavailable):
            return {}
        return parse_accounting(out)

    def _scancel(self, arguments: Sequence[str]) -> None:
        """``scancel``; a job or step that has already ended is no error."""
        try:
            self.run("scancel", arguments)
        except SlurmRefused as error:
            if "already completing or completed" in str(error) or "Invalid job id" in str(error):
                return
            raise

    def steps(self, job_id: int) -> list[str]:
        """The job's steps that run replicas (``JOBID.N``; the batch step left out)."""
        out = self.run("squeue", ["--steps", "--noheader", f"--jobs={job_id}", "--format=%i"])
        prefix = f"{job_id}."
        return [
            step
            for line in out.splitlines()
            if (step := line.strip()).startswith(prefix) and step.removeprefix(prefix).isdigit()
        ]

    def completed(self, names: set[str]) -> list[SlurmJob]:
        """Finished jobs of these names from the job completion log (outlives MinJobAge).

        Empty when the cluster keeps no completion log Flotilla can read (then a job that left
        ``squeue`` is known only from the run record in the output directory)."""
        try:
            out = self.run(
                "sacct",
                [
                    "-c",
                    "-S",
                    "2000-01-01",
                    "-P",
                    "-n",
                    "-o",
                    "jobid,jobname,state,exitcode,start,end,nodelist",
                ],
            )
        except SlurmRefused:
            return []
        found = []
        for line in out.splitlines():
            fields = line.split("|")
            if len(fields) < 7 or fields[1] not in names:
                continue
            code, _, signal = fields[3].partition(":")
            raw = (int(code) << 8 | int(signal)) if code.isdigit() and signal.isdigit() else None
            found.append(
                SlurmJob(
                    job_id=int(fields[0]) if fields[0].isdigit() else 0,
                    name=fields[1],
                    comment="",
                    state=fields[2].split()[0],
                    exit_code=raw,
                    submit_time=_timestamp(fields[4]) or 0.0,
                    start_time=_timestamp(fields[4]),
                    end_time=_timestamp(fields[5]),
                    nodes=fields[6],
                    reason="",
                )
            )
        return found


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else ""


_UNREACHABLE = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "Unable to establish controller",
    "DNS SRV lookup failed",
    "Could not establish a configuration source",
    "Zero Bytes were transmitted",
    "Munge",
    "munge",
    "Unable to open file",
)


def _unreachable(stderr: str) -> bool:
    return any(marker in stderr for marker in _UNREACHABLE)


def _json(text: str, program: str, where: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        raise BackendUnavailable(f"slurm: {program} --json printed no JSON") from None
    if not isinstance(data, dict):
        raise BackendUnavailable(f"slurm: {program} --json printed no object")
    errors = [error for error in data.get("errors") or () if isinstance(error, Mapping)]
    if errors:
        # squeue --json exits 0 with an empty job list and an "errors" entry when slurmctld
        # does not answer: taking that list as the truth would report every run lost.
        first = errors[0]
        what = first.get("description") or first.get("error") or "unknown error"
        raise BackendUnavailable(f"slurm: slurmctld does not answer {program} ({where}): {what}")
    return data


def _number(value: Any) -> float | None:
    """Slurm prints numbers plain, or as ``{"set": true, "number": N}`` in newer versions."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _state(value: Any) -> str:
    if isinstance(value, list):
        return str(value[0]) if value else "UNKNOWN"
    return str(value or "UNKNOWN")


def _job(item: Mapping[str, Any]) -> SlurmJob:
    exit_code = item.get("exit_code")
    if isinstance(exit_code, Mapping):  # Slurm 23.02+: {"status": …, "return_code": …}
        code = _number(exit_code.get("return_code")) or 0
        signal = _number((exit_code.get("signal") or {}).get("id")) or 0
        raw: int | None = int(code) << 8 | int(signal)
    else:
        number = _number(exit_code)
        raw = None if number is None else int(number)
    start, end = _number(item.get("start_time")), _number(item.get("end_time"))
    return SlurmJob(
        job_id=int(_number(item.get("job_id")) or 0),
        name=str(item.get("name") or ""),
        comment=str(item.get("comment") or ""),
        state=_state(item.get("job_state")),
        exit_code=raw,
        submit_time=_number(item.get("submit_time")) or 0.0,
        start_time=start or None,
        end_time=end or None,
        nodes=str(item.get("nodes") or ""),
        reason=str(item.get("state_reason") or ""),
    )


def _node(item: Mapping[str, Any]) -> SlurmNode:
    features = item.get("active_features") or item.get("features") or ""
    if isinstance(features, list):
        features = ",".join(str(feature) for feature in features)
    return SlurmNode(
        name=str(item.get("name") or ""),
        state=_state(item.get("state")).lower(),
        flags=tuple(str(flag).upper() for flag in item.get("state_flags") or ()),
        cpus=int(_number(item.get("cpus")) or 0),
        memory_mib=int(_number(item.get("real_memory")) or 0),
        gres=str(item.get("gres") or ""),
        features=tuple(feature for feature in str(features).split(",") if feature),
        partitions=tuple(str(partition) for partition in item.get("partitions") or ()),
        reason=str(item.get("reason") or ""),
    )


def _timestamp(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None
