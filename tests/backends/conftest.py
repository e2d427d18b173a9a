"""Fixtures that make backends over a temporary state dir and always close them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .ray_support import RayHarness
from .support import Harness, KubernetesHarness, LocalHarness, SimHarness


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every contract test on the Ray head runs on one xdist worker (``--dist loadgroup``), so
    a test run starts one head (marks on fixture params do not reach the tests)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("harness") == "ray":
            item.add_marker(pytest.mark.xdist_group("ray"))


@pytest.fixture(params=["local", "sim", "kubernetes", "ray"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    made: Harness
    if request.param == "ray":
        made = RayHarness(tmp_path / "state", scratch, request.getfixturevalue("ray_head"))
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
