"""The JSON schema keywords every grammar engine the workers run enforces, and the rules that keep each one
enforced. A schema outside them is refused with a per-line 400 naming the keyword and where it sits (see
protocol/structured.py for why).

The keywords are those xgrammar's JSON-schema converter (the CPU engine's, and vLLM's and SGLang's default
backend) turns into grammar, less those vLLM's xgrammar backend refuses: OpenAI's strict-mode subset plus
minLength, maxLength, minProperties, prefixItems, a schema as additionalProperties, and the formats below.
xgrammar reads some keywords in an order that drops others, so those combinations are refused too: a
string's `pattern` or `format` beside `minLength`/`maxLength` (the pattern wins and the length is lost),
`format` beside `pattern`, anything but annotations beside `$ref` or `anyOf`, anything but annotations and
`type` beside `enum` or `const`, and a value of another type (the values are generated as given).

xgrammar writes a string bounded by minLength/maxLength with a character class that lets raw control
characters (a tab, U+0001) into the output, which is then no JSON at all; its `pattern` strings do not. So
the schema engines get (`engine_form`) says the same bounds as a pattern of plain characters, and the ipv4
format as a pattern without leading zeros. xgrammar's other format grammars are its own, close to RFC 3339
and friends (a date's day is not checked against its month).
"""
from __future__ import annotations

import re
from typing import Any

from blendserve.protocol.fields import BodyError

TYPES = ("string", "number", "integer", "boolean", "object", "array", "null")
FORMATS = ("date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid", "uri",
           "uri-reference", "uri-template", "json-pointer", "relative-json-pointer")
ANNOTATIONS = {"title", "description", "$comment", "$schema", "examples", "default", "deprecated", "readOnly",
               "writeOnly"}   # no effect on what matches
DEFS = ("$defs", "definitions")
KEYWORDS = ANNOTATIONS | {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "enum", "const", "anyOf",
    "$ref", *DEFS, "pattern", "format", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "minItems", "maxItems", "minProperties",
}
# JSON-schema keywords no engine the workers run enforces (xgrammar ignores them, or vLLM refuses them).
NOT_ENFORCED = {"allOf", "oneOf", "not", "if", "then", "else", "multipleOf", "uniqueItems", "contains",
                "minContains", "maxContains", "maxProperties", "patternProperties", "propertyNames",
                "dependentRequired", "dependentSchemas", "unevaluatedItems", "unevaluatedProperties",
                "additionalItems", "contentEncoding", "contentMediaType", "$id", "$anchor", "$dynamicRef"}
LENGTHS = ("minLength", "maxLength")
MAX_DEPTH = 10           # OpenAI's nesting limit
_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
IPV4 = f"^({_OCTET}\\.){{3}}{_OCTET}$"


def check_schema(schema: Any, strict: bool, param: str) -> None:
    """Raise BodyError (invalid_value, naming the keyword and where it sits) for a schema outside the subset.
    Strict: every object lists all its properties in `required` and sets `additionalProperties: false`,
    and the root is an object, as OpenAI's strict mode demands."""
    if not isinstance(schema, dict):
        raise BodyError("invalid_value", f"'{param}' must be a JSON schema object.", param)
    if strict and (schema.get("type") != "object" or "anyOf" in schema):
        raise BodyError("invalid_value", f"'{param}': the root of a strict schema must be an object "
                        "(\"type\": \"object\"), not anyOf.", param)
    defs = {k: schema[k] for k in DEFS if isinstance(schema.get(k), dict)}
    _check(schema, strict, param, "", 0, defs)


def engine_form(s: Any) -> Any:
    """The schema as engines get it: minLength/maxLength as a pattern of that many characters other than
    '"', '\\' and the control characters (each one code point, as jsonschema counts a string's length)."""
    if isinstance(s, list):
        return [engine_form(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {k: v if k in ("enum", "const", "default", "examples") else engine_form(v) for k, v in s.items()}
    if s.get("format") == "ipv4":       # xgrammar's allows leading zeros ("01.2.3.4"), which ipv4 does not
        out = {k: v for k, v in out.items() if k != "format"}
        out["pattern"] = IPV4
    if any(k in s for k in LENGTHS) and "pattern" not in s and "format" not in s:
        low, high = s.get("minLength", 0), s.get("maxLength", "")
        out = {k: v for k, v in out.items() if k not in LENGTHS}
        out["pattern"] = f'^[^"\\\\\\x00-\\x1f]{{{low},{high}}}$'
    return out


def _fail(param: str, where: str, message: str) -> BodyError:
    return BodyError("invalid_value", f"'{param}' is outside the supported JSON schema subset at "
                     f"'{where or '#'}': {message}", param)


def _check(s: Any, strict: bool, param: str, where: str, depth: int, defs: dict) -> None:
    if isinstance(s, bool):
        raise _fail(param, where, "boolean schemas are not supported.")
    if not isinstance(s, dict):
        raise _fail(param, where, "a schema must be an object.")
    if depth > MAX_DEPTH:
        raise _fail(param, where, f"schemas nest at most {MAX_DEPTH} levels deep.")
    for key in s:
        if key in NOT_ENFORCED:
            raise _fail(param, where, f"the keyword '{key}' is not supported: no grammar engine enforces it.")
        if key not in KEYWORDS:
            raise _fail(param, where, f"the keyword '{key}' is not supported.")
    _check_values(s, param, where, defs)
    _check_combined(s, param, where, defs)
    props = s.get("properties")
    if props is not None:
        if not isinstance(props, dict):
            raise _fail(param, where, "'properties' must be an object.")
        for name, sub in props.items():
            _check(sub, strict, param, f"{where}/properties/{name}", depth + 1, defs)
    _check_object(s, strict, param, where)
    if isinstance(s.get("additionalProperties"), dict):
        _check(s["additionalProperties"], strict, param, f"{where}/additionalProperties", depth + 1, defs)
    if "items" in s and not isinstance(s["items"], bool):
        _check(s["items"], strict, param, f"{where}/items", depth + 1, defs)
    for key in ("prefixItems", "anyOf"):
        if key in s:
            if not isinstance(s[key], list) or not s[key]:
                raise _fail(param, where, f"'{key}' must be a non-empty array of schemas.")
            for i, sub in enumerate(s[key]):
                _check(sub, strict, param, f"{where}/{key}/{i}", depth + 1, defs)
    for key in DEFS:
        if key in s:
            if not isinstance(s[key], dict):
                raise _fail(param, where, f"'{key}' must be an object of schemas.")
            for name, sub in s[key].items():
                _check(sub, strict, param, f"{where}/{key}/{name}", depth + 1, defs)


def _check_values(s: dict, param: str, where: str, defs: dict) -> None:
    """The keywords whose values are not schemas: $ref, type, enum, format, pattern, the bounds."""
    if "$ref" in s:
        ref = s["$ref"]
        if not isinstance(ref, str) or not (ref == "#" or re.fullmatch(r"#/(\$defs|definitions)/[^/]+", ref)):
            raise _fail(param, where, f"'$ref' must be '#' or point into '$defs', got {ref!r}.")
        if ref != "#" and ref.rsplit("/", 1)[1] not in defs.get(ref.split("/")[1], {}):
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
    for key in ("minItems", "maxItems", "minProperties", *LENGTHS):
        if key in s and (isinstance(s[key], bool) or not isinstance(s[key], int) or s[key] < 0):
            raise _fail(param, where, f"'{key}' must be a non-negative integer.")
    for low, high in (LENGTHS, ("minItems", "maxItems")):
        if s.get(low, 0) > s.get(high, s.get(low, 0)):
            raise _fail(param, where, f"'{low}' {s[low]} is greater than '{high}' {s[high]}: nothing matches.")
    if "items" in s and not isinstance(s["items"], (dict, bool)):
        raise _fail(param, where, "'items' must be a schema (a list of schemas is 'prefixItems').")


def _check_combined(s: dict, param: str, where: str, defs: dict) -> None:
    """Keywords xgrammar reads one in place of another: refused together, so none is silently dropped."""
    for first in ("format", "pattern"):
        for other in (*LENGTHS, "pattern"):
            if first in s and other in s and other != first:
                raise _fail(param, where, f"'{other}' beside '{first}' is not enforced (the {first} alone sets "
                            f"the string); bound the length inside one pattern instead, e.g. '^[a-z]{{1,8}}$'.")
    for key in ("$ref", "anyOf"):
        if key in s:
            extra = sorted(set(s) - ANNOTATIONS - {key, *DEFS})
            if extra:
                raise _fail(param, where, f"'{extra[0]}' beside '{key}' is not enforced; move it into the "
                            f"{'definition' if key == '$ref' else 'branches'}.")
    values = s["enum"] if isinstance(s.get("enum"), list) else [s["const"]] if "const" in s else []
    if values:
        extra = sorted(set(s) - ANNOTATIONS - {"enum", "const", "type", *DEFS})
        if extra:
            raise _fail(param, where, f"'{extra[0]}' beside '{'enum' if 'enum' in s else 'const'}' is not enforced "
                        "(the values are generated as given).")
        types = s.get("type")
        for v in values:
            if types is not None and not any(_is(v, t) for t in (types if isinstance(types, list) else [types])):
                raise _fail(param, where, f"the value {v!r} of 'enum'/'const' is not of its 'type' {types!r}, "
                            "and would be generated as given.")


def _is(value: Any, json_type: str) -> bool:
    """`value` (parsed JSON) is of the JSON schema type `json_type`."""
    if json_type in ("integer", "number"):
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return number and (json_type == "number" or float(value).is_integer())
    return isinstance(value, {"string": str, "boolean": bool, "null": type(None), "array": list,
                              "object": dict}[json_type])


def _check_object(s: dict, strict: bool, param: str, where: str) -> None:
    """An object's own keywords: required, additionalProperties, and strict mode's rules."""
    props, types = s.get("properties"), s.get("type")
    required = s.get("required")
    if required is not None and (not isinstance(required, list) or not all(isinstance(r, str) for r in required)):
        raise _fail(param, where, "'required' must be an array of property names.")
    extra = s.get("additionalProperties")
    if extra is not None and not isinstance(extra, (bool, dict)):
        raise _fail(param, where, "'additionalProperties' must be true, false or a schema.")
    is_object = types == "object" or (isinstance(types, list) and "object" in types) or props is not None
    if strict and is_object:
        if extra is not False:
            raise _fail(param, where, "strict mode needs \"additionalProperties\": false on every object.")
        missing = sorted(set(props or {}) - set(required or []))
        if missing:
            raise _fail(param, where, f"strict mode needs every property in 'required'; missing: {missing}.")
