"""A uid of each owner's own (issue 37): on a root server whose ``local`` clusters give jobs
uids from a range, every owner (the name of the token that submitted a job) gets one uid of
the range for good, kept in the database (``owner_uids``), so all of one owner's runs — its
retries, the steps of its pipelines — run as that uid and share its files, and two owners
never share one. The request and answer of that assignment, between the ``local`` backend
that asks and the store that answers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OwnerUidRequest:
    """The uid of ``owner``: the one it has, else the lowest of ``first``-``last`` nobody has
    and not in ``unusable`` (uids with an account on this machine, held by another server)."""

    owner: str
    first: int
    last: int
    unusable: frozenset[int] = frozenset()


@dataclass(frozen=True)
class OwnerUid:
    """``uid``: the owner's (``None``: every uid of the range has an owner, or is unusable);
    ``assigned``: given to it just now."""

    owner: str
    uid: int | None
    assigned: bool = False
