"""Scenario features the engine does not implement yet: refused loudly, never ignored.

A scenario that asks for a policy the engine cannot honour would otherwise produce a report
that looks right and is not. Each entry names the field path and what is missing.
"""

from __future__ import annotations

from flotilla.model.scenario import Scenario


def unsupported_features(scenario: Scenario) -> list[str]:
    problems = []
    for index, job in enumerate(scenario.jobs):
        for task_index, task in enumerate(job.tasks):
            if task.topology is not None and task.topology.gpu is not None:
                problems.append(
                    f"jobs[{index}].tasks[{task_index}].topology: GPU topology scopes are not "
                    "implemented yet"
                )
    return problems
