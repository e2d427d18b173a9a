"""The shared scenarios (../shared/scenarios) pass ``flotilla simulate FILE --check``.

They are run through the installed ``flotilla`` command, exactly as a user or another tool
would run them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.timing import limit


def _flotilla() -> list[str]:
    beside_python = Path(sys.executable).with_name("flotilla")
    if beside_python.exists():
        return [str(beside_python)]
    found = shutil.which("flotilla")
    assert found, "the flotilla command is not installed (uv sync installs it)"
    return [found]


SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "scenarios"
NAMES = sorted(path.stem for path in SHARED.glob("*.yaml")) or ["(shared scenarios missing)"]


@pytest.mark.parametrize("name", NAMES)
def test_shared_scenario_passes_check(shared_dir: Path, name: str) -> None:
    path = shared_dir / "scenarios" / f"{name}.yaml"
    assert path.exists(), f"{path} is missing"
    result = subprocess.run(
        [*_flotilla(), "simulate", str(path), "--check", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=limit(120),
    )
    assert result.returncode == 0, result.stderr
    assert "expectations hold" in result.stderr
