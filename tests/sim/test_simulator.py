"""Simulator semantics: virtual time, timers, cancellation, failures, sync and async cycles."""

from __future__ import annotations

import pytest

from flotilla.model import Scenario
from flotilla.sim import SimulationOptions, Simulator
from flotilla.sim.report import build_report, check_expectations
from tests.builders import (
    Data,
    Report,
    cluster,
    job,
    jobs,
    load,
    nodes,
    run,
    scenario,
    simulate_report,
)

ASYNC = {"mode": "async"}


class _BoundedSimulator(Simulator):
    """Fails the test instead of spinning forever when a run never ends."""

    MAX_CYCLES = 1000

    def __init__(self, spec: Scenario) -> None:
        super().__init__(spec)
        self.cycles_run = 0

    def _cycle(self, now: float) -> bool:
        self.cycles_run += 1
        if self.cycles_run > self.MAX_CYCLES:
            raise AssertionError(f"still cycling at t={now:g}: the run never ends")
        return super()._cycle(now)


def bounded_run(data: Data) -> _BoundedSimulator:
    sim = _BoundedSimulator(load(data))
    sim.run()
    return sim


def one_node(cpu: float = 4, **kwargs: object) -> list[Data]:
    return [cluster("c", nodes(1, cpu=cpu), **kwargs)]  # type: ignore[arg-type]


# --- time -----------------------------------------------------------------------------------


def test_job_submitted_at_t_is_scheduled_by_the_cycle_at_t() -> None:
    report = simulate_report(scenario(clusters=one_node(), jobs=[job(submit_at=3, duration=1)]))
    assert report.events("j", "scheduled")[0]["time"] == 3


def test_jobs_are_scheduled_only_on_the_cycle_grid() -> None:
    data = scenario(
        clusters=one_node(),
        jobs=[job(submit_at=3, duration=1)],
        settings={"cycle_interval": 10},
    )
    report = simulate_report(data)
    assert report.job("j")["started_at"] == 10
    assert report.job("j")["finished_at"] == 11


def test_a_job_ending_at_t_frees_its_resources_for_the_cycle_at_t() -> None:
    data = scenario(clusters=one_node(cpu=1), jobs=[jobs(n=2, cpu=1, duration=7)])
    report = simulate_report(data)
    assert report.job("j-0")["finished_at"] == 7
    assert report.job("j-1")["started_at"] == 7


def test_startup_delay_postpones_start_and_end() -> None:
    data = scenario(
        clusters=one_node(startup_delay=5), jobs=[job(duration=10), job("other", duration=1)]
    )
    report = simulate_report(data)
    assert report.events("j", "scheduled")[0]["time"] == 0
    assert report.events("j", "started")[0]["time"] == 5
    assert report.job("j")["started_at"] == 5
    assert report.job("j")["finished_at"] == 15


def test_a_job_without_duration_runs_past_the_end() -> None:
    sim = run(scenario(clusters=one_node(), jobs=[job()]))
    assert sim.end_reason == "nothing can change any more"
    assert build_report(sim)["jobs"][0]["state"] == "running"


def test_run_ends_when_every_job_is_terminal() -> None:
    sim = run(scenario(clusters=one_node(), jobs=[job(duration=5)]))
    assert sim.end_reason == "every job is terminal"
    assert sim.end_time == 5


def test_until_stops_after_the_cycle_at_that_time() -> None:
    data = scenario(clusters=one_node(cpu=1), jobs=[jobs(n=3, cpu=1, duration=10)])
    sim = run(data, until=10)
    report = Report(build_report(sim))
    assert sim.end_reason == "--until"
    assert report.raw["end_time"] == 10
    assert report.state("j-0") == "succeeded"
    assert report.state("j-1") == "running"  # started by the cycle at t=10, which ran
    assert report.state("j-2") == "queued"


def test_expectation_after_until_is_reported_as_not_reached() -> None:
    data = scenario(
        clusters=one_node(cpu=1),
        jobs=[job(duration=100)],
        expect=[{"at": 50, "job": "j", "state": "running"}],
    )
    failures = check_expectations(run(data, until=10))
    assert failures == ["expect[0] at t=50: not reached (the run stopped at t=10)"]


def test_expectation_after_a_natural_end_uses_the_final_state() -> None:
    data = scenario(
        clusters=one_node(),
        jobs=[job(duration=5)],
        expect=[{"at": 500, "job": "j", "state": "succeeded"}],
    )
    assert check_expectations(run(data)) == []


def test_max_time_stops_the_run() -> None:
    data = scenario(clusters=one_node(), jobs=[job(duration=1000)], settings={"max_time": 30})
    sim = run(data)
    assert (sim.end_time, sim.end_reason) == (30, "settings.max_time")


def test_until_before_max_time_wins() -> None:
    data = scenario(clusters=one_node(), jobs=[job(duration=1000)], settings={"max_time": 30})
    assert run(data, until=20).end_reason == "--until"


def test_a_job_that_never_fits_ends_the_run_with_a_reason() -> None:
    sim = run(scenario(clusters=one_node(cpu=4), jobs=[job(cpu=8)]))
    report = Report(build_report(sim))
    assert sim.end_reason == "nothing can change any more"
    assert report.state("j") == "queued"
    assert "no node has 8 cpu at all (largest 4)" in report.job("j")["reason"]


def test_cycles_counts_every_cycle_of_the_grid_even_when_the_clock_jumps() -> None:
    sim = run(scenario(clusters=one_node(), jobs=[job(duration=1000)]))
    assert sim.end_time == 1000
    assert sim.cycles == 1001


# --- cancellation ---------------------------------------------------------------------------


def test_cancelling_a_running_job_frees_its_resources_at_cancel_time() -> None:
    data = scenario(
        clusters=one_node(cpu=4),
        jobs=[job("hog", cpu=4, duration=100, cancel_at=12), job("next", cpu=4, duration=1)],
    )
    report = simulate_report(data)
    assert report.state("hog") == "cancelled"
    assert report.job("hog")["finished_at"] == 12
    assert report.job("next")["started_at"] == 12
    assert [e["event"] for e in report.events("hog")] == [
        "submitted",
        "scheduled",
        "started",
        "cancelled",
    ]


def test_cancelling_a_queued_job_means_it_never_runs() -> None:
    data = scenario(
        clusters=one_node(cpu=1),
        jobs=[job("first", duration=10), job("second", duration=10, cancel_at=5)],
    )
    report = simulate_report(data)
    assert report.state("second") == "cancelled"
    assert report.cluster_of("second") is None
    assert report.job("second")["started_at"] is None
    assert report.events("second", "scheduled") == []


def test_cancel_after_the_job_ended_changes_nothing() -> None:
    report = simulate_report(scenario(clusters=one_node(), jobs=[job(duration=5, cancel_at=9)]))
    assert report.state("j") == "succeeded"
    assert report.events("j", "cancelled") == []


def test_a_job_cancelled_during_its_startup_delay_never_starts() -> None:
    data = scenario(clusters=one_node(startup_delay=10), jobs=[job(duration=5, cancel_at=3)])
    report = simulate_report(data)
    assert report.state("j") == "cancelled"
    assert report.events("j", "started") == []


# --- cluster failure ------------------------------------------------------------------------


def test_cluster_failure_requeues_its_running_jobs_which_run_elsewhere() -> None:
    data = scenario(
        clusters=[
            cluster("primary", nodes(1, cpu=4), fail_at=5),
            cluster("backup", nodes(1, cpu=4)),
        ],
        jobs=[job(cpu=4, duration=10)],
    )
    report = simulate_report(data)
    requeued = report.events("j", "requeued")
    assert [(e["time"], e["reason"]) for e in requeued] == [
        (5, "cluster primary became unreachable")
    ]
    assert [(e["time"], e["cluster"]) for e in report.events("j", "scheduled")] == [
        (0, "primary"),
        (5, "backup"),
    ]
    assert report.job("j")["finished_at"] == 15  # a fresh run of the full duration
    clusters = {c["name"]: c for c in report.raw["clusters"]}
    assert clusters["primary"]["state"] == "unreachable"
    assert clusters["primary"]["allocated"] == {}


def test_a_requeued_job_with_nowhere_to_go_waits_with_the_failure_as_reason() -> None:
    data = scenario(
        clusters=[cluster("only", nodes(1, cpu=4), fail_at=5)],
        jobs=[job(cpu=4, duration=10)],
    )
    report = simulate_report(data)
    assert report.state("j") == "queued"
    assert report.job("j")["reason"] == "no ready cluster"


# --- async mode -----------------------------------------------------------------------------


def test_async_jobs_start_one_cycle_later_than_sync() -> None:
    workload = [jobs(n=3, cpu=1, duration=5, submit_at=2)]
    sync = simulate_report(scenario(clusters=one_node(), jobs=workload))
    asynchronous = simulate_report(scenario(clusters=one_node(), jobs=workload, settings=ASYNC))
    for name in ("j-0", "j-1", "j-2"):
        assert sync.job(name)["started_at"] == 2
        assert asynchronous.job(name)["started_at"] == 3


def test_async_drops_a_decision_about_a_job_cancelled_meanwhile() -> None:
    data = scenario(
        clusters=one_node(cpu=1),
        jobs=[job("gone", duration=5, cancel_at=1), job("after", duration=5)],
        settings=ASYNC,
    )
    report = simulate_report(data)
    assert report.state("gone") == "cancelled"
    assert report.events("gone", "scheduled") == []
    # "after" did not fit the t=0 snapshot; the round at t=1 sees the cpu free.
    assert report.job("after")["started_at"] == 2


def test_async_drops_a_decision_for_a_cluster_that_failed_meanwhile() -> None:
    data = scenario(
        clusters=[
            cluster("first", nodes(1, cpu=4), fail_at=1),
            cluster("second", nodes(1, cpu=4)),
        ],
        jobs=[job(cpu=4, duration=5)],
        settings=ASYNC,
    )
    report = simulate_report(data)
    assert [(e["time"], e["cluster"]) for e in report.events("j", "scheduled")] == [(2, "second")]


def test_async_reason_says_a_dropped_decision_was_dropped() -> None:
    data = scenario(
        clusters=[
            cluster("first", nodes(1, cpu=4), fail_at=1),
            cluster("second", nodes(1, cpu=4)),
        ],
        jobs=[job(cpu=4, duration=5)],
        settings=ASYNC,
        expect=[{"at": 1, "job": "j", "state": "queued", "reason": "decision from t=0 dropped"}],
    )
    assert check_expectations(run(data)) == []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_job_that_never_fits_ends_the_run_in_either_mode(mode: str) -> None:
    data = scenario(
        clusters=one_node(cpu=4),
        jobs=[job("fits", cpu=1, duration=3), job("never", cpu=8)],
        settings={"mode": mode},
    )
    sim = bounded_run(data)
    report = Report(build_report(sim))
    assert sim.end_reason == "nothing can change any more"
    assert report.state("fits") == "succeeded"
    assert report.state("never") == "queued"
    assert "no node has 8 cpu at all" in report.job("never")["reason"]


def test_simulation_options_default_to_no_limit() -> None:
    assert SimulationOptions().until is None
