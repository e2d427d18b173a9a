"""What each run does with the GPUs it holds: sampled from a ``GpuSource`` (NVML on a real
machine), kept per run, and checked against its share when the cluster's sharing is
``monitor``.

A sample reads the devices (utilisation, memory) and the processes holding GPU memory (MPS
clients included), and gives each process to the run whose processes include it: every pid
in the run's cgroups, whatever its session or process group (a ``torchrun`` job's workers
call ``setsid``), or, without cgroups, every descendant of its replicas (``run_pids``). Per
run:

- ``memory_used``: the bytes its processes hold now, over all its devices; ``memory_peak``
  the most seen at any sample.
- ``utilization``: percent of the GPUs it holds that kernels kept busy at the last sample. Where
  NVML gives each process its SM utilisation (``nvmlDeviceGetProcessUtilization``), a run's
  figure is its processes' own. Where it does not (MIG instances, many drivers under MPS),
  the device's one figure is split among the runs with processes on it in proportion to the
  GPU memory each holds there, and the run's use is marked ``utilization_shared`` unless its
  processes were the device's only ones.
- ``held_gpu_seconds`` and ``used_gpu_seconds``: GPUs held (its fraction per device) and
  GPUs kept busy (its part of each device's utilisation), integrated over the time between
  samples (the first from the run's start); ``efficiency`` is their ratio, the way ``seff``
  reports CPU efficiency.

``monitor``: a run whose processes hold more GPU memory on a device than its share there (the
task's ``gpu_memory``, else its ``gpu`` fraction of the device's memory; a whole device for
``gpu >= 1``) is named in ``Sample.over_share`` with the reason the job will carry, e.g.
"used 60Gi of GPU memory, its share is 35Gi".
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flotilla.backends.local.gpu_sources import GpuSource, GpuUnavailable
from flotilla.model.gpu_use import GpuUse
from flotilla.model.quantity import format_quantity


@dataclass(frozen=True)
class DeviceShare:
    """What one run holds of one device: ``fraction`` of it, and ``memory`` bytes of its memory
    (``None``: the fraction of whatever the device has)."""

    device: int
    fraction: float
    memory: float | None = None


@dataclass(frozen=True)
class RunGpus:
    """A running run as the sampler needs it: every process of it now (``run_pids``) and the
    shares of the devices its replicas were given."""

    run_id: str
    pids: frozenset[int]
    shares: tuple[DeviceShare, ...]
    started_at: float | None = None
    """When it started (the request's clock): its first sample counts the GPUs held since
    then, so a run that ends at its first sample (a ``monitor`` stop) has held them too."""


def _parents() -> dict[int, int]:
    """Every process of this machine → its parent (``/proc/<pid>/stat``)."""
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                text = stat.read()
        except OSError:
            continue  # gone meanwhile
        # The command name is in parentheses and may hold anything: the fields follow the last.
        fields = text[text.rindex(b")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
    return parents


def run_pids(roots: Iterable[int], in_cgroups: Iterable[int] | None) -> frozenset[int]:
    """Every process of a run: those in its cgroups (``in_cgroups``: a process never leaves
    them, ``setsid`` or not), else its replicas' commands (``roots``) and every descendant."""
    if in_cgroups is not None:
        return frozenset(in_cgroups) | frozenset(roots)
    children: dict[int, list[int]] = defaultdict(list)
    for pid, parent in _parents().items():
        children[parent].append(pid)
    found: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return frozenset(found)


@dataclass(frozen=True)
class SampleRequest:
    """One sample: the runs to account, what each used so far, and the time now. ``monitor``:
    also check each run's memory against its share."""

    runs: tuple[RunGpus, ...]
    previous: Mapping[str, GpuUse]
    now: float
    monitor: bool = False


@dataclass(frozen=True)
class Sample:
    """``uses``: each run's use with this sample added. ``over_share``: run → why it is over
    its share (``monitor`` only). ``error``: why the source could not be read (``uses`` then
    holds the previous figures unchanged)."""

    uses: Mapping[str, GpuUse]
    over_share: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None


def sample_gpus(source: GpuSource, request: SampleRequest) -> Sample:
    """Read ``source`` once and add what it shows to each run's use (see the module)."""
    if not request.runs:
        return Sample({})
    try:
        devices = {device.index: device for device in source.devices()}
        found = source.processes()
    except GpuUnavailable as error:
        return Sample(
            {run.run_id: request.previous.get(run.run_id, GpuUse()) for run in request.runs},
            error=str(error),
        )
    run_of_pid = {pid: run.run_id for run in request.runs for pid in run.pids}
    held: dict[tuple[str, int], int] = defaultdict(int)
    """(run, device) → bytes its processes hold there."""
    own: dict[tuple[str, int], float | None] = {}
    """(run, device) → its processes' own SM percent there (None: NVML has none)."""
    on_device: dict[int, int] = defaultdict(int)
    """device → bytes held there by processes of the runs sampled."""
    strangers: set[int] = set()
    """Devices with a process of no run sampled (another user's, an MPS server)."""
    for process in found:
        run_id = run_of_pid.get(process.pid)
        if run_id is None:
            strangers.add(process.device)
            continue
        key = (run_id, process.device)
        held[key] += process.memory_used
        on_device[process.device] += process.memory_used
        mine, theirs = own.get(key, 0.0), process.sm_utilization
        own[key] = None if mine is None or theirs is None else mine + theirs
    uses: dict[str, GpuUse] = {}
    over: dict[str, str] = {}
    for run in request.runs:
        before = request.previous.get(run.run_id, GpuUse())
        fractions = _fractions(run)
        memory = sum(held.get((run.run_id, device), 0) for device in fractions)
        busy = 0.0
        """Devices' worth kept busy by this run now (1.0: one whole device at 100 %)."""
        shared = False
        for device in fractions:
            key = (run.run_id, device)
            if key not in own:
                continue  # none of its processes on this device
            measured = own[key]
            if measured is not None:
                busy += min(100.0, measured) / 100.0
                continue
            mine, everyone = held.get(key, 0), on_device.get(device, 0)
            util = devices[device].utilization if device in devices else None
            if util is None:
                continue
            if mine == everyone and device not in strangers:
                busy += util / 100.0  # alone on the device: its figure is the run's
            elif everyone:
                busy += util / 100.0 * mine / everyone
                shared = True
        total_fraction = sum(fractions.values())
        since = before.sampled_at if before.sampled_at is not None else run.started_at
        elapsed = 0.0 if since is None else max(0.0, request.now - since)
        uses[run.run_id] = GpuUse(
            memory_used=memory,
            memory_peak=max(before.memory_peak, memory),
            utilization=100.0 * busy / total_fraction if total_fraction else None,
            held_gpu_seconds=before.held_gpu_seconds + total_fraction * elapsed,
            used_gpu_seconds=before.used_gpu_seconds + busy * elapsed,
            sampled_at=request.now,
            samples=before.samples + 1,
            utilization_shared=shared,
        )
        if request.monitor:
            reason = _over_share(run, held, devices)
            if reason is not None:
                over[run.run_id] = reason
    return Sample(uses, over)


def _fractions(run: RunGpus) -> dict[int, float]:
    fractions: dict[int, float] = defaultdict(float)
    for share in run.shares:
        fractions[share.device] += share.fraction
    return dict(fractions)


def _over_share(
    run: RunGpus, held: Mapping[tuple[str, int], int], devices: Mapping[int, Any]
) -> str | None:
    allowed: dict[int, float] = defaultdict(float)
    for share in run.shares:
        if share.memory is not None:
            allowed[share.device] += share.memory
        elif share.device in devices:
            allowed[share.device] += min(1.0, share.fraction) * devices[share.device].memory_total
        else:
            allowed[share.device] = float("inf")  # a device we cannot read: nothing to compare
    for device, limit in sorted(allowed.items()):
        used = held.get((run.run_id, device), 0)
        if used > limit:
            return (
                f"used {format_quantity('memory', used)} of GPU memory, "
                f"its share is {format_quantity('memory', limit)}"
            )
    return None


def shares_of(
    placements: Sequence[tuple[str, tuple[int, ...]]],
    resources: Mapping[str, Mapping[str, float]],
) -> tuple[DeviceShare, ...]:
    """Each placed replica's devices (``(task, gpu_ids)``) with the task's share of each: a
    fraction below 1 on its one device (and its ``gpu_memory``, if it asked for one), or one
    whole device per id. A task whose resources are not known holds each device whole."""
    shares: list[DeviceShare] = []
    for task, gpu_ids in placements:
        asked = resources.get(task, {})
        gpu = float(asked.get("gpu", len(gpu_ids)) or 0.0)
        memory = asked.get("gpu_memory")
        for device in gpu_ids:
            if 0 < gpu < 1:
                shares.append(DeviceShare(device, gpu, float(memory) if memory else None))
            else:
                shares.append(DeviceShare(device, 1.0, None))
    return tuple(shares)
