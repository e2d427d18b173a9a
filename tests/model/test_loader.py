"""Scenario files: YAML or JSON, duplicate keys refused, unreadable files reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from flotilla.model import SpecError, load_scenario
from tests.builders import cluster, job, nodes, scenario

DATA = scenario(clusters=[cluster("c", nodes(2, cpu=4))], jobs=[job(cpu="500m")])


def test_yaml_scenario_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(DATA))
    spec = load_scenario(path)
    assert spec.jobs[0].tasks[0].resources["cpu"] == 0.5


def test_json_scenario_file_loads_the_same(tmp_path: Path) -> None:
    yaml_path, json_path = tmp_path / "s.yaml", tmp_path / "s.json"
    yaml_path.write_text(yaml.safe_dump(DATA))
    json_path.write_text(json.dumps(DATA))
    assert load_scenario(json_path) == load_scenario(yaml_path)


def test_yaml_duplicate_keys_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: x\nclusters:\n  - name: c\n    nodes: [{name: n, resources: {cpu: 1, cpu: 2}}]\n"
        "queues: [{name: q}]\n"
    )
    with pytest.raises(SpecError) as caught:
        load_scenario(path)
    assert "duplicate key 'cpu'" in caught.value.problems[0]
    assert caught.value.source == str(path)


def test_yaml_syntax_errors_become_spec_errors(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(SpecError):
        load_scenario(path)


def test_json_syntax_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('{\n"name": "x",\n}')
    with pytest.raises(SpecError) as caught:
        load_scenario(path)
    assert caught.value.problems[0].startswith("line 3:")


def test_an_unreadable_file_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        load_scenario(tmp_path / "missing.yaml")
    assert caught.value.problems[0].startswith("cannot read file")


def test_validation_problems_carry_the_file_name(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**DATA, "bogus": 1}))
    with pytest.raises(SpecError) as caught:
        load_scenario(path)
    assert caught.value.problems == ["bogus: unknown field"]
    assert str(caught.value).startswith(f"{path}: invalid scenario")
