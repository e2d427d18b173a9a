"""The marker a Flotilla run carries in its Slurm job's comment, and Slurm states → run states.

The comment is where a run's identity lives in the engine, so that any backend object — in
another scheduler replica after a failover, or after a kill -9 and restart — finds the runs of
its cluster with one ``squeue`` and knows what they are:

    flotilla;cluster=gpu-a;run=job-1-0;job=job-1;at=1795468636;max=30;p=[…];stop=…;kill=…

Values are percent-encoded, so a reason or a cluster name cannot break the format. ``stop``
(why Flotilla stopped the run) and ``kill`` (when the hard kill is due) are written with
``scontrol update`` *before* the signal, so a restarted backend knows a cancel was asked and
finishes it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from urllib.parse import quote, unquote

from flotilla.backends.common import placements_from_json, placements_to_json
from flotilla.backends.interface import BackendRunState, ReplicaPlacement

PREFIX = "flotilla"
STOP_MAX_RUNTIME = "max_runtime"
"""The ``stop`` value that says Flotilla stopped the run for exceeding its max_runtime."""


@dataclass(frozen=True)
class Marker:
    cluster: str
    run_id: str
    job: str
    dispatched_at: float
    placements: tuple[ReplicaPlacement, ...]
    max_runtime: float | None = None
    stop: str | None = None
    kill_at: float | None = None

    def encode(self) -> str:
        fields = {
            "cluster": self.cluster,
            "run": self.run_id,
            "job": self.job,
            "at": f"{self.dispatched_at:.0f}",
            "p": json.dumps(placements_to_json(self.placements), separators=(",", ":")),
        }
        if self.max_runtime is not None:
            fields["max"] = f"{self.max_runtime:g}"
        if self.stop is not None:
            fields["stop"] = self.stop
        if self.kill_at is not None:
            fields["kill"] = f"{self.kill_at:.3f}"
        return ";".join(
            [PREFIX, *(f"{key}={quote(value, safe='')}" for key, value in fields.items())]
        )

    def stopping(self, reason: str, kill_at: float | None) -> Marker:
        return replace(self, stop=reason, kill_at=kill_at)


def decode(comment: str) -> Marker | None:
    """The marker in a job's comment; ``None`` for a job that is not Flotilla's."""
    parts = comment.split(";")
    if not parts or parts[0] != PREFIX:
        return None
    fields: dict[str, str] = {}
    for part in parts[1:]:
        key, equals, value = part.partition("=")
        if equals:
            fields[key] = unquote(value)
    try:
        return Marker(
            cluster=fields["cluster"],
            run_id=fields["run"],
            job=fields["job"],
            dispatched_at=float(fields["at"]),
            placements=placements_from_json(json.loads(fields["p"])),
            max_runtime=float(fields["max"]) if "max" in fields else None,
            stop=fields.get("stop"),
            kill_at=float(fields["kill"]) if "kill" in fields else None,
        )
    except (KeyError, ValueError, TypeError):
        return None


ACTIVE_STATES = {
    "PENDING": BackendRunState.PENDING,
    "CONFIGURING": BackendRunState.PENDING,
    "REQUEUED": BackendRunState.PENDING,
    "REQUEUE_FED": BackendRunState.PENDING,
    "REQUEUE_HOLD": BackendRunState.PENDING,
    "RESV_DEL_HOLD": BackendRunState.PENDING,
    "RUNNING": BackendRunState.RUNNING,
    "COMPLETING": BackendRunState.RUNNING,
    "SUSPENDED": BackendRunState.RUNNING,
    "STOPPED": BackendRunState.RUNNING,
    "SIGNALING": BackendRunState.RUNNING,
    "STAGE_OUT": BackendRunState.RUNNING,
    "RESIZING": BackendRunState.RUNNING,
}
"""Slurm's job states of a job that has not ended, and what Flotilla calls them."""

ENDED_STATES = {
    "COMPLETED": (BackendRunState.SUCCEEDED, ""),
    "FAILED": (BackendRunState.FAILED, ""),
    "CANCELLED": (BackendRunState.CANCELLED, "cancelled in Slurm (scancel)"),
    "TIMEOUT": (BackendRunState.FAILED, "reached its Slurm time limit"),
    "OUT_OF_MEMORY": (BackendRunState.FAILED, "ran out of memory (Slurm OUT_OF_MEMORY)"),
    "DEADLINE": (BackendRunState.FAILED, "missed its Slurm deadline"),
    "BOOT_FAIL": (BackendRunState.LOST, "its node failed to boot (Slurm BOOT_FAIL)"),
    "NODE_FAIL": (BackendRunState.LOST, "its node failed (Slurm NODE_FAIL)"),
    "PREEMPTED": (BackendRunState.LOST, "preempted by Slurm itself (not by Flotilla)"),
    "SPECIAL_EXIT": (BackendRunState.FAILED, "ended in Slurm's SPECIAL_EXIT state"),
}
"""Slurm's final job states: Flotilla's state and the message when Slurm gives no exit code."""


def exit_code_of(raw: int | None) -> int | None:
    """A raw wait status as Python reports it: the exit code, or minus the signal."""
    if raw is None:
        return None
    if raw & 0x7F:
        return -(raw & 0x7F)
    return raw >> 8
