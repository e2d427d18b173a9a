"""Parity: every scenario, simulated and replayed against a real ``flotilla up``, ends the same.

One server (a real process, SQLite) replays every shared scenario (``../shared/scenarios``)
and every project scenario (``tests/scenarios``), one after the other; each replay is
compared with ``flotilla simulate`` of the same file (``parity.py``: per job the final state,
the runs, the cluster, the replicas placed, the start order within each queue, and the
times within ``tolerance``). A difference is a bug in one of the two, or one of the known
differences of ``KNOWN`` below, each with its reason — also listed in ``docs/scenarios.md``
(*Replay*). A known difference marked ``always`` must still occur: when it is fixed, the
test says so and the entry goes.

Speeds keep the suite to a few minutes: each scenario plays in about ``TARGET_WALL`` wall
seconds, never faster than ``MAX_SPEED`` (the service's latencies — a dispatch, a poll, a
preemption's stop — are wall time, and at a higher speed they outgrow the scenario's gaps).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest
import yaml

from flotilla.model import scenario_from_data
from flotilla.model.loader import load_scenario
from flotilla.model.scenario import Scenario
from flotilla.replay.driver import replay
from flotilla.replay.plan import Milestones, plan_replay
from flotilla.replay.report import build_replay_report
from flotilla.sdk import Client
from flotilla.sim.report import build_report
from flotilla.sim.simulator import simulate
from tests.builders import REPO_ROOT, SHARED_DIR
from tests.e2e.service import FLOTILLA, START_LIMIT, Server, Services
from tests.parity.parity import Difference, compare, service_lag, tolerance
from tests.timing import limit

PATIENCE = 10.0
"""Seconds (on the reference machine, stretched by ``tests/timing.py``) a step waits for the
service to catch up with the simulation's course before it goes ahead regardless."""
TARGET_WALL = 2.0
"""Wall seconds a scenario should take to play."""
MAX_SPEED = 200.0
MIN_WALL_CYCLE = 0.05
"""The service's cycle interval is at most this many wall seconds (a faster speed for a
scenario with long cycles: max-time.yaml's 10 s cycles)."""
SPEEDS = {
    # Backfill reservations are computed from expected ends in wall time: at a higher speed a
    # reservation falls in the past before the next cycle and the quick jobs miss their gap.
    "backfill-starvation-backfill": 20.0,
    "backfill-starvation-best-effort": 20.0,
}
"""Scenarios that need a slower speed than the rule gives, and why."""


@dataclass(frozen=True)
class Known:
    """A known difference between the service and the simulator in one scenario."""

    job: str
    """A job name or a pattern of them (``fnmatch``: ``stream-d-*``; ``*`` for every job),
    or ``queue NAME`` for a start order."""
    fields: frozenset[str]
    reason: str
    always: bool = True
    """It occurs on every run (a semantic difference), not only when timing says so."""

    def covers(self, difference: Difference) -> bool:
        return fnmatch(difference.job, self.job) and difference.field in self.fields


EVERY_FIELD = frozenset(
    {"state", "cluster", "runs", "placements", "submitted_at", "started_at", "finished_at"}
)
MAX_TIME_CUT = (
    "settings.max_time cuts a pipeline of 40 s jobs: each generation starts when the one "
    "before ends, so the service's lag adds up over ~5 generations, and the jobs of the last "
    "two that end (or start) within that lag of max_time are on the other side of the cut"
)
PIPELINE_FIELDS = frozenset({"state", "cluster", "placements", "runs", "started_at", "finished_at"})
KNOWN: dict[str, list[Known]] = {
    "backfill-starvation-best-effort": [
        Known("stream-[cd]-*", PIPELINE_FIELDS, MAX_TIME_CUT, always=False)
    ],
    "backfill-starvation-backfill": [
        Known("stream-[cd]-*", PIPELINE_FIELDS, MAX_TIME_CUT, always=False)
    ],
    "async-mode": [
        Known(
            "b",
            frozenset({"cluster", "placements", "runs", "started_at", "finished_at"}),
            "async mode: the simulator applies a round's result at the next cycle (its "
            "executor is inline), the service as soon as the round is ready — b may be "
            "placed before its cancel at t=1 arrives; it ends cancelled either way",
            always=False,
        ),
        Known(
            "queue q",
            frozenset({"start order"}),
            "async mode: as for b (b appears in the service's start order)",
            always=False,
        ),
    ],
    "cost-optimized-cheapest-fit": [
        Known(
            "d-again",
            frozenset({"cluster"}),
            "a tie in time: a-cpu ends at t=10, exactly when d-again arrives, and the "
            "simulator frees it first; in the service a-cpu started a dispatch later than it "
            "was placed, so it may end after d-again's submission, which then finds cheap full",
            always=False,
        )
    ],
    "owners-own-limits": [
        Known(
            "queue research",
            frozenset({"start order"}),
            "a tie in time: all seven jobs end at t=100 and the simulator frees them in one "
            "step, so owners' DRF orders the five left with every end known; the service may "
            "see the ends over two cycles and start the first of the five while the rest still "
            "run (which five start, and their states, are the same)",
            always=False,
        )
    ],
    "preemption-fair-share": [
        Known(
            "*",
            frozenset({"started_at", "finished_at"}),
            "the service writes each eviction and each re-queue of a preempted job in a "
            "transaction of its own (about 30 ms each on a loaded 2-core machine): the 16 "
            "victims free their cores over ~1-2 wall seconds, beyond the tolerance at speed 200",
            always=False,
        )
    ],
}


def scenario_files() -> list[Path]:
    shared = sorted((SHARED_DIR / "scenarios").glob("*.yaml"))
    project = sorted((REPO_ROOT / "tests" / "scenarios").rglob("*.yaml"))
    return shared + project


def speed_for(scenario: Scenario, simulated: dict[str, Any]) -> float:
    if scenario.name in SPEEDS:
        return SPEEDS[scenario.name]
    interval = scenario.settings.cycle_interval
    by_length = float(simulated["end_time"]) / TARGET_WALL
    return min(MAX_SPEED, max(interval / MIN_WALL_CYCLE, by_length))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("parity")
    services = Services(root)
    try:
        yield services.start(db=f"sqlite:///{root / 'flotilla.db'}", state_dir=root / "state")
    finally:
        services.close()


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[Client]:
    with Client(server.url, server.token, timeout=60.0) as api:
        yield api


def _label(path: Path) -> str:
    return path.stem


PARITY_GROUPS = 2
"""The replays share a `flotilla up` per worker; in this many xdist groups, so that they run
on as many workers at once (one group of ≈ 300 s was the suite's longest unit)."""


def _replays() -> list[Any]:
    return [
        pytest.param(
            path, id=_label(path), marks=pytest.mark.xdist_group(f"parity-{i % PARITY_GROUPS}")
        )
        for i, path in enumerate(scenario_files())
    ]


@pytest.mark.timing  # paced against a live service: a loaded machine can fall behind
@pytest.mark.parametrize("path", _replays())
def test_replay_matches_simulate(path: Path, client: Client) -> None:
    scenario = load_scenario(path)
    simulated = build_report(simulate(scenario))
    speed = speed_for(scenario, simulated)
    plan = plan_replay(scenario, speed)
    replayed = build_replay_report(replay(client, plan, patience=limit(PATIENCE)))
    slack = tolerance(scenario.settings.cycle_interval, speed, service_lag(replayed, scenario))
    cut = (
        scenario.settings.max_time
        if replayed["summary"]["end_reason"] == "settings.max_time"
        else None
    )
    differences = compare(simulated, replayed, slack, cut)
    known = KNOWN.get(scenario.name, [])
    unexplained = [d for d in differences if not any(k.covers(d) for k in known)]
    assert not unexplained, (
        f"{scenario.name} at speed {speed:g} (times within {slack:g} s):\n"
        + "\n".join(f"  {d}" for d in unexplained)
    )
    for entry in known:
        if entry.always:
            assert any(entry.covers(d) for d in differences), (
                f"{scenario.name}: the known difference is gone, remove it from KNOWN and "
                f"docs/scenarios.md: {entry.job} {sorted(entry.fields)}: {entry.reason}"
            )


@pytest.mark.xdist_group("parity-0")
def test_the_replay_command_writes_the_simulate_report(server: Server, tmp_path: Path) -> None:
    """``flotilla replay`` as a user runs it: a process, a report file of simulate's schema."""
    scenario = REPO_ROOT / "tests" / "scenarios" / "cancellation.yaml"
    output = tmp_path / "report.json"
    command = [str(FLOTILLA), "replay", str(scenario), "--server", server.url]
    subprocess.run(
        [*command, "--speed", "20", "-o", str(output), "--replace-fleet"],
        env={**os.environ, "FLOTILLA_TOKEN": server.token or ""},
        check=True,
        timeout=START_LIMIT,
    )
    replayed = json.loads(output.read_text())
    simulated = build_report(simulate(load_scenario(scenario)))
    assert set(replayed) == set(simulated)
    assert [set(job) for job in replayed["jobs"]] == [set(job) for job in simulated["jobs"]]
    assert set(replayed["summary"]) >= set(simulated["summary"])
    assert {job["name"]: job["state"] for job in replayed["jobs"]} == {
        "hog": "cancelled",
        "next": "succeeded",
        "waiter": "cancelled",
    }
    assert replayed["summary"]["replay"]["speed"] == 20


def test_replay_refuses_a_service_whose_real_clusters_it_would_replace(tmp_path: Path) -> None:
    """A replay replaces the service's fleet with simulated clusters: pointed at a service
    people use (its local cluster here), it stops before touching it, saying what would go."""
    services = Services(tmp_path)
    try:
        live = services.start(db=f"sqlite:///{tmp_path / 'flotilla.db'}", state_dir=tmp_path / "s")
        scenario = REPO_ROOT / "tests" / "scenarios" / "cancellation.yaml"
        refused = subprocess.run(
            [str(FLOTILLA), "replay", str(scenario), "--server", live.url],
            env={**os.environ, "FLOTILLA_TOKEN": live.token or ""},
            capture_output=True,
            text=True,
            timeout=START_LIMIT,
        )
        assert refused.returncode == 2, refused.stderr
        assert "would replace this service's fleet" in refused.stderr
        assert "local (local)" in refused.stderr and "--replace-fleet" in refused.stderr
        clusters = live.http.get("/v1/clusters").json()
        assert [(c["name"], c["backend"]) for c in clusters] == [("local", "local")]
    finally:
        services.close()


@pytest.mark.xdist_group("parity-1")
def test_a_service_that_disagrees_with_the_simulator_still_fails_parity(client: Client) -> None:
    """The replay waits for the simulation's course (``Milestones``), but only for a while:
    a service whose lifecycle differs never gets there, the step goes ahead, and the
    comparison names the difference. Here the service is given ``careful`` without its
    retry (limit 0), the simulator's course is that of the scenario as written: careful
    fails at t=5 in the service, and at t=40 after a second run in the simulator. (Its
    times are not asserted: on a loaded machine the tolerance of times widens with the
    service's lag; runs, states and clusters stay exact.)"""
    path = REPO_ROOT / "tests" / "scenarios" / "policies" / "retry-node-failure.yaml"
    scenario = load_scenario(path)
    simulated = build_report(simulate(scenario))
    data = yaml.safe_load(path.read_text())
    (careful,) = [job for job in data["jobs"] if job["name"] == "careful"]
    careful["retry"]["limit"] = 0
    speed = speed_for(scenario, simulated)
    plan = replace(
        plan_replay(scenario_from_data(data), speed), milestones=Milestones.of(simulated)
    )
    replayed = build_replay_report(replay(client, plan, patience=limit(PATIENCE)))
    slack = tolerance(scenario.settings.cycle_interval, speed, service_lag(replayed, scenario))
    found = {(d.job, d.field) for d in compare(simulated, replayed, slack)}
    assert ("careful", "runs") in found, found  # 1 run in the service, 2 in the simulator


def test_every_known_difference_names_a_scenario() -> None:
    names = {load_scenario(path).name for path in scenario_files()}
    assert set(KNOWN) <= names
    assert set(SPEEDS) <= names
