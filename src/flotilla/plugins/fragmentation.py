"""Fragmentation-aware GPU packing (Score): where a replica wastes the fewest GPUs.

Why: bin-packing on the mean of CPU, memory and GPU use strands GPUs. CPU-only work lands on
GPU nodes and eats the CPU and memory that GPU jobs need beside a free GPU, and fractions
spread over devices so that whole-GPU jobs no longer fit. The remedy is Fragmentation
Gradient Descent (Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads
with Fragmentation Gradient Descent", USENIX ATC 2023): a node's *fragmentation* is the free
GPU capacity that the expected next job could not use there, and a replica goes to the node
whose fragmentation it increases least.

The score has three tiers, summed with weights far apart so the first decides when it can:

1. **Fragmentation** (FGD). The expected next job is drawn from the *mix*: the GPU requests of
   the queued and running jobs, taken at the start of each scheduling round (a sample of at
   most ``MIX_SAMPLE`` jobs), grouped by GPU amount (every whole amount, and the
   ``MIX_TYPES`` most frequent fractions), with the median CPU and memory of each group
   beside it. For a request of the mix, the unusable GPU capacity of a node is all its
   free GPU when the request does not fit there (too few suitable devices, or too little CPU
   or memory left beside them), else the free share of the devices it cannot use (devices
   with less free than a fraction asks for; partly used devices for whole GPUs). Weighted by
   how often each request occurs, that is the node's expected fragmentation; the tier scores
   its increase by the placement (it may be negative: filling a fragment). Amounts are
   counted in thousandths of a GPU as integers, so the vectorised score and the one-row
   score agree bit for bit whatever the order of the sums.
2. **Rules** that protect GPUs, for ties of the first tier: a CPU-only replica prefers nodes
   with no free GPU (CPU-only nodes, or GPU nodes whose GPUs are all taken), a soft
   preference, not a taint; a fractional replica prefers a node with a partly used device it
   fits on (the device itself is chosen by ``gpu-devices``: the fullest that fits).
3. **Best fit** (``binpack``'s utilisation) last, so ties go to the fullest node.

On a cluster without GPU devices the score is exactly ``binpack``'s, so on CPU-only fleets
the default profile places as ``binpack`` does.

Row-local: a node's score reads only its own row and the placement-relevant request, plus
the round's mix, which is fixed for a round; each round works on fresh copies of the node tables,
and the engine keeps a best-node index per table copy, so no index ever holds scores of two
mixes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from flotilla.framework.interfaces import CycleStartInput, CycleState, FilterInput, ScoreInput
from flotilla.framework.jobs import SchedulingJob, TaskRequest
from flotilla.framework.nodes import NodeTable
from flotilla.framework.resources import EPSILON, Vector
from flotilla.plugins.fit import _row_utilisation, _utilisation_after

MILLI = 1000
"""GPU amounts are counted in thousandths of a GPU, as integers (exact sums)."""

MIX_SAMPLE = 2048
"""Jobs read from the queue (then from the running set) to estimate the mix each round."""

MIX_TYPES = 8
"""Distinct fractional GPU amounts kept in the mix (the most frequent): the cost is linear in
it. Whole amounts are all kept: they share one computation of the usable devices."""

WHOLE_GPU_PRIOR = 10
"""One-GPU requests get a pseudo-count of a tenth of the mix (one at least) added: a sample
that has not seen them yet (a queue of notebooks) must not make breaking a whole device look
free, and whole GPUs are what most training jobs ask for."""

FRAGMENTATION_WEIGHT = 0.9
RULE_WEIGHT = 0.0005
PACKING_WEIGHT = 0.0001
"""Tier weights (they sum below 1, so the score stays in [0, 1]). One thousandth of a GPU of
expected fragmentation on an 8-GPU node moves the first tier by about 6e-5; the rules and
the best fit therefore decide only among nodes the first tier finds (nearly) equal."""

_MEMO_LIMIT = 65_536
"""Node states whose score (all but the best-fit part) is remembered, per placement key."""


@dataclass(frozen=True)
class MixType:
    """One GPU request of the mix: its amount, typical CPU and memory, and how often."""

    gpu_milli: int
    cpu: float
    memory: float
    count: int


@dataclass(frozen=True)
class Mix:
    """The round's expected next requests."""

    types: tuple[MixType, ...]

    @property
    def total(self) -> int:
        return sum(kind.count for kind in self.types)


DEFAULT_MIX = Mix((MixType(MILLI, 0.0, 0.0, 1),))
"""The mix before any GPU job was seen (or outside a scheduling round): the prior alone."""


def mix_of(jobs: Sequence[SchedulingJob], cpu: int | None, memory: int | None) -> Mix:
    """The mix of ``jobs``' GPU requests: one entry per replica asking for a GPU, grouped by
    amount (the ``MIX_TYPES`` most frequent kept), with the median CPU and memory of each."""
    # Jobs built alike share one tuple of tasks (``framework.jobs``): counted per tuple first
    # (one lookup per job), then per distinct request. The tuples stay referenced by ``jobs``
    # for the whole call, so their ids cannot be reused meanwhile.
    alike: dict[int, list[Any]] = {}
    for job in jobs:
        tasks = job.tasks
        seen = alike.get(id(tasks))
        if seen is None:
            alike[id(tasks)] = [tasks, 1]
        else:
            seen[1] += 1
    shapes: dict[tuple[float, bytes], list[Any]] = {}
    for tasks, jobs_alike in alike.values():
        for task in tasks:
            if task.gpu <= 0:
                continue
            key = (task.gpu, task.request.tobytes())
            found = shapes.get(key)
            if found is None:
                shapes[key] = [task, task.replicas * jobs_alike]
            else:
                found[1] += task.replicas * jobs_alike
    groups: dict[int, list[tuple[float, float, int]]] = {}
    for task, count in shapes.values():
        task_cpu = float(task.request[cpu]) if cpu is not None else 0.0
        task_memory = float(task.request[memory]) if memory is not None else 0.0
        groups.setdefault(round(task.gpu * MILLI), []).append((task_cpu, task_memory, count))
    counted = [(amount, sum(count for *_, count in group)) for amount, group in groups.items()]
    # Every whole amount is kept (they share one computation: ``fragmentation_rows``), the
    # most frequent fractions up to ``MIX_TYPES``: a rare 8-GPU request left out of the mix
    # made breaking a free 8-GPU node look free (issue 38, the openb-shaped trace).
    fractions = [item for item in counted if item[0] < MILLI]
    kept = sorted(fractions, key=lambda item: (-item[1], item[0]))[:MIX_TYPES]
    kept += [item for item in counted if item[0] >= MILLI]
    types = []
    everything = sum(total for _, total in kept)
    prior = max(1, everything // WHOLE_GPU_PRIOR)
    if not any(amount == MILLI for amount, _ in kept):
        types.append(MixType(MILLI, 0.0, 0.0, prior))
    for amount, total in sorted(kept):
        group = groups[amount]
        extra = prior if amount == MILLI else 0
        types.append(
            MixType(amount, _median(group, 0, total), _median(group, 1, total), total + extra)
        )
    types.sort(key=lambda kind: kind.gpu_milli)
    return Mix(tuple(types))


def _median(group: list[tuple[float, float, int]], field: int, total: int) -> float:
    """The upper median of ``field`` over the group's requests, each counted ``count`` times."""
    seen = 0
    for entry in sorted(group, key=lambda entry: entry[field]):
        seen += entry[2]
        if seen > total // 2:
            return entry[field]
    return 0.0


def _dimension(nodes: NodeTable, name: str) -> int | None:
    index: int | None = nodes.space.index.get(name)
    return index


class _Model:
    """The fragmentation arithmetic of one mix for one node table (its resource space)."""

    def __init__(self, mix: Mix, nodes: NodeTable) -> None:
        self.mix = mix
        self.blocks = nodes.numa_block
        """The table's static device layout this model was made for (shared by copies)."""
        self.cpu = _dimension(nodes, "cpu")
        self.memory = _dimension(nodes, "memory")
        self.types = [
            (kind.gpu_milli, kind.cpu - EPSILON, kind.memory - EPSILON, kind.count)
            for kind in mix.types
        ]
        width = nodes.device_free.shape[1]
        self.gpu_counts = np.count_nonzero(nodes.numa_block >= 0, axis=1)
        """Devices per node (static: shared by every copy of the table)."""
        self.scale = 1.0 / (2.0 * max(width, 1) * MILLI * max(mix.total, 1))
        """Turns a fragmentation increase into [-0.5, 0.5] of the first tier."""

    # --- one row, on Python integers --------------------------------------------------------

    def fragmentation(self, devices: list[int], cpu_free: float, memory_free: float) -> int:
        """Expected unusable GPU (thousandths, times the mix's counts) of one node state."""
        total = sum(devices)
        if total == 0:
            return 0
        expected = 0
        for amount, cpu, memory, count in self.types:
            if cpu_free < cpu or memory_free < memory:
                expected += count * total
                continue
            if amount < MILLI:
                fits = False
                unusable = 0
                for free in devices:
                    if free >= amount:
                        fits = True
                    else:
                        unusable += free
            else:
                whole = 0
                unusable = 0
                for free in devices:
                    if free >= MILLI:
                        whole += 1
                    else:
                        unusable += free
                fits = whole * MILLI >= amount
            expected += count * (unusable if fits else total)
        return expected

    def increase(
        self,
        devices: list[int],
        cpu_free: float,
        memory_free: float,
        task: tuple[int, float, float],
    ) -> int:
        """How much placing ``task`` (GPU thousandths, CPU, memory) raises the fragmentation."""
        amount, cpu, memory = task
        before = self.fragmentation(devices, cpu_free, memory_free)
        after_devices = list(devices)
        if 0 < amount < MILLI:
            # The fullest device that fits, as ``gpu-devices`` reserves it.
            fitting = [(free, device) for device, free in enumerate(devices) if free >= amount]
            if fitting:
                _, device = min(fitting)
                after_devices[device] -= amount
        elif amount >= MILLI:
            left = amount // MILLI
            for device, free in enumerate(devices):
                if left and free >= MILLI:
                    after_devices[device] = 0
                    left -= 1
        after = self.fragmentation(after_devices, cpu_free - cpu, memory_free - memory)
        return after - before

    # --- many rows, vectorised ------------------------------------------------------------

    def fragmentation_rows(
        self,
        devices: npt.NDArray[np.int64],
        cpu_free: Vector,
        memory_free: Vector,
    ) -> npt.NDArray[np.int64]:
        total = devices.sum(axis=1)
        expected = np.zeros(len(devices), dtype=np.int64)
        # Whole-GPU requests all see the same usable devices: counted once for all of them.
        whole_count: npt.NDArray[np.int64] | None = None
        partial: npt.NDArray[np.int64] | None = None
        for amount, cpu, memory, count in self.types:
            room = (cpu_free >= cpu) & (memory_free >= memory)
            if amount < MILLI:
                usable = devices >= amount
                fits = usable.any(axis=1)
                unusable = np.where(usable, 0, devices).sum(axis=1)
            else:
                if whole_count is None or partial is None:
                    whole = devices >= MILLI
                    whole_count = np.count_nonzero(whole, axis=1)
                    partial = np.where(whole, 0, devices).sum(axis=1)
                fits = whole_count * MILLI >= amount
                unusable = partial
            expected += count * np.where(room & fits, unusable, total)
        return np.where(total == 0, 0, expected)

    def increase_rows(
        self,
        devices: npt.NDArray[np.int64],
        cpu_free: Vector,
        memory_free: Vector,
        task: tuple[int, float, float],
    ) -> npt.NDArray[np.int64]:
        amount, cpu, memory = task
        before = self.fragmentation_rows(devices, cpu_free, memory_free)
        after_devices = devices.copy()
        rows = np.arange(len(devices))
        if 0 < amount < MILLI:
            # The fullest fitting device; ties to the lowest device (the row path's ``min``).
            keyed = np.where(devices >= amount, devices, np.iinfo(np.int64).max)
            chosen = keyed.argmin(axis=1)
            can = devices[rows, chosen] >= amount
            after_devices[rows[can], chosen[can]] -= amount
        elif amount >= MILLI:
            whole = devices >= MILLI
            # The first ``amount // MILLI`` whole devices of each row (the row path's order).
            taken = whole & (np.cumsum(whole, axis=1) <= amount // MILLI)
            after_devices[taken] = 0
        after = self.fragmentation_rows(after_devices, cpu_free - cpu, memory_free - memory)
        return after - before


def _devices_milli(nodes: NodeTable, rows: npt.NDArray[np.intp] | None) -> npt.NDArray[np.int64]:
    free = nodes.device_free if rows is None else nodes.device_free[rows]
    milli: npt.NDArray[np.int64] = np.rint(free * MILLI).astype(np.int64)
    return milli


def _row_devices(nodes: NodeTable, row: int) -> list[int]:
    return [round(free * MILLI) for free in nodes.device_free[row].tolist()]


def _task_key(task: TaskRequest, model: _Model) -> tuple[int, float, float]:
    cpu = float(task.request[model.cpu]) if model.cpu is not None else 0.0
    memory = float(task.request[model.memory]) if model.memory is not None else 0.0
    return (round(task.gpu * MILLI) if task.gpu > 0 else 0, cpu, memory)


class GpuFragmentationScore:
    """Prefer the node where the replica adds the least expected GPU fragmentation (FGD),
    then the rules that protect GPUs, then best fit (see the module's docstring)."""

    name = "gpu-fragmentation"
    # Row-local: a node's score reads its own row, the placement-relevant request and the round's
    # mix (fixed for the round, whose node tables are fresh copies).

    def __init__(self) -> None:
        self._models: dict[tuple[int, int], _Model] = {}

    def start_cycle(self, request: CycleStartInput) -> None:
        """Estimate the mix from a sample of the queued jobs, then of the running ones."""
        snapshot: Any = request.snapshot
        if not any(cluster.nodes.device_free.shape[1] for cluster in snapshot.clusters):
            return
        sample: list[SchedulingJob] = []
        queued: Sequence[SchedulingJob] = snapshot.queued
        sample.extend(queued[:MIX_SAMPLE])
        running: Sequence[Any] = snapshot.running
        for record in running[: MIX_SAMPLE - len(sample)]:
            sample.append(record.job)
        space_holder = snapshot.clusters[0].nodes
        mix = mix_of(sample, _dimension(space_holder, "cpu"), _dimension(space_holder, "memory"))
        request.cycle.data[self.name] = mix

    def _model(self, cycle: CycleState, nodes: NodeTable) -> _Model:
        mix = cycle.data.get(self.name, DEFAULT_MIX)
        key = (id(mix), id(nodes.numa_block))
        model = self._models.get(key)
        # Identity checks too: an id may be reused once its object is gone.
        if model is None or model.mix is not mix or model.blocks is not nodes.numa_block:
            if len(self._models) > 8:
                self._models.clear()
            model = self._models[key] = _Model(mix, nodes)
        return model

    def score(self, request: ScoreInput) -> Vector:
        nodes = request.cluster.nodes
        utilisation = _utilisation_after(request)
        if nodes.device_free.shape[1] == 0:
            return utilisation
        model = self._model(request.cycle, nodes)
        candidates = request.candidates
        task = _task_key(request.task, model)
        amount = task[0]
        # Nodes without devices: no fragmentation to add (0.5), and the CPU-only rule holds.
        fragmentation = np.full(len(candidates), 0.5)
        rule = np.full(len(candidates), 1.0 if amount == 0 else 0.0)
        equipped = np.flatnonzero(model.gpu_counts[candidates] > 0)
        if len(equipped):
            rows = candidates[equipped]
            devices = _devices_milli(nodes, rows)
            cpu_free = nodes.free[rows, model.cpu] if model.cpu is not None else np.zeros(len(rows))
            memory_free = (
                nodes.free[rows, model.memory] if model.memory is not None else np.zeros(len(rows))
            )
            increase = model.increase_rows(devices, cpu_free, memory_free, task)
            fragmentation[equipped] = 0.5 - increase.astype(np.float64) * model.scale
            if amount == 0:
                rule[equipped] = (devices.sum(axis=1) == 0).astype(np.float64)
            elif amount < MILLI:
                rule[equipped] = ((devices >= amount) & (devices < MILLI)).any(axis=1)
        result: Vector = (
            fragmentation * FRAGMENTATION_WEIGHT + rule * RULE_WEIGHT + utilisation * PACKING_WEIGHT
        )
        return result

    def row_score(self, request: FilterInput) -> Callable[[int], float]:
        """One node's score on Python values, bit for bit ``score``'s (integer
        fragmentation, then the same float operations in the same order)."""
        nodes = request.cluster.nodes
        utilisation = _row_utilisation(request)
        if nodes.device_free.shape[1] == 0:
            return utilisation
        model = self._model(request.cycle, nodes)
        task = _task_key(request.task, model)
        amount = task[0]
        item = nodes.free.item
        cpu, memory = model.cpu, model.memory
        memo: dict[tuple[float, ...], float] = {}
        scale = model.scale

        counts = model.gpu_counts.tolist()
        bare = 0.5 * FRAGMENTATION_WEIGHT + (1.0 if amount == 0 else 0.0) * RULE_WEIGHT

        device_free = nodes.device_free

        def score(row: int) -> float:
            if not counts[row]:
                return bare + utilisation(row) * PACKING_WEIGHT
            cpu_free = item(row, cpu) if cpu is not None else 0.0
            memory_free = item(row, memory) if memory is not None else 0.0
            # Keyed by the row's raw state: a node state seen before costs one lookup.
            state = (cpu_free, memory_free, *device_free[row].tolist())
            known = memo.get(state)
            if known is None:
                if len(memo) > _MEMO_LIMIT:
                    memo.clear()
                devices = _row_devices(nodes, row)
                increase = model.increase(devices, cpu_free, memory_free, task)
                fragmentation = 0.5 - float(increase) * scale
                if amount == 0:
                    rule = 1.0 if sum(devices) == 0 else 0.0
                elif amount < MILLI:
                    rule = 1.0 if any(amount <= free < MILLI for free in devices) else 0.0
                else:
                    rule = 0.0
                known = memo[state] = fragmentation * FRAGMENTATION_WEIGHT + rule * RULE_WEIGHT
            return known + utilisation(row) * PACKING_WEIGHT

        return score
