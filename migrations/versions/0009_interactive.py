"""workers.interactive_url: where a worker's interactive endpoint listens (null: it serves none)

The API forwards /v1/chat/completions and /v1/completions to a live worker of the model.

Revision ID: 0009_interactive
Revises: 0008_worker_stats
"""
from alembic import op
import sqlalchemy as sa

revision = "0009_interactive"
down_revision = "0008_worker_stats"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workers") as t:
        t.add_column(sa.Column("interactive_url", sa.String(256), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workers") as t:
        t.drop_column("interactive_url")
