"""The FGD baseline of the GPU fill bench counts fragments as the paper defines them."""

from __future__ import annotations

from collections import Counter

import numpy as np
from bench.fgd import FgdScore, TaskType


def test_fragments_are_the_free_gpu_each_task_type_could_not_use() -> None:
    workload: Counter[TaskType] = Counter(
        {(1000, 2.0, 0.0): 1, (500, 2.0, 0.0): 1, (0, 2.0, 0.0): 1}
    )
    fgd = FgdScore(workload, cpu=0, memory=1)
    devices = np.array([[500, 1000], [500, 1000], [250, 0]], dtype=np.int64)
    cpu_free = np.array([8.0, 1.0, 8.0])
    memory_free = np.zeros(3)
    assert fgd.fragmentation(devices, cpu_free, memory_free).tolist() == [
        # a whole GPU cannot use the half-free device; half a GPU uses both; CPU-only: none
        500 + 0 + 1500,
        # too little CPU for any type: every free GPU is a fragment for each
        3 * 1500,
        # no whole device, no half: all of it for every type
        3 * 250,
    ]
