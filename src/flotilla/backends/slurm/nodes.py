"""Slurm nodes as Flotilla's ``NodeInfo``: capacity, GPUs from Gres, features as labels."""

from __future__ import annotations

import re

from flotilla.backends.slurm.commands import SlurmNode
from flotilla.model.node_info import NodeInfo

MIB = 1 << 20
FEATURE_LABEL = "slurm.feature/"
PARTITION_LABEL = "slurm.partition/"

UNUSABLE_STATES = {"down", "drained", "draining", "fail", "failing", "future", "unknown"}
UNUSABLE_FLAGS = {
    "DRAIN",
    "DRAINED",
    "DRAINING",
    "NOT_RESPONDING",
    "FAIL",
    "MAINTENANCE",
    "POWERED_DOWN",
    "POWER_DOWN",
    "REBOOT_REQUESTED",
    "RESERVED",
}
"""A node in one of these states (or with one of these flags) takes no new job: it is left out
of the inventory, so Flotilla places nothing there; its running jobs are still reported."""

_GPU = re.compile(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)")


def gpu_count(gres: str) -> int:
    """GPUs in a node's Gres (``gpu:2``, ``gpu:a100:4(S:0-1)``, ``gpu:a100:2,gpu:v100:1``)."""
    return sum(int(count) for count in _GPU.findall(gres))


_GPU_TYPE = re.compile(r"(?:^|,)gpu:([^:,(]+):\d+")


def gpu_model(gres: str) -> str | None:
    """The GPU type a node's Gres names (``gpu:a100:4`` → ``a100``); None when it names none
    or several (``gpu:a100:2,gpu:v100:1``: no one model)."""
    types = set(_GPU_TYPE.findall(gres))
    return types.pop() if len(types) == 1 else None


def usable(node: SlurmNode) -> bool:
    states = set(node.state.replace("+", " ").split())
    return not (states & UNUSABLE_STATES) and not (set(node.flags) & UNUSABLE_FLAGS)


def node_info(node: SlurmNode) -> NodeInfo | None:
    """The node as Flotilla sees it, or ``None`` when Slurm would not start a job there."""
    if not node.name or not usable(node):
        return None
    gpus = gpu_count(node.gres)
    labels = {f"{FEATURE_LABEL}{feature}": "true" for feature in node.features}
    labels.update({f"{PARTITION_LABEL}{partition}": "true" for partition in node.partitions})
    return NodeInfo(
        name=node.name,
        capacity={
            "cpu": float(node.cpus),
            "memory": float(node.memory_mib * MIB),
            "gpu": float(gpus),
        },
        labels=labels,
        taints=(),
        gpu_count=gpus,
        gpu_model=gpu_model(node.gres) if gpus else None,
    )
