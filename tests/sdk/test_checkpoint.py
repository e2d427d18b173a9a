"""``flotilla.checkpoint()``: a job reports "checkpointed now" by touching the file its
backend names in ``FLOTILLA_CHECKPOINT_FILE``; without one it does nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import flotilla


def test_checkpoint_touches_the_named_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / ".flotilla-checkpoint"
    monkeypatch.setenv("FLOTILLA_CHECKPOINT_FILE", str(marker))
    assert flotilla.checkpoint() is True
    assert marker.exists()
    os.utime(marker, (1_000, 1_000))
    assert flotilla.checkpoint() is True
    assert marker.stat().st_mtime > 1_000  # a later checkpoint is a later time


def test_checkpoint_outside_flotilla_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLOTILLA_CHECKPOINT_FILE", raising=False)
    assert flotilla.checkpoint() is False
