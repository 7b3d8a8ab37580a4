"""Tools: `tools` (functions) with tool_choice "none", "required" and a named function, the call generated under
the function's JSON schema and returned as message.tool_calls with OpenAI's finish_reason ("stop" for a named function,
"tool_calls" under "required"); "auto" is a clear 400 where the chat template has no tool-call format (served where it
has one: tests/features/test_auto_tools.py); in a batch and interactively (plain and streamed)."""
from __future__ import annotations

import json

import jsonschema_rs
import openai
import pytest

from blendserve.protocol.fields import BodyError
from blendserve.protocol.structured import ToolCall, check_auto, check_tools
from tests.conftest import TINY
from tests.live import read_lines, run_batch

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {"type": "object", "additionalProperties": False, "required": ["city", "unit"],
           "properties": {"city": {"enum": ["paris", "oslo"]}, "unit": {"enum": ["c", "f"]}}}
TIME = {"type": "object", "additionalProperties": False, "required": ["zone"],
        "properties": {"zone": {"$ref": "#/$defs/zone"}}, "$defs": {"zone": {"enum": ["utc", "cet"]}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER, "strict": True}},
         {"type": "function", "function": {"name": "get_time", "parameters": TIME, "strict": True}}]
PARAMS = {"get_weather": WEATHER, "get_time": TIME}


def test_tool_choice_rules() -> None:
    for choice in (None, "auto"):
        with pytest.raises(BodyError) as e:       # a template without a tool-call format
            check_auto({"tools": TOOLS, "tool_choice": choice}, False)
        assert e.value.param == "tool_choice" and "auto" in e.value.message
        check_auto({"tools": TOOLS, "tool_choice": choice}, True)
        assert check_tools({"tools": TOOLS, "tool_choice": choice}) == (None, ToolCall(None, auto=True))
    with pytest.raises(BodyError, match="not in 'tools'"):
        check_tools({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}})
    assert check_tools({"tools": TOOLS, "tool_choice": "none"}) is None
    constraint, call = check_tools({"tools": TOOLS, "tool_choice": "required"})
    schema = json.loads(constraint.schema)
    assert call.name is None and len(schema["anyOf"]) == 2
    assert schema["anyOf"][1]["properties"]["arguments"]["properties"]["zone"]["$ref"] == "#/$defs/get_time.zone"
    jsonschema_rs.validate(schema, {"name": "get_time", "arguments": {"zone": "utc"}})


def _check_call(message, finish: str, names=("get_weather",), expect: str = "stop") -> None:
    assert finish == expect and message.content is None
    (call,) = message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and call.function.name in names
    jsonschema_rs.validate(PARAMS[call.function.name], json.loads(call.function.arguments))


def test_tools_interactive(served) -> None:
    c = served.client()
    named = c.chat.completions.create(model=TINY, messages=ASK, tools=TOOLS, max_tokens=100, temperature=1.0,
                                      tool_choice={"type": "function", "function": {"name": "get_weather"}})
    _check_call(named.choices[0].message, named.choices[0].finish_reason)
    required = c.chat.completions.create(model=TINY, messages=ASK, tools=TOOLS, tool_choice="required",
                                         max_tokens=100, temperature=1.0, seed=2)
    _check_call(required.choices[0].message, required.choices[0].finish_reason, tuple(PARAMS), "tool_calls")
    plain = c.chat.completions.create(model=TINY, messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=3)
    assert plain.choices[0].message.tool_calls is None and isinstance(plain.choices[0].message.content, str)
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=TINY, messages=ASK, tools=TOOLS, max_tokens=3)
    assert e.value.body["param"] == "tool_choice" and "auto" in e.value.body["message"]
    # A conversation that carries a call and its result goes on.
    turn = [*ASK, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    assert c.chat.completions.create(model=TINY, messages=turn, max_tokens=2).choices[0].message.content is not None


def test_tools_streamed(served) -> None:
    c = served.client()
    for choice, names, expect in (({"type": "function", "function": {"name": "get_time"}}, ("get_time",), "stop"),
                                  ("required", tuple(PARAMS), "tool_calls")):
        name, args, finish = None, "", None
        for chunk in c.chat.completions.create(model=TINY, messages=ASK, tools=TOOLS, tool_choice=choice,
                                               max_tokens=100, stream=True):
            for ch in chunk.choices:
                for call in ch.delta.tool_calls or ():
                    name = call.function.name or name
                    args += call.function.arguments or ""
                finish = ch.finish_reason or finish
        assert finish == expect and name in names, (name, args)
        jsonschema_rs.validate(PARAMS[name], json.loads(args))


def test_tools_in_a_batch(served) -> None:
    c = served.client()
    choices = [{"type": "function", "function": {"name": "get_weather"}}, "required", "none"]
    rows = [{"custom_id": f"t{i}", "method": "POST", "url": "/v1/chat/completions",
             "body": {"model": TINY, "messages": ASK, "tools": TOOLS, "tool_choice": choices[i % 3],
                      "max_tokens": 100, "seed": i, "temperature": 1.0}} for i in range(6)]
    b = run_batch(c, rows)
    assert b.status == "completed", b
    out = {x["custom_id"]: x["response"]["body"]["choices"][0] for x in read_lines(c, b.output_file_id)}
    for i in range(6):
        choice = out[f"t{i}"]
        if i % 3 == 2:
            assert "tool_calls" not in choice["message"] and choice["finish_reason"] in ("stop", "length")
            continue
        m = openai.types.chat.ChatCompletionMessage.model_validate(choice["message"])
        if i % 3 == 0:
            _check_call(m, choice["finish_reason"], ("get_weather",), "stop")
        else:
            _check_call(m, choice["finish_reason"], tuple(PARAMS), "tool_calls")
