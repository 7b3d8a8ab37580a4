"""The configuration page, generated from the settings model, lists every variable the settings read, and the
docs-side text (docs/hooks/settings_text.py) has a meaning for every field and for nothing else."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import yaml
from pydantic_settings import BaseSettings

from blendserve.core.config import Settings

ROOT = Path(__file__).resolve().parents[1]
HOOKS = ROOT / "docs" / "hooks"


def load(name: str) -> ModuleType:
    """A module of docs/hooks by path, as MkDocs loads it."""
    spec = importlib.util.spec_from_file_location(f"docs_hooks_{name}", HOOKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def env_names(model: type[BaseSettings]) -> set[str]:
    """Every environment variable a settings model reads, nested models included: worked out here, apart
    from the generator, so a generator that skipped a group would not pass its own check."""
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


def generated_rows() -> dict[str, list[str]]:
    """Variable -> its row's other cells, from the configuration page as the docs build renders it."""
    page = load("settings_page")
    text = page.fill((ROOT / "docs" / page.PAGE).read_text())
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^\| `(BLENDSERVE_[A-Z0-9_]+)` \|(.*)\|$", line)
        if m:
            assert m[1] not in rows, f"{m[1]} is listed twice"
            rows[m[1]] = [c.strip() for c in re.split(r"(?<!\\)\|", m[2])]
    return rows


def test_the_page_lists_every_setting_and_only_settings():
    settings, page = env_names(Settings), set(generated_rows())
    assert not settings - page, f"settings missing from the configuration page: {sorted(settings - page)}"
    assert not page - settings, f"the configuration page lists variables no setting reads: {sorted(page - settings)}"


def test_every_row_has_a_type_a_default_and_a_meaning():
    for env, cells in generated_rows().items():
        assert len(cells) == 3 and all(cells), f"{env}: {cells}"


def described() -> set[str]:
    """Variables whose field carries its own `Field(description=...)`, nested settings included."""
    page = load("settings_page")
    return {env for _, _, m in page.groups() for env, field in page.fields(m) if field.description}


def test_the_text_names_every_field_and_no_missing_one():
    text, settings = set(load("settings_text").SETTINGS), env_names(Settings)
    undescribed = settings - text - described()
    assert not undescribed, f"fields without a meaning in settings_text.py: {sorted(undescribed)}"
    assert not text - settings, f"settings_text.py names variables no setting reads: {sorted(text - settings)}"


def test_the_docs_build_runs_the_generator():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert "docs/hooks/settings_page.py" in config["hooks"]
    page = (ROOT / "docs" / load("settings_page").PAGE).read_text()
    assert load("settings_page").MARKER in page
