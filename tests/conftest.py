"""Suite-wide fixtures: where the shared contract lives, and a CLI runner."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.builders import SHARED_DIR


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """``../shared`` beside the repository; required in CI, optional on a laptop."""
    scenarios = SHARED_DIR / "scenarios"
    if not scenarios.is_dir():
        message = (
            f"shared scenarios not found at {scenarios.resolve()}: clone the shared contract "
            "beside the repository (../shared)"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return SHARED_DIR
