"""The Responses API's request rules and its Response object, alone: what a body becomes, what is refused."""
from __future__ import annotations

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from blendserve.protocol.fields import BodyError
from blendserve.protocol.response_object import EventStream, finished
from blendserve.protocol.responses_api import LOGPROBS, chat_messages, chat_params, check_responses
from blendserve.protocol.structured import ToolCall, check_tools

WEATHER = {"type": "function", "name": "weather", "description": "The weather in a city.", "strict": True,
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                          "additionalProperties": False}}
LP = [{"token": "He", "bytes": [72, 101], "logprob": -0.5,
       "top_logprobs": [{"token": "He", "bytes": [72, 101], "logprob": -0.5}, {"token": "A", "bytes": [65],
                                                                               "logprob": -1.5}]}]


def parse(events: list[tuple[str, dict]]) -> list:
    return [TypeAdapter(ResponseStreamEvent).validate_python(e) for _, e in events]


def test_input_and_instructions_become_a_chat() -> None:
    assert chat_messages({"input": "Hi"}) == [{"role": "user", "content": "Hi"}]
    body = {"instructions": "Be brief.", "input": [
        {"role": "developer", "content": "Answer in French."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Capital of "},
                                                          {"type": "input_text", "text": "France?"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Paris.", "annotations": []}]},
        {"role": "user", "content": "And Italy?"}]}
    assert chat_messages(body) == [
        {"role": "system", "content": "Be brief."}, {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And Italy?"}]
    assert check_responses({"model": "m", "input": "x", "max_output_tokens": 20})[1] == 20


@pytest.mark.parametrize("body, param", [
    ({"store": True}, "store"),
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object", "patternProperties": {}}}}},
     "text.format.schema"),
    ({"text": {"format": {"type": "xml"}}}, "text.format.type"),
    ({"tools": [{"type": "function", "name": "f"}]}, "tool_choice"),      # "auto": no tool format to parse
    ({"tools": [{"type": "web_search"}], "tool_choice": "required"}, "tools[0].type"),
    ({"tools": [{"type": "function", "name": "a b"}], "tool_choice": "required"}, "tools[0].name"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "other"}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"include": ["reasoning.encrypted_content"]}, "include"),
    ({"include": ["nothing"]}, "include"),
    ({"top_logprobs": 21, "include": [LOGPROBS]}, "top_logprobs"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": 1}]}, "input[0].output"),
    ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type"),
    ({"background": True}, "background"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0]"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"input": ""}, "input"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"temperature": 3}, "temperature"),
    ({"metadata": {"k": 1}}, "metadata"),
    ({"seed": 1}, "seed"),
])
def test_refused_with_the_parameter_named(body, param) -> None:
    with pytest.raises(BodyError) as e:
        check_responses({"model": "m", "input": "x", **body})
    assert e.value.param == param


def test_asking_for_nothing_is_accepted() -> None:
    check_responses({"model": "m", "input": "x", "store": False, "previous_response_id": None, "tools": [],
                     "tool_choice": "auto", "reasoning": {"effort": None}, "include": [], "truncation": "disabled",
                     "text": {"format": {"type": "json_object"}}, "metadata": {"a": "b"}, "user": "u",
                     "parallel_tool_calls": True})


def test_response_and_events_parse_as_the_sdk_types() -> None:
    body = {"model": "m", "input": "x", "instructions": "I", "metadata": {"k": "v"}, "max_output_tokens": 5,
            "temperature": 0}
    r = Response.model_validate(finished(body, "m", "resp_1", "msg_1", 1, "Hello", "length", 10, 4, 5))
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output_text == "Hello" and r.instructions == "I" and r.metadata == {"k": "v"}
    assert r.usage.input_tokens == 10 and r.usage.input_tokens_details.cached_tokens == 4
    assert r.usage.total_tokens == 15
    ev = EventStream(body, "m")
    events = ev.opening() + ev.delta("He") + ev.delta("llo") + ev.closing("Hello", "stop", 10, 0, 2)
    parsed = parse(events)
    assert [p.type for p in parsed] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.completed"]
    assert [p.sequence_number for p in parsed] == list(range(10))
    assert parsed[-1].response.output_text == "Hello" and parsed[-1].response.status == "completed"


def test_function_call_items_become_the_chat_turns_they_were() -> None:
    call = {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": '{"city": "Paris"}',
            "id": "fc_1", "status": "completed"}
    assert chat_messages({"input": [{"role": "user", "content": "Weather in Paris?"}, call,
                                    {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]}) == [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]


def test_tools_and_logprobs_read_as_chats() -> None:
    p = chat_params({"input": "x", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "weather"},
                     "include": [LOGPROBS], "top_logprobs": 3})
    assert p["tools"] == [{"type": "function", "function": {k: WEATHER[k] for k in
                                                            ("name", "description", "parameters", "strict")}}]
    assert p["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    assert (p["logprobs"], p["top_logprobs"]) == (True, 3)
    constraint, tool = check_tools(p)
    assert tool == ToolCall("weather", "stop") and constraint.strict and '"city"' in constraint.schema
    assert check_tools(chat_params({"input": "x", "tools": [WEATHER], "tool_choice": "none"})) is None
    # As vLLM reads it: top_logprobs alone asks for nothing; the include alone asks for the sampled token's.
    assert "logprobs" not in chat_params({"input": "x", "top_logprobs": 3})
    assert chat_params({"input": "x", "include": [LOGPROBS]})["top_logprobs"] == 0
    check_responses({"model": "m", "input": "x", "tools": [WEATHER], "tool_choice": "required",
                     "include": [LOGPROBS], "top_logprobs": 20})


def test_a_forced_call_is_a_function_call_item() -> None:
    body = {"model": "m", "input": "x", "tools": [WEATHER], "tool_choice": "required"}
    r = Response.model_validate(finished(body, "m", "resp_1", "msg_1", 1, '{"city": "Paris"}', "stop", 10, 0, 6,
                                         ToolCall("weather")))
    item = r.output[0]
    assert (item.type, item.name, item.arguments, item.status) == ("function_call", "weather", '{"city": "Paris"}',
                                                                   "completed")
    assert item.call_id.startswith("call_") and r.tools[0].name == "weather" and r.tool_choice == "required"
    many = finished(body, "m", "resp_1", "msg_1", 1, '{"name": "weather", "arguments": {"city": "Oslo"}}', "stop",
                    10, 0, 12, ToolCall(None))
    assert (many["output"][0]["name"], many["output"][0]["arguments"]) == ("weather", '{"city": "Oslo"}')
    cut = finished(body, "m", "resp_1", "msg_1", 1, '{"name": "wea', "length", 10, 0, 4, ToolCall(None))
    assert cut["output"][0]["type"] == "message" and cut["status"] == "incomplete"


def test_logprobs_and_call_streams_parse_as_the_sdk_types() -> None:
    body = {"model": "m", "input": "x", "include": [LOGPROBS], "top_logprobs": 2}
    r = Response.model_validate(finished(body, "m", "resp_1", "msg_1", 1, "He", "stop", 3, 0, 1, None, LP))
    lp = r.output[0].content[0].logprobs[0]
    assert (lp.token, lp.bytes, lp.logprob, [t.token for t in lp.top_logprobs]) == ("He", [72, 101], -0.5, ["He", "A"])
    ev = EventStream(body, "m")
    parsed = parse(ev.opening() + ev.delta("He", LP) + ev.closing("He", "stop", 3, 0, 1, LP))
    assert parsed[4].type == "response.output_text.delta" and parsed[4].logprobs[0].top_logprobs[1].token == "A"
    assert parsed[5].logprobs[0].logprob == -0.5
    tools = {"model": "m", "input": "x", "tools": [WEATHER], "tool_choice": "required"}
    ev = EventStream(tools, "m", ToolCall("weather"))
    parsed = parse(ev.opening() + ev.delta('{"city": ') + ev.delta('"Paris"}') +
                   ev.closing('{"city": "Paris"}', "stop", 3, 0, 5))
    assert [p.type for p in parsed] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert parsed[5].arguments == '{"city": "Paris"}' and parsed[6].item.name == "weather"
    assert parsed[2].item.id == parsed[3].item_id == parsed[6].item.id
    ev = EventStream(tools, "m", ToolCall(None))        # its function is named inside the output: opened at the end
    text = '{"name": "weather", "arguments": {"city": "Oslo"}}'
    parsed = parse(ev.opening() + ev.delta(text[:9]) + ev.closing(text, "stop", 3, 0, 12))
    assert [p.type for p in parsed][2:] == [
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert parsed[3].delta == parsed[4].arguments == '{"city": "Oslo"}' and parsed[2].item.name == "weather"
