"""leases: one active scheduler per database, any number standing by

Revision ID: 0004
Revises: 0003
"""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    leases = op.create_table(
        "leases",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(128), nullable=True),
        sa.Column("until", sa.Float(), nullable=False, server_default="0"),
    )
    op.bulk_insert(leases, [{"name": "scheduler", "holder": None, "until": 0.0}])


def downgrade() -> None:
    op.drop_table("leases")
