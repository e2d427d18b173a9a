"""The comparison of a simulate report with a replay report (``parity.py``), on reports
written by hand: what counts as a difference, and what a ``max_time`` cut explains."""

from __future__ import annotations

from typing import Any

from tests.parity.parity import compare


def job(name: str, state: str, started: float | None, finished: float | None) -> dict[str, Any]:
    return {
        "name": name,
        "queue": "q",
        "state": state,
        "cluster": None if started is None else "c1",
        "placements": [] if started is None else [{"task": "main", "replica": 0}],
        "submitted_at": 0,
        "started_at": started,
        "finished_at": finished,
    }


def report(*jobs: dict[str, Any]) -> dict[str, Any]:
    events = [
        {"time": j["started_at"], "job": j["name"], "event": "scheduled"}
        for j in jobs
        if j["started_at"] is not None
    ]
    return {"jobs": list(jobs), "events": sorted(events, key=lambda e: e["time"])}


def test_a_run_that_ends_just_past_the_cut_on_one_side_is_no_difference() -> None:
    # simulated: started at 170, still running at max_time 200 (it would end at 210);
    # replayed: the lagging service ended it at 230, before its own cut.
    simulated = report(job("b", "running", 170, None), job("c", "queued", None, None))
    replayed = report(job("b", "succeeded", 190, 230), job("c", "running", 230, None))
    assert compare(simulated, replayed, slack=40, cut=200) == []


def test_a_state_far_from_the_cut_still_differs() -> None:
    simulated = report(job("b", "running", 170, None))
    replayed = report(job("b", "succeeded", 100, 120))  # ended 80 s before the cut
    found = {(d.job, d.field) for d in compare(simulated, replayed, slack=40, cut=200)}
    assert ("b", "state") in found


def test_without_a_cut_a_different_state_is_a_difference() -> None:
    simulated = report(job("b", "running", 170, None))
    replayed = report(job("b", "succeeded", 190, 230))
    found = {(d.job, d.field) for d in compare(simulated, replayed, slack=40)}
    assert {("b", "state"), ("b", "finished_at")} <= found


def test_queued_against_ended_is_never_explained_by_the_cut() -> None:
    simulated = report(job("b", "queued", None, None))
    replayed = report(job("b", "succeeded", 195, 205))
    found = {(d.job, d.field) for d in compare(simulated, replayed, slack=40, cut=200)}
    assert ("b", "state") in found
