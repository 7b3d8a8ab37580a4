"""Uploads: a file sent in parts, and each tenant's stored bytes reserved as they arrive

uploads and upload_parts hold the Uploads API's objects (blendserve/core/uploads.py);
a part's bytes live in the file store under the part's id. storage_holds holds
the bytes a tenant reserved against its stored-bytes quota while an upload or a
part streams, and a part's bytes until its upload ends (blendserve/api/holds.py).

Revision ID: 0015_uploads
Revises: 0014_output_order
"""
import sqlalchemy as sa
from alembic import op

revision = "0015_uploads"
down_revision = "0014_output_order"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("uploads",
                    sa.Column("id", sa.String(64), primary_key=True),
                    sa.Column("owner", sa.String(64), nullable=False),
                    sa.Column("filename", sa.String(512), nullable=False),
                    sa.Column("purpose", sa.String(32), nullable=False),
                    sa.Column("mime_type", sa.String(128), nullable=False),
                    sa.Column("bytes", sa.BigInteger(), nullable=False),
                    sa.Column("created_at", sa.Integer(), nullable=False),
                    sa.Column("expires_at", sa.Integer(), nullable=False),
                    sa.Column("status", sa.String(16), nullable=False),
                    sa.Column("file_id", sa.String(64), nullable=True),
                    sa.Column("file_expires_after_s", sa.Integer(), nullable=True))
    op.create_index("ix_uploads_owner", "uploads", ["owner"])
    op.create_index("ix_uploads_expires_at", "uploads", ["expires_at"])
    op.create_table("upload_parts",
                    sa.Column("id", sa.String(64), primary_key=True),
                    sa.Column("upload_id", sa.String(64), nullable=False),
                    sa.Column("bytes", sa.BigInteger(), nullable=False),
                    sa.Column("created_at", sa.Integer(), nullable=False))
    op.create_index("ix_upload_parts_upload_id", "upload_parts", ["upload_id"])
    op.create_table("storage_holds",
                    sa.Column("id", sa.String(64), primary_key=True),
                    sa.Column("owner", sa.String(64), nullable=False),
                    sa.Column("bytes", sa.BigInteger(), nullable=False),
                    sa.Column("expires_at", sa.Integer(), nullable=False))
    op.create_index("ix_storage_holds_owner", "storage_holds", ["owner"])
    op.create_index("ix_storage_holds_expires_at", "storage_holds", ["expires_at"])


def downgrade() -> None:
    op.drop_table("storage_holds")
    op.drop_table("upload_parts")
    op.drop_table("uploads")
