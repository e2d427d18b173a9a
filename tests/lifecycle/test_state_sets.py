"""Every surface takes the job states from the lifecycle core: a state added there and not
known to one of them (the SDK's and CLI's terminal sets, the CLI's colours, the dashboard's
lists and badges, the simulator's states) fails here."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient

from flotilla.cli import render
from flotilla.lifecycle import (
    JOB_STATE_ORDER,
    JOB_TRANSITIONS,
    TERMINAL_JOB_STATES,
    WAITING_JOB_STATES,
    JobState,
)
from flotilla.model.scenario import ScenarioJobState
from flotilla.sdk import calls
from flotilla.sim import state as sim_state
from flotilla.web.app import STATIC, router

TERMINAL = {state.value for state in TERMINAL_JOB_STATES}
WAITING = {state.value for state in WAITING_JOB_STATES}


def test_the_core_lists_every_state_once_with_its_moves() -> None:
    assert sorted(JOB_STATE_ORDER) == sorted(JobState)
    assert set(JOB_TRANSITIONS) == set(JobState)
    assert all(not JOB_TRANSITIONS[state] for state in TERMINAL_JOB_STATES)


def test_the_sdk_and_the_cli_end_where_the_core_does_and_colour_every_state() -> None:
    assert calls.TERMINAL == TERMINAL
    assert render.ENDED_STATES == TERMINAL
    assert set(render.STATE_STYLES) == {state.value for state in JobState}


def test_the_simulators_states_are_the_cores_names() -> None:
    names = {state.value for state in ScenarioJobState}
    assert names <= {state.value for state in JobState}
    assert TERMINAL | WAITING | {"running"} <= names
    assert {state.value for state in sim_state.TERMINAL_STATES} == TERMINAL
    assert {state.value for state in sim_state.WAITING_STATES} == WAITING


def test_the_dashboard_reads_the_states_from_the_api_and_has_a_badge_for_each() -> None:
    app = FastAPI()
    app.include_router(router)
    answer = TestClient(app).get("/ui/api/states").json()
    assert answer == {
        "states": [state.value for state in JOB_STATE_ORDER],
        "terminal": sorted(TERMINAL),
        "waiting": sorted(WAITING),
    }
    scripts = "".join(path.read_text() for path in Path(STATIC).glob("*.js"))
    # no copy of a state set in the page's code: a list of two or more state names
    names = "|".join(state.value for state in JobState)
    literal = rf'"(?:{names})"\s*,\s*"(?:{names})"'
    assert re.search(literal, scripts) is None
    css = (Path(STATIC) / "style.css").read_text()
    for state in JobState:
        assert f".state-{state.value}" in css, f"no badge colour for {state.value}"
