"""tool_choice "auto" on a model whose chat template has a tool-call format (Hermes' <tool_call> blocks): the template
lists the tools, the model writes text or calls, and the calls come back as message.tool_calls with finish_reason
"tool_calls"; text without a whole call is the answer. In a batch and interactively, plain and streamed."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from blendserve.protocol.bodies import model_info, prompt_text
from blendserve.protocol.results import chat_message
from blendserve.protocol.structured import ToolCall, parse_calls
from blendserve.worker.engines.base import GenResult
from tests.live import Deployment, read_lines, run_batch

HERMES = """{%- if tools %}<|im_start|>system
You may call functions. <tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>
Answer a call as <tool_call>{"name": ..., "arguments": ...}</tool_call>.<|im_end|>
{% endif %}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '
' + (message['content'] or '') + '<|im_end|>' + '
' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant
' }}{% endif %}"""
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
NAME = "tiny-tools"


@pytest.fixture(scope="module")
def hermes_model(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny test model with a chat template that has a tool-call format."""
    path = tmp_path_factory.mktemp("hermes") / "model"
    shutil.copytree(tiny_model, path)
    (path / "chat_template.jinja").write_text(HERMES)
    return path


def test_calls_are_read_out_of_the_text() -> None:
    text = 'Let me check. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' \
           '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    assert parse_calls(text) == ("Let me check.", [("get_weather", '{"city": "Paris"}'), ("get_time", "{}")])
    assert parse_calls("It is sunny.") == ("It is sunny.", [])
    assert parse_calls('<tool_call>{"name": "x", "argum') == ('<tool_call>{"name": "x", "argum', [])   # cut off
    assert parse_calls('<tool_call>not json</tool_call>')[1] == []
    auto = ToolCall(None, auto=True)
    message, finish = chat_message(GenResult(1, [1], text, "stop", 3, 0), auto)
    assert finish == "tool_calls" and message["content"] == "Let me check."
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather", "get_time"]
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in message["tool_calls"])
    plain, finish = chat_message(GenResult(1, [1], "It is sunny.", "stop", 3, 0), auto)
    assert finish == "stop" and plain["content"] == "It is sunny." and "tool_calls" not in plain


def test_the_template_lists_the_tools_under_auto_only(hermes_model: Path, tiny_model: Path) -> None:
    info = model_info(NAME, hermes_model)
    assert info.tool_calls and not model_info("tiny", tiny_model).tool_calls
    body = {"messages": ASK, "tools": [WEATHER]}
    assert '"get_weather"' in prompt_text("/v1/chat/completions", body, info)
    forced = {**body, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    assert "get_weather" not in prompt_text("/v1/chat/completions", forced, info)     # the grammar forces it


def test_auto_in_a_batch_and_interactively(hermes_model: Path, tmp_path: Path) -> None:
    d = Deployment(tmp_path, "", f"{NAME}={hermes_model}").start_all()
    try:
        c = d.client()
        rows = [{"custom_id": f"a{i}", "method": "POST", "url": "/v1/chat/completions",
                 "body": {"model": NAME, "messages": ASK, "tools": [WEATHER], "max_tokens": 8, "seed": i,
                          **({"tool_choice": "auto"} if i % 2 else {})}} for i in range(4)]
        b = run_batch(c, rows)
        assert b.status == "completed" and b.request_counts.completed == 4, b
        for line in read_lines(c, b.output_file_id):
            choice = line["response"]["body"]["choices"][0]
            assert choice["finish_reason"] in ("stop", "length", "tool_calls"), choice
            assert isinstance(choice["message"]["content"], str) or choice["message"]["tool_calls"]
        r = c.chat.completions.create(model=NAME, messages=ASK, tools=[WEATHER], max_tokens=8)
        assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
        chunks = list(c.chat.completions.create(model=NAME, messages=ASK, tools=[WEATHER], max_tokens=8,
                                                stream=True))
        assert chunks[-1].choices[0].finish_reason in ("stop", "length", "tool_calls")
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        calls = [t for ch in chunks if ch.choices for t in ch.choices[0].delta.tool_calls or ()]
        assert text or calls, [ch.model_dump() for ch in chunks]
    finally:
        d.stop()
