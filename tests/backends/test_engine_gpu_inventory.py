"""GPU inventory from the engines (issue 26): the model (and on Kubernetes the per-device
memory) each engine reports goes into ``NodeInfo``, in the shapes the engines print: a Slurm
node's Gres (``scontrol show node``/``sinfo --json``), a Ray node of the dashboard's
``/api/v0/nodes``, a Kubernetes Node labelled by NVIDIA's GPU feature discovery."""

from __future__ import annotations

from flotilla.backends.kubernetes.status import node_info as kube_node
from flotilla.backends.ray.nodes import read_nodes
from flotilla.backends.slurm.commands import SlurmNode
from flotilla.backends.slurm.nodes import gpu_model
from flotilla.backends.slurm.nodes import node_info as slurm_node

MIB = 2**20


def test_a_slurm_nodes_gres_type_is_its_gpu_model() -> None:
    node = SlurmNode("g1", "idle", (), 64, 512_000, "gpu:a100:4(S:0-1)", (), ("gpu",), "")
    info = slurm_node(node)
    assert info is not None
    assert (info.gpu_count, info.gpu_model) == (4, "a100")
    assert gpu_model("gpu:4") is None  # no type named
    assert gpu_model("gpu:a100:2,gpu:v100:1") is None  # no one model
    assert gpu_model("gpu:h100:8,shard:64") == "h100"


def ray_node(resources: dict[str, float], labels: dict[str, str]) -> dict[str, object]:
    return {
        "node_id": "a" * 56,
        "node_ip": "10.0.0.7",
        "state": "ALIVE",
        "is_head_node": False,
        "resources_total": resources,
        "labels": labels,
    }


def test_a_ray_nodes_accelerator_type_is_its_gpu_model() -> None:
    resources = {"CPU": 16.0, "GPU": 4.0, "memory": 6.4e10, "accelerator_type:A100": 1.0}
    [node] = read_nodes([ray_node(resources, {})])
    assert (node.info.gpu_count, node.info.gpu_model) == (4, "A100")
    assert "accelerator_type:A100" not in node.info.capacity
    labelled = {"ray.io/accelerator-type": "H100"}
    [node] = read_nodes([ray_node({"CPU": 8.0, "GPU": 1.0}, labelled)])
    assert node.info.gpu_model == "H100"
    [cpu_only] = read_nodes([ray_node({"CPU": 8.0}, {})])
    assert (cpu_only.info.gpu_count, cpu_only.info.gpu_model) == (0, None)


def test_a_kubernetes_nodes_gpu_operator_labels_give_model_and_memory() -> None:
    node = {
        "metadata": {
            "name": "gpu-1",
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                "nvidia.com/gpu.memory": "81920",
                "nvidia.com/gpu.count": "8",
            },
        },
        "status": {"allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"}},
    }
    info = kube_node(node, "nvidia.com/gpu")
    assert info.gpu_count == 8
    assert info.gpu_model == "NVIDIA-A100-SXM4-80GB"
    assert info.gpu_memory == 81920 * MIB
    assert info.capacity["gpu_memory"] == 8 * 81920 * MIB  # a gpu_memory job can be placed
    unlabelled = kube_node(
        {"metadata": {"name": "n"}, "status": {"allocatable": {"nvidia.com/gpu": "1"}}},
        "nvidia.com/gpu",
    )
    assert (unlabelled.gpu_model, unlabelled.gpu_memory) == (None, None)
    assert "gpu_memory" not in unlabelled.capacity
