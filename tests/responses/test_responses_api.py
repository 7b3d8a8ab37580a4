"""/v1/responses end to end with the real `openai` SDK against the real server: plain, streamed (its event
types), and as a batch endpoint (files + batches), on SQLite and PostgreSQL, with text.format, forced function
calls and logprobs; what is refused is a 400."""
from __future__ import annotations

import json
import time

import jsonschema_rs
import openai
import pytest

from tests.conftest import TINY
from tests.live import read_lines, run_batch

ASK = "Name three colours."
# An enum and a bounded integer: a random-weight model's constrained output ends within a few tokens.
ITEM = {"type": "object", "additionalProperties": False, "required": ["kind", "score"],
        "properties": {"kind": {"enum": ["k1", "k2"]}, "score": {"type": "integer", "minimum": 1, "maximum": 5}}}
TEXT = {"format": {"type": "json_schema", "name": "item", "schema": ITEM, "strict": True}}
RATE = {"type": "function", "name": "rate", "description": "Rate an item.", "parameters": ITEM, "strict": True}
LOGPROBS = ["message.output_text.logprobs"]


@pytest.fixture(scope="module")
def client(deployment) -> openai.OpenAI:
    c = deployment.client()
    deadline = time.time() + 30
    while True:         # the API learns of the worker from its row, within a second of its first beat
        try:
            c.responses.create(model=TINY, input="hi", max_output_tokens=1)
            return c
        except openai.APIStatusError as e:
            if e.status_code != 503 or time.time() > deadline:
                raise
            time.sleep(0.2)


def test_response_object_matches_the_chat_it_translates_to(client) -> None:
    r = client.responses.create(model=TINY, instructions="Be brief.", input=ASK, max_output_tokens=12,
                                temperature=0, metadata={"run": "t1"})
    chat = client.chat.completions.create(model=TINY, max_tokens=12, temperature=0, messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": ASK}])
    assert r.object == "response" and r.id.startswith("resp_") and r.model == TINY
    assert r.output_text == chat.choices[0].message.content       # same prompt, same greedy tokens
    assert r.output[0].type == "message" and r.output[0].role == "assistant"
    assert r.output[0].content[0].type == "output_text"
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"     # 12 tokens, cut
    assert r.usage.input_tokens == chat.usage.prompt_tokens and r.usage.output_tokens == 12
    assert r.usage.total_tokens == r.usage.input_tokens + 12 and r.usage.input_tokens_details.cached_tokens >= 0
    assert r.instructions == "Be brief." and r.metadata == {"run": "t1"} and r.max_output_tokens == 12


def test_message_items_input(client) -> None:
    r = client.responses.create(model=TINY, max_output_tokens=4, temperature=0, input=[
        {"role": "developer", "content": "Answer in one word."},
        {"role": "user", "content": [{"type": "input_text", "text": ASK}]}])
    chat = client.chat.completions.create(model=TINY, max_tokens=4, temperature=0, messages=[
        {"role": "system", "content": "Answer in one word."}, {"role": "user", "content": ASK}])
    assert r.output_text == chat.choices[0].message.content
    # The answer's own output items sent back as input: the conversation goes on without stored state.
    more = client.responses.create(model=TINY, max_output_tokens=4, temperature=0, input=[
        {"role": "user", "content": ASK}, *r.output, {"role": "user", "content": "More."}])
    chat = client.chat.completions.create(model=TINY, max_tokens=4, temperature=0, messages=[
        {"role": "user", "content": ASK}, {"role": "assistant", "content": r.output_text},
        {"role": "user", "content": "More."}])
    assert more.output_text == chat.choices[0].message.content


def test_streamed_events_add_up_to_the_plain_answer(client) -> None:
    plain = client.responses.create(model=TINY, input=ASK, max_output_tokens=10, temperature=0)
    events = list(client.responses.create(model=TINY, input=ASK, max_output_tokens=10, temperature=0, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.incomplete"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == plain.output_text == events[-4].text
    assert events[-1].response.output_text == text and events[-1].response.usage.output_tokens == 10


@pytest.mark.parametrize("kwargs, param", [
    ({"store": True}, "store"),
    ({"previous_response_id": "resp_123"}, "previous_response_id"),
    ({"text": {"format": {"type": "xml"}}}, "text.format.type"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object", "allOf": []}}}},
     "text.format.schema"),
    ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type"),
    ({"tools": [RATE]}, "tool_choice"),         # "auto": the model's chat template has no tool-call format
    ({"tools": [{"type": "web_search"}], "tool_choice": "required"}, "tools[0].type"),
    ({"include": ["reasoning.encrypted_content"]}, "include"),
    ({"include": LOGPROBS, "top_logprobs": 21}, "top_logprobs"),
])
def test_refused_with_a_400_naming_the_parameter(client, kwargs, param) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(**{"model": TINY, "input": "x", **kwargs})
    assert e.value.body["param"] == param


def test_batch_of_responses(client) -> None:
    rows = [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/responses",
             "body": {"model": TINY, "input": f"{ASK} ({i})", "max_output_tokens": 6, "temperature": 0,
                      "instructions": "Be brief.", "metadata": {"i": str(i)}}} for i in range(6)]
    b = run_batch(client, rows, endpoint="/v1/responses")
    assert b.status == "completed", b.errors
    out = {x["custom_id"]: x["response"] for x in read_lines(client, b.output_file_id)}
    assert set(out) == {f"r{i}" for i in range(6)}
    from openai.types.responses import Response

    for i in range(6):
        r = Response.model_validate(out[f"r{i}"]["body"])
        assert out[f"r{i}"]["status_code"] == 200 and r.object == "response"
        assert r.usage.output_tokens == 6 and r.metadata == {"i": str(i)} and r.instructions == "Be brief."
    plain = client.responses.create(model=TINY, input=f"{ASK} (0)", max_output_tokens=6, temperature=0,
                                    instructions="Be brief.")
    assert Response.model_validate(out["r0"]["body"]).output_text == plain.output_text
    bad = [{**rows[0], "body": {**rows[0]["body"], "store": True}}]
    b = run_batch(client, bad, endpoint="/v1/responses")
    [err] = read_lines(client, b.error_file_id)
    assert b.status == "completed" and err["response"]["body"]["error"]["param"] == "store"


def test_text_format_json_schema_interactively_and_in_a_batch(client) -> None:
    r = client.responses.create(model=TINY, input="An item?", text=TEXT, max_output_tokens=60, temperature=1.0)
    assert r.status == "completed" and r.text.format.type == "json_schema"
    jsonschema_rs.validate(ITEM, json.loads(r.output_text))
    rows = [{"custom_id": f"j{i}", "method": "POST", "url": "/v1/responses",
             "body": {"model": TINY, "input": f"Item {i}?", "text": TEXT, "max_output_tokens": 60,
                      "temperature": 1.0}} for i in range(4)]
    b = run_batch(client, rows, endpoint="/v1/responses")
    assert b.status == "completed" and b.request_counts.completed == 4, b
    for line in read_lines(client, b.output_file_id):
        body = line["response"]["body"]
        assert body["status"] == "completed"
        jsonschema_rs.validate(ITEM, json.loads(body["output"][0]["content"][0]["text"]))


def test_forced_function_call_plain_streamed_answered_and_in_a_batch(client) -> None:
    r = client.responses.create(model=TINY, input="Rate it.", tools=[RATE], tool_choice="required",
                                max_output_tokens=60, temperature=1.0)
    call = r.output[0]
    assert r.status == "completed" and (call.type, call.name, call.status) == ("function_call", "rate", "completed")
    jsonschema_rs.validate(ITEM, json.loads(call.arguments))
    assert call.call_id.startswith("call_") and r.tools[0].name == "rate" and r.tool_choice == "required"
    # The call and the function's output sent back: the conversation goes on without stored state.
    more = client.responses.create(model=TINY, max_output_tokens=4, temperature=0, input=[
        {"role": "user", "content": "Rate it."}, call,
        {"type": "function_call_output", "call_id": call.call_id, "output": "Thanks."}])
    assert more.output[0].type == "message" and more.usage.input_tokens > r.usage.input_tokens
    events = list(client.responses.create(model=TINY, input="Rate it.", tools=[RATE], max_output_tokens=60,
                                          tool_choice={"type": "function", "name": "rate"}, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-3:] == ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert set(kinds[3:-3]) == {"response.function_call_arguments.delta"}
    streamed = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert streamed == events[-3].arguments == events[-1].response.output[0].arguments
    jsonschema_rs.validate(ITEM, json.loads(streamed))
    rows = [{"custom_id": f"t{i}", "method": "POST", "url": "/v1/responses",
             "body": {"model": TINY, "input": f"Rate item {i}.", "tools": [RATE], "tool_choice": "required",
                      "max_output_tokens": 60, "temperature": 1.0}} for i in range(4)]
    b = run_batch(client, rows, endpoint="/v1/responses")
    assert b.status == "completed" and b.request_counts.completed == 4, b
    for line in read_lines(client, b.output_file_id):
        item = line["response"]["body"]["output"][0]
        assert (item["type"], item["name"]) == ("function_call", "rate")
        jsonschema_rs.validate(ITEM, json.loads(item["arguments"]))


def test_logprobs_are_the_chats_plain_streamed_and_in_a_batch(client) -> None:
    r = client.responses.create(model=TINY, input=ASK, max_output_tokens=5, temperature=0, include=LOGPROBS,
                                top_logprobs=2)
    chat = client.chat.completions.create(model=TINY, messages=[{"role": "user", "content": ASK}], max_tokens=5,
                                          temperature=0, logprobs=True, top_logprobs=2)
    lp = r.output[0].content[0].logprobs
    want = chat.choices[0].logprobs.content
    assert [x.token for x in lp] == [x.token for x in want] and len(lp) == 5
    assert [x.logprob for x in lp] == pytest.approx([x.logprob for x in want], abs=1e-3)
    assert all(len(x.top_logprobs) == 2 and x.bytes == list(x.token.encode()) for x in lp if
               not x.token.startswith("bytes:"))
    events = list(client.responses.create(model=TINY, input=ASK, max_output_tokens=5, temperature=0,
                                          include=LOGPROBS, top_logprobs=2, stream=True))
    streamed = [x for e in events if e.type == "response.output_text.delta" for x in e.logprobs]
    assert [x.token for x in streamed] == [x.token for x in lp]
    assert [len(x.top_logprobs) for x in streamed] == [2] * 5
    assert client.responses.create(model=TINY, input=ASK, max_output_tokens=5, top_logprobs=2).output[0] \
        .content[0].logprobs == []          # as vLLM: without the include, none
    rows = [{"custom_id": f"l{i}", "method": "POST", "url": "/v1/responses",
             "body": {"model": TINY, "input": f"{ASK} ({i})", "max_output_tokens": 4, "temperature": 0,
                      "include": LOGPROBS, "top_logprobs": 1}} for i in range(3)]
    b = run_batch(client, rows, endpoint="/v1/responses")
    assert b.status == "completed", b
    for line in read_lines(client, b.output_file_id):
        body = line["response"]["body"]
        lps = body["output"][0]["content"][0]["logprobs"]
        assert len(lps) == body["usage"]["output_tokens"] == 4 and all(len(x["top_logprobs"]) == 1 for x in lps)
