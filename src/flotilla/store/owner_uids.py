"""Each owner's uid of a range, kept for good (``owner_uids``; ``flotilla.model.owner_uids``).

An owner's uid is read; an owner without one gets the lowest uid of the range that no owner
has and that the caller did not call unusable. Two servers assigning at once over one database
cannot give one uid twice: the uid is unique, and the loser's insert fails and is retried
(``SqlStore._upsert``), then finds its owner's row or the next free uid.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from flotilla.model.owner_uids import OwnerUid, OwnerUidRequest
from flotilla.store.schema import OwnerUidRow


def owner_uid(session: Session, request: OwnerUidRequest, now: datetime) -> OwnerUid:
    """The owner's uid, assigned now if it had none (see the module docstring)."""
    found = session.scalars(
        select(OwnerUidRow.uid).where(OwnerUidRow.owner == request.owner)
    ).first()
    if found is not None:
        return OwnerUid(request.owner, int(found))
    taken = set(
        session.scalars(
            select(OwnerUidRow.uid).where(
                OwnerUidRow.uid >= request.first, OwnerUidRow.uid <= request.last
            )
        )
    )
    for uid in range(request.first, request.last + 1):
        if uid in taken or uid in request.unusable:
            continue
        session.add(OwnerUidRow(owner=request.owner, uid=uid, assigned_at=now))
        session.flush()  # a uid another server just gave raises IntegrityError here
        return OwnerUid(request.owner, uid, assigned=True)
    return OwnerUid(request.owner, None)


def owner_uids(session: Session) -> dict[str, int]:
    """Every owner's uid."""
    return {row.owner: int(row.uid) for row in session.scalars(select(OwnerUidRow))}
