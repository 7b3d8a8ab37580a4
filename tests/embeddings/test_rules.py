"""The /v1/embeddings rules alone: inputs' shapes, joined token arrays, per-input context, and the body."""
from __future__ import annotations

import base64

import numpy as np
import pytest

from blendserve.protocol.embeddings import (
    SEGMENT,
    check_embeddings,
    context_error,
    embed_model_info,
    join,
    response_body,
    split,
    token_count,
    tokenize,
)
from blendserve.protocol.fields import BodyError


@pytest.fixture(scope="module")
def info(minilm):
    return embed_model_info("m", minilm)


def test_every_input_shape_is_one_joined_array(info) -> None:
    bodies = [{"input": "a b"}, {"input": [101, 7, 102]}, {"input": ["x", "y z"]}, {"input": [[101, 102], [5]]}]
    out = tokenize(bodies, info)
    assert out[0] == info.encode(["a b"])[0] and out[1] == [101, 7, 102]
    assert out[2] == info.encode(["x"])[0] + [SEGMENT] + info.encode(["y z"])[0]
    assert [s.tolist() for s in split(out[3])] == [[101, 102], [5]] and token_count(out[3]) == 3
    assert [s.tolist() for s in split(join([[1], [2, 3], [4]]))] == [[1], [2, 3], [4]]


def test_texts_are_tokenized_whole_not_at_the_tokenizer_files_truncation(info) -> None:
    ids = info.encode(["word " * 200])[0]      # MiniLM's tokenizer.json truncates at 128
    assert len(ids) == 202 and context_error(ids, info) is None
    long = info.encode(["word " * 300])[0]
    err = context_error(join([ids, long]), info)
    assert err.code == "context_length_exceeded" and err.param == "input[1]"


@pytest.mark.parametrize("body, param", [
    ({"input": "x", "dimensions": 383}, "dimensions"),
    ({"input": "x", "dimensions": True}, "dimensions"),
    ({"input": ["a", ""]}, "input[1]"),
    ({"input": [["a"]]}, "input"),
    ({"input": [-1, 5]}, "input[0]"),
    ({"input": ["x"] * 2049}, "input"),
    ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
    ({"input": "x", "stream": True}, "stream"),
    ({"input": "x", "truncate": 5}, "truncate"),
])
def test_refused_naming_the_parameter(info, body, param) -> None:
    with pytest.raises(BodyError) as e:
        check_embeddings({"model": "m", **body}, info)
    assert e.value.param == param


def test_own_dimensions_are_accepted_and_base64_is_little_endian_float32(info) -> None:
    assert check_embeddings({"model": "m", "input": "x", "dimensions": 384}, info).encoding_format == "float"
    v = np.array([[0.5, -0.25, 1e-3]], dtype=np.float32)
    raw = response_body("m", v, 3, "base64")["data"][0]["embedding"]
    assert np.array_equal(np.frombuffer(base64.b64decode(raw), dtype="<f4"), v[0])
    as_float = response_body("m", v, 3, "float")
    assert as_float["data"][0]["embedding"] == [0.5, -0.25, 0.001]       # float32's shortest form
    assert as_float["usage"] == {"prompt_tokens": 3, "total_tokens": 3} and as_float["object"] == "list"
