"""A uid of each owner's own (issue 37): ``owner_uids``, one row per owner whose local jobs
ran as a uid of the server's range.

Assigned at the owner's first run and kept for good, so all of an owner's runs share one uid
(its retries and pipelines share files) and no two owners ever share one.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "owner_uids",
        sa.Column("owner", sa.String(length=253), nullable=False),
        sa.Column("uid", sa.BigInteger(), nullable=False),
        sa.Column("assigned_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("owner", name=op.f("pk_owner_uids")),
        sa.UniqueConstraint("uid", name=op.f("uq_owner_uids_uid")),
    )


def downgrade() -> None:
    op.drop_table("owner_uids")
