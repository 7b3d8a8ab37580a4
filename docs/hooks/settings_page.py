"""The configuration page's tables, generated from the settings model so the page cannot drift from it.

An MkDocs hook (mkdocs.yml, `hooks:`): on docs/configuration.md it replaces the marker line with one table
per settings group, every field a row: its environment variable, type and default read from
`blendserve.core.config.Settings` and its nested settings, its meaning from settings_text.py beside this
file (else the field's `Field(description=...)`). A field without a meaning fails the build rather than
render an empty cell.
"""
from __future__ import annotations

import html
import importlib.util
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from blendserve.core.config import Settings

PAGE = "configuration.md"
MARKER = "<!-- settings tables -->"
HERE = Path(__file__).resolve().parent

# Headings of the nested groups, by their field on Settings; the top-level fields come first, as "General".
GROUPS = {
    "cpu": "CPU engine",
    "vllm": "In-process vLLM engine",
    "spec": "Speculative decoding",
    "echo": "Echo engine",
    "sglang": "In-process SGLang engine",
    "server_engine": "A running server as the engine (`--engine openai`)",
    "limit": "Limits: request heads and each tenant's interactive share",
    "webhook": "Webhooks",
}


def _meanings() -> dict[str, str | tuple[str, str]]:
    """settings_text.SETTINGS, loaded by path: MkDocs loads hooks by path, so a sibling is not importable."""
    spec = importlib.util.spec_from_file_location("settings_text", HERE / "settings_text.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SETTINGS


def env_name(model: type[BaseSettings], name: str, field: FieldInfo) -> str:
    """The environment variable pydantic-settings reads for a field: its alias, else prefix + name."""
    if isinstance(field.validation_alias, str):
        return field.validation_alias.upper()
    return (model.model_config.get("env_prefix", "") + name).upper()


def fields(model: type[BaseSettings]) -> Iterator[tuple[str, FieldInfo]]:
    """(environment variable, field) for the model's own scalar fields, nested settings left out."""
    for name, field in model.model_fields.items():
        if not _is_settings(field.annotation):
            yield env_name(model, name, field), field


def groups() -> list[tuple[str, str, type[BaseSettings]]]:
    """(heading, intro, model) for the top-level settings and each nested settings group, in model order."""
    out = [("General", "", Settings)]
    for name, field in Settings.model_fields.items():
        if _is_settings(field.annotation):
            doc = " ".join((field.annotation.__doc__ or "").split())
            out.append((GROUPS.get(name, field.annotation.__name__), doc, field.annotation))
    return out


def env_names() -> set[str]:
    """Every environment variable the settings read."""
    return {env for _, _, model in groups() for env, _ in fields(model)}


def render() -> str:
    """The tables, as Markdown."""
    meanings = _meanings()
    parts: list[str] = []
    for heading, intro, model in groups():
        parts += [f"## {heading}", ""]
        if intro:
            parts += [intro, ""]
        parts += ["| variable | type | default | meaning |", "| --- | --- | --- | --- |"]
        for env, field in fields(model):
            entry = meanings.get(env) or field.description
            if not entry:
                raise KeyError(f"{env} has no entry in docs/hooks/settings_text.py and no description")
            meaning, note = (entry, "") if isinstance(entry, str) else entry
            default = _default(field) + (f" ({note})" if note else "")
            parts.append(f"| `{env}` | {_cell(_type(field.annotation))} | {_cell(default)} | {_cell(meaning)} |")
        parts.append("")
    return "\n".join(parts)


def fill(markdown: str) -> str:
    """configuration.md's source with its marker replaced by the tables."""
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lacks the marker {MARKER!r}")
    return markdown.replace(MARKER, render())


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """MkDocs' hook: generate the tables into the configuration page; every other page passes through."""
    return fill(markdown) if page.file.src_uri == PAGE else markdown


def _is_settings(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseSettings)


def _type(annotation: Any) -> str:
    """A type as a reader needs it: `int`, `true/false`, one of a few words, or optional."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin in (list, dict):
        return "comma-separated list"
    if origin is typing.Literal:
        return " | ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        kinds = [_type(a) for a in args if a is not type(None)]
        return " | ".join(kinds) + (" or unset" if type(None) in args else "")
    names = {bool: "bool", int: "int", float: "float", str: "string", Path: "path"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default(field: FieldInfo) -> str:
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if value in ("", [], {}):
        return "empty"
    if isinstance(value, list):         # lists and mappings are written as users set them: comma separated
        value = ",".join(map(str, value))
    elif isinstance(value, dict):       # "name=path" entries, or bare keys where the value is derived ("24h")
        value = ",".join(f"{k}={v}" if isinstance(v, str | Path) else str(k) for k, v in value.items())
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, Path) and not value.is_absolute():
        return f"`./{value}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    """Text for a table cell: a pipe would end the cell. Outside code it is escaped; inside a code span an
    escape would show, so such a span is written as HTML with the pipe as an entity."""
    parts = text.split("`")             # odd parts are code spans
    for i, part in enumerate(parts):
        if i % 2 == 0:
            parts[i] = part.replace("|", "\\|")
        elif "|" in part:
            parts[i] = f"<code>{html.escape(part).replace('|', '&#124;')}</code>"
        else:
            parts[i] = f"`{part}`"
    return "".join(parts)
