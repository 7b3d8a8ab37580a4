"""Alembic environment: the URL and the settings come from the caller (blendserve.migrations.upgrade).

Run by hand (`alembic upgrade head`), this file is Alembic's own entry point: settings the caller did not
pass are read from the BLENDSERVE_* environment here, once. The migrations read them from
`config.attributes["settings"]` (0012: the API keys' tenants).
"""
from __future__ import annotations

from alembic import context
from sqlalchemy import text

from blendserve.core.db import make_engine
from blendserve.core.models import Base

config = context.config


def run_migrations_online() -> None:
    if config.attributes.get("settings") is None:      # run by hand, or upgrade() given a URL alone
        from blendserve.core.config import get_settings

        config.attributes["settings"] = get_settings()
    url = config.get_main_option("sqlalchemy.url") or config.attributes["settings"].db_url
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
