"""The stall probe (``FLOTILLA_STALL_PROBE``): off unless armed; armed, it names what held the
whole process while it could not run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from flotilla.stall_probe import ENVIRONMENT, StallProbe, start_if_armed


def test_unarmed_nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENVIRONMENT, raising=False)
    assert start_if_armed() is None


def _hold_the_interpreter() -> int:
    # One C call over a long range: no bytecode runs, so no other thread gets the GIL.
    return sum(range(30_000_000))


def test_a_stop_of_the_whole_process_is_written_with_what_held_it(tmp_path: Path) -> None:
    out = tmp_path / "stalls.jsonl"
    probe = StallProbe(out, threshold_ms=15)
    probe.start()
    try:
        time.sleep(0.05)  # the probe is ticking
        _hold_the_interpreter()
        time.sleep(0.05)  # the probe writes its line
    finally:
        probe.stop()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    stalls = [line for line in lines if line["late_ms"] >= 15]
    assert stalls, lines
    frames = [frame for line in stalls for frame in line["threads"].get("MainThread", [])]
    assert any("test_a_stop_of_the_whole_process" in frame for frame in frames)
    assert all("cpu_ms" in line and "gc" in line for line in stalls)
