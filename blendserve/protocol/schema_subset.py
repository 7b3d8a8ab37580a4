"""The JSON schema subset every grammar engine the workers run enforces: OpenAI's strict-mode subset
(https://platform.openai.com/docs/guides/structured-outputs, "Supported schemas"). A schema outside it is
refused with a per-line 400 naming the keyword and where it sits (see protocol/structured.py for why).
"""
from __future__ import annotations

import re
from typing import Any

from blendserve.protocol.fields import BodyError

TYPES = ("string", "number", "integer", "boolean", "object", "array", "null")
FORMATS = ("date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid")
ANNOTATIONS = {"title", "description", "$comment", "$schema", "examples"}   # no effect on what matches
KEYWORDS = ANNOTATIONS | {
    "type", "properties", "required", "additionalProperties", "items", "enum", "const", "anyOf", "$ref", "$defs",
    "definitions", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "minItems", "maxItems",
}
MAX_DEPTH = 10           # OpenAI's nesting limit
MAX_PROPERTIES = 5000    # OpenAI's limit of object properties in one schema


def check_schema(schema: Any, strict: bool, param: str) -> None:
    """Raise BodyError (invalid_value, naming the keyword and where it sits) for a schema outside the subset.
    Strict: every object lists all its properties in `required` and sets `additionalProperties: false`,
    and the root is an object, as OpenAI's strict mode demands."""
    if not isinstance(schema, dict):
        raise BodyError("invalid_value", f"'{param}' must be a JSON schema object.", param)
    if strict and (schema.get("type") != "object" or "anyOf" in schema):
        raise BodyError("invalid_value", f"'{param}': the root of a strict schema must be an object "
                        "(\"type\": \"object\"), not anyOf.", param)
    defs = {**(schema.get("$defs") or {}), **(schema.get("definitions") or {})} \
        if isinstance(schema.get("$defs", {}), dict) and isinstance(schema.get("definitions", {}), dict) else {}
    count = [0]
    _check(schema, strict, param, "", 0, defs, count)


def _fail(param: str, where: str, message: str) -> BodyError:
    return BodyError("invalid_value", f"'{param}' is outside the supported JSON schema subset at "
                     f"'{where or '#'}': {message}", param)


def _check(s: Any, strict: bool, param: str, where: str, depth: int, defs: dict, count: list[int]) -> None:
    if isinstance(s, bool):
        raise _fail(param, where, "boolean schemas are not supported.")
    if not isinstance(s, dict):
        raise _fail(param, where, "a schema must be an object.")
    if depth > MAX_DEPTH:
        raise _fail(param, where, f"schemas nest at most {MAX_DEPTH} levels deep.")
    for key in s:
        if key not in KEYWORDS:
            raise _fail(param, where, f"the keyword '{key}' is not supported.")
    _check_values(s, param, where, defs)
    props = s.get("properties")
    if props is not None:
        if not isinstance(props, dict):
            raise _fail(param, where, "'properties' must be an object.")
        count[0] += len(props)
        if count[0] > MAX_PROPERTIES:
            raise _fail(param, where, f"a schema has at most {MAX_PROPERTIES} properties.")
        for name, sub in props.items():
            _check(sub, strict, param, f"{where}/properties/{name}", depth + 1, defs, count)
    _check_object(s, strict, param, where)
    if "items" in s:
        _check(s["items"], strict, param, f"{where}/items", depth + 1, defs, count)
    if "anyOf" in s:
        if not isinstance(s["anyOf"], list) or not s["anyOf"]:
            raise _fail(param, where, "'anyOf' must be a non-empty array of schemas.")
        for i, sub in enumerate(s["anyOf"]):
            _check(sub, strict, param, f"{where}/anyOf/{i}", depth + 1, defs, count)
    for key in ("$defs", "definitions"):
        if key in s:
            if not isinstance(s[key], dict):
                raise _fail(param, where, f"'{key}' must be an object of schemas.")
            for name, sub in s[key].items():
                _check(sub, strict, param, f"{where}/{key}/{name}", depth + 1, defs, count)


def _check_values(s: dict, param: str, where: str, defs: dict) -> None:
    """The keywords whose values are not schemas: $ref, type, enum, format, pattern, the bounds."""
    if "$ref" in s:
        ref = s["$ref"]
        if not isinstance(ref, str) or not (ref == "#" or re.fullmatch(r"#/(\$defs|definitions)/[^/]+", ref)):
            raise _fail(param, where, f"'$ref' must be '#' or point into '$defs', got {ref!r}.")
        if ref != "#" and ref.rsplit("/", 1)[1] not in defs:
            raise _fail(param, where, f"'$ref' {ref!r} names no definition.")
    types = s.get("type")
    if types is not None:
        listed = types if isinstance(types, list) else [types]
        if not listed or any(t not in TYPES for t in listed):
            raise _fail(param, where, f"'type' must be one of {list(TYPES)} or a list of them, got {types!r}.")
    if "enum" in s and (not isinstance(s["enum"], list) or not s["enum"]):
        raise _fail(param, where, "'enum' must be a non-empty array.")
    if "format" in s and s["format"] not in FORMATS:
        raise _fail(param, where, f"the format {s['format']!r} is not supported; supported: {list(FORMATS)}.")
    if "pattern" in s:
        try:
            re.compile(s["pattern"])
        except (re.error, TypeError):
            raise _fail(param, where, f"'pattern' {s['pattern']!r} is not a regular expression.") from None
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if key in s and (isinstance(s[key], bool) or not isinstance(s[key], (int, float))):
            raise _fail(param, where, f"'{key}' must be a number.")
    for key in ("minItems", "maxItems"):
        if key in s and (isinstance(s[key], bool) or not isinstance(s[key], int) or s[key] < 0):
            raise _fail(param, where, f"'{key}' must be a non-negative integer.")


def _check_object(s: dict, strict: bool, param: str, where: str) -> None:
    """An object's own keywords: required, additionalProperties, and strict mode's rules."""
    props, types = s.get("properties"), s.get("type")
    required = s.get("required")
    if required is not None and (not isinstance(required, list) or not all(isinstance(r, str) for r in required)):
        raise _fail(param, where, "'required' must be an array of property names.")
    extra = s.get("additionalProperties")
    if extra is not None and not isinstance(extra, bool):
        raise _fail(param, where, "'additionalProperties' must be true or false (a schema there is not supported).")
    is_object = types == "object" or (isinstance(types, list) and "object" in types) or props is not None
    if strict and is_object:
        if extra is not False:
            raise _fail(param, where, "strict mode needs \"additionalProperties\": false on every object.")
        missing = sorted(set(props or {}) - set(required or []))
        if missing:
            raise _fail(param, where, f"strict mode needs every property in 'required'; missing: {missing}.")
