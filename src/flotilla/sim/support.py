"""Scenario features the engine does not implement yet: refused loudly, never ignored.

A scenario that asks for a policy the engine cannot honour would otherwise produce a report
that looks right and is not. Each entry names the field path and what is missing. Today the
engine implements every field of the contract, so nothing is refused.
"""

from __future__ import annotations

from flotilla.model.scenario import Scenario


def unsupported_features(scenario: Scenario) -> list[str]:
    del scenario
    return []
