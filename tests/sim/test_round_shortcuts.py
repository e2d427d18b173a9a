"""Per-round shortcuts give the answers of the slow paths.

``may_act`` lets the engine skip PostFilter plugins that cannot act: each scenario simulated
with the precheck is compared with the same scenario with it removed (every plugin called for
every unplaceable job). ``BacklogView.running_by_name`` saves the round building its
running-job mapping.
``set_waiting_reasons`` writes each cycle's pending reasons without a per-job state check.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from flotilla.framework.jobs import SchedulingJob, build_job
from flotilla.framework.resources import ResourceSpace
from flotilla.model import JobSpec, load_scenario
from flotilla.plugins.preemption import QueuePreemption
from flotilla.scheduler import CycleResult, SchedulingSnapshot
from flotilla.sim import Simulator
from flotilla.sim import simulator as simulator_module
from flotilla.sim.report import build_report
from flotilla.sim.state import WAITING_STATES, SimJob, set_waiting_reasons

ROOT = Path(__file__).resolve().parents[2]
SHARED = "shared:"
"""Prefix of a scenario of the shared contract (``../shared``, the ``shared_dir`` fixture)."""
SCENARIOS = [
    "tests/scenarios/policies/preemption-minimal-victims.yaml",
    f"{SHARED}scenarios/quota-borrow-and-reclaim.yaml",
    "examples/quickstart.yaml",
]
ALL_SCENARIOS = [
    *SCENARIOS,
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests/scenarios").rglob("*.yaml")),
]


def _scenario(name: str, request: pytest.FixtureRequest) -> Path:
    """The scenario's path: in this repository, or in the shared contract (required in CI)."""
    if name.startswith(SHARED):
        shared: Path = request.getfixturevalue("shared_dir")
        return shared / name.removeprefix(SHARED)
    return ROOT / name


def _report(path: Path) -> str:
    report = build_report(Simulator(load_scenario(path)).run())
    del report["summary"]["wall_seconds"]
    return json.dumps(report, sort_keys=True)


@pytest.mark.parametrize("name", SCENARIOS, ids=lambda name: Path(name).stem)
def test_reports_equal_with_and_without_the_precheck(
    name: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    path = _scenario(name, request)
    fast = _report(path)
    monkeypatch.delattr(QueuePreemption, "may_act")
    assert _report(path) == fast


def _job() -> SchedulingJob:
    spec = JobSpec.model_validate(
        {"name": "j", "queue": "q", "tasks": [{"name": "t", "resources": {"cpu": 1}}]}
    )
    return build_job(
        spec,
        name="j",
        space=ResourceSpace(["cpu"]),
        sequence=0,
        submit_time=0.0,
        priority=0,
        preemptible=True,
    )


def test_every_queue_policy_that_cannot_act_is_refused_by_post_filter() -> None:
    """Where ``may_act`` says no, ``post_filter`` returns the empty result (slow path)."""
    from flotilla.framework.interfaces import PostFilterInput, PostFilterResult
    from flotilla.model.queue import Preemption

    class Context:
        def __init__(self, policy: Preemption, node: int | None) -> None:
            self.policy, self.node = policy, node
            self.running_jobs = ()

        def queue_policy(self, queue: str) -> Preemption:
            return self.policy

        def quota_node(self, queue: str) -> int | None:
            return self.node

    plugin = QueuePreemption()
    policies = [
        Preemption(),
        Preemption.model_validate({"within_queue": "lower_priority"}),
        Preemption.model_validate({"reclaim_within_cohort": "any"}),
        Preemption.model_validate({"borrow_within_cohort": {"policy": "lower_priority"}}),
    ]
    for policy in policies:
        for node in (None, 0):
            context = Context(policy, node)
            if not plugin.may_act("q", context):  # type: ignore[arg-type]
                request = PostFilterInput(
                    job=_job(),
                    reason="no fit",
                    cycle=context,  # type: ignore[arg-type]
                    context=context,  # type: ignore[arg-type]
                )
                assert plugin.post_filter(request) == PostFilterResult()


def test_a_run_given_running_by_name_decides_as_one_that_builds_it() -> None:
    """The simulator hands ``backlog.running_by_name``; without it the round builds the same
    mapping."""
    scenario = load_scenario(ROOT / "tests/scenarios/policies/preemption-minimal-victims.yaml")
    sim = Simulator(scenario)
    checked = 0
    inner = sim.algorithm.schedule

    def both(snapshot: SchedulingSnapshot, cancel: object = None) -> CycleResult:
        nonlocal checked
        assert snapshot.backlog is not None and snapshot.backlog.running_by_name is not None
        slow = inner(replace(snapshot, backlog=replace(snapshot.backlog, running_by_name=None)))
        fast = inner(snapshot)
        assert [(s.job.name, s.assignment) for s in fast.scheduled] == [
            (s.job.name, s.assignment) for s in slow.scheduled
        ]
        assert fast.preempted == slow.preempted
        assert dict(fast.pending) == dict(slow.pending)
        checked += bool(snapshot.running)
        return fast

    sim.algorithm.schedule = both  # type: ignore[method-assign,assignment]
    sim.run()
    assert checked > 0


def _slow_reasons(sim: Simulator, pending: Mapping[str, str]) -> None:
    """The per-job loop ``set_waiting_reasons`` replaced: look up each name, check the state."""
    for name, reason in pending.items():
        job = sim.job_by_name[name]
        if job.state in WAITING_STATES:
            job.reason = reason


@pytest.mark.parametrize("name", ALL_SCENARIOS, ids=lambda name: Path(name).stem)
def test_waiting_reasons_equal_the_per_job_loop(
    name: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """Each cycle, the fast writes leave every job with the reason the per-job loop gives, in
    sync and async mode alike (both apply a round's reasons through ``set_waiting_reasons``)."""
    sim = Simulator(load_scenario(_scenario(name, request)))
    calls = 0

    def both(waiting: Mapping[str, SimJob], pending: Mapping[str, str]) -> None:
        nonlocal calls
        calls += 1
        assert dict(waiting) == {j.name: j for j in sim.jobs if j.waiting}
        before = {job.name: job.reason for job in sim.jobs}
        set_waiting_reasons(waiting, pending)
        fast = {job.name: job.reason for job in sim.jobs}
        for job in sim.jobs:
            job.reason = before[job.name]
        _slow_reasons(sim, pending)
        assert {job.name: job.reason for job in sim.jobs} == fast

    monkeypatch.setattr(simulator_module, "set_waiting_reasons", both)
    sim.run()
    assert calls > 0
