"""workers.hardware: the planner's hardware profile of the device the worker computes on (null: unknown)

The planner prices a round (its ETA, planning_rounds.est_*) on it (blendserve/scheduler/blend.py): a vLLM worker on
a CPU is not an H100.

Revision ID: 0011_worker_hardware
Revises: 0010_control_plane
"""
import sqlalchemy as sa
from alembic import op

revision = "0011_worker_hardware"
down_revision = "0010_control_plane"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workers") as t:
        t.add_column(sa.Column("hardware", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workers") as t:
        t.drop_column("hardware")
