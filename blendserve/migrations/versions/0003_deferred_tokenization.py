"""Deferred tokenization: rows are `queued` until tokenized, their prompts stay in the input file

requests.prompt_ids, prompt_tokens, max_tokens become nullable; input_offset and
input_length locate the line in the input file; an index finds a batch's queued rows.

Revision ID: 0003
Revises: 0002
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

COLUMNS = (("prompt_ids", sa.LargeBinary()), ("prompt_tokens", sa.Integer()), ("max_tokens", sa.Integer()))


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch_op:
        for name, type_ in COLUMNS:
            batch_op.alter_column(name, existing_type=type_, nullable=True)
        batch_op.add_column(sa.Column("input_offset", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("input_length", sa.Integer(), nullable=True))
    op.create_index("ix_requests_batch_status", "requests", ["batch_id", "status", "line"])


def downgrade() -> None:
    op.drop_index("ix_requests_batch_status", "requests")
    op.execute("DELETE FROM requests WHERE status = 'queued'")
    with op.batch_alter_table("requests") as batch_op:
        batch_op.drop_column("input_length")
        batch_op.drop_column("input_offset")
        for name, type_ in COLUMNS:
            batch_op.alter_column(name, existing_type=type_, nullable=False)
