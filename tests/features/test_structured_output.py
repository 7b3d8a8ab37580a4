"""Structured output: `response_format` json_schema (OpenAI's strict subset) and json_object, through the real SDK
against the real service, in a batch and interactively; every finished output parses and validates. A schema
outside the subset is a per-line 400 naming the keyword (tests/features/test_schema_keywords.py: each keyword)."""
from __future__ import annotations

import json
from typing import Literal

import jsonschema_rs
import openai
import pytest
from pydantic import BaseModel

from blendserve.protocol.fields import BodyError
from blendserve.protocol.structured import check_schema, schema_constraint
from tests.conftest import TINY
from tests.live import chat_lines, read_lines, run_batch

LABEL = {"type": "object", "additionalProperties": False, "required": ["label", "ok", "tags", "note"],
         "properties": {"label": {"enum": ["pos", "neg", "neutral"]}, "ok": {"type": "boolean"},
                        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
                        "note": {"anyOf": [{"type": "null"}, {"const": "x"}]}}}
ITEM = {"type": "object", "additionalProperties": False, "required": ["item"],
        "properties": {"item": {"$ref": "#/$defs/item"}},
        "$defs": {"item": {"type": "object", "additionalProperties": False, "required": ["kind", "score"],
                           "properties": {"kind": {"enum": ["k1", "k2"]},
                                          "score": {"type": "integer", "minimum": 1, "maximum": 5}}}}}


def fmt(name: str, schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


@pytest.mark.parametrize("schema, keyword", [
    ({"type": "object", "allOf": []}, "allOf"),
    ({"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}}, "uniqueItems"),
    ({"type": "object", "patternProperties": {}}, "patternProperties"),
    ({"type": "object", "properties": {"a": {"type": "number", "multipleOf": 2}}}, "multipleOf"),
])
def test_keywords_outside_the_subset_are_named(schema, keyword) -> None:
    with pytest.raises(BodyError) as e:
        check_schema(schema, False, "response_format.json_schema.schema")
    assert keyword in e.value.message and e.value.code == "invalid_value"


def test_strict_rules_and_canonical_form() -> None:
    with pytest.raises(BodyError, match="additionalProperties"):
        check_schema({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}, True, "s")
    with pytest.raises(BodyError, match="missing"):
        check_schema({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False},
                     True, "s")
    with pytest.raises(BodyError, match="names no definition"):
        check_schema({"type": "object", "properties": {"a": {"$ref": "#/$defs/b"}}}, False, "s")
    a, b = schema_constraint(fmt("x", LABEL), "rf"), schema_constraint(fmt("y", dict(reversed(LABEL.items()))), "rf")
    assert a == b and a.strict                     # equal schemas share one compiled grammar
    assert schema_constraint({"type": "json_object"}, "rf").schema == '{"type": "object"}'
    assert schema_constraint({"type": "text"}, "rf") is None


# Keys in reverse alphabetical order: an output that sorted them would show it. `zeta` is bounded: the tiny
# model at temperature 1 otherwise writes digits until max_tokens, and an unfinished output shows no order.
ORDERED = {"type": "object", "additionalProperties": False, "required": ["zeta", "mid", "alpha"],
           "properties": {"zeta": {"type": "integer", "minimum": 0, "maximum": 99999}, "mid": {"enum": ["x", "y"]},
                          "alpha": {"type": "object", "additionalProperties": False, "required": ["b", "a"],
                                    "properties": {"b": {"type": "boolean"}, "a": {"type": "boolean"}}}}}


def test_canonical_form_keeps_property_order() -> None:
    text = schema_constraint(fmt("o", ORDERED), "rf").schema
    assert list(json.loads(text)["properties"]) == ["zeta", "mid", "alpha"]
    assert list(json.loads(text)["properties"]["alpha"]["properties"]) == ["b", "a"]
    other = schema_constraint(fmt("o", {**ORDERED, "properties": dict(reversed(ORDERED["properties"].items()))}), "rf")
    assert other.schema != text                    # another property order is another grammar


def test_outputs_keep_the_schemas_key_order(served) -> None:
    """Every finished output, in a batch and interactively, writes its keys in the schema's order."""
    c = served.client()
    rows = chat_lines(8, TINY, max_tokens=60, prefix="fill in: ")
    for i, row in enumerate(rows):
        row["body"].update(temperature=1.0, seed=i, response_format=fmt("ordered", ORDERED))
    b = run_batch(c, rows)
    outs = [x["response"]["body"]["choices"][0] for x in read_lines(c, b.output_file_id)]
    outs.append(c.chat.completions.create(model=TINY, messages=[{"role": "user", "content": "fill in"}],
                                          max_tokens=60, response_format=fmt("ordered", ORDERED)
                                          ).choices[0].model_dump())
    finished = [json.loads(o["message"]["content"]) for o in outs if o["finish_reason"] == "stop"]
    assert len(finished) >= 5, outs
    for doc in finished:
        assert list(doc) == ["zeta", "mid", "alpha"] and list(doc["alpha"]) == ["b", "a"], doc


def test_grammars_compile_once_per_schema(tiny_engine) -> None:
    from blendserve.worker.engines.cpu.grammar import Grammars

    g = Grammars(tiny_engine.tokenizer, int(tiny_engine.model.lm_head.shape[0]), sorted(tiny_engine.eos))
    s = schema_constraint(fmt("x", LABEL), "rf").schema
    assert g.get(s, True) is g.get(s, True) and g.get(s, True) is not g.get(s, False)
    assert g.get(s, True).result(timeout=30) is not None


@pytest.mark.parametrize("native", [True, False])     # the C++ mask kernel and xgrammar's
def test_a_steps_masks_land_on_its_constrained_rows_only(tiny_engine, native) -> None:
    import torch

    from blendserve.worker.engines.base import SamplingParams
    from blendserve.worker.engines.cpu.grammar import Grammars
    from blendserve.worker.engines.cpu.sampler import SamplingState, sample

    g = Grammars(tiny_engine.tokenizer, int(tiny_engine.model.lm_head.shape[0]), sorted(tiny_engine.eos),
                 native=native)
    assert (g.kernel is not None) == native
    spec = schema_constraint(fmt("label", LABEL), "rf")
    grammars = [g.state(spec.schema, True) if i % 2 == 0 else None for i in range(5)]
    states = [SamplingState(SamplingParams(max_tokens=8, temperature=0), gs) for gs in grammars]
    logits = torch.randn(5, g.vocab_size, generator=torch.Generator().manual_seed(0))
    masks = g.prepare(grammars)
    assert masks.rows == [0, 2, 4]
    masked = logits.clone()
    masks.apply(masked)
    assert torch.equal(masked[1::2], logits[1::2])                  # free rows untouched
    allowed = ~torch.isinf(masked[0::2])
    opening = tiny_engine.tokenizer.decode(allowed[0].nonzero()[:, 0].tolist())
    assert 0 < int(allowed[0].sum()) < 10 and set(opening) <= set('{"'), opening   # only the object's start
    tokens = sample(logits.clone(), states, g.prepare(grammars))
    assert all(allowed[i // 2, tokens[i]] for i in (0, 2, 4))
    assert tokens[1] == int(logits[1].argmax()) and tokens[3] == int(logits[3].argmax())
    assert sample(logits.clone(), states) == tokens                # masks made at once when not prepared


def test_a_batch_of_mixed_schemas_gives_only_valid_json(served, tiny_engine) -> None:
    c = served.client()
    # json_object lets a random-weight model write keys forever: a bias toward '}' makes its objects short, and
    # only the grammar puts the '{' before it (the bias alone would start the output with '}').
    close = {str(tiny_engine.tokenizer.convert_tokens_to_ids("}")): 100}
    rows = chat_lines(12, TINY, max_tokens=80, prefix="classify: ")
    for i, row in enumerate(rows):
        kind = ("label", "item", "object")[i % 3]
        row["body"].update(temperature=1.0 if i % 2 else 0, seed=i,
                           response_format={"type": "json_object"} if kind == "object" else
                           fmt(kind, LABEL if kind == "label" else ITEM))
        if kind == "object":
            row["body"]["logit_bias"] = close
    b = run_batch(c, rows)
    assert b.status == "completed" and b.request_counts.completed == 12, b
    out = {x["custom_id"]: x["response"]["body"] for x in read_lines(c, b.output_file_id)}
    for row in rows:
        choice = out[row["custom_id"]]["choices"][0]
        assert choice["finish_reason"] == "stop", choice
        doc = json.loads(choice["message"]["content"])
        spec = row["body"]["response_format"]
        schema = spec["json_schema"]["schema"] if spec["type"] == "json_schema" else {"type": "object"}
        jsonschema_rs.validate(schema, doc)


def test_a_schema_outside_the_subset_fails_its_line_naming_the_keyword(served) -> None:
    c = served.client()
    rows = chat_lines(3, TINY, max_tokens=4)
    rows[1]["body"]["response_format"] = fmt("bad", {"type": "object", "properties": {"a": {"not": {}}}})
    rows[2]["body"]["response_format"] = fmt("loose", {"type": "object", "properties": {"a": {"type": "null"}},
                                                      "required": ["a"]})
    b = run_batch(c, rows)
    assert b.status == "completed" and (b.request_counts.completed, b.request_counts.failed) == (1, 2)
    errs = {e["custom_id"]: e["response"]["body"]["error"] for e in read_lines(c, b.error_file_id)}
    assert {k: e["code"] for k, e in errs.items()} == {rows[1]["custom_id"]: "invalid_value",
                                                      rows[2]["custom_id"]: "invalid_value"}
    assert "'not'" in errs[rows[1]["custom_id"]]["message"]
    assert "additionalProperties" in errs[rows[2]["custom_id"]]["message"]


class Verdict(BaseModel):
    label: Literal["pos", "neg"]
    ok: bool


def test_interactive_parse_with_a_pydantic_model_and_a_stream(served) -> None:
    c = served.client()
    r = c.chat.completions.parse(model=TINY, messages=[{"role": "user", "content": "Is this good?"}],
                                 response_format=Verdict, max_tokens=40, temperature=1.0, seed=1)
    assert r.choices[0].finish_reason == "stop" and isinstance(r.choices[0].message.parsed, Verdict)
    chunks = list(c.chat.completions.create(model=TINY, messages=[{"role": "user", "content": "Item?"}],
                                            response_format=fmt("item", ITEM), max_tokens=60, stream=True))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    jsonschema_rs.validate(ITEM, json.loads(text))
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=TINY, messages=[{"role": "user", "content": "x"}], max_tokens=4,
                                  response_format=fmt("bad", {"type": "object", "patternProperties": {}}))
    assert e.value.body["param"] == "response_format.json_schema.schema"
    assert "patternProperties" in e.value.body["message"]
