"""Fixtures that make backends over a temporary state dir and always close them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .engines.slurm_cluster import SlurmCluster, slurm_installed
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
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=["local", "sim", "kubernetes", "ray", "slurm"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    made: Harness
    if request.param == "ray":
        made = RayHarness(tmp_path / "state", scratch, request.getfixturevalue("ray_head"))
    elif request.param == "slurm":
        made = SlurmHarness(tmp_path / "state", scratch, request.getfixturevalue("slurm_cluster"))
    else:
        kind = {"local": LocalHarness, "sim": SimHarness, "kubernetes": KubernetesHarness}[
            request.param
        ]
        made = kind(tmp_path / "state", scratch)
    try:
        yield made
    finally:
        made.close_all()


@pytest.fixture
def local(tmp_path: Path) -> Iterator[LocalHarness]:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    made = LocalHarness(tmp_path / "state", scratch)
    try:
        yield made
    finally:
        made.close_all()


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimHarness]:
    made = SimHarness(tmp_path / "state", tmp_path)
    try:
        yield made
    finally:
        made.close_all()


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[KubernetesHarness]:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    made = KubernetesHarness(tmp_path / "state", scratch)
    try:
        yield made
    finally:
        made.close_all()
