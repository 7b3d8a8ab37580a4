"""The order a batch's results finished in, for reading them while it runs

requests.out_seq: the request's place among its batch's finished requests,
assigned by the leading scheduler (blendserve/scheduler/outputs.py) in the
order their results became visible; GET /v1/batches/{id}/output reads by it.
Both indexes are partial: ix_requests_batch_out holds only numbered rows and
serves that read; ix_requests_unnumbered holds only the finished rows not
numbered yet, so the scheduler finds them without scanning a batch's
unfinished rows, and a result write touches neither until it is numbered. Rows finished before this revision are
numbered by the scheduler after the upgrade, a page per batch per tick.

Revision ID: 0014_output_order
Revises: 0013_webhooks
"""
import sqlalchemy as sa
from alembic import op

revision = "0014_output_order"
down_revision = "0013_webhooks"
branch_labels = None
depends_on = None

_NUMBERED = sa.text("out_seq IS NOT NULL")
_UNNUMBERED = sa.text("out_seq IS NULL AND finished_at IS NOT NULL")


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch_op:
        batch_op.add_column(sa.Column("out_seq", sa.BigInteger(), nullable=True))
    op.create_index("ix_requests_batch_out", "requests", ["batch_id", "out_seq"], sqlite_where=_NUMBERED,
                    postgresql_where=_NUMBERED)
    op.create_index("ix_requests_unnumbered", "requests", ["batch_id"], sqlite_where=_UNNUMBERED,
                    postgresql_where=_UNNUMBERED)


def downgrade() -> None:
    op.drop_index("ix_requests_unnumbered", table_name="requests")
    op.drop_index("ix_requests_batch_out", table_name="requests")
    with op.batch_alter_table("requests") as batch_op:
        batch_op.drop_column("out_seq")
