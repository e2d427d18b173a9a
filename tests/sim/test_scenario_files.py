"""Every scenario file under tests/scenarios passes ``flotilla simulate FILE --check``.

Each file states one rule of the engine, its hand-worked outcome in ``description`` and that
outcome in ``expect``. A second test flips the rule's setting in a few of them and checks that
their expectations then fail, so these files do test the rule and not just any behaviour.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from flotilla.cli.main import app
from tests.builders import failed_expectations

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
FILES = sorted(SCENARIOS.glob("*.yaml"))


def test_there_are_scenario_files() -> None:
    assert len(FILES) >= 20


@pytest.mark.parametrize("path", FILES, ids=[path.stem for path in FILES])
def test_scenario_file_passes_check(path: Path) -> None:
    data = yaml.safe_load(path.read_text())
    assert data.get("description"), f"{path.name}: describe the hand-worked outcome"
    assert data.get("expect"), f"{path.name}: state the outcome in an expect block"
    result = CliRunner().invoke(app, ["simulate", str(path), "--check", "--format", "json"])
    assert result.exit_code == 0, result.stderr


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    target: Any = data
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target.setdefault(part, {})
    target[last] = value


COUNTERFACTUALS = [
    ("strict-fifo", "settings.queueing", "best-effort-fifo"),
    ("best-effort-fifo", "settings.queueing", "strict-fifo"),
    ("fifo-global-submission-order", "settings.fair_share", "drf"),
    ("drf-three-queues-dominant-shares", "queues.2.weight", 1),
    ("cluster-only-waits-for-its-cluster", "settings.assignment_strategy", "resource-aware"),
    ("resource-aware-best-fit-and-spill-over", "settings.assignment_strategy", "cluster-only"),
    ("cost-optimized-cheapest-fit", "settings.assignment_strategy", "resource-aware"),
    ("async-mode", "settings.mode", "sync"),
    ("startup-delay", "clusters.0.startup_delay", 0),
    ("priority-then-submission-order", "jobs.1.priority", 9),
    ("cluster-failure", "clusters.0.fail_at", None),
    ("dependencies", "jobs.1.depends_on", []),
]


@pytest.mark.parametrize(
    ("name", "field", "value"), COUNTERFACTUALS, ids=[c[0] for c in COUNTERFACTUALS]
)
def test_scenario_expectations_fail_without_the_rule(name: str, field: str, value: Any) -> None:
    data = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())
    _set(data, field, value)
    assert failed_expectations(data), f"{name} still passes with {field}={value!r}"
