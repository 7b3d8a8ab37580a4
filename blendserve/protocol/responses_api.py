"""/v1/responses (OpenAI's Responses API): its request rules and its translation to a chat. The Response
object and its stream events are blendserve/protocol/response_object.py.

Run by the Responses request model (blendserve/protocol/requests.py), which batch
validation and a worker's interactive lane parse a body into, and by the scheduler's
tokenizer (blendserve/protocol/bodies.prompt_text), so a batch line and an interactive call
are read the same way. Pure: no database, no engine.

A Responses body is a chat in other words: `instructions` becomes the system
message, `input` (a string: one user message; or message, function_call and
function_call_output items) the rest, `max_output_tokens` the chat's max_tokens,
`text.format` its response_format, function `tools` and `tool_choice` its tools,
and `include: ["message.output_text.logprobs"]` with `top_logprobs` its logprobs
(as vLLM reads them: without the include, no logprobs). Nothing is stored:
`store: true` and `previous_response_id` (which reads a stored response back)
are refused with a 400 rather than silently ignored.
"""
from __future__ import annotations

from typing import Any

from blendserve.protocol.fields import BodyError, check_int, check_messages, check_number
from blendserve.protocol.grammar_limits import GrammarLimits
from blendserve.protocol.structured import check_auto, check_tools, schema_constraint

ENDPOINT = "/v1/responses"
# Applied, or describing the caller (no effect on the output): accepted.
APPLIED = {"model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "text", "metadata",
           "stream", "stream_options", "tools", "tool_choice", "include", "top_logprobs"}
DESCRIPTIVE = {"user", "safety_identifier", "prompt_cache_key", "service_tier", "parallel_tool_calls",
               "max_tool_calls", "prompt_cache_retention"}
# Refused unless null, false, empty or the default: what each would ask for that is not done here.
UNSUPPORTED = {
    "previous_response_id": "responses are not stored here, so none can be continued; send the whole "
                            "conversation in 'input'",
    "store": "responses are not stored here; send 'store': false or leave it out",
    "conversation": "conversations are not stored here; send the whole conversation in 'input'",
    "background": "background responses are not supported; use a batch for work that may wait",
    "reasoning": "the served models do not reason", "prompt": "stored prompt templates are not supported",
    "truncation": "only 'disabled' truncation is supported (a prompt that does not fit is a 400)",
}
DEFAULTS = {"truncation": "disabled", "reasoning": {}}
LOGPROBS = "message.output_text.logprobs"     # the one `include` value with something to include here
INCLUDABLE = {"file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
              "message.input_image.image_url", "computer_call_output.output.image_url",
              "code_interpreter_call.outputs", "reasoning.encrypted_content", LOGPROBS}
KNOWN = APPLIED | DESCRIPTIVE | UNSUPPORTED.keys()
TEXT_PARTS = ("input_text", "output_text", "text")
METADATA_KEYS, METADATA_KEY_LEN, METADATA_VALUE_LEN = 16, 64, 512


def _asks_nothing(key: str, v: Any) -> bool:
    return v is None or v is False or v == [] or v == "" or v == {} or (type(v) is int and v == 0) \
        or DEFAULTS.get(key) == v or (key == "reasoning" and isinstance(v, dict) and not any(v.values()))


def check_text(text: Any, grammar: GrammarLimits | None = None) -> None:
    """`text`: {"format": ...}: text (the default), `json_schema` (OpenAI's strict subset) or `json_object`,
    checked and later applied by the machinery chat's `response_format` uses (protocol/structured.py); `verbosity`
    only at its default."""
    if text is None:
        return
    if not isinstance(text, dict) or not text.keys() <= {"format", "verbosity"}:
        raise BodyError("invalid_value", "'text' must be an object with 'format' (and 'verbosity').", "text")
    schema_constraint(text.get("format"), "text.format", grammar)
    if text.get("verbosity") not in (None, "medium"):
        raise BodyError("unsupported_value", "'text.verbosity' is not supported (only 'medium').", "text.verbosity")


def chat_tools(body: dict) -> dict:
    """`tools` and `tool_choice` in chat's shape (the function's fields under "function"), for
    blendserve.protocol.structured.check_tools. Only function tools: the hosted ones (web search, file search, ...) run
    at OpenAI."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    out: dict[str, Any] = {}
    if tools is not None:
        if not isinstance(tools, list):
            raise BodyError("invalid_value", "'tools' must be an array of function tools.", "tools")
        out["tools"] = []
        for i, t in enumerate(tools):
            kind = t.get("type") if isinstance(t, dict) else None
            if kind != "function":
                raise BodyError("unsupported_value", f"'tools[{i}].type': only function tools are supported, got "
                                f"{kind!r}.", f"tools[{i}].type")
            out["tools"].append({"type": "function", "function": {
                k: t[k] for k in ("name", "description", "parameters", "strict") if k in t}})
    if choice == "auto" and not tools:       # the Responses API's default, with or without tools
        choice = None
    if isinstance(choice, dict) and choice.get("type") == "function" and "function" not in choice:
        choice = {"type": "function", "function": {"name": choice.get("name")}}
    if choice is not None:
        out["tool_choice"] = choice
    return out


def check_responses_tools(body: dict, grammar: GrammarLimits | None = None) -> None:
    """chat's rules for tools, its errors in the Responses API's words. tool_choice "auto" is refused here
    whatever the template: a Response's output would have to be split into message and call items."""
    try:
        check_tools(chat_tools(body), grammar)
        check_auto(chat_tools(body), False)
    except BodyError as e:
        e.param = (e.param or "").replace(".function.", ".")
        e.message = e.message.replace(".function.", ".").replace(
            '{"type": "function", "function": {"name": ...}}', '{"type": "function", "name": ...}')
        raise


def logprobs_asked(body: dict) -> int | None:
    """How many likeliest tokens to list beside each output token (0-20), or None: no logprobs. Raises
    BodyError for an `include` value that is unknown or has nothing to include here."""
    include = body.get("include")
    if include is not None and (not isinstance(include, list) or not all(isinstance(x, str) for x in include)):
        raise BodyError("invalid_value", "'include' must be an array of strings.", "include")
    for x in include or ():
        if x not in INCLUDABLE:
            raise BodyError("invalid_value", f"'include': unknown value {x!r}.", "include")
        if x != LOGPROBS:
            raise BodyError("unsupported_value", f"'include': {x!r} is not available here (only '{LOGPROBS}').",
                            "include")
    top = check_int(body, "top_logprobs", 0)
    if top is not None and top > 20:
        raise BodyError("invalid_value", f"'top_logprobs' must be an integer between 0 and 20, got {top}.",
                        "top_logprobs")
    return (top or 0) if LOGPROBS in (include or ()) else None


def chat_params(body: dict) -> dict:
    """The sampling settings of a Responses body in chat's words (blendserve.protocol.requests.ResponsesRequest
    samples with them): `text.format` is chat's `response_format` (blendserve.protocol.structured reads either
    shape)."""
    fmt = (body.get("text") or {}).get("format")
    top = logprobs_asked(body)
    return {"temperature": body.get("temperature"), "top_p": body.get("top_p"), **chat_tools(body),
            **({"response_format": fmt} if fmt is not None else {}),
            **({"logprobs": True, "top_logprobs": top} if top is not None else {})}


def check_metadata(metadata: Any) -> None:
    """OpenAI's metadata: at most 16 string pairs, keys up to 64 characters, values up to 512."""
    if metadata is None:
        return
    if not isinstance(metadata, dict) or len(metadata) > METADATA_KEYS or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= METADATA_KEY_LEN and len(v) <= METADATA_VALUE_LEN
            for k, v in metadata.items()):
        raise BodyError("invalid_value", f"'metadata' must be an object of at most {METADATA_KEYS} string pairs, "
                        f"keys of at most {METADATA_KEY_LEN} characters and values of at most {METADATA_VALUE_LEN}.",
                        "metadata")


def check_params(body: Any, grammar: GrammarLimits | None = None) -> int | None:
    """Every rule but the input's; returns max_output_tokens (None: the rest of the context). Raises BodyError."""
    if not isinstance(body, dict):
        raise BodyError("invalid_value", "The request body must be a JSON object.")
    unknown = sorted(body.keys() - KNOWN)
    if unknown:
        raise BodyError("unsupported_parameter", f"Unrecognized request argument supplied: '{unknown[0]}'.", unknown[0])
    for key in sorted(UNSUPPORTED.keys() & body.keys()):
        if not _asks_nothing(key, body[key]):
            raise BodyError("unsupported_parameter", f"'{key}': {UNSUPPORTED[key]}.", key)
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise BodyError("invalid_value", "'instructions' must be a string.", "instructions")
    check_number(body, "temperature", 0.0, 2.0)
    check_number(body, "top_p", 0.0, 1.0)
    check_text(body.get("text"), grammar)
    check_metadata(body.get("metadata"))
    check_responses_tools(body, grammar)
    logprobs_asked(body)
    return check_int(body, "max_output_tokens", 1)


def _item_text(item: dict, p: str) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BodyError("invalid_value", f"'{p}.content' must be a string or an array of content parts.",
                        f"{p}.content")
    out = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS:
            raise BodyError("unsupported_value", f"'{p}.content[{j}]': only text parts ({', '.join(TEXT_PARTS)}) "
                            f"are supported, got {kind!r}.", f"{p}.content[{j}]")
        if not isinstance(part.get("text"), str):
            raise BodyError("invalid_value", f"'{p}.content[{j}].text' must be a string.", f"{p}.content[{j}].text")
        out.append(part["text"])
    return "".join(out)


def _tool_turn(item: dict, p: str) -> dict:
    """A function_call item as chat's assistant turn that called it; a function_call_output as its tool turn."""
    fields = ("call_id", "name", "arguments") if item["type"] == "function_call" else ("call_id", "output")
    for f in fields:
        if not isinstance(item.get(f), str):
            raise BodyError("invalid_value", f"'{p}.{f}' must be a string.", f"{p}.{f}")
    if item["type"] == "function_call_output":
        return {"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]}
    fn = {"name": item["name"], "arguments": item["arguments"]}
    return {"role": "assistant", "content": None, "tool_calls": [{"id": item["call_id"], "type": "function",
                                                                  "function": fn}]}


def chat_messages(body: dict) -> list[dict]:
    """The chat the model sees: `instructions` as the system message, then `input` (a string is one user
    message; message items keep their roles, `developer` read as `system`; function calls and their outputs
    become chat's assistant and tool turns). Raises BodyError."""
    inp = body.get("input")
    if isinstance(inp, str):
        if not inp:
            raise BodyError("invalid_value", "'input' must not be empty.", "input")
        items = [{"role": "user", "content": inp}]
    elif isinstance(inp, list) and inp:
        items = []
        for i, item in enumerate(inp):
            p = f"input[{i}]"
            if not isinstance(item, dict):
                raise BodyError("invalid_value", f"'{p}' must be an object.", p)
            kind = item.get("type", "message")
            if kind == "message":
                items.append({"role": item.get("role"), "content": _item_text(item, p)})
            elif kind in ("function_call", "function_call_output"):
                items.append(_tool_turn(item, p))
            else:
                raise BodyError("unsupported_value", f"'{p}.type': only message, function_call and "
                                f"function_call_output items are supported, got {kind!r}.", f"{p}.type")
    else:
        raise BodyError("invalid_value", "'input' must be a non-empty string or an array of message items.", "input")
    if body.get("instructions"):
        items.insert(0, {"role": "system", "content": body["instructions"]})
    try:
        return check_messages(items)
    except BodyError as e:      # name the Responses field, not the chat one
        e.param = (e.param or "").replace("messages", "input")
        e.message = e.message.replace("'messages", "'input")
        raise


def check_responses(body: Any, grammar: GrammarLimits | None = None) -> tuple[list[dict], int | None]:
    """A whole Responses body: its chat messages and its max_output_tokens (`grammar`: the deployment's limits
    on output schemas). Raises BodyError."""
    mt = check_params(body, grammar)
    return chat_messages(body), mt
