"""Per-run GPU use (issue 26): ``run_gpu_use``, one row per run its backend sampled.

What a run did with the GPUs it held (memory now and at peak, utilisation, GPU-seconds held
and used), as the backend last reported it; ``describe``, ``usage`` and ``/metrics`` read it.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_gpu_use",
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("memory_used", sa.BigInteger(), nullable=False),
        sa.Column("memory_peak", sa.BigInteger(), nullable=False),
        sa.Column("utilization", sa.Float(), nullable=True),
        sa.Column("held_gpu_seconds", sa.Float(), nullable=False),
        sa.Column("used_gpu_seconds", sa.Float(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("sampled_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_run_gpu_use")),
    )


def downgrade() -> None:
    op.drop_table("run_gpu_use")
