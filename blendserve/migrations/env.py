"""Alembic environment: the URL comes from the caller (blendserve.migrations.upgrade) or BLENDSERVE_* settings."""
from __future__ import annotations

from alembic import context
from sqlalchemy import text

from blendserve.core.db import make_engine
from blendserve.core.models import Base

config = context.config


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        from blendserve.core.config import get_settings

        url = get_settings().db_url
    engine = make_engine(url)
    with engine.connect() as conn:
        with conn.begin():
            if conn.dialect.name == "postgresql":
                # Roles start together and each upgrades at start: one at a time.
                conn.execute(text("SELECT pg_advisory_xact_lock(727274)"))
            context.configure(connection=conn, target_metadata=Base.metadata, render_as_batch=True)
            context.run_migrations()
    engine.dispose()


run_migrations_online()
