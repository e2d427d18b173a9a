"""A run's CPU time and peak memory (issue 29, ``flotilla sacct``): ``runs.cpu_seconds``,
``runs.memory_peak``.

What the run's processes used, as its backend measured it when the run ended: CPU seconds
(user + system, summed over replicas: Slurm's ``TotalCPU``) and the largest peak resident
memory of any one replica in bytes (Slurm's ``MaxRSS``). Null: the backend did not measure
it (no cgroups, a backend whose API does not say, or a run that has not ended).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("cpu_seconds", sa.Float(), nullable=True))
        batch.add_column(sa.Column("memory_peak", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("memory_peak")
        batch.drop_column("cpu_seconds")
