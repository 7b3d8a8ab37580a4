"""Bring the schema to head; every role calls this at start (idempotent, serialised).

Alembic logs a line per plugin when it is imported (alembic.runtime.plugins)
and one per migration it runs: every role starting would print the same
dozen lines. Its loggers are set to WARNING before the import, so a role's
start says what the role does, and a failed migration still says why.
"""
from __future__ import annotations

import logging
from pathlib import Path

logging.getLogger("alembic").setLevel(logging.WARNING)

from alembic import command  # noqa: E402  (after the level: the import itself logs)
from alembic.config import Config  # noqa: E402


def upgrade(url: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).parent))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    command.upgrade(cfg, "head")
