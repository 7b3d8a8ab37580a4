"""worker stats and planning rounds: workers.running_sequences / kv_used_tokens (pushed with each heartbeat)
and a planning_rounds table (one row per round: duration, requests, the plan's estimate and balance)

So one scrape of the API (/metrics, /dashboard) sees figures that live in the worker and scheduler processes.

Revision ID: 0008_worker_stats
Revises: 0007
"""
import sqlalchemy as sa
from alembic import op

revision = "0008_worker_stats"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workers") as t:
        t.add_column(sa.Column("running_sequences", sa.Integer(), nullable=True))
        t.add_column(sa.Column("kv_used_tokens", sa.Integer(), nullable=True))
    op.create_table(
        "planning_rounds",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("duration_s", sa.Float(), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("est_seconds", sa.Float(), nullable=True),
        sa.Column("est_compute_s", sa.Float(), nullable=True),
        sa.Column("est_memory_s", sa.Float(), nullable=True),
        sa.Column("est_prefill_tokens", sa.Float(), nullable=True),
        sa.Column("est_decode_tokens", sa.Float(), nullable=True),
        sa.Column("rounds_total", sa.Integer(), nullable=False),
        sa.Column("requests_total", sa.BigInteger(), nullable=False),
        sa.Column("seconds_total", sa.Float(), nullable=False),
        sa.Column("buckets_total", sa.JSON(), nullable=False),
    )
    op.create_index("ix_planning_rounds_started_at", "planning_rounds", ["started_at"])
    op.create_index("ix_planning_rounds_model_id", "planning_rounds", ["model", "id"])


def downgrade() -> None:
    op.drop_index("ix_planning_rounds_model_id", table_name="planning_rounds")
    op.drop_index("ix_planning_rounds_started_at", table_name="planning_rounds")
    op.drop_table("planning_rounds")
    with op.batch_alter_table("workers") as t:
        t.drop_column("kv_used_tokens")
        t.drop_column("running_sequences")
