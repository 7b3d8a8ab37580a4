"""Structured output and forced tool calls: which JSON schema a request's output must match.

Run where a request is validated (the API for a call, the scheduler for a
batch line), so a schema is refused there, as that request's 400 or that line's
error naming the keyword or the limit, and every engine then gets a schema it
can enforce, and compile quickly. The keywords are those every grammar engine
the workers run (xgrammar on the CPU engine, vLLM's and SGLang's own) enforces
(protocol/schema_subset.py), so a finished output always parses and validates.
Keywords no engine enforces (allOf, not, if/then, patternProperties,
multipleOf, ...) are refused rather than silently ignored: a grammar that
ignores a keyword would produce outputs the caller's validator rejects. The
schema a request's output must match, a tool's or all of them under "required",
then stays within `GrammarLimits` and converts with xgrammar itself
(protocol/grammar_limits.py): a schema whose grammar would take seconds to
compile, or a pattern xgrammar refuses, never reaches an engine.

`response_format` json_schema and json_object, a named tool_choice and
tool_choice "required" all reduce to one `Constraint`: the schema (canonical
JSON text, so equal schemas share one compiled grammar, with each object's
properties in the schema's order, the order outputs follow) and whether strict
rules apply. The subset itself is checked in protocol/schema_subset.py. The Responses API's `text.format`
reuses `check_schema` and `schema_constraint`.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from blendserve.protocol.fields import BodyError
from blendserve.protocol.grammar_limits import (
    DEFAULT,
    GrammarLimits,
    check_compiles,
    check_limits,
    check_size,
    json_bytes,
)
from blendserve.protocol.schema_subset import check_schema, engine_form

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
JSON_OBJECT = json.dumps({"type": "object"})


@dataclass(frozen=True)
class Constraint:
    """What an output must be: a JSON document matching `schema` (canonical JSON text)."""
    schema: str
    strict: bool


@dataclass(frozen=True)
class ToolCall:
    """How the output maps to `message.tool_calls`: the named function's arguments (`name` set), or, under
    tool_choice "required" over several functions, one object `{"name": ..., "arguments": {...}}`.
    `finish_reason` of a finished call: OpenAI answers "stop" when tool_choice names the function and
    "tool_calls" when the model chose to call."""
    name: str | None
    finish_reason: str = "tool_calls"
    auto: bool = False      # tool_choice "auto": the model writes text or calls, read back by parse_calls


# Keywords whose value is data, written out as given (an object in `const` is output with its own key order).
_DATA = {"enum", "const", "default", "examples"}


def canonical(schema: Any) -> str:
    """The schema as compact JSON text with its keywords sorted, so schemas that differ only in the order of
    their keywords share one compiled grammar, and each `properties` map kept in the schema's own order:
    that is the order the output's keys are generated in, as OpenAI's structured outputs do (a schema that
    puts `reasoning` before `answer` gets its reasoning generated first)."""
    return json.dumps(_ordered(schema), separators=(",", ":"), ensure_ascii=False)


def _ordered(s: Any, names: bool = False) -> Any:
    """`s` with every schema's keywords sorted; `names`: s maps property names to schemas, kept in order."""
    if isinstance(s, list):
        return [_ordered(x) for x in s]
    if not isinstance(s, dict):
        return s
    if names:
        return {k: _ordered(v) for k, v in s.items()}
    return {k: s[k] if k in _DATA else _ordered(s[k], names=k == "properties") for k in sorted(s)}


def bounded(schema: Any, strict: bool, param: str, limits: GrammarLimits | None) -> Constraint:
    """The constraint of a checked schema, once it is within the limits and xgrammar converts it: the schema
    in the form engines get (`engine_form`), which the caller's schema accepts every output of."""
    limits = limits or DEFAULT
    check_limits(schema, param, limits)
    out = Constraint(canonical(engine_form(schema)), strict)
    check_compiles(out.schema, strict, param)
    return out


def schema_constraint(fmt: Any, param: str, limits: GrammarLimits | None = None) -> Constraint | None:
    """An OpenAI `response_format` (chat) or `text.format` (Responses): None for text, else its Constraint.
    Accepts both the chat shape (`json_schema: {name, schema, strict}`) and the Responses shape
    (`name`, `schema`, `strict` beside `type`)."""
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
        raise BodyError("invalid_value", f"'{param}.type' must be 'text', 'json_object' or 'json_schema'.",
                        f"{param}.type")
    if fmt["type"] == "text":
        return None
    if fmt["type"] == "json_object":
        return Constraint(JSON_OBJECT, False)
    spec, at = (fmt["json_schema"], f"{param}.json_schema") if "json_schema" in fmt else (fmt, param)
    if not isinstance(spec, dict):
        raise BodyError("invalid_value", f"'{at}' must be an object with 'name' and 'schema'.", at)
    name = spec.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise BodyError("invalid_value", f"'{at}.name' must be 1-64 characters of a-z, A-Z, 0-9, _ and -.",
                        f"{at}.name")
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise BodyError("invalid_value", f"'{at}.strict' must be a boolean.", f"{at}.strict")
    schema = spec.get("schema")
    if schema is None:
        return Constraint(JSON_OBJECT, False)
    check_size(schema, f"{at}.schema", limits or DEFAULT)
    check_schema(schema, bool(strict), f"{at}.schema")
    return bounded(schema, bool(strict), f"{at}.schema", limits)


def check_tools(body: dict, limits: GrammarLimits | None = None) -> tuple[Constraint | None, ToolCall] | None:
    """Check `tools` and `tool_choice`; the constraint and the call's shape when a call is forced, else None.

    "none" (or no tools): plain text. A named function: its arguments, under its parameters' schema.
    "required": one call of any listed function (a single function is the named case). "auto" (the default
    with tools): no constraint; the template lists the tools and the calls are read out of the text
    (`parse_calls`), where the model's template has that format (`check_auto`)."""
    tools, choice, limits = body.get("tools"), body.get("tool_choice"), limits or DEFAULT
    if tools in (None, []):
        if choice not in (None, "none"):
            raise BodyError("invalid_value", "'tool_choice' needs 'tools'.", "tool_choice")
        return None
    if not isinstance(tools, list):
        raise BodyError("invalid_value", "'tools' must be an array of function tools.", "tools")
    if len(tools) > limits.tools:
        raise limits.refuse("tools", f"{len(tools)} tools", "tools")
    if choice == "required" and len(tools) > 1:
        _check_required_size(tools, limits)
    functions: dict[str, tuple[dict, bool]] = {}
    for i, tool in enumerate(tools):
        p = f"tools[{i}]"
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict):
            raise BodyError("invalid_value", f"'{p}' must be {{\"type\": \"function\", \"function\": {{...}}}}.", p)
        name = fn.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            raise BodyError("invalid_value", f"'{p}.function.name' must be 1-64 characters of a-z, A-Z, 0-9, _ "
                            "and -.", f"{p}.function.name")
        if name in functions:
            raise BodyError("invalid_value", f"'{p}.function.name': '{name}' is listed twice.", f"{p}.function.name")
        strict = fn.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise BodyError("invalid_value", f"'{p}.function.strict' must be a boolean.", f"{p}.function.strict")
        params = fn.get("parameters")
        if params is None:
            params = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
        check_size(params, f"{p}.function.parameters", limits)
        check_schema(params, bool(strict), f"{p}.function.parameters")
        functions[name] = (params, bool(strict))
    if choice is None or choice == "auto":
        return None, ToolCall(None, auto=True)       # served where the template can list tools (check_auto)
    if choice == "none":
        return None
    if choice == "required":
        if len(functions) == 1:
            name = next(iter(functions))
            return bounded(*functions[name], "tools[0].function.parameters", limits), ToolCall(name)
        schema, strict = _any_call(functions)
        return bounded(schema, strict, "tools", limits), ToolCall(None)
    named = choice.get("function", {}).get("name") if isinstance(choice, dict) and choice.get("type") == "function" \
        and isinstance(choice.get("function"), dict) else None
    if named is None:
        raise BodyError("invalid_value", "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", "
                        "\"function\": {\"name\": ...}}.", "tool_choice")
    if named not in functions:
        raise BodyError("invalid_value", f"'tool_choice' names '{named}', which is not in 'tools'.", "tool_choice")
    at = f"tools[{list(functions).index(named)}].function.parameters"
    return bounded(*functions[named], at, limits), ToolCall(named, "stop")


def _check_required_size(tools: list, limits: GrammarLimits) -> None:
    """Under "required" one schema holds every tool's parameters: refuse it from their size, before any of
    them is walked (128 tools of 150 parameters took 0.1 s of Python to check one by one)."""
    params = [t["function"].get("parameters") for t in tools
              if isinstance(t, dict) and isinstance(t.get("function"), dict)]
    if (size := sum(json_bytes(p) for p in params)) > limits.schema_bytes:
        raise limits.refuse("schema_bytes", f"the tools' parameters are {size} bytes of JSON", "tools")


def _any_call(functions: dict[str, tuple[dict, bool]]) -> tuple[dict, bool]:
    """One object naming a function and holding its arguments, for any of `functions`. Each function's own
    definitions move to the root's `$defs` under its name, and its `$ref`s with them."""
    defs: dict[str, Any] = {}
    options = []
    for name, (params, _) in functions.items():
        local = {**params.get("definitions", {}), **params.get("$defs", {})}
        for key, sub in local.items():
            defs[f"{name}.{key}"] = _rebase(sub, name)
        body = _rebase({k: v for k, v in params.items() if k not in ("$defs", "definitions")}, name)
        options.append({"type": "object", "properties": {"name": {"const": name}, "arguments": body},
                        "required": ["name", "arguments"], "additionalProperties": False})
    schema: dict[str, Any] = {"anyOf": options}
    if defs:
        schema["$defs"] = defs
    return schema, all(strict for _, strict in functions.values())


def _rebase(s: Any, name: str) -> Any:
    if isinstance(s, list):
        return [_rebase(x, name) for x in s]
    if not isinstance(s, dict):
        return s
    out = {k: _rebase(v, name) for k, v in s.items()}
    ref = s.get("$ref")
    if isinstance(ref, str) and ref.startswith(("#/$defs/", "#/definitions/")):
        out["$ref"] = f"#/$defs/{name}.{ref.rsplit('/', 1)[1]}"
    return out


def constraint(body: dict, limits: GrammarLimits | None = None) -> tuple[Constraint | None, ToolCall | None]:
    """The output's constraint from a chat or completions body: a forced tool call first, else
    `response_format`. Raises BodyError for what the checks above refuse."""
    tools = check_tools(body, limits)
    fmt = schema_constraint(body.get("response_format"), "response_format", limits)
    if tools is not None and tools[0] is not None:
        return tools
    return fmt, tools[1] if tools is not None else None


def auto_tools(body: dict) -> bool:
    """The body gives tools and lets the model choose (tool_choice "auto", OpenAI's default with tools)."""
    return bool(body.get("tools")) and body.get("tool_choice") in (None, "auto")


def check_auto(body: dict, tool_calls: bool) -> None:
    """Refuse tool_choice "auto" for a model whose chat template has no tool-call format (`tool_calls`)."""
    if auto_tools(body) and not tool_calls:
        raise BodyError("unsupported_value", "tool_choice 'auto' (the default when 'tools' are given) needs a chat "
                        "template with a tool-call format, and the served model's has none: send tool_choice "
                        "'required', a named function ({\"type\": \"function\", \"function\": {\"name\": ...}}) "
                        "or 'none'.", "tool_choice")


TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(re.escape(TOOL_CALL_OPEN) + r"\s*(.*?)\s*" + re.escape(TOOL_CALL_CLOSE), re.S)


def parse_calls(text: str) -> tuple[str | None, list[tuple[str, str]]]:
    """Under tool_choice "auto": the text before the first call (None if empty) and each call's name and
    arguments (JSON text) from `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks. Text whose
    blocks do not all parse as calls is an answer, with no calls (as vLLM's hermes parser does)."""
    found = _CALL.findall(text)
    if not found:
        return text, []
    calls = []
    for raw in found:
        try:
            call = json.loads(raw)
            name, args = call["name"], call.get("arguments", {})
        except (ValueError, KeyError, TypeError):
            return text, []
        if not isinstance(name, str):
            return text, []
        calls.append((name, args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)))
    content = text[:text.index(TOOL_CALL_OPEN)].strip()
    return content or None, calls


def split_call(tool: ToolCall, text: str) -> tuple[str, str] | None:
    """A forced call's function name and its arguments (JSON text) from the generated output; None when the
    output is no whole call (cut off by max_tokens under "required" over several functions)."""
    if tool.name is not None:
        return tool.name, text
    try:
        call = json.loads(text)
        return call["name"], json.dumps(call["arguments"], ensure_ascii=False)
    except (ValueError, KeyError, TypeError):
        return None
