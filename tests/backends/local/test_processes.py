"""How the local backend tells a process group is over (``backends/local/processes.py``).

A cancelled run is reported ended once nothing of its group can run its own code again; a
process the kernel is ending counts as gone, however long it takes to become a zombie.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flotilla.backends.local import processes

PF_EXITING = 0x4
SIGKILL_PENDING = f"{1 << 8:016x}"


def fake_proc(root: Path, group: int, *, state: str, flags: int, pending: str) -> Path:
    """A ``/proc`` with one process of ``group`` in it (pid 4242)."""
    entry = root / "4242"
    entry.mkdir(parents=True)
    fields = [state, "1", str(group), str(group), "0", "-1", str(flags)] + ["0"] * 45
    (entry / "stat").write_text(f"4242 (sleep) {' '.join(fields)}\n")
    (entry / "status").write_text(f"Name:\tsleep\nShdPnd:\t{pending}\nSigPnd:\t{pending}\n")
    return root


@pytest.fixture
def group() -> int:
    return os.getpgrp()  # a group that exists, so the signal probe finds it


def test_a_running_member_keeps_its_group_alive(
    tmp_path: Path, group: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = fake_proc(tmp_path, group, state="S", flags=0, pending="0" * 16)
    monkeypatch.setattr(processes, "_PROC", root)
    assert processes.group_alive(group)


def test_a_member_with_a_sigkill_pending_does_not(
    tmp_path: Path, group: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = fake_proc(tmp_path, group, state="R", flags=0, pending=SIGKILL_PENDING)
    monkeypatch.setattr(processes, "_PROC", root)
    assert not processes.group_alive(group)


def test_a_member_in_its_exit_path_does_not_once_the_kernel_took_the_signal(
    tmp_path: Path, group: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kernel clears the pending SIGKILL when it takes it, before the process is a zombie:
    # a cancel reported ended, then its group seen alive again, failed a CI run.
    root = fake_proc(tmp_path, group, state="R", flags=PF_EXITING, pending="0" * 16)
    monkeypatch.setattr(processes, "_PROC", root)
    assert not processes.group_alive(group)
    assert not processes.process_alive(4242, None)
