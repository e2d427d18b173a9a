"""An assignment has one JSON form, written and read in one place: what a run stores (and an
old database holds) comes back as the same assignment, and readers get typed placements."""

from __future__ import annotations

import json

import numpy as np

from flotilla.framework.assignment_record import AssignmentRecord, PlacementRecord
from flotilla.framework.interfaces import Assignment, CycleState
from flotilla.framework.registry import Framework
from flotilla.scheduler.placement import place_job
from tests.builders import Fleet, cluster, fleet, job, nodes, scenario, task


def _fleet() -> Fleet:
    return fleet(
        scenario(
            clusters=[cluster("east", nodes(1, name="g", cpu=8, gpu=2, gpu_memory="16Gi"))],
            jobs=[
                job("train", tasks=[task("main", cpu=2, gpu=1, gpu_memory="4Gi")]),
                job("notebook", tasks=[task("main", cpu=1, gpu=0.5)]),
            ],
        )
    )


def _place(placed: Fleet, name: str) -> Assignment:
    decision = place_job(
        Framework.from_profile(), placed.job(name), placed.cluster(), CycleState(time=0), keep=True
    )
    assert decision.assignment is not None
    return decision.assignment


def test_the_json_form_is_the_one_runs_have_always_stored() -> None:
    placed = _fleet()
    whole, half = _place(placed, "train"), _place(placed, "notebook")
    assert json.dumps(whole.to_json()) == json.dumps(
        {
            "cluster": "east",
            "placements": [
                {
                    "task": "main",
                    "replica": 0,
                    "node": "g-0",
                    "gpus": [0],
                    "shares": [[0, 1.0]],
                    "gpu_memory": 4 * 2.0**30,
                }
            ],
        }
    )
    assert half.to_json()["placements"][0] == {
        "task": "main",
        "replica": 0,
        "node": "g-0",
        "gpus": [1],
        "shares": [[1, 0.5]],
        "gpu_memory": 0.0,
    }


def test_a_stored_assignment_comes_back_on_a_fresh_node_table() -> None:
    placed = _fleet()
    original = _place(placed, "train")
    fresh = _fleet()
    rebuilt = Assignment.from_json(
        json.loads(json.dumps(original.to_json())), fresh.job("train"), fresh.cluster()
    )
    assert rebuilt is not None
    [before], [after] = original.placements, rebuilt.placements
    assert (after.task, after.replica, after.node, after.row, after.gpus) == (
        before.task,
        before.replica,
        before.node,
        before.row,
        before.gpus,
    )
    assert np.array_equal(after.request, before.request)
    gone = {**original.to_json(), "placements": [{**original.to_json()["placements"][0]}]}
    gone["placements"][0]["node"] = "g-9"
    assert Assignment.from_json(gone, fresh.job("train"), fresh.cluster()) is None


def test_an_older_row_reads_with_defaults_for_what_it_lacks() -> None:
    old = {"placements": [{"task": "main", "replica": 1, "node": "n", "gpus": [2]}]}
    record = AssignmentRecord.unmarshal(old)
    assert record == AssignmentRecord("", (PlacementRecord("main", 1, "n", (2,)),))
    assert AssignmentRecord.unmarshal(None) == AssignmentRecord("")
    current = _place(_fleet(), "notebook").to_json()
    assert AssignmentRecord.unmarshal(current).marshal() == current
