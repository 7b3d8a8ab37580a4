"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29 11:14:17.150525
"""
import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    _batches()
    _chunks()
    _files()
    _workers()
    _requests()


def _batches() -> None:
    op.create_table('batches',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('owner', sa.String(length=64), nullable=False),
    sa.Column('endpoint', sa.String(length=64), nullable=False),
    sa.Column('model', sa.String(length=256), nullable=True),
    sa.Column('input_file_id', sa.String(length=64), nullable=False),
    sa.Column('completion_window', sa.String(length=16), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('output_file_id', sa.String(length=64), nullable=True),
    sa.Column('error_file_id', sa.String(length=64), nullable=True),
    sa.Column('errors', sa.JSON(), nullable=True),
    sa.Column('metadata', sa.JSON(), nullable=True),
    sa.Column('created_at', sa.Integer(), nullable=False),
    sa.Column('in_progress_at', sa.Integer(), nullable=True),
    sa.Column('expires_at', sa.Integer(), nullable=False),
    sa.Column('finalizing_at', sa.Integer(), nullable=True),
    sa.Column('completed_at', sa.Integer(), nullable=True),
    sa.Column('failed_at', sa.Integer(), nullable=True),
    sa.Column('expired_at', sa.Integer(), nullable=True),
    sa.Column('cancelling_at', sa.Integer(), nullable=True),
    sa.Column('cancelled_at', sa.Integer(), nullable=True),
    sa.Column('total', sa.Integer(), nullable=False),
    sa.Column('first_run_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('batches', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_batches_created_at'), ['created_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_batches_owner'), ['owner'], unique=False)
        batch_op.create_index(batch_op.f('ix_batches_status'), ['status'], unique=False)


def _chunks() -> None:
    op.create_table('chunks',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('model', sa.String(length=256), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('worker_id', sa.String(length=64), nullable=True),
    sa.Column('lease_until', sa.Float(), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('size', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('chunks', schema=None) as batch_op:
        batch_op.create_index('ix_chunks_claim', ['model', 'status', 'seq'], unique=False)


def _files() -> None:
    op.create_table('files',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('owner', sa.String(length=64), nullable=False),
    sa.Column('filename', sa.String(length=512), nullable=False),
    sa.Column('purpose', sa.String(length=32), nullable=False),
    sa.Column('bytes', sa.BigInteger(), nullable=False),
    sa.Column('created_at', sa.Integer(), nullable=False),
    sa.Column('expires_at', sa.Integer(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('files', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_files_created_at'), ['created_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_files_owner'), ['owner'], unique=False)


def _workers() -> None:
    op.create_table('workers',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('model', sa.String(length=256), nullable=False),
    sa.Column('engine', sa.String(length=32), nullable=False),
    sa.Column('kv_capacity_tokens', sa.Integer(), nullable=False),
    sa.Column('host', sa.String(length=256), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=False),
    sa.Column('started_at', sa.Float(), nullable=False),
    sa.Column('heartbeat_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )


def _requests() -> None:
    op.create_table('requests',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('batch_id', sa.String(length=64), nullable=False),
    sa.Column('line', sa.Integer(), nullable=False),
    sa.Column('custom_id', sa.String(length=512), nullable=False),
    sa.Column('model', sa.String(length=256), nullable=False),
    sa.Column('body', sa.JSON(), nullable=False),
    sa.Column('prompt_ids', sa.LargeBinary(), nullable=False),
    sa.Column('prompt_tokens', sa.Integer(), nullable=False),
    sa.Column('max_tokens', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('chunk_id', sa.Integer(), nullable=True),
    sa.Column('position', sa.Integer(), nullable=True),
    sa.Column('response', sa.JSON(), nullable=True),
    sa.Column('error', sa.JSON(), nullable=True),
    sa.Column('completion_tokens', sa.Integer(), nullable=False),
    sa.Column('cached_tokens', sa.Integer(), nullable=False),
    sa.Column('finished_at', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['batch_id'], ['batches.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('requests', schema=None) as batch_op:
        batch_op.create_index('ix_requests_batch_line', ['batch_id', 'line'], unique=True)
        batch_op.create_index('ix_requests_chunk', ['chunk_id', 'position'], unique=False)
        batch_op.create_index('ix_requests_status_model', ['status', 'model'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('requests', schema=None) as batch_op:
        batch_op.drop_index('ix_requests_status_model')
        batch_op.drop_index('ix_requests_chunk')
        batch_op.drop_index('ix_requests_batch_line')

    op.drop_table('requests')
    op.drop_table('workers')
    with op.batch_alter_table('files', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_files_owner'))
        batch_op.drop_index(batch_op.f('ix_files_created_at'))

    op.drop_table('files')
    with op.batch_alter_table('chunks', schema=None) as batch_op:
        batch_op.drop_index('ix_chunks_claim')

    op.drop_table('chunks')
    with op.batch_alter_table('batches', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_batches_status'))
        batch_op.drop_index(batch_op.f('ix_batches_owner'))
        batch_op.drop_index(batch_op.f('ix_batches_created_at'))

    op.drop_table('batches')
