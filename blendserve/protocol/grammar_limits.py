"""Bounded grammar work: the limits a schema's grammar must stay within, checked where a request is validated.

A grammar engine (xgrammar on the CPU engine, and by default in vLLM and SGLang) compiles a schema into a
grammar over the vocabulary before the first token. Some schemas take tens of seconds to compile (an enum
of 60,000 strings, an anyOf of 1,000 branches, 20,000 properties, a pattern `[\\s\\S]{0,20000}`), and some
patterns Python accepts xgrammar refuses (a backreference, `\\b`). Both are refused here, at validation, as
that request's 400 or that batch line's error, naming the limit: the engine then only compiles schemas that
compile, and quickly. Measured with SmolLM2's vocabulary (the compile scales with the grammar, little with
the vocabulary): 2,000 properties compile in 0.65 s, an enum of 5,000 strings in 0.2 s, a pattern repeating
any character 256 times in 0.2 s and 1,000 times in 2.5 s (cost grows with the square of the expanded size);
a maxLength of 500, which engines get as a pattern (schema_subset.engine_form), in 0.26 s.

The last check converts the schema with xgrammar itself (`Grammar.from_json_schema`, no vocabulary: a few
milliseconds once the limits hold), so whatever xgrammar refuses is refused here with its own words.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import re
from dataclasses import dataclass, fields
from typing import Any

from blendserve.protocol.answer_size import AnswerLimits
from blendserve.protocol.fields import BodyError

try:        # Python's own regex parse tree: the dialect jsonschema checks `pattern` with (3.11+; 3.10's names)
    import re._constants as sre_c
    import re._parser as sre_parse
except ImportError:
    import sre_constants as sre_c  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]


@dataclass(frozen=True)
class GrammarLimits:
    """What one request's output schema may hold (BLENDSERVE_GRAMMAR_*, core/grammar_settings.py)."""
    schema_bytes: int = 100_000      # the schema as compact JSON text, all tools' together under "required"
    enum_values: int = 1000          # enum values and consts in one schema (OpenAI's bound)
    any_of: int = 128                # branches of one anyOf (tool_choice "required" over 128 tools is one)
    properties: int = 1000           # object properties in one schema, every object's together
    tools: int = 128                 # function tools in one request (OpenAI's bound)
    length: int = 500                # largest minLength, maxLength, minItems or maxItems (a length is a pattern)
    pattern_size: int = 500          # a pattern's size with every repetition written out ([\s\S]{0,600}: 600)

    @classmethod
    def of(cls, settings: Any) -> GrammarLimits:
        """The limits of a deployment's GrammarSettings (core/grammar_settings.py): the fields they share."""
        return cls(**{f.name: getattr(settings, f.name) for f in fields(cls)})

    def refuse(self, name: str, message: str, param: str) -> BodyError:
        """A refusal naming the limit's setting, so a caller knows which bound and an operator which knob."""
        env = f"BLENDSERVE_GRAMMAR_{name.upper()}"
        return BodyError("invalid_value", f"'{param}': {message} (the limit {env}={getattr(self, name)}).", param)


DEFAULT = GrammarLimits()
PASSED = GrammarLimits(*[2**62] * len(fields(GrammarLimits)))   # a body read again after its door's check


def with_grammar(info: Any, settings: Any, limits: Any = None) -> Any:
    """A role's ModelInfo (protocol/fields.py) carrying its deployment's limits (GrammarSettings), which the
    rules read at validation; with ``limits`` (LimitSettings), one answer's bounds too (protocol/answer_size.py),
    which the scheduler holds a batch line to."""
    info = dataclasses.replace(info, grammar=GrammarLimits.of(settings))
    return info if limits is None else dataclasses.replace(info, answer=AnswerLimits.of(limits))


_LOOKAROUND = {sre_c.ASSERT, sre_c.ASSERT_NOT}
_REPEATS = {sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", sre_c.MAX_REPEAT)}


def pattern_size(pattern: str) -> int:
    """The pattern's size with each repetition written out (`(ab){3}`: 6; unbounded `a+`: 2). Raises ValueError
    for what xgrammar's regex engine does not enforce the way Python's `re` reads it: a lookaround, a
    backreference, a conditional group, an inline flag."""
    parsed = sre_parse.parse(pattern)
    if parsed.state.flags & ~re.UNICODE:
        raise ValueError("inline flags are not enforced")
    return _size(parsed)


def _size(items: Any) -> int:
    total = 0
    for op, av in items:
        if op in _REPEATS:
            lo, hi, sub = av
            total += max(lo + 1 if hi == sre_c.MAXREPEAT else hi, 1) * _size(sub)
        elif op is sre_c.SUBPATTERN:
            if av[1] or av[2]:
                raise ValueError("inline flags are not enforced")
            total += _size(av[-1])
        elif op is sre_c.BRANCH:
            total += sum(_size(b) for b in av[1])
        elif op in _LOOKAROUND or op in (sre_c.GROUPREF, sre_c.GROUPREF_EXISTS):
            raise ValueError("lookarounds and backreferences are not enforced")
        else:
            _plain(op, av)
            total += 1
    return total


def _plain(op: Any, av: Any) -> None:
    """Refuse a literal or a character class that names '"', '\\' or a control character: xgrammar writes what
    a pattern matches into the JSON string unescaped, so the output would be no JSON (a negated class, '.' and
    '\\s' leave them out)."""
    items = [(op, av)] if op is sre_c.LITERAL else av if op is sre_c.IN else []
    if items and items[0][0] is sre_c.NEGATE:
        return
    for kind, value in items:
        low, high = (value, value) if kind is sre_c.LITERAL else value if kind is sre_c.RANGE else (-1, -1)
        if 0 <= low < 0x20 or low <= 0x22 <= high or low <= 0x5C <= high:
            raise ValueError("it matches '\"', '\\' or a control character, which JSON strings hold only "
                             "escaped and the grammar engines write unescaped; leave them out (printable ASCII: "
                             "[ !#-\\[\\]-~])")


def json_bytes(value: Any) -> int:
    """The value's size as compact JSON text, in bytes (what `schema_bytes` bounds)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def check_size(schema: Any, param: str, limits: GrammarLimits = DEFAULT) -> None:
    """Raise BodyError where the schema is past `schema_bytes` of compact JSON: run first, before any rule
    walks the schema in Python, so a megabyte schema costs one C-speed encode to refuse."""
    size = json_bytes(schema)
    if size > limits.schema_bytes:
        raise limits.refuse("schema_bytes", f"the schema is {size} bytes of JSON", param)


def check_limits(schema: Any, param: str, limits: GrammarLimits = DEFAULT) -> None:
    """Raise BodyError naming the first limit the schema (a checked one, see schema_subset) goes past."""
    check_size(schema, param, limits)
    counts = {"enum_values": 0, "properties": 0}
    _walk(schema, param, limits, counts)


def _walk(s: Any, param: str, limits: GrammarLimits, counts: dict[str, int]) -> None:
    if isinstance(s, list):
        for x in s:
            _walk(x, param, limits, counts)
        return
    if not isinstance(s, dict):
        return
    counts["enum_values"] += len(s["enum"]) if isinstance(s.get("enum"), list) else int("const" in s)
    if counts["enum_values"] > limits.enum_values:
        raise limits.refuse("enum_values", f"more than {limits.enum_values} enum values and consts", param)
    if isinstance(s.get("anyOf"), list) and len(s["anyOf"]) > limits.any_of:
        raise limits.refuse("any_of", f"an anyOf of {len(s['anyOf'])} branches", param)
    if isinstance(s.get("properties"), dict):
        counts["properties"] += len(s["properties"])
        if counts["properties"] > limits.properties:
            raise limits.refuse("properties", f"more than {limits.properties} properties", param)
    for key in ("minLength", "maxLength", "minItems", "maxItems"):
        if isinstance(s.get(key), int) and s[key] > limits.length:
            raise limits.refuse("length", f"'{key}' is {s[key]}", param)
    if isinstance(s.get("pattern"), str):
        try:
            n = pattern_size(s["pattern"])
        except (ValueError, re.error) as e:
            raise BodyError("invalid_value", f"'{param}': the pattern {s['pattern']!r} cannot be enforced: "
                            f"{e}.", param) from None
        if n > limits.pattern_size:
            raise limits.refuse("pattern_size", f"the pattern {s['pattern'][:80]!r} expands to {n} "
                                "characters", param)
    for key, sub in s.items():
        if key not in ("enum", "const", "default", "examples", "pattern"):
            _walk(sub, param, limits, counts)


def check_compiles(schema_text: str, strict: bool, param: str) -> None:
    """Raise BodyError with xgrammar's own reason when it refuses the schema (run after check_limits, so the
    conversion is quick)."""
    reason = _converts(schema_text, strict)
    if reason is not None:
        raise BodyError("invalid_value", f"'{param}': the grammar engine refuses this schema: {reason}", param)


@functools.lru_cache(maxsize=256)
def _converts(schema_text: str, strict: bool) -> str | None:
    """None when xgrammar converts the schema, else its reason; cached, as a batch's lines share a schema."""
    try:
        import xgrammar as xgr
    except ImportError:         # a role without the grammar library: the limits still hold, the engine checks the rest
        return None
    try:
        xgr.Grammar.from_json_schema(schema_text, any_whitespace=False, strict_mode=strict)
    except Exception as e:      # xgrammar raises RuntimeError or its own errors; any refusal is the request's
        return reason(e)
    return None


def reason(error: BaseException) -> str:
    """xgrammar's error in its own words, without the timestamp and source line it prefixes them with."""
    lines = [ln for ln in str(error).strip().splitlines() if ln.strip()] or [type(error).__name__]
    return re.sub(r"^\[[\d:]+\] \S+: ", "", lines[-1])
