"""The order a batch's results finished in, for reading them while it runs

Revision ID: 0014_output_order
Revises: 0013_webhooks
"""
import sqlalchemy as sa  # noqa: F401
from alembic import op  # noqa: F401

revision = "0014_output_order"
down_revision = "0013_webhooks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
