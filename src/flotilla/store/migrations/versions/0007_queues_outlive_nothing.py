"""Queues may be deleted once they hold no unfinished job: a job no longer checks a foreign
key to its queue.

A queue that had ever held a job could never be deleted (the finished jobs' rows pointed at
it), so ``fleet apply`` of a file without it was a 409 forever. The jobs keep the queue's
name (their history, accounting and permissions go by name); the store refuses to delete a
queue while a job of it is unfinished, and a queue created again under that name finds its
old jobs in it.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint(batch.f("fk_jobs_queue_queues"), type_="foreignkey")


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.create_foreign_key(batch.f("fk_jobs_queue_queues"), "queues", ["queue"], ["name"])
