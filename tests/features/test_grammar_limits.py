"""Bounded grammar work: a hostile schema is refused at validation, quickly, naming the limit it crosses; a
pattern xgrammar refuses is that request's error, never the engine's; on the CPU engine a slow compile
delays only its own request, and one past its time budget fails alone."""
from __future__ import annotations

import json
import time

import openai
import pytest
import xgrammar  # noqa: F401  (loaded once per process, as a role does at its first schema: seconds, not timed)

from blendserve.core.engine_settings import CpuEngineSettings
from blendserve.core.grammar_settings import GrammarSettings
from blendserve.protocol.fields import BodyError
from blendserve.protocol.grammar_limits import GrammarLimits
from blendserve.protocol.structured import constraint
from blendserve.worker.engines.base import GenRequest, SamplingParams
from tests.conftest import SQLITE_ONLY, TINY
from tests.live import chat_lines, read_lines, run_batch


def strict(props: dict) -> dict:
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def rf(schema: dict) -> dict:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema,
                                                                       "strict": True}}}


def tools(n: int, params: int) -> dict:
    return {"tool_choice": "required", "tools": [
        {"type": "function", "function": {"name": f"f{t}", "parameters": strict(
            {f"p{i}": {"type": "integer"} for i in range(params)})}} for t in range(n)]}


ATTACKS = {
    "enum of 60,000 strings": (rf(strict({"a": {"enum": [f"v{i}" for i in range(60000)]}})), "SCHEMA_BYTES"),
    "enum of 1,500 values": (rf(strict({"a": {"enum": list(range(1500))}})), "ENUM_VALUES"),
    "anyOf of 1,000 branches": (rf(strict({"a": {"anyOf": [{"const": i} for i in range(1000)]}})), "ANY_OF"),
    "20,000 properties": (rf(strict({f"p{i}": {"type": "integer"} for i in range(20000)})), "SCHEMA_BYTES"),
    "1,500 properties": (rf(strict({f"p{i}": {"type": "null"} for i in range(1500)})), "PROPERTIES"),
    "[\\s\\S]{0,20000}": (rf(strict({"a": {"type": "string", "pattern": "[\\s\\S]{0,20000}"}})), "PATTERN_SIZE"),
    "nested repeats": (rf(strict({"a": {"type": "string", "pattern": "((ab){0,40}c){0,40}"}})), "PATTERN_SIZE"),
    "maxLength 20,000": (rf(strict({"a": {"type": "string", "maxLength": 20000}})), "LENGTH"),
    "128 tools x 150 parameters": (tools(128, 150), "SCHEMA_BYTES"),
    "129 tools": (tools(129, 1), "TOOLS"),
    "backreference": (rf(strict({"a": {"type": "string", "pattern": "(a)\\1"}})), "backreference"),
    "word boundary": (rf(strict({"a": {"type": "string", "pattern": "\\bx\\b"}})), "Word boundary"),
    "lookahead": (rf(strict({"a": {"type": "string", "pattern": "(?=b)a"}})), "lookaround"),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_each_attack_is_refused_quickly_naming_the_limit(attack) -> None:
    body, named = ATTACKS[attack]
    start = time.monotonic()
    with pytest.raises(BodyError) as e:
        constraint(body)
    assert time.monotonic() - start < 3.0
    assert e.value.code == "invalid_value" and named in e.value.message, e.value.message
    if named.isupper():
        assert f"BLENDSERVE_GRAMMAR_{named}=" in e.value.message


@pytest.mark.parametrize("attack", [a for a, (_, named) in ATTACKS.items() if named == "SCHEMA_BYTES"])
def test_a_schema_past_the_size_limit_is_refused_before_any_rule_walks_it(attack, monkeypatch) -> None:
    """One encode at C speed, not a walk in Python of every node (which cost 0.1 s of the API per request)."""
    def walked(*_) -> None:
        raise AssertionError("a rule walked the schema before its size was checked")

    monkeypatch.setattr("blendserve.protocol.structured.check_schema", walked)
    with pytest.raises(BodyError, match="BLENDSERVE_GRAMMAR_SCHEMA_BYTES="):
        constraint(ATTACKS[attack][0])


def test_within_the_limits_passes_and_the_settings_move_them() -> None:
    body = rf(strict({"a": {"enum": list(range(900))}, "b": {"type": "string", "pattern": "^[a-z]{0,400}$"}}))
    assert constraint(body)[0] is not None
    tight = GrammarLimits.of(GrammarSettings(enum_values=100))
    with pytest.raises(BodyError, match="BLENDSERVE_GRAMMAR_ENUM_VALUES=100"):
        constraint(body, tight)
    assert constraint(tools(8, 100))[0] is not None        # 800 properties under "required": within


def test_attacks_through_the_service_fail_alone(served) -> None:
    """A call gets its 400 in seconds; batch lines fail alone while the others complete."""
    c = served.client()
    start = time.monotonic()
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=TINY, messages=[{"role": "user", "content": "x"}], max_tokens=4,
                                  **ATTACKS["anyOf of 1,000 branches"][0])
    assert time.monotonic() - start < 5.0 and "BLENDSERVE_GRAMMAR_ANY_OF" in e.value.body["message"]
    rows = chat_lines(4, TINY, max_tokens=4)
    rows[1]["body"].update(ATTACKS["backreference"][0])
    rows[2]["body"].update(ATTACKS["[\\s\\S]{0,20000}"][0])
    b = run_batch(c, rows)
    assert (b.request_counts.completed, b.request_counts.failed) == (2, 2), b
    errs = {e["custom_id"]: e["response"]["body"]["error"]["message"] for e in read_lines(c, b.error_file_id)}
    assert "backreference" in errs[rows[1]["custom_id"]]
    assert "BLENDSERVE_GRAMMAR_PATTERN_SIZE" in errs[rows[2]["custom_id"]]


@SQLITE_ONLY
def test_the_deployments_limits_apply_where_requests_are_validated(make_deployment) -> None:
    """BLENDSERVE_GRAMMAR_* reach the scheduler's batch lines and the worker's calls."""
    c = make_deployment(BLENDSERVE_GRAMMAR_ENUM_VALUES="5").start_all().client()
    body = rf(strict({"a": {"enum": list(range(6))}}))
    rows = chat_lines(2, TINY, max_tokens=4)
    rows[1]["body"].update(body)
    b = run_batch(c, rows)
    assert (b.request_counts.completed, b.request_counts.failed) == (1, 1), b
    [err] = read_lines(c, b.error_file_id)
    assert "BLENDSERVE_GRAMMAR_ENUM_VALUES=5" in err["response"]["body"]["error"]["message"]
    deadline = time.monotonic() + 60
    while True:
        try:
            c.chat.completions.create(model=TINY, messages=[{"role": "user", "content": "x"}], max_tokens=4, **body)
            raise AssertionError("an enum past the deployment's limit was served")
        except openai.BadRequestError as e:
            assert "BLENDSERVE_GRAMMAR_ENUM_VALUES=5" in e.body["message"]
            break
        except openai.APIStatusError as e:        # 503 until the worker answers calls
            assert e.status_code == 503 and time.monotonic() < deadline
            time.sleep(0.2)


SLOW = json.dumps(strict({"a": {"type": "string", "pattern": "[\\s\\S]{0,1500}"}}))   # past validation's limit
QUICK = json.dumps(strict({"a": {"type": "string", "pattern": "^[a-z]{1,4}$"}}))


@pytest.fixture(scope="module")
def budget_engine(tiny_model):
    """A CPU engine whose compiles have a short time budget."""
    from blendserve.worker.engines.cpu.engine import CpuEngine

    return CpuEngine(tiny_model, TINY, threads=1, kv_capacity_tokens=16384, config=CpuEngineSettings(),
                     grammar=GrammarSettings(compile_timeout_s=0.3))


def _timed(engine, requests: list[GenRequest]) -> dict[int, tuple[float, object]]:
    start, out = time.monotonic(), {}
    for r in engine.generate(requests):
        out[r.key] = (time.monotonic() - start, r)
    return out


def test_a_slow_compile_delays_only_its_own_request(tiny_engine) -> None:
    """The slow schema's request comes first; the quick and the plain requests beside it finish long before its
    compile ends, and it then finishes too, under its grammar."""
    out = _timed(tiny_engine, [GenRequest(1, [5, 6, 7], SamplingParams(max_tokens=24, json_schema=SLOW,
                                                                      strict_schema=True)),
                               GenRequest(2, [5, 6, 8], SamplingParams(max_tokens=16, json_schema=QUICK,
                                                                      strict_schema=True)),
                               GenRequest(3, [5, 6, 9], SamplingParams(max_tokens=16))])
    slow = out[1][0]
    assert out[2][0] < slow / 2 and out[3][0] < slow / 2, out
    assert all(r.error is None for _, r in out.values())
    assert out[1][1].text.startswith('{"a": "') and out[2][1].finish_reason == "stop"


def test_a_compile_past_its_budget_or_refused_fails_alone(budget_engine) -> None:
    bad = json.dumps(strict({"a": {"type": "string", "pattern": "(a)\\1"}}))    # what validation refuses
    out = _timed(budget_engine, [GenRequest(1, [5, 6, 7], SamplingParams(max_tokens=8, json_schema=SLOW.replace(
                                     "1500", "1501"), strict_schema=True, n=2)),
                                 GenRequest(2, [5, 6, 7], SamplingParams(max_tokens=8, json_schema=bad)),
                                 GenRequest(3, [5, 6, 8], SamplingParams(max_tokens=24, json_schema=QUICK))])
    assert out[1][1].refused and "BLENDSERVE_GRAMMAR_COMPILE_TIMEOUT_S" in out[1][1].error, out[1][1]
    assert out[1][0] < 3.0                                     # failed at its budget, not when the compile ends
    assert out[2][1].refused and "Backreference" in out[2][1].error
    assert out[3][1].error is None and json.loads(out[3][1].text)["a"].isalpha()


def test_compiled_grammars_are_kept_for_the_most_recent_schemas(tiny_engine, monkeypatch) -> None:
    """Many distinct schemas (each within the limits) do not keep every grammar ever compiled."""
    from blendserve.worker.engines.cpu import grammar

    monkeypatch.setattr(grammar, "CACHED", 3)
    g = grammar.Grammars.of_engine(tiny_engine, 0)
    schemas = [json.dumps(strict({f"k{i}": {"type": "integer"}})) for i in range(6)]
    first = g.get(schemas[0], True)
    for s in schemas[1:]:
        g.get(s, True).result(timeout=30)
        g.get(schemas[0], True)                       # used again: kept, and compiled once
    assert len(g.cache) <= 4 and g.get(schemas[0], True) is first
    assert g.get(schemas[1], True) is not None and len(g.started) == len(g.cache)


def test_a_body_within_raised_limits_keeps_its_constraint_when_read_again() -> None:
    """Limits raised by the deployment hold at the door and after it: the typed body's constraint (read for the
    engine, and again from a stored row) is not held to the defaults."""
    from dataclasses import replace

    from blendserve.protocol.fields import ModelInfo
    from blendserve.protocol.requests import ChatCompletionRequest

    info = ModelInfo("m", 4096, lambda m, tools=None: "", lambda t: [[1]] * len(t), lambda t: [[1]] * len(t),
                     grammar=GrammarLimits.of(GrammarSettings(enum_values=3000)))
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}],
            **rf(strict({"a": {"enum": list(range(2000))}}))}
    req = ChatCompletionRequest.parse(body, info)
    assert json.loads(req.sampling_params(8).json_schema)["properties"]["a"]["enum"][-1] == 1999
    stored = ChatCompletionRequest.stored(req.params())
    assert stored.sampling_params(8).json_schema == req.sampling_params(8).json_schema
    with pytest.raises(BodyError, match="BLENDSERVE_GRAMMAR_ENUM_VALUES=1000"):
        ChatCompletionRequest.parse(body, replace(info, grammar=None))


def test_an_interactive_request_waits_for_its_grammar_outside_the_steps(tiny_engine) -> None:
    """Interactive requests (the driver's urgent ones) are held the same way: the quick one beside the slow
    compile finishes first, and the slow one then runs under its grammar."""
    calls = [[GenRequest(7, [5, 6, 7], SamplingParams(max_tokens=24, json_schema=SLOW.replace("1500", "1502"),
                                                      strict_schema=True)),
              GenRequest(8, [5, 6, 8], SamplingParams(max_tokens=24, json_schema=QUICK, strict_schema=True))]]
    out = {}
    start = time.monotonic()
    for r in tiny_engine.generate([GenRequest(1, [5, 6, 9], SamplingParams(max_tokens=4))],
                                  urgent=lambda: calls.pop() if calls else []):
        out[r.key] = (time.monotonic() - start, r)
    assert set(out) == {1, 7, 8} and all(r.error is None for _, r in out.values()), out
    assert out[8][0] < out[7][0] / 2 and out[1][0] < out[7][0] / 2, out   # long before the compile ends
    assert out[7][1].text.startswith('{"a": "')
