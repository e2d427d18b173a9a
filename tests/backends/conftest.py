"""Fixtures that make backends over a temporary state dir and always close them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.timing import limit

from .engines.fake_kube_apiserver import FakeApiServer
from .engines.slurm_cluster import SlurmCluster, slurm_installed
from .kube_support import Manual
from .ray_support import RayHarness
from .support import Harness, KubernetesHarness, LocalHarness, SimHarness, SlurmHarness


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every contract test on the Ray head runs on one xdist worker (``--dist loadgroup``), so
    a test run starts one head (marks on fixture params do not reach the tests)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("harness") == "ray":
            item.add_marker(pytest.mark.xdist_group("ray"))


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A real munged + slurmctld + slurmd for the session (per xdist worker), stopped by PID.

    Outside CI a machine without Slurm skips these tests (``scripts/install-slurm`` installs
    it); under ``CI=true`` a missing Slurm is a failure, never a skip."""
    if not slurm_installed():
        if os.environ.get("CI") == "true":
            pytest.fail("Slurm is not installed: run scripts/install-slurm (CI must test it)")
        pytest.skip("Slurm is not installed (scripts/install-slurm installs it)")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm") / "box")
    cluster.start(timeout=limit(30))  # longer on a busy machine (tests/timing.py)
    try:
        yield cluster
    finally:
        cluster.stop()


def _directories(tmp_path: Path) -> tuple[Path, Path]:
    """A harness's state dir and scratch dir (made) under the test's temporary dir."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    return tmp_path / "state", scratch


@pytest.fixture(params=["local", "sim", "kubernetes", "ray", "slurm"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    state, scratch = _directories(tmp_path)
    made: Harness
    if request.param == "ray":
        made = RayHarness(state, scratch, request.getfixturevalue("ray_head"))
    elif request.param == "slurm":
        made = SlurmHarness(state, scratch, request.getfixturevalue("slurm_cluster"))
    else:
        kind = {"local": LocalHarness, "sim": SimHarness, "kubernetes": KubernetesHarness}[
            request.param
        ]
        made = kind(state, scratch)
    with made:
        yield made


@pytest.fixture
def local(tmp_path: Path) -> Iterator[LocalHarness]:
    with LocalHarness(*_directories(tmp_path)) as made:
        yield made


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimHarness]:
    with SimHarness(*_directories(tmp_path)) as made:
        yield made


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[KubernetesHarness]:
    with KubernetesHarness(*_directories(tmp_path)) as made:
        yield made


@pytest.fixture
def manual(tmp_path: Path) -> Iterator[Manual]:
    """The kubernetes backend over a fake API server whose kubelet runs nothing: the test moves
    pods through phases (two nodes: gpu-1 with 4 GPUs, cpu-1 tainted spot)."""
    server = FakeApiServer(run_processes=False)
    server.cluster.add_node("gpu-1", cpu="16", memory="64Gi", gpus=4, labels={"pool": "a100"})
    server.cluster.add_node(
        "cpu-1", cpu="4", memory="8Gi", taints=[{"key": "spot", "effect": "NoSchedule"}]
    )
    setup = Manual(server, server.kubeconfig(tmp_path / "kubeconfig"))
    try:
        yield setup
    finally:
        for backend in setup.made:
            backend.close()
        server.close()
