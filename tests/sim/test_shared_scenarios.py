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

SUPPORTED = [
    "weighted-fair-share",
    "cluster-affinity-and-cost",
    "gang-all-or-nothing",
    "gpu-sharing",
]


def _flotilla() -> list[str]:
    beside_python = Path(sys.executable).with_name("flotilla")
    if beside_python.exists():
        return [str(beside_python)]
    found = shutil.which("flotilla")
    assert found, "the flotilla command is not installed (uv sync installs it)"
    return [found]


@pytest.mark.parametrize("name", SUPPORTED)
def test_shared_scenario_passes_check(shared_dir: Path, name: str) -> None:
    path = shared_dir / "scenarios" / f"{name}.yaml"
    result = subprocess.run(
        [*_flotilla(), "simulate", str(path), "--check", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "expectations hold" in result.stderr


def test_shared_quota_scenario_is_refused_until_quotas_exist(shared_dir: Path) -> None:
    """Quotas and preemption are not built: the scenario is refused, never half-honoured."""
    path = shared_dir / "scenarios" / "quota-borrow-and-reclaim.yaml"
    if not path.exists():
        pytest.skip("no quota scenario in ../shared")
    result = subprocess.run(
        [*_flotilla(), "simulate", str(path), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "quotas: the elastic quota tree is not enforced yet" in result.stderr
