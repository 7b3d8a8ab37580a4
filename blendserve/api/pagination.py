"""Cursor pagination over (created_at, id): objects created in the same second are neither skipped nor repeated."""
from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, or_


def after_cursor(key: tuple[Any, Any], cursor: tuple[int, str], *, descending: bool) -> ColumnElement[bool]:
    """Rows strictly after `cursor` in the (created_at, id) order, spelled out (row values vary by dialect)."""
    (t, i), (ct, ci) = key, cursor
    if descending:
        return or_(t < ct, and_(t == ct, i < ci))
    return or_(t > ct, and_(t == ct, i > ci))
