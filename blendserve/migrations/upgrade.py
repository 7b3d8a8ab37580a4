"""Bring the schema to head; every role calls this at start (idempotent, serialised).

Alembic logs a line per plugin when it is imported (alembic.runtime.plugins)
and one per migration it runs: every role starting would print the same
dozen lines. Its loggers are set to WARNING before the import, so a role's
start says what the role does, and a failed migration still says why.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

logging.getLogger("alembic").setLevel(logging.WARNING)

from alembic import command  # noqa: E402  (after the level: the import itself logs)
from alembic.config import Config  # noqa: E402

if TYPE_CHECKING:
    from blendserve.core.config import Settings


def upgrade(url: str, settings: Settings | None = None) -> None:
    """Bring the database at `url` to head. `settings` reach the migrations through Alembic's
    `config.attributes` (its way of passing objects to env.py); without them, env.py reads the environment."""
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).parent))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    if settings is not None:
        cfg.attributes["settings"] = settings
    command.upgrade(cfg, "head")
