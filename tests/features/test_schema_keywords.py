"""Every JSON-schema keyword a grammar engine enforces is accepted, and enforced: the real CPU engine's outputs
under each validate with jsonschema (formats checked too). A keyword no engine enforces, or a combination
xgrammar would read as one keyword in place of another, is refused naming the keyword; through the real
SDK and service, a batch under minLength/maxLength/pattern finishes with outputs that validate."""
from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from blendserve.protocol.fields import BodyError
from blendserve.protocol.structured import schema_constraint
from blendserve.worker.engines.base import GenRequest, SamplingParams
from tests.conftest import TINY
from tests.live import chat_lines, read_lines, run_batch

# Formats asserted too where engines' grammars match Python's checkers exactly (a date's day is not checked
# against its month by any engine's grammar).
FORMATS = jsonschema.FormatChecker(["ipv4", "uuid"])


def strict(props: dict) -> dict:
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def fmt(schema: dict, is_strict: bool = True) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "k", "schema": schema, "strict": is_strict}}


NAME = {"type": "string", "minLength": 2, "maxLength": 6}
CODE = {"type": "string", "pattern": "^[a-c]{2,4}-[0-9]{2}$"}
ACCEPTED = {
    "minLength/maxLength": (strict({"v": NAME}), True),
    "pattern": (strict({"v": CODE}), True),
    "format": (strict({"d": {"type": "string", "format": "date"}, "ip": {"type": "string", "format": "ipv4"},
                       "id": {"type": "string", "format": "uuid"}}), True),
    "minimum/maximum": (strict({"v": {"type": "integer", "minimum": 3, "maximum": 7}}), True),
    "exclusiveMinimum/exclusiveMaximum": (strict({"v": {"type": "integer", "exclusiveMinimum": -3,
                                                        "exclusiveMaximum": 4}}), True),
    "minItems/maxItems": (strict({"v": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 2,
                                        "maxItems": 3}}), True),
    "anyOf": (strict({"v": {"anyOf": [{"type": "null"}, {"type": "integer", "minimum": 0, "maximum": 9}]}}), True),
    "$ref/$defs": ({**strict({"v": {"$ref": "#/$defs/p"}}), "$defs": {"p": strict({"n": NAME})}}, True),
    "enum/const": (strict({"v": {"type": "string", "enum": ["x", "yy"]}, "c": {"const": 3}}), True),
    "prefixItems": (strict({"v": {"type": "array", "prefixItems": [{"type": "boolean"}, {"enum": ["x"]}],
                                  "items": False}}), True),
    "minProperties": ({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "boolean"}},
                       "minProperties": 1, "additionalProperties": False}, False),
    "additionalProperties schema": ({"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"],
                                     "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 9}}, False),
}


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_every_enforced_keyword_is_accepted_and_outputs_validate(tiny_engine, case) -> None:
    schema, is_strict = ACCEPTED[case]
    spec = schema_constraint(fmt(schema, is_strict), "response_format")
    # Different seeds at temperature 1: the tiny model picks freely among what the grammar allows.
    close = tiny_engine.tokenizer.convert_tokens_to_ids("}")
    reqs = [GenRequest(i, [5, 6, 7, 8], SamplingParams(max_tokens=120, temperature=1.0, seed=i, json_schema=spec.schema,
                                                       strict_schema=spec.strict, logit_bias=((close, 3.0),)))
            for i in range(6)]
    results = list(tiny_engine.generate(reqs))
    finished = [r for r in results if r.finish_reason == "stop"]
    assert len(results) == 6 and all(r.error is None for r in results)
    assert finished, [r.text for r in results]
    for r in finished:
        jsonschema.validate(json.loads(r.text), schema, format_checker=FORMATS)


@pytest.mark.parametrize("schema, keyword", [
    ({"type": "object", "allOf": [{"type": "object"}]}, "allOf"),
    ({"type": "object", "oneOf": [{"type": "object"}]}, "oneOf"),
    ({"type": "object", "properties": {"a": {"not": {"type": "null"}}}}, "not"),
    ({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 2}}}, "multipleOf"),
    ({"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}}, "uniqueItems"),
    ({"type": "object", "properties": {"a": {"type": "array", "contains": {"const": 1}}}}, "contains"),
    ({"type": "object", "maxProperties": 2}, "maxProperties"),
    ({"type": "object", "patternProperties": {"^x": {"type": "integer"}}}, "patternProperties"),
    ({"type": "object", "propertyNames": {"pattern": "^a"}}, "propertyNames"),
    ({"type": "object", "if": {"required": ["a"]}}, "if"),
    ({"type": "object", "x-custom": 1}, "x-custom"),
    ({"type": "object", "properties": {"a": {"type": "string", "format": "ipv4-ish"}}}, "ipv4-ish"),
])
def test_a_keyword_no_engine_enforces_is_refused_by_name(schema, keyword) -> None:
    with pytest.raises(BodyError) as e:
        schema_constraint(fmt(schema, False), "response_format")
    assert f"'{keyword}'" in e.value.message and e.value.code == "invalid_value"
    assert e.value.param == "response_format.json_schema.schema"


@pytest.mark.parametrize("sub, named", [
    ({"type": "string", "pattern": "^a+$", "maxLength": 3}, ["maxLength", "pattern"]),
    ({"type": "string", "format": "date", "minLength": 3}, ["minLength", "format"]),
    ({"type": "string", "format": "date", "pattern": "^2"}, ["pattern", "format"]),
    ({"type": "string", "anyOf": [{"maxLength": 2}]}, ["type", "anyOf"]),
    ({"$ref": "#/$defs/s", "maxLength": 2}, ["maxLength", "$ref"]),
    ({"type": "string", "enum": ["a", 1]}, ["enum", "type"]),
    ({"enum": ["a", "bcd"], "maxLength": 2}, ["maxLength", "enum"]),
    ({"type": "string", "minLength": 4, "maxLength": 2}, ["'minLength' 4", "'maxLength' 2"]),
    ({"type": "integer", "minimum": 5, "maximum": 2}, ["minimum"]),      # xgrammar's own words
])
def test_a_combination_one_keyword_would_drop_is_refused_naming_both(sub, named) -> None:
    schema = {**strict({"a": sub}), "$defs": {"s": {"type": "string"}}}
    with pytest.raises(BodyError) as e:
        schema_constraint(fmt(schema), "response_format")
    assert all(n in e.value.message for n in named), e.value.message


@pytest.mark.parametrize("pattern", ['^a"b$', "^[ -~]{1,8}$", "^a\\\\b$", "^\\t$"])
def test_a_pattern_matching_what_json_escapes_is_refused(pattern) -> None:
    """xgrammar writes a pattern's '"', '\\' and control characters into the output unescaped: no JSON."""
    with pytest.raises(BodyError, match="control character"):
        schema_constraint(fmt(strict({"a": {"type": "string", "pattern": pattern}})), "response_format")
    printable = "^[ !#-\\[\\]-~]{1,8}$"           # the same without them: accepted
    assert schema_constraint(fmt(strict({"a": {"type": "string", "pattern": printable}})), "rf") is not None


def test_pydantic_shapes_stay_accepted() -> None:
    """What the openai SDK's `parse` sends for a pydantic model: enums with a type, nullable anyOf with a title
    and a default beside it."""
    schema = strict({"label": {"type": "string", "enum": ["pos", "neg"], "title": "Label"},
                     "note": {"anyOf": [{"type": "string", "maxLength": 20}, {"type": "null"}], "default": None,
                              "title": "Note"}})
    assert json.loads(schema_constraint(fmt(schema), "rf").schema)["properties"]["note"]["anyOf"]


def test_a_batch_under_length_and_pattern_keywords_validates(served) -> None:
    """Through the real SDK and service: every finished output of a batch validates, and a refused keyword is
    an interactive 400 naming it."""
    c = served.client()
    schema = strict({"name": NAME, "code": CODE})
    rows = chat_lines(6, TINY, max_tokens=48, prefix="name and code: ")
    for i, row in enumerate(rows):
        row["body"].update(temperature=1.0, seed=i, response_format=fmt(schema))
    b = run_batch(c, rows)
    assert b.status == "completed" and b.request_counts.completed == 6, b
    outs = [x["response"]["body"]["choices"][0] for x in read_lines(c, b.output_file_id)]
    finished = [json.loads(o["message"]["content"]) for o in outs if o["finish_reason"] == "stop"]
    assert finished, outs
    for doc in finished:
        jsonschema.validate(doc, schema)
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=TINY, messages=[{"role": "user", "content": "x"}], max_tokens=4,
                                  response_format=fmt(strict({"a": {"type": "array", "uniqueItems": True}})))
    assert "uniqueItems" in e.value.body["message"]
