"""Webhook deliveries: one row per event and endpoint, queued until delivered

A batch's terminal status change inserts its event's rows in the same
transaction (blendserve/core/deliveries.py); the leading scheduler sends them
and keeps each one's attempts, next attempt, delivery time and last answer
here (blendserve/scheduler/webhooks.py), so no role's restart loses one.

Revision ID: 0013_webhooks
Revises: 0012_tenants
"""
import sqlalchemy as sa
from alembic import op

revision = "0013_webhooks"
down_revision = "0012_tenants"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("webhook_deliveries",
                    sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
                    sa.Column("event_id", sa.String(64), nullable=False),
                    sa.Column("event_type", sa.String(32), nullable=False),
                    sa.Column("batch_id", sa.String(64), nullable=False),
                    sa.Column("owner", sa.String(64), nullable=False),
                    sa.Column("target", sa.String(80), nullable=False),
                    sa.Column("payload", sa.Text(), nullable=False),
                    sa.Column("created_at", sa.Integer(), nullable=False),
                    sa.Column("status", sa.String(16), nullable=False),
                    sa.Column("attempts", sa.Integer(), nullable=False),
                    sa.Column("next_attempt_at", sa.Float(), nullable=False),
                    sa.Column("delivered_at", sa.Float(), nullable=True),
                    sa.Column("last_status", sa.Integer(), nullable=True),
                    sa.Column("last_error", sa.String(300), nullable=True),
                    sa.UniqueConstraint("event_id", "target", name="uq_webhook_deliveries_event_target"))
    op.create_index("ix_webhook_deliveries_due", "webhook_deliveries", ["status", "next_attempt_at"])
    op.create_index("ix_webhook_deliveries_owner", "webhook_deliveries", ["owner", "id"])


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_owner", "webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_due", "webhook_deliveries")
    op.drop_table("webhook_deliveries")
