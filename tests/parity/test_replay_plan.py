"""``flotilla replay``'s plan and command line, without a server: what the service is given
(times scaled by the speed, scenario-only fields gone) and the errors a user sees."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from flotilla.api.submission import parse_submission
from flotilla.backends.interface import BackendUnavailable
from flotilla.backends.sim import make_sim_backend
from flotilla.cli.main import app
from flotilla.model import scenario_from_data
from flotilla.model.fleet import FleetCluster
from flotilla.model.loader import load_scenario
from flotilla.replay.plan import FOREVER, plan_replay
from tests.builders import REPO_ROOT

SCENARIO = {
    "name": "plan",
    "settings": {"cycle_interval": 2, "max_time": 500},
    "clusters": [
        {
            "name": "c",
            "startup_delay": 4,
            "fail_at": 30,
            "nodes": [{"name": "n", "resources": {"cpu": 4}}],
        }
    ],
    "queues": [{"name": "q"}],
    "jobs": [
        {
            "name": "train",
            "count": 2,
            "queue": "q",
            "submit_at": 10,
            "duration": 100,
            "cancel_at": 50,
            "tasks": [{"name": "w", "replicas": 2, "resources": {"cpu": 1}}],
            "gang": {"min_member": 2, "timeout": 60},
            "retry": {"limit": 1, "delay": "20s"},
        },
        {"name": "forever", "queue": "q", "tasks": [{"name": "m", "resources": {"cpu": 1}}]},
        {"name": "huge", "queue": "q", "tasks": [{"name": "m", "resources": {"cpu": 64}}]},
    ],
}


def test_every_clock_of_the_scenario_runs_at_the_replay_speed() -> None:
    plan = plan_replay(scenario_from_data(SCENARIO), speed=10)
    assert plan.fleet["settings"]["cycle_interval"] == 0.2
    assert "max_time" not in plan.fleet["settings"]
    (cluster,) = plan.fleet["clusters"]
    assert cluster["backend"] == "sim"
    assert cluster["settings"]["startup_delay"] == 0.4
    FleetCluster.model_validate(cluster)
    train = plan.steps[1].submit[0]
    assert plan.steps[1].at == 10
    assert train["payload"] == {"sim": {"duration": 10.0}}
    assert train["duration"] == 10.0
    assert train["gang"]["timeout"] == 6.0
    assert train["retry"]["delay"] == 2.0
    assert train["count"] == 2


def test_the_plan_submits_what_the_service_accepts() -> None:
    plan = plan_replay(scenario_from_data(SCENARIO), speed=10)
    bodies = [body for step in plan.steps for body in step.submit]
    specs, _ = parse_submission({"jobs": bodies})
    assert [spec.name for spec in specs] == ["forever", "huge", "train"]
    forever = next(body for body in bodies if body["name"] == "forever")
    assert forever["payload"]["sim"]["duration"] == FOREVER
    assert all(body["hold_if_unfit"] for body in bodies)  # "huge" stays queued, as simulated


def test_cancels_and_cluster_failures_are_steps_of_their_own() -> None:
    plan = plan_replay(scenario_from_data(SCENARIO), speed=10)
    cancel = next(step for step in plan.steps if step.cancel)
    assert cancel.at == 50
    assert [job.name for job in cancel.cancel] == ["train-0", "train-1"]
    failure = next(step for step in plan.steps if step.fail)
    assert (failure.at, failure.fail, failure.submit, failure.cancel) == (30, ["c"], [], [])
    assert plan.unsupported == []


def test_a_failed_cluster_stops_answering_and_the_service_loses_it_within_a_cycle() -> None:
    plan = plan_replay(scenario_from_data(SCENARIO), speed=10)
    # half the scenario's 2 s cycle, at speed 10: the simulator loses a cluster at once
    assert plan.fleet["settings"]["heartbeat_timeout"] == 0.1
    assert "fail_at" not in plan.fleet["clusters"][0]["settings"]
    failing = plan.failing_fleet({"c": 1_800_000_000.0})
    (cluster,) = failing["clusters"]
    assert cluster["settings"]["fail_at"] == 1_800_000_000.0
    FleetCluster.model_validate(cluster)
    backend = make_sim_backend(cluster="c", **cluster["settings"], clock=lambda: 1_800_000_000.0)
    with pytest.raises(BackendUnavailable, match="cluster c failed"):
        backend.poll()


def test_each_step_awaits_what_the_simulator_did_before_its_time() -> None:
    """The plan carries the simulation's course; a step at t waits until the service has
    placed each job as often as the simulator had before t, and ended what it had ended."""
    scenario = REPO_ROOT / "tests" / "scenarios" / "policies" / "retry-node-failure.yaml"
    plan = plan_replay(load_scenario(scenario), speed=20)
    assert plan.milestones is not None
    # primary fails at 5: all three placed at 0, nothing ended (the cycle at 5 comes after)
    assert plan.milestones.due(5) == {
        "careful": (1, False),
        "fragile": (1, False),
        "plain": (1, False),
    }
    # backup fails at 40: careful placed again at 15; plain again at 5, ended at 25; fragile
    # failed at 5. careful fails at 40, by the step itself: not yet due.
    assert plan.milestones.due(40) == {
        "careful": (2, False),
        "fragile": (1, True),
        "plain": (2, True),
    }
    assert plan_replay(load_scenario(scenario), speed=20, paced=False).milestones is None


def test_an_invalid_scenario_exits_2_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nclusters: []\nqueues: [{name: q}]\n")
    result = CliRunner().invoke(app, ["replay", str(bad), "--server", "http://127.0.0.1:9"])
    assert result.exit_code == 2
    assert "invalid scenario" in result.output
    assert "clusters" in result.output


def test_an_unreachable_server_exits_1_saying_so() -> None:
    scenario = REPO_ROOT / "tests" / "scenarios" / "cancellation.yaml"
    result = CliRunner().invoke(app, ["replay", str(scenario), "--server", "http://127.0.0.1:9"])
    assert result.exit_code == 1
    assert "cannot reach the Flotilla server at http://127.0.0.1:9" in result.output


def test_speed_must_be_positive() -> None:
    scenario = REPO_ROOT / "tests" / "scenarios" / "cancellation.yaml"
    result = CliRunner().invoke(app, ["replay", str(scenario), "--speed", "0"])
    assert result.exit_code == 2
