"""retention: batches.output_expires_after_s, an index on files.expires_at for the sweep, and chunk
indexes that keep done chunks (history) out of the planner's queries

Revision ID: 0006
Revises: 0004
"""
import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("batches") as b:
        b.add_column(sa.Column("output_expires_after_s", sa.Integer(), nullable=True))
    op.create_index("ix_files_expires_at", "files", ["expires_at"])
    op.create_index("ix_chunks_status_model", "chunks", ["status", "model"])
    op.create_index("ix_chunks_seq", "chunks", ["seq"])


def downgrade() -> None:
    op.drop_index("ix_chunks_seq", table_name="chunks")
    op.drop_index("ix_chunks_status_model", table_name="chunks")
    op.drop_index("ix_files_expires_at", table_name="files")
    with op.batch_alter_table("batches") as b:
        b.drop_column("output_expires_after_s")
