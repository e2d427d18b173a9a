"""The scheduling mode: each round inline in the loop (``sync``), or beside it (``async``,
Armada's: the loop takes a ready result, reconciles it and starts the next round).

In a module of its own, without pydantic, so that ``flotilla up``'s options name it without
building the scenario models (docs/performance.md, CLI start-up); ``flotilla.model.scenario``
exports it too."""

from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    SYNC = "sync"
    ASYNC = "async"
