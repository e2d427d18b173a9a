"""The fleet file: the scenario's fleet part plus, per cluster, a backend and its settings."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from flotilla.cli.main import app
from flotilla.model.fleet import secret_reference
from flotilla.model.fleet_loader import FleetError, fleet_from_data, load_fleet

EXAMPLES = Path(__file__).parents[2] / "examples"


def fleet_data(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "test",
        "settings": {"assignment_strategy": "resource-aware", "queueing": "backfill"},
        "priority_classes": [{"name": "high", "value": 100, "preemptible": False}],
        "clusters": [
            {"name": "here", "backend": "local"},
            {
                "name": "ray",
                "backend": "sim",
                "labels": {"engine": "ray"},
                "settings": {"address": "http://127.0.0.1:8265", "token": {"env": "T"}},
            },
        ],
        "quotas": [{"name": "org", "min": {"cpu": 4}, "children": [{"name": "a"}]}],
        "queues": [{"name": "a", "quota": "a"}, {"name": "b", "weight": 2}],
    }
    data.update(changes)
    return data


def problems_of(data: Any) -> list[str]:
    with pytest.raises(FleetError) as caught:
        fleet_from_data(data, "fleet.yaml")
    return caught.value.problems


def test_a_service_cluster_needs_no_nodes_and_keeps_its_settings() -> None:
    fleet = fleet_from_data(fleet_data())
    assert fleet.clusters[0].nodes == []
    assert fleet.clusters[1].settings["address"] == "http://127.0.0.1:8265"
    assert fleet.settings.queueing == "backfill"
    assert fleet.priority_classes[0].value == 100


def test_secret_references_are_recognised_and_kept_as_references() -> None:
    fleet = fleet_from_data(fleet_data())
    assert secret_reference(fleet.clusters[1].settings["token"]) == ("env", "T")
    assert secret_reference({"file": "/run/secret"}) == ("file", "/run/secret")
    assert secret_reference({"env": "A", "file": "B"}) is None
    assert fleet.clusters[1].has_secrets()


def test_unknown_fields_are_refused_with_their_path() -> None:
    data = fleet_data()
    data["clusters"][1]["setings"] = {}
    data["queues"][0]["wieght"] = 1
    found = problems_of(data)
    assert "clusters[1].setings: unknown field" in found
    assert "queues[0].wieght: unknown field" in found


def test_cross_references_are_checked_with_their_path() -> None:
    data = fleet_data(queues=[{"name": "a", "quota": "nope"}, {"name": "a"}])
    data["clusters"][1]["name"] = "here"
    found = problems_of(data)
    assert "queues[0].quota: unknown quota 'nope'" in found
    assert any(p.startswith("queues[1].name: duplicate queue name 'a'") for p in found)
    assert any(p.startswith("clusters[1].name: duplicate cluster name 'here'") for p in found)


def test_a_cluster_setting_an_empty_reference_and_an_inline_secret_are_refused() -> None:
    data = fleet_data()
    data["clusters"][1]["settings"] = {"cluster": "x"}
    assert problems_of(data)[0].startswith("clusters[1].settings.cluster: is the cluster's name")
    data["clusters"][1]["settings"] = {"token": {"env": ""}}
    assert problems_of(data)[0].startswith("clusters[1].settings.token: a secret reference")
    data["clusters"][1]["settings"] = {"api_token": "s3cret"}
    [problem] = problems_of(data)
    assert problem.startswith("clusters[1].settings.api_token: a secret is given by reference")
    assert "s3cret" not in problem


def test_a_fleet_needs_clusters_and_queues() -> None:
    found = problems_of({"clusters": [], "queues": []})
    assert "clusters: List should have at least 1 item after validation, not 0" in found
    assert any(p.startswith("queues:") for p in found)


def test_an_unreadable_or_malformed_file_names_itself(tmp_path: Path) -> None:
    with pytest.raises(FleetError) as caught:
        load_fleet(tmp_path / "missing.yaml")
    assert "cannot read file" in caught.value.problems[0]
    bad = tmp_path / "bad.yaml"
    bad.write_text("clusters: [\n")
    with pytest.raises(FleetError) as caught:
        load_fleet(bad)
    assert caught.value.source == str(bad)
    assert "invalid fleet" in str(caught.value)


def test_the_examples_are_valid_fleet_files() -> None:
    mixed = load_fleet(EXAMPLES / "fleet.yaml")
    assert [c.backend for c in mixed.clusters] == ["local", "ray", "slurm"]
    assert mixed.cluster("ray").settings["address"] == "http://127.0.0.1:8265"
    local = load_fleet(EXAMPLES / "fleet-local.yaml")
    assert {c.backend for c in local.clusters} == {"local", "sim"}


def test_simulate_takes_its_fleet_from_a_fleet_file(tmp_path: Path) -> None:
    workload = {
        "name": "workload-only",
        "jobs": [
            {
                "name": "train",
                "queue": "vision",
                "duration": 10,
                "tasks": [{"name": "w", "resources": {"cpu": 1, "gpu": 4}}],
                "affinity": {"clusters": {"required": {"accelerator": "a100"}}},
            }
        ],
        "expect": [{"at": 0, "job": "train", "state": "running", "cluster": "gpu-sim"}],
    }
    path = tmp_path / "workload.yaml"
    path.write_text(yaml.safe_dump(workload))
    result = CliRunner().invoke(
        app,
        ["simulate", str(path), "--fleet", str(EXAMPLES / "fleet-local.yaml"), "--check"],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert {c["name"] for c in report["clusters"]} == {"local", "gpu-sim"}


def test_a_simulated_cluster_beside_a_real_one_takes_only_jobs_that_ask_for_it() -> None:
    """examples/fleet-local.yaml: this machine and a simulated GPU cluster. Jobs that ask for
    no cluster run on the real one, a few at a time, though gpu-sim has room: there they
    would "succeed" without running. The GPU job requires gpu-sim's label and runs there.
    A fleet of simulated clusters alone (a test bed) sends every job anywhere."""
    from flotilla.model.fleet_loader import scenario_with_fleet
    from flotilla.sim.report import build_report
    from flotilla.sim.simulator import simulate

    fleet = load_fleet(EXAMPLES / "fleet-local.yaml")
    workload = yaml.safe_load((EXAMPLES / "workload.yaml").read_text())
    report = build_report(simulate(scenario_with_fleet(workload, fleet)))
    placed = {job["name"]: job["cluster"] for job in report["jobs"]}
    assert placed.pop("train") == "gpu-sim"
    assert set(placed.values()) == {"local"}, placed

    test_bed = fleet.model_copy(
        update={"clusters": [c for c in fleet.clusters if c.backend == "sim"]}
    )
    assert "flotilla.io/simulated" not in test_bed.labels_of(test_bed.clusters[0])
    report = build_report(simulate(scenario_with_fleet(workload, test_bed)))
    assert {job["cluster"] for job in report["jobs"]} == {"gpu-sim"}


def test_simulate_refuses_a_fleet_cluster_without_nodes(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(fleet_data()))
    workload = tmp_path / "w.yaml"
    workload.write_text(yaml.safe_dump({"name": "w"}))
    result = CliRunner().invoke(
        app, ["simulate", str(workload), "--fleet", str(fleet)], env={"COLUMNS": "400"}
    )
    assert result.exit_code == 2
    output = " ".join(result.output.split())  # rich wraps long lines
    assert f"{fleet}: invalid fleet" in output
    assert "clusters[0].nodes: a simulated cluster needs its nodes" in output


def test_a_fleet_naming_an_uninstalled_backend_lists_the_installed_ones() -> None:
    from flotilla.backends import available_backends
    from flotilla.service.fleet import check_fleet

    data = yaml.safe_load((EXAMPLES / "fleet.yaml").read_text())
    data["clusters"][1]["backend"] = "no-such-engine"
    problems = check_fleet(fleet_from_data(data))
    installed = ", ".join(available_backends())
    assert (
        f"clusters[1].backend: unknown backend 'no-such-engine' (installed: {installed}; a "
        "backend registers under the entry-point group 'flotilla.backends')"
    ) in problems
    assert check_fleet(load_fleet(EXAMPLES / "fleet-local.yaml")) == []


def test_up_refuses_an_invalid_fleet_before_touching_the_database(tmp_path: Path) -> None:
    data = yaml.safe_load((EXAMPLES / "fleet.yaml").read_text())
    data["clusters"][1]["backend"] = "no-such-engine"
    data["clusters"][2]["settings"]["token"] = {"env": "FLOTILLA_TEST_UNSET_VARIABLE"}
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    db = tmp_path / "flotilla.db"
    result = CliRunner().invoke(
        app, ["up", "--fleet", str(path), "--db", f"sqlite:///{db}"], env={"COLUMNS": "400"}
    )
    assert result.exit_code == 2
    output = " ".join(result.output.split())
    assert f"{path}: invalid fleet" in output
    assert "clusters[1].backend: unknown backend 'no-such-engine'" in output
    assert (
        "clusters[2].settings.token: environment variable FLOTILLA_TEST_UNSET_VARIABLE is not set"
        in output
    ) or "clusters[2].backend: unknown backend 'slurm'" in output
    assert not db.exists()


def test_the_simulate_commands_in_the_examples_headers_run() -> None:
    """Each ``flotilla simulate …`` an example file's header shows exits 0 (the one in
    fleet-local.yaml exited 2: the quickstart's expectations name its own clusters)."""
    from typer.testing import CliRunner

    from flotilla.cli.main import app

    shown = [
        found.group(0).split()
        for path in sorted(EXAMPLES.glob("*.yaml"))
        for line in path.read_text().splitlines()
        if line.startswith("#") and (found := re.search(r"flotilla simulate [^`#]*", line))
    ]
    assert shown, "no example shows a simulate command"
    root = EXAMPLES.parent
    for words in shown:
        arguments = [str(root / word) if word.startswith("examples/") else word for word in words]
        result = CliRunner().invoke(app, [*arguments[1:], "--format", "json"])
        assert result.exit_code == 0, (words, result.output)


def test_an_owners_own_limits_are_read_and_checked_as_in_a_scenario() -> None:
    data = fleet_data(
        queues=[
            {
                "name": "a",
                "owners": {"max_running_jobs": 2, "limits": {"alice": {"max_running_jobs": 8}}},
            }
        ]
    )
    fleet = fleet_from_data(data)
    owners = fleet.queues[0].owners
    assert owners is not None and owners.limits["alice"].max_running_jobs == 8
    data["queues"][0]["owners"]["limits"]["alice"] = {"max_jobs": 8}
    assert "queues[0].owners.limits.alice.max_jobs: unknown field" in problems_of(data)
