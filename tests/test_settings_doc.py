"""The README's configuration table and blendserve/core/config.py's settings name the same variables, both ways."""
from __future__ import annotations

import re
from pathlib import Path

from pydantic_settings import BaseSettings

from blendserve.core.config import Settings

README = Path(__file__).resolve().parents[1] / "README.md"


def env_names(model: type[BaseSettings]) -> set[str]:
    """Every environment variable a settings model reads, nested models included."""
    prefix = model.model_config.get("env_prefix", "")
    names: set[str] = set()
    for name, field in model.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseSettings):
            names |= env_names(kind)
        elif isinstance(field.validation_alias, str):
            names.add(field.validation_alias.upper())
        else:
            names.add((prefix + name).upper())
    return names


def documented() -> set[str]:
    """Variables in the first column of the README's table; in a row `BLENDSERVE_SERVER_URL` / `_API_KEY`,
    the second is BLENDSERVE_SERVER_API_KEY."""
    text = README.read_text()
    table = text[text.index("## Configuration"):]
    names: set[str] = set()
    for row in re.findall(r"^\| (`BLENDSERVE_[^|]+)\|", table, flags=re.M):
        cells = re.findall(r"`([A-Z0-9_]+)`", row)
        first = cells[0]
        names.update(_expand(first, cell) if cell.startswith("_") else cell for cell in cells)
    return names


def _expand(first: str, suffix: str) -> str:
    """`BLENDSERVE_SERVER_URL` + `_API_KEY` -> `BLENDSERVE_SERVER_API_KEY`: the suffix replaces what
    follows the group's prefix (the longest prefix of ``first`` that names a settings group)."""
    groups = sorted({p for p in _prefixes() if first.startswith(p)}, key=len, reverse=True)
    return groups[0] + suffix.lstrip("_")


def _prefixes() -> set[str]:
    out = {"BLENDSERVE_"}
    for field in Settings.model_fields.values():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseSettings):
            out.add(kind.model_config["env_prefix"].upper())
    return out


def test_every_setting_is_documented_and_every_documented_variable_is_a_setting():
    settings, readme = env_names(Settings), documented()
    assert not settings - readme, f"settings missing from README's configuration table: {sorted(settings - readme)}"
    assert not readme - settings, f"README documents variables no setting reads: {sorted(readme - settings)}"
