"""Webhook deliveries: one row per event and endpoint, queued until delivered

Revision ID: 0013_webhooks
Revises: 0012_tenants
"""
import sqlalchemy as sa  # noqa: F401
from alembic import op  # noqa: F401

revision = "0013_webhooks"
down_revision = "0012_tenants"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
