"""Tenants: rows of a key now listed under a tenant move to it; files.lines for the queue quota

Owners were a digest of the key that made a row; a `tenant:key` entry of
BLENDSERVE_API_KEYS makes them the tenant's (blendserve/core/owners.py). The keys are
configuration, so this maps what the keys configured now say; the API repeats
the same idempotent mapping at every start (a key moved under a tenant later).
files.lines is the line count of an upload (an upper bound of its requests),
which the queued-requests quota adds up when a batch is created; null for
files stored before it (the API counts those when they are used).
deleted_files keeps a deleted file's place in the list order for a week (list
cursors); batches.input_file_id is indexed for the delete guard (a running
batch's input file cannot be deleted).

Revision ID: 0012_tenants
Revises: 0011_worker_hardware
"""
import sqlalchemy as sa
from alembic import op

revision = "0012_tenants"
down_revision = "0011_worker_hardware"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("files") as t:
        t.add_column(sa.Column("lines", sa.Integer(), nullable=True))
    op.create_index("ix_batches_input_file_id", "batches", ["input_file_id"])
    op.create_table("deleted_files",
                    sa.Column("id", sa.String(64), primary_key=True),
                    sa.Column("owner", sa.String(64), nullable=False),
                    sa.Column("created_at", sa.Integer(), nullable=False),
                    sa.Column("deleted_at", sa.Integer(), nullable=False))
    op.create_index("ix_deleted_files_deleted_at", "deleted_files", ["deleted_at"])
    from alembic import context

    from blendserve.core.owners import Keyring

    settings = context.config.attributes["settings"]       # set by env.py
    files, batches = sa.table("files", sa.column("owner")), sa.table("batches", sa.column("owner"))
    for digest, owner in Keyring.parse(settings.api_keys).named.items():
        for table in (files, batches):
            op.execute(table.update().where(table.c.owner == digest).values(owner=owner))


def downgrade() -> None:
    op.drop_table("deleted_files")
    op.drop_index("ix_batches_input_file_id", "batches")
    with op.batch_alter_table("files") as t:
        t.drop_column("lines")
