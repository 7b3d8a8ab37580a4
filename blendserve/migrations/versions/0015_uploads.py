"""Uploads: a file sent in parts, and each tenant's stored bytes reserved as they arrive

Revision ID: 0015_uploads
Revises: 0014_output_order
"""
import sqlalchemy as sa  # noqa: F401
from alembic import op  # noqa: F401

revision = "0015_uploads"
down_revision = "0014_output_order"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
