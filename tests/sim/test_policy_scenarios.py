"""Every policy scenario in tests/scenarios/policies holds its own ``expect`` block.

Each file states one rule of docs/policies.md and the outcome worked out by hand; running it
through the real ``flotilla simulate --check`` makes it a regression test of that rule.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from flotilla.cli.main import app

POLICIES = Path(__file__).resolve().parents[1] / "scenarios" / "policies"


@pytest.mark.parametrize("scenario", sorted(POLICIES.glob("*.yaml")), ids=lambda path: path.stem)
def test_policy_scenario_holds_its_expectations(scenario: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "simulate",
            str(scenario),
            "--check",
            "--format",
            "json",
            "--output",
            str(tmp_path / "report.json"),
        ],
    )
    assert result.exit_code == 0, result.output


def test_every_policy_scenario_has_expectations_and_a_description() -> None:
    import yaml

    for scenario in POLICIES.glob("*.yaml"):
        data = yaml.safe_load(scenario.read_text())
        assert data.get("expect"), f"{scenario.name} checks nothing"
        assert len(data.get("description", "")) > 40, f"{scenario.name} does not say its rule"
