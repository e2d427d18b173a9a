"""A generated GPU-sharing trace shaped like Alibaba's public ``openb`` trace (the GPU-sharing
cluster trace of Weng et al., ATC'23: 8,152 pods on 1,523 nodes with 6,212 GPUs), for the GPU
fill bench (``python -m bench.gpu_fill --trace openb``). It is not that trace (which is not in
the repository): its shape, written down here, is what the bench needs of it.

- **Nodes**: 1,523, of which 167 without GPUs (96 CPUs, 512 GiB), 100 with one GPU (32 CPUs,
  128 GiB), 456 with two (64 CPUs, 256 GiB), 300 with four (64 CPUs, 384 GiB) and 500 with eight
  (96 CPUs, 768 GiB): 6,212 GPUs.
- **Pods**: 8,152, in a seeded order. GPU amounts: 24 distinct, 20 of them fractional (the 19
  multiples of 0.05 from 0.05 to 0.95, and 0.125) and 4 whole (1, 2, 4, 8); 12 % of the pods
  ask for no GPU. Fractional pods are 38 % of all, skewed to the common sizes (0.5, 0.25, 0.1,
  0.125, 0.75 most); one GPU 44 %, two 3.5 %, four 1.5 %, eight 1 %. CPU and memory are drawn
  per pod (1, 2, 4 or 8 CPUs beside a fraction, 4 to 32 beside whole GPUs, more with more
  GPUs; 2, 4 or 8 GiB per CPU), so the joint (GPU, CPU, memory) task types number in the
  hundreds, as in openb. The GPU asked for adds up to about the
  fleet's 6,212 GPUs (``demand`` in ``trace``'s result), so the fleet fills up and the rules
  differ in what they strand.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GI = 2**30

NODES: tuple[tuple[str, float, float, int, int], ...] = (
    # pool, CPUs, memory GiB, GPUs, nodes
    ("cpu", 96, 512, 0, 167),
    ("gpu1", 32, 128, 1, 100),
    ("gpu2", 64, 256, 2, 456),
    ("gpu4", 64, 384, 4, 300),
    ("gpu8", 96, 768, 8, 500),
)

PODS = 8_152

FRACTIONS: tuple[tuple[float, float], ...] = (
    # GPU amount, relative weight among the fractional pods
    *((round(0.05 * step, 2), 1.0) for step in range(1, 20) if step not in (2, 5, 10, 15)),
    (0.1, 8.0),
    (0.25, 12.0),
    (0.5, 16.0),
    (0.75, 4.0),
    (0.125, 6.0),
)
"""20 fractional amounts: the 19 multiples of 0.05 below 1 and 0.125."""

SHARES: tuple[tuple[str, float], ...] = (
    ("none", 0.12),
    ("fraction", 0.38),
    ("1", 0.44),
    ("2", 0.035),
    ("4", 0.015),
    ("8", 0.01),
)


@dataclass(frozen=True)
class Pod:
    gpu: float
    cpu: float
    memory: float
    """Bytes."""


def trace(seed: int) -> list[Pod]:
    """The pods, in arrival order (seeded)."""
    rng = np.random.default_rng(seed)
    kinds = [kind for kind, _ in SHARES]
    weights = np.array([share for _, share in SHARES])
    amounts = np.array([amount for amount, _ in FRACTIONS])
    fraction_weights = np.array([weight for _, weight in FRACTIONS])
    pods = []
    for _ in range(PODS):
        kind = kinds[int(rng.choice(len(kinds), p=weights / weights.sum()))]
        if kind == "none":
            gpu = 0.0
        elif kind == "fraction":
            gpu = float(
                amounts[rng.choice(len(amounts), p=fraction_weights / fraction_weights.sum())]
            )
        else:
            gpu = float(kind)
        cpus = (1, 2, 4, 8) if gpu < 1 else (4, 8, 12, 16, 32)[: 2 + min(3, int(gpu))]
        cpu = float(rng.choice(cpus))
        per_cpu = float(rng.choice((2, 4, 8)))
        pods.append(Pod(gpu, cpu, cpu * per_cpu * GI))
    return pods


def gpu_amounts(pods: list[Pod]) -> tuple[int, int]:
    """Distinct GPU amounts asked for, and how many of them are fractional."""
    amounts = {pod.gpu for pod in pods if pod.gpu > 0}
    return len(amounts), sum(1 for amount in amounts if amount < 1)
