"""Leftover run cgroups (issue 23): a server killed with ``kill -9`` that never starts again
over its state dir leaves its runs' cgroups behind, empty. ``flotilla up`` removes them at
start — those no process holds, made long enough ago not to be a starting run's — and says
how many in one line. Real cgroups, as root (CI runs these as root, never skipped there);
each test works in a ``flotilla`` cgroup of its own, so it never touches the runs of other
servers on this machine."""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flotilla.backends.local import cgroups as cgroup_module
from flotilla.backends.local import tree as local_tree
from flotilla.backends.local.cgroups import Cgroups, CgroupV1, CgroupV2, Detected, Limits
from tests.backends.local.test_local_cgroups import _require_isolation
from tests.cli.conftest import served
from tests.cli.test_up_isolation import up

__all__ = ["served"]  # the fixture, used by name below

OLD = "c1-0123456789ab.6553550479c14fd5b4a8e129d7f882f5"
"""A run cgroup's name: cluster, state-dir hash, run id."""


@pytest.fixture
def private() -> Iterator[Cgroups]:
    """This machine's hierarchy, with a ``flotilla`` directory of this test's own."""
    _require_isolation()
    found = cgroup_module.detect().cgroups
    assert found is not None
    name = f"flotilla-test-{uuid.uuid4().hex[:8]}"
    hierarchy: Cgroups
    if isinstance(found, CgroupV2):
        hierarchy = CgroupV2(found.base.parent / name, found.enforced)
        directories = [hierarchy.base]
    else:
        assert isinstance(found, CgroupV1)
        hierarchy = CgroupV1({key: base.parent / name for key, base in found.bases.items()})
        directories = list({base.resolve(): base for base in hierarchy.bases.values()}.values())
    for directory in directories:
        directory.mkdir(exist_ok=True)
    yield hierarchy
    for leftover in hierarchy.listed():
        hierarchy.kill(leftover)
        hierarchy.remove(leftover)
    for directory in directories:
        with contextlib.suppress(OSError):
            directory.rmdir()


def joined(hierarchy: Cgroups, path: str) -> subprocess.Popen[bytes]:
    """A process in the cgroup ``path`` (made now)."""
    directories = hierarchy.create(path, Limits())
    process = subprocess.Popen(["sleep", "1000"])
    for directory in directories:
        (directory / "cgroup.procs").write_text(str(process.pid))
    return process


def test_a_sweep_removes_old_empty_run_cgroups_only(private: Cgroups) -> None:
    private.create(f"{OLD}/main-0", Limits())
    busy = "c1-0123456789ab.busy-run"
    process = joined(private, f"{busy}/main-0")
    private.create("not-a-run/inside", Limits())
    try:
        # Young: a run that is starting has an empty cgroup too.
        assert local_tree.sweep_leftovers(private, older_than=60) == 0
        assert {OLD, busy, "not-a-run"} <= set(private.listed())

        later = time.time() + 120
        assert local_tree.sweep_leftovers(private, older_than=60, now=later) == 1
        assert OLD not in private.listed()
        assert {busy, "not-a-run"} <= set(private.listed())  # a process in it; not a run's
        assert process.poll() is None
    finally:
        process.kill()
        process.wait()
    private.remove("not-a-run")


def test_up_removes_leftover_run_cgroups_and_says_how_many(
    served: list[dict[str, Any]],
    private: Cgroups,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(local_tree, "_detected", lambda: Detected(private))
    monkeypatch.setattr(local_tree, "LEFTOVER_AGE", 0.0)
    private.create(f"{OLD}/main-0", Limits())
    private.create(f"{OLD.replace('.6', '.7')}/main-1", Limits())
    result = up(tmp_path)
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.output.splitlines() if "leftover run cgroup" in line]
    assert line.strip() == (
        "removed 2 leftover run cgroup(s): empty, made by runs no longer running"
    )
    assert private.listed() == {}
