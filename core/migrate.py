"""Bring the schema to head; every role calls this at start (idempotent, serialised)."""
from __future__ import annotations

import logging
from pathlib import Path

from alembic import command
from alembic.config import Config

import migrations


def upgrade(url: str) -> None:
    logging.getLogger("alembic").setLevel(logging.WARNING)
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(next(iter(migrations.__path__)))))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    command.upgrade(cfg, "head")
