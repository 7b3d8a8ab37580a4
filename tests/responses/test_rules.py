"""The Responses API's request rules and its Response object, alone: what a body becomes, what is refused."""
from __future__ import annotations

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from core.fields import BodyError
from core.responses_api import EventStream, chat_messages, check_responses, finished


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
    ({"tools": [{"type": "function", "name": "f"}]}, "tools"),
    ({"background": True}, "background"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": "1"}]}, "input[0].type"),
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
    events = ev.opening() + [ev.delta("He"), ev.delta("llo")] + ev.closing("Hello", "stop", 10, 0, 2)
    parsed = [TypeAdapter(ResponseStreamEvent).validate_python(e) for _, e in events]
    assert [p.type for p in parsed] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.completed"]
    assert [p.sequence_number for p in parsed] == list(range(10))
    assert parsed[-1].response.output_text == "Hello" and parsed[-1].response.status == "completed"
