"""workers.step_tokens: the engine's token budget per mixed step (null: it cannot mix prefill and decode)

The planner paces a blend to it (blendserve/scheduler/blend.py).

Revision ID: 0007
Revises: 0004
"""
import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workers") as t:
        t.add_column(sa.Column("step_tokens", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workers") as t:
        t.drop_column("step_tokens")
