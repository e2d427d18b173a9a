"""How long a test may wait, from how fast this machine is now: the one place in ``tests/``
where a time limit is made.

A test waits for a condition (a file written, a state reached), never for a fixed time; its
limit exists only to fail a test that hangs, so it must never be what a slow machine reaches
first. A limit is written as the seconds the wait takes at most on a quiet reference machine
(the 2-core CI box), and stretched by the machine's ``slowdown()``: the wall time of a fixed
piece of pure-Python work, divided by that work's time on the reference machine. It measures
the CPU's speed and the share of it this process gets (a busy machine, a slow one, one under
a debugger), at least 1. A deadline that expires measures again and waits on while the
machine has become slower than when it was set, so a load that arrives mid-wait is allowed
for too.

``FLOTILLA_TEST_SLOWDOWN`` sets a floor under the measure (e.g. 3 on a machine known to be
slow in ways a CPU loop does not show, such as a slow disk).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

REFERENCE_SECONDS = 0.015
"""The calibration's CPU time on the reference machine (idle: its wall time is the same)."""

MAX_SLOWDOWN = 40.0
"""A measure past this is noise (the process was stopped, swapped out); a hang still fails."""

_SAMPLES = 3
_measured: tuple[float, float] | None = None  # (when, slowdown)
_REMEASURE_AFTER = 10.0


def _calibration() -> int:
    total = 0
    for number in range(200_000):
        total += number * number % 7
    return total


def measure() -> float:
    """The slowdown now: the calibration's mean wall time over its reference, at least 1."""
    started = time.perf_counter()
    for _ in range(_SAMPLES):
        _calibration()
    wall = (time.perf_counter() - started) / _SAMPLES
    floor = float(os.environ.get("FLOTILLA_TEST_SLOWDOWN") or 1.0)
    return min(max(wall / REFERENCE_SECONDS, floor, 1.0), max(MAX_SLOWDOWN, floor))


def slowdown() -> float:
    """This machine's slowdown, measured at most every few seconds (a wait loop may ask often)."""
    global _measured
    now = time.monotonic()
    if _measured is None or now - _measured[0] > _REMEASURE_AFTER:
        _measured = (now, measure())
    return _measured[1]


def limit(seconds: float) -> float:
    """``seconds`` on the reference machine, as long as it takes on this one now."""
    return seconds * slowdown()


class Deadline:
    """``seconds`` (on the reference machine) from now, stretched by the slowdown; when it
    seems to have passed, the slowdown is measured again and the deadline moves out if the
    machine has become slower since it was set."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = time.monotonic()
        self.factor = slowdown()

    @property
    def allowed(self) -> float:
        """The seconds this deadline allows so far (the reference seconds, stretched)."""
        return self.seconds * self.factor

    def remaining(self) -> float:
        return max(0.0, self.started + self.allowed - time.monotonic())

    def expired(self) -> bool:
        if time.monotonic() < self.started + self.allowed:
            return False
        global _measured
        _measured = None
        self.factor = max(self.factor, slowdown())
        return time.monotonic() >= self.started + self.allowed


def deadline(seconds: float) -> Deadline:
    """A deadline of ``seconds`` on the reference machine (see the module's docstring)."""
    return Deadline(seconds)


def wait_until(
    condition: Callable[[], bool],
    what: str | Callable[[], str],
    seconds: float = 30.0,
    interval: float = 0.02,
    step: Callable[[], None] | None = None,
) -> None:
    """Poll ``condition`` (calling ``step`` between polls, e.g. a loop's cycle) until it holds;
    fail naming ``what`` once ``seconds`` on the reference machine, stretched, have passed."""
    due = deadline(seconds)
    while not condition():
        if due.expired():
            said = what if isinstance(what, str) else what()
            raise AssertionError(f"timed out after {due.allowed:.0f}s waiting for {said}")
        if step is not None:
            step()
        time.sleep(interval)
