"""Fixtures that make backends over a temporary state dir and always close them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .engines.ray_head import RayHead, ray_executable
from .ray_support import RayHarness
from .support import Harness, LocalHarness, SimHarness


@pytest.fixture(scope="session")
def ray_head() -> Iterator[RayHead]:
    """A real Ray head for the session (per xdist worker), stopped by PID at the end.

    Outside CI a machine where Ray is missing or cannot start skips the Ray tests; under
    ``CI=true`` that is a failure, never a skip."""
    in_ci = os.environ.get("CI") == "true"
    if ray_executable() is None:
        if in_ci:
            pytest.fail("Ray is not installed: uv sync --all-extras (CI must test it)")
        pytest.skip("Ray is not installed (uv sync --all-extras installs it)")
    head = RayHead()
    try:
        head.start()
    except RuntimeError as error:
        if in_ci:
            pytest.fail(f"the Ray head did not start: {error}")
        pytest.skip(f"the Ray head did not start: {error}")
    try:
        yield head
    finally:
        head.stop()


@pytest.fixture(params=["local", "sim", "ray"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    made: Harness
    if request.param == "ray":
        made = RayHarness(tmp_path / "state", scratch, request.getfixturevalue("ray_head"))
    else:
        kind = {"local": LocalHarness, "sim": SimHarness}[request.param]
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
