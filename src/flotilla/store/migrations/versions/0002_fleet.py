"""The fleet in force: one row holding the applied fleet file (secret references only).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fleet",
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_fleet")),
    )


def downgrade() -> None:
    op.drop_table("fleet")
