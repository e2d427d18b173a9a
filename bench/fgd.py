"""FGD as published, a baseline of the GPU fill bench (not a plugin of Flotilla).

Fragmentation Gradient Descent (Weng et al., "Beware of Fragmentation: Scheduling
GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC 2023) places a task on
the node whose expected fragmentation it raises least. The expectation is over the *target
workload*: every task type (its CPU, memory and GPU demand) of the whole trace, weighted by
its popularity, known in advance — the paper's evaluation takes it from the trace being
replayed, and so does this baseline (``FgdScore(workload)``). A node's fragmentation for one
task type is all its unallocated GPU when the type cannot run there (too little CPU or
memory, too few suitable devices) or asks for no GPU, else the unallocated share of the
devices it cannot use (devices with less free than a fraction needs; partly used devices for
whole GPUs).

Differences from Flotilla's ``gpu-fragmentation`` score: the whole trace's types, each with its
own CPU and memory (Flotilla: a sample of the queued and running jobs of the round, the most
frequent GPU amounts with their median CPU and memory), CPU-only types counted, no prior on
whole GPUs, and no second or third tier (ties go to the first node). Both use the same
per-device model (``gpu-devices`` picks the device), so only the node choice differs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from flotilla.framework.interfaces import FilterInput, ScoreInput
from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.resources import Vector

MILLI = 1000

TaskType = tuple[int, float, float]
"""GPU thousandths, CPU, memory (bytes)."""


def workload_types(jobs: Sequence[SchedulingJob], cpu: int, memory: int) -> Counter[TaskType]:
    """Every replica's demand in the workload, counted: FGD's target workload."""
    counted: Counter[TaskType] = Counter()
    for job in jobs:
        for task in job.tasks:
            kind = (
                round(task.gpu * MILLI),
                float(task.request[cpu]),
                float(task.request[memory]),
            )
            counted[kind] += task.replicas
    return counted


class FgdScore:
    """FGD's node choice over a known workload distribution (see the module docstring)."""

    name = "fgd"

    def __init__(self, workload: Counter[TaskType], cpu: int, memory: int) -> None:
        self.cpu = cpu
        self.memory = memory
        kinds = sorted(workload.items())
        self.gpu = np.array([kind[0] for kind, _ in kinds], dtype=np.int64)
        self.cpu_need = np.array([kind[1] for kind, _ in kinds])
        self.memory_need = np.array([kind[2] for kind, _ in kinds])
        self.weight = np.array([count for _, count in kinds], dtype=np.int64)
        self.total = int(self.weight.sum())

    def fragmentation(
        self, devices: npt.NDArray[np.int64], cpu_free: Vector, memory_free: Vector
    ) -> npt.NDArray[np.int64]:
        """Expected unusable GPU thousandths (times the total weight) of each row."""
        total = devices.sum(axis=1)
        whole = devices >= MILLI
        whole_count = np.count_nonzero(whole, axis=1)
        partial = np.where(whole, 0, devices).sum(axis=1)
        expected = np.zeros(len(devices), dtype=np.int64)
        for amount, cpu, memory, weight in zip(
            self.gpu.tolist(),
            self.cpu_need.tolist(),
            self.memory_need.tolist(),
            self.weight.tolist(),
            strict=True,
        ):
            if amount == 0:
                expected += weight * total  # a CPU-only task uses none of the free GPU
                continue
            room = (cpu_free >= cpu) & (memory_free >= memory)
            if amount < MILLI:
                usable = devices >= amount
                fits = usable.any(axis=1)
                unusable = np.where(usable, 0, devices).sum(axis=1)
            else:
                fits = whole_count * MILLI >= amount
                unusable = partial
            expected += weight * np.where(room & fits, unusable, total)
        return expected

    def score(self, request: ScoreInput) -> Vector:
        nodes = request.cluster.nodes
        rows = request.candidates
        devices: npt.NDArray[np.int64] = np.rint(nodes.device_free[rows] * MILLI).astype(np.int64)
        cpu_free = nodes.free[rows, self.cpu]
        memory_free = nodes.free[rows, self.memory]
        task = request.task
        amount = round(task.gpu * MILLI) if task.gpu > 0 else 0
        after = devices.copy()
        index = np.arange(len(rows))
        if 0 < amount < MILLI:
            # The fullest device that fits, as ``gpu-devices`` reserves it.
            keyed = np.where(devices >= amount, devices, np.iinfo(np.int64).max)
            chosen = keyed.argmin(axis=1)
            can = devices[index, chosen] >= amount
            after[index[can], chosen[can]] -= amount
        elif amount >= MILLI:
            whole = devices >= MILLI
            after[whole & (np.cumsum(whole, axis=1) <= amount // MILLI)] = 0
        before = self.fragmentation(devices, cpu_free, memory_free)
        later = self.fragmentation(
            after,
            cpu_free - float(task.request[self.cpu]),
            memory_free - float(task.request[self.memory]),
        )
        width = max(devices.shape[1], 1)
        scale = 1.0 / (2.0 * width * MILLI * max(self.total, 1))
        result: Vector = 0.5 - (later - before).astype(np.float64) * scale
        return result

    def row_score(self, request: FilterInput) -> Callable[[int], float]:
        """One row through ``score`` itself (a baseline: exactness over speed)."""

        def score(row: int) -> float:
            one = ScoreInput(
                request.job,
                request.task,
                request.cluster,
                np.array([row], dtype=np.intp),
                request.cycle,
            )
            return float(self.score(one)[0])

        return score
