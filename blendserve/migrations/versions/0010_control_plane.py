"""batch_counts: per-batch request counters, one row per writer, so status polls of a 1,000,000-request
batch read a few rows instead of aggregating its request rows; backfilled from existing requests

Revision ID: 0010_control_plane
Revises: 0009_interactive
"""
import sqlalchemy as sa
from alembic import op

revision = "0010_control_plane"
down_revision = "0009_interactive"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "batch_counts",
        sa.Column("batch_id", sa.String(64), sa.ForeignKey("batches.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("writer", sa.String(128), primary_key=True),
        *(sa.Column(c, sa.BigInteger(), nullable=False, server_default="0")
          for c in ("completed", "failed", "prompt_tokens", "cached_tokens", "completion_tokens")),
    )
    op.execute(
        "INSERT INTO batch_counts (batch_id, writer, completed, failed, prompt_tokens, cached_tokens, "
        "completion_tokens) SELECT batch_id, 'migration', "
        "SUM(CASE WHEN status = 'completed' THEN 1 ELSE 0 END), "
        "SUM(CASE WHEN status IN ('failed', 'cancelled', 'expired') THEN 1 ELSE 0 END), "
        "SUM(CASE WHEN status = 'completed' THEN COALESCE(prompt_tokens, 0) ELSE 0 END), "
        "SUM(CASE WHEN status = 'completed' THEN cached_tokens ELSE 0 END), "
        "SUM(CASE WHEN status = 'completed' THEN completion_tokens ELSE 0 END) "
        "FROM requests WHERE status IN ('completed', 'failed', 'cancelled', 'expired') GROUP BY batch_id")


def downgrade() -> None:
    op.drop_table("batch_counts")
