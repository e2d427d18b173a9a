"""Fixtures that make backends over a temporary state dir and always close them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .support import Harness, KubernetesHarness, LocalHarness, SimHarness


@pytest.fixture(params=["local", "sim", "kubernetes"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    kind = {"local": LocalHarness, "sim": SimHarness, "kubernetes": KubernetesHarness}[
        request.param
    ]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
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
