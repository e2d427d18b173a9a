"""Accounts by queue or owner: the ``local`` backend's ``run_as_accounts`` setting (issue 23).

The alternative to a uid of its own per run (``uid_range``): an admin maps a job's owner (the
name of the token that submitted it) or its queue to an existing account of this machine, in
the fleet file, so a tenant's jobs run as that tenant's account — its files, its quotas, its
``sudo`` rules — as Slurm runs a job as its submitter::

    settings:
      run_as_accounts:
        owners: {alice: alice, bob: bob}
        queues: {team-a: svc-team-a}

A job whose owner is mapped runs as that account; else one whose queue is; else as the
cluster's ``run_as`` or ``uid_range`` says (or the server's user). Every account must exist
here and may not be root (uid 0); an unknown one is an error naming the field
(``run_as_accounts.owners.alice: no such user 'alice' on this machine``), and mapping anyone
needs the server to run as root. Runs of one account are isolated from other accounts and
from the server, not from each other (they share its uid).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flotilla.backends.local.identity import Identity, fixed_identity

KINDS = ("owners", "queues")
"""What a job is mapped by, in the order it is looked up."""


@dataclass(frozen=True)
class AccountMap:
    """Owner and queue → the account its jobs run as (``run_as_accounts``)."""

    owners: Mapping[str, Identity] = field(default_factory=dict)
    queues: Mapping[str, Identity] = field(default_factory=dict)

    def identity_for(self, queue: str | None, owner: str | None) -> Identity | None:
        """The account a job of ``queue`` submitted by ``owner`` runs as; None: not mapped."""
        if owner is not None and owner in self.owners:
            return self.owners[owner]
        if queue is not None and queue in self.queues:
            return self.queues[queue]
        return None

    def __bool__(self) -> bool:
        return bool(self.owners or self.queues)


def parse_account_map(value: Any, dynamic: tuple[int, int] | None = None) -> AccountMap:
    """The ``run_as_accounts`` setting; raises ``ValueError`` naming each bad field.
    ``dynamic``: the cluster's ``uid_range``, which no mapped account may fall in (a run's
    end kills every process of its uid, and would kill the account's jobs)."""
    if value is None:
        return AccountMap()
    where = "run_as_accounts"
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: must be a mapping with 'owners' and/or 'queues'")
    problems: list[str] = []
    found: dict[str, dict[str, Identity]] = {kind: {} for kind in KINDS}
    for kind, entries in value.items():
        if kind not in KINDS:
            problems.append(f"{where}.{kind}: unknown field (owners or queues)")
            continue
        if not isinstance(entries, Mapping):
            problems.append(f"{where}.{kind}: must map names to accounts")
            continue
        for name, account in entries.items():
            path = f"{where}.{kind}.{name}"
            if not isinstance(account, str | int) or isinstance(account, bool) or account == "":
                problems.append(f"{path}: must name an account (a user name or uid)")
                continue
            try:
                identity = fixed_identity(str(account))
            except ValueError as error:
                problems.append(f"{path}: {str(error).removeprefix('run_as: ')}")
                continue
            assert identity is not None
            if identity.uid == 0:
                problems.append(f"{path}: {account!r} is root; a job never runs as root")
                continue
            if dynamic is not None and dynamic[0] <= identity.uid <= dynamic[1]:
                problems.append(
                    f"{path}: {account!r} has uid {identity.uid}, inside the cluster's "
                    f"uid_range {dynamic[0]}-{dynamic[1]} (uids given to runs of their own)"
                )
                continue
            found[kind][str(name)] = identity
    if problems:
        raise ValueError("; ".join(problems))
    return AccountMap(owners=found["owners"], queues=found["queues"])
