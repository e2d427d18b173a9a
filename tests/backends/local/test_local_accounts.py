"""Accounts by owner or queue (``run_as_accounts``; issue 23's alternative to a uid per run):
a job runs as the account its owner, else its queue, is mapped to in the fleet file; an
account that does not exist, or root, is an error naming the field. Switching users needs
root (CI runs these as root, never skipped there)."""

from __future__ import annotations

import pwd
from pathlib import Path
from typing import Any

import pytest

from flotilla.backends import BackendRunState
from flotilla.backends.local.accounts import parse_account_map
from flotilla.model import JobSpec
from flotilla.model.fleet import FleetCluster
from flotilla.service.fleet_settings import resolve
from tests.backends.local.test_local_identities import uids_in_range
from tests.backends.local.test_local_isolation import needs_root
from tests.backends.support import LocalHarness, read_all, request
from tests.timing import wait_until

DAEMON = pwd.getpwnam("daemon").pw_uid
NOBODY = pwd.getpwnam("nobody").pw_uid


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (
            {"owners": {"alice": "no-such-user-x"}},
            "run_as_accounts.owners.alice: no such user 'no-such-user-x' on this machine",
        ),
        ({"queues": {"team-a": "root"}}, "run_as_accounts.queues.team-a: 'root' is root"),
        ({"queues": {"team-a": 0}}, "run_as_accounts.queues.team-a: 0 is root"),
        ({"groups": {"x": "daemon"}}, "run_as_accounts.groups: unknown field (owners or queues)"),
        ({"owners": ["alice"]}, "run_as_accounts.owners: must map names to accounts"),
        ({"owners": {"alice": ""}}, "run_as_accounts.owners.alice: must name an account"),
        (["alice"], "run_as_accounts: must be a mapping"),
    ],
)
def test_a_bad_account_map_is_an_error_naming_the_field(value: Any, problem: str) -> None:
    with pytest.raises(ValueError, match="run_as_accounts") as raised:
        parse_account_map(value)
    assert problem in str(raised.value)


def test_a_mapped_account_inside_the_uid_range_is_refused() -> None:
    with pytest.raises(ValueError) as raised:
        parse_account_map({"owners": {"bob": "nobody"}}, (NOBODY - 5, NOBODY + 5))
    assert str(raised.value).startswith(f"run_as_accounts.owners.bob: 'nobody' has uid {NOBODY}")


def test_the_local_backend_takes_the_setting_from_a_fleet_file() -> None:
    """``resolve`` passes it to the factory as the fleet file gives it (a mapping)."""
    from flotilla.backends import backend_factory

    accounts = {"owners": {"alice": "daemon"}, "queues": {"team-a": "nobody"}}
    cluster = FleetCluster(name="here", backend="local", settings={"run_as_accounts": accounts})
    resolved = resolve(cluster, 0, factory=backend_factory("local"))
    assert resolved.problems == [] and resolved.values == {"run_as_accounts": accounts}


def test_jobs_run_as_the_account_of_their_owner_else_their_queue(local: LocalHarness) -> None:
    needs_root()
    uid_range = uids_in_range(62000, 4)
    accounts = {"owners": {"alice": "daemon"}, "queues": {"team-a": "nobody"}}
    backend = local.make(working_dir=None, uid_range=uid_range, run_as_accounts=accounts)
    cases = {
        "by-owner": ("team-a", "alice"),  # the owner's mapping wins over the queue's
        "by-queue": ("team-a", "carol"),
        "unmapped": ("team-b", "carol"),
    }
    for run_id, (queue, owner) in cases.items():
        payload = {"command": "id -u"}
        backend.dispatch(request(backend, run_id, payload, queue=queue, owner=owner))
    ran = {}
    for run_id in cases:
        status = local.wait_terminal(backend, run_id)
        assert status.state is BackendRunState.SUCCEEDED, status
        ran[run_id] = int(read_all(backend, run_id).split()[0])
    first, last = (int(part) for part in uid_range.split("-"))
    assert ran["by-owner"] == DAEMON and ran["by-queue"] == NOBODY
    assert first <= ran["unmapped"] <= last  # a uid of its own, from the range


def test_the_scheduler_hands_the_backend_the_jobs_queue_and_owner(tmp_path: Path) -> None:
    """What ``run_as_accounts`` maps by reaches the backend with every dispatch."""
    from tests.service.test_cancel_before_dispatch import two_jobs

    store, backend, loop, _ = two_jobs(tmp_path)
    seen: list[tuple[str | None, str | None]] = []
    backend.on_dispatch = lambda request: seen.append((request.queue, request.owner))
    owned = JobSpec.model_validate(
        {
            "name": "owned",
            "queue": "default",
            "tasks": [{"name": "main", "resources": {"cpu": 1}}],
            "payload": {"sim": {"duration": 600}},
        }
    )
    store.submit_jobs([owned], owner="alice")
    wait_until(lambda: len(seen) >= 3, lambda: f"three dispatches: {seen}", 60, 0, loop.cycle)
    assert sorted(seen, key=str) == [("default", "alice"), ("default", None), ("default", None)]
    loop.close()
    store.close()
