"""Every job state is the lifecycle core's choice (issue 36): no code outside the core and its
two hosts sets a job's state, and the hosts write only what the core answered.

Read from the source (AST), so a new module that writes a state by itself fails here:

* a store ``Transition`` whose new state is written out (``JobState.FAILED``) rather than
  taken from the core's ``SetState``, anywhere in ``src/flotilla``;
* a state write (``transition``, ``transition_many``, ``apply_transitions``, building a
  store ``Transition``) outside the hosts: the service (``service/``, and the store that
  applies its writes and commands, ``store/``) and the simulator (``sim/``);
* a job state assigned to an attribute (``job.state = ScenarioJobState.RUNNING``) outside the
  simulator's two modules that apply the core's effects.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tests.builders import REPO_ROOT

SRC = REPO_ROOT / "src" / "flotilla"
CORE = ("lifecycle/",)
HOSTS = ("service/", "store/", "sim/")
SIM_APPLIERS = ("sim/interpreter.py", "sim/simulator.py")
STATE_ENUMS = {"JobState", "ScenarioJobState"}
WRITES = {"transition", "transition_many", "apply_transitions"}


def modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        yield relative, ast.parse(path.read_text(), filename=str(path))


def _literal_state(node: ast.expr | None) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in STATE_ENUMS
    )


def _new_state(call: ast.Call) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == "new_state":
            return keyword.value
    return call.args[1] if len(call.args) > 1 else None


def _called(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def violations(relative: str, tree: ast.Module) -> list[str]:
    found: list[str] = []
    in_core = relative.startswith(CORE)
    in_host = relative.startswith(HOSTS)
    for node in ast.walk(tree):
        where = f"{relative}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call):
            name = _called(node)
            if name == "Transition" and not in_core:
                if _literal_state(_new_state(node)):
                    found.append(f"{where}: a store Transition to a state the core did not answer")
                if not in_host:
                    found.append(f"{where}: a store Transition outside the core's hosts")
            if name in WRITES and not (in_host or in_core):
                found.append(f"{where}: {name}() outside the core's hosts")
        if isinstance(node, ast.Assign) and _literal_state(node.value):
            targets = [
                t for t in node.targets if isinstance(t, ast.Attribute) and t.attr == "state"
            ]
            if targets and relative not in SIM_APPLIERS:
                found.append(f"{where}: a job state assigned outside the simulator's appliers")
    return found


def test_no_code_outside_the_core_and_its_hosts_sets_a_job_state() -> None:
    found = [problem for relative, tree in modules() for problem in violations(relative, tree)]
    assert found == []


def test_the_check_finds_a_state_written_out() -> None:
    """The rules above catch what they are for (a guard against a check that passes vacuously)."""
    written = ast.parse(
        "Transition(job, JobState.FAILED, 'x')\nstore.transition_many([])\n"
        "job.state = ScenarioJobState.RUNNING\n"
    )
    assert len(violations("server/jobs.py", written)) == 4
    assert len(violations("service/dispatch.py", written)) == 2
    answered = ast.parse("Transition(job, change.state, change.reason)")
    assert violations("service/dispatch.py", answered) == []
