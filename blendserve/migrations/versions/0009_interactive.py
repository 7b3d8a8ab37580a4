"""workers.interactive_url and interactive_share: where a worker's interactive endpoint listens (null: it
serves none), and the share of its tokens interactive requests took in the last minute

The API forwards /v1/chat/completions and /v1/completions to a live worker of the model; the planner paces
batch work to the rest of the worker's step budget.

Revision ID: 0009_interactive
Revises: 0008_worker_stats
"""
import sqlalchemy as sa
from alembic import op

revision = "0009_interactive"
down_revision = "0008_worker_stats"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workers") as t:
        t.add_column(sa.Column("interactive_url", sa.String(256), nullable=True))
        t.add_column(sa.Column("interactive_share", sa.Float(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("workers") as t:
        t.drop_column("interactive_share")
        t.drop_column("interactive_url")
