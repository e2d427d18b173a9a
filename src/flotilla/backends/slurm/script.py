"""A run as one Slurm batch job: the sbatch options and the batch script.

One job holds every replica (so a gang starts all at once or not at all); the batch script
starts one ``srun`` step per replica on the node Flotilla chose, each with its own stdout and
stderr file, waits for them, and on the first replica that fails stops the others and exits
with that replica's code (so Slurm's own ``ExitCode`` is the run's). Each replica's exit code
is also written to ``TASK-REPLICA.exit`` beside its output.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from flotilla.backends.common import rendezvous_env
from flotilla.backends.interface import DispatchRequest, ReplicaPlacement
from flotilla.model.payload import CommandPayload

MIB = 1 << 20


@dataclass(frozen=True)
class ReplicaShape:
    """What one replica asks of its node, in Slurm's units."""

    placement: ReplicaPlacement
    cpus: int
    memory_mib: int | None
    gpus: int


def replica_file(placement: ReplicaPlacement, suffix: str) -> str:
    return f"{placement.task}-{placement.replica}.{suffix}"


def shapes(request: DispatchRequest) -> list[ReplicaShape]:
    made = []
    for placement in request.placements:
        asks: Mapping[str, float] = request.resources.get(placement.task, {})
        cpus = max(1, math.ceil(float(asks.get("cpu", 1.0)) - 1e-9))
        memory = asks.get("memory")
        memory_mib = max(1, math.ceil(float(memory) / MIB)) if memory else None
        gpu = float(asks.get("gpu", 0.0))
        gpus = max(len(placement.gpu_ids), int(gpu) if gpu >= 1 else 0)
        made.append(ReplicaShape(placement, cpus, memory_mib, gpus))
    return made


def sbatch_options(
    request: DispatchRequest,
    *,
    comment: str,
    output: Path,
    working_dir: Path,
    partition: str | None,
    time_slack: float = 60.0,
) -> list[str]:
    """The options of the one ``sbatch`` that submits ``request`` (no shell involved)."""
    replicas = shapes(request)
    nodes = list(dict.fromkeys(shape.placement.node for shape in replicas))
    options = [
        f"--job-name={request.run_id}",
        f"--comment={comment}",
        f"--nodes={len(nodes)}",
        f"--nodelist={','.join(nodes)}",
        f"--ntasks={len(replicas)}",
        f"--cpus-per-task={max(shape.cpus for shape in replicas)}",
        f"--output={output / 'batch.stdout'}",
        f"--error={output / 'batch.stderr'}",
        f"--chdir={working_dir}",
        "--export=NONE",
        "--no-requeue",
    ]
    per_cpu = memory_per_cpu(replicas)
    if per_cpu is not None:
        options.append(f"--mem-per-cpu={per_cpu}")
    gpus_per_node = max(
        sum(shape.gpus for shape in replicas if shape.placement.node == node) for node in nodes
    )
    if gpus_per_node:
        options.append(f"--gres=gpu:{gpus_per_node}")
    if request.max_runtime is not None:
        # Flotilla stops the run at max_runtime itself; Slurm's limit is the backstop for a
        # time when no backend watches (a minute later: Slurm counts whole minutes).
        minutes = math.ceil((request.max_runtime + time_slack) / 60)
        options.append(f"--time={minutes}")
    if partition:
        options.append(f"--partition={partition}")
    return options


def memory_per_cpu(replicas: Sequence[ReplicaShape]) -> int | None:
    asked = [
        math.ceil(shape.memory_mib / shape.cpus)
        for shape in replicas
        if shape.memory_mib is not None
    ]
    return max(asked) if asked else None


SIBLING_GRACE = 30.0
"""Seconds a failed replica's siblings get to end after SIGTERM before their ``srun`` is
killed (the backend passes its ``grace_period``)."""


def batch_script(
    request: DispatchRequest,
    payload: CommandPayload,
    output: Path,
    environment: Mapping[str, str],
    *,
    sibling_grace: float = SIBLING_GRACE,
) -> str:
    """The batch script: one background ``srun`` per replica, then wait, failing fast.

    After the first failure the other replicas' steps get SIGTERM (``scancel --signal=TERM``
    of the job: its steps, not this shell; ``srun`` itself must not be signalled, it answers
    SIGTERM by SIGKILLing its step at once, so no trap would run), and their ``srun`` SIGKILL
    ``sibling_grace`` seconds later: an ``srun`` whose step was still being launched when the
    TERM came ("aborted before step completely launched") otherwise waited up to a minute
    for the step's I/O, and the gang read running all that time. Killing ``srun`` is safe:
    the script then exits, which ends the job and every step left in it.
    The grace is a ``sleep`` the script waits on with the steps (its own child, killed when
    the steps end first, so nothing of it outlives the job); the ``srun`` it kills are
    children not yet reaped, so their process ids cannot have been reused."""
    replicas = shapes(request)
    per_cpu = memory_per_cpu(replicas)
    lines = [
        "#!/bin/bash",
        f"# Flotilla run {request.run_id} of job {request.job} on cluster {request.cluster}.",
        "# Generated by flotilla.backends.slurm; one srun step per replica.",
        "export SLURM_EXPORT_ENV=ALL",
        "# A stop signals the steps (scancel --signal=TERM), not this shell; were it signalled",
        "# by Slurm itself, it outlives SIGTERM to report the steps' codes.",
        "trap 'echo \"flotilla: SIGTERM\" >&2' TERM",
        f"out={shlex.quote(str(output))}",
    ]
    for name, value in environment.items():
        lines.append(f"export {name}={shlex.quote(value)}")
    lines += ["declare -A label_of running"]
    argv = " ".join(shlex.quote(part) for part in payload.argv())
    for shape in replicas:
        placement = shape.placement
        step = [
            "srun",
            "--nodes=1",
            "--ntasks=1",
            "--exact",
            f"--nodelist={placement.node}",
            f"--cpus-per-task={shape.cpus}",
            f"--job-name={request.run_id}:{placement.label}",
            f'--output="$out"/{shlex.quote(replica_file(placement, "stdout"))}',
            f'--error="$out"/{shlex.quote(replica_file(placement, "stderr"))}',
        ]
        if per_cpu is not None:
            step.append(f"--mem-per-cpu={per_cpu}")
        if shape.gpus:
            step.append(f"--gres=gpu:{shape.gpus}")
        # Rank 0's node by its Slurm name (a host name in the cluster); the job's own env,
        # exported above, wins over the rendezvous variables.
        rendezvous = rendezvous_env(request, placement, request.placements[0].node)
        variables = {
            **{name: value for name, value in rendezvous.items() if name not in payload.env},
            "FLOTILLA_TASK": placement.task,
            "FLOTILLA_REPLICA": str(placement.replica),
            "FLOTILLA_NODE": placement.node,
        }
        prefix = " ".join(f"{name}={shlex.quote(value)}" for name, value in variables.items())
        if not shape.gpus:
            prefix += " CUDA_VISIBLE_DEVICES="
        lines.append(f"{prefix} {' '.join(step)} {argv} &")
        lines.append(f"running[$!]=1; label_of[$!]={shlex.quote(placement.label)}")
    lines += [
        "status=0",
        "failed=",
        "watchdog=  # a sleep of the grace, started at the first failure",
        'while [ "${#running[@]}" -gt 0 ]; do',
        '  finished=; wait -n -p finished "${!running[@]}" $watchdog; code=$?',
        '  if [ -z "$finished" ]; then [ "$code" -gt 128 ] && continue; break; fi',
        '  if [ "$finished" = "$watchdog" ]; then',
        '    watchdog=; kill -KILL "${!running[@]}" 2>/dev/null; continue',
        "  fi",
        '  unset "running[$finished]"; label=${label_of[$finished]}',
        '  echo "$code" > "$out/${label/\\//-}.exit"',
        '  if [ "$code" -ne 0 ] && [ -z "$failed" ]; then',
        "    failed=$label; status=$code",
        '    echo "flotilla: replica $label exited with code $code" >&2',
        '    if [ "${#running[@]}" -gt 0 ]; then',
        '      scancel --signal=TERM "$SLURM_JOB_ID" 2>/dev/null ||',
        '        kill -TERM "${!running[@]}" 2>/dev/null',
        f"      sleep {sibling_grace:g} & watchdog=$!",
        "    fi",
        "  fi",
        "done",
        '[ -z "$watchdog" ] || kill "$watchdog" 2>/dev/null',
        'exit "$status"',
        "",
    ]
    return "\n".join(lines)
