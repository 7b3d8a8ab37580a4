"""/v1/embeddings: the request rules, the model facts they need, and the response body, as OpenAI defines them.

Shared by batch validation (blendserve/scheduler/validation.py), the scheduler's tokenizer
(core/bodies.tokenize), and a worker's interactive endpoint, so a body one path
accepts the other accepts too. Pure: no database, no engine.

One request may embed up to MAX_INPUTS inputs. A request row holds one array
of token ids, so a request's inputs travel as one array with SEGMENT (-1, never
a token id) between them; `split` takes them apart in the engine.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from blendserve.protocol.fields import SPECIAL_MARGIN, BodyError, ModelInfo, utf8_len

ENDPOINT = "/v1/embeddings"
SEGMENT = -1            # between two inputs' token ids in one request's array
MAX_INPUTS = 2048       # OpenAI's limit of inputs in one request
KNOWN = {"model", "input", "encoding_format", "dimensions", "user"}
ENCODINGS = ("float", "base64")


@dataclass
class EmbedModelInfo(ModelInfo):
    """An embedding model: `context_length` is the tokens one input may have."""
    dimensions: int = 0
    vocab_size: int = 0


def embed_model_info(name: str, path: Path, tokenizer: Any = None) -> EmbedModelInfo:
    """The tokenizer-side facts of an embedding checkpoint. Inputs are tokenized as sentence-transformers
    tokenizes them ([CLS] text [SEP]), through a private copy of the Rust backend with truncation and
    padding off: MiniLM's tokenizer.json carries both (truncation at 128), which would cut inputs
    silently where they must be counted and refused."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from blendserve.core.embedstore import dimensions, max_input_tokens

    tok = tokenizer if tokenizer is not None else PreTrainedTokenizerFast.from_pretrained(str(path))
    backend = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    backend.no_truncation()
    backend.no_padding()

    def encode(texts: list[str]) -> list[list[int]]:
        return [e.ids for e in backend.encode_batch(texts, add_special_tokens=True)]

    def no_chat(messages: list[dict]) -> str:
        raise BodyError("invalid_value", f"'{name}' is an embedding model: it serves only {ENDPOINT}.", "model")

    return EmbedModelInfo(name=name, context_length=max_input_tokens(path), render_chat=no_chat, encode=encode,
                          encode_prompt=encode, task="embed", dimensions=dimensions(path),
                          vocab_size=backend.get_vocab_size())


@dataclass
class EmbedInputs:
    """A checked body's inputs: texts to tokenize, or token ids as given; and how to answer."""
    texts: list[str] | None
    ids: list[list[int]] | None
    encoding_format: str


def _is_ids(x: Any) -> bool:
    return isinstance(x, list) and bool(x) and all(isinstance(t, int) and not isinstance(t, bool) for t in x)


def check_embeddings(body: Any, info: ModelInfo) -> EmbedInputs:
    """Check an embeddings body against the model. Raises BodyError.

    `input`: a string, a list of strings, a list of token ids, or a list of such lists (at most 2048;
    strings non-empty). Token ids are embedded as given, no special token added (what vLLM does): send
    the tokenizer's own ids, [CLS] and [SEP] included, to get the text's vector. `dimensions` is only the
    model's own (MiniLM: 384; it was not trained to be cut), else a 400.
    """
    if not isinstance(body, dict):
        raise BodyError("invalid_value", "The request body must be a JSON object.")
    if body.get("stream"):
        raise BodyError("unsupported_parameter", f"'stream' is not supported on {ENDPOINT}.", "stream")
    unknown = sorted(body.keys() - KNOWN - {"stream"})
    if unknown:
        raise BodyError("unsupported_parameter", f"Unrecognized request argument supplied: '{unknown[0]}'.", unknown[0])
    if not isinstance(info, EmbedModelInfo):
        raise BodyError("invalid_value", f"The model '{info.name}' does not support {ENDPOINT}: it is not an "
                        "embedding model.", "model")
    fmt = body.get("encoding_format")
    fmt = "float" if fmt is None else fmt
    if fmt not in ENCODINGS:
        raise BodyError("invalid_value", f"'encoding_format' must be one of {list(ENCODINGS)}, got {fmt!r}.",
                        "encoding_format")
    dims = body.get("dimensions")
    if dims is not None:
        if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
            raise BodyError("invalid_value", f"'dimensions' must be a positive integer, got {dims!r}.", "dimensions")
        if dims != info.dimensions:
            raise BodyError("unsupported_value", f"'{info.name}' returns {info.dimensions} dimensions and cannot "
                            f"return {dims}: it was not trained for shortened embeddings.", "dimensions")
    inp = body.get("input")
    if isinstance(inp, str):
        inp = [inp]
    if _is_ids(inp):
        inp = [inp]
    if not isinstance(inp, list) or not inp:
        raise BodyError("invalid_value", "'input' must be a non-empty string, a list of strings, a list of token "
                        "ids, or a list of lists of token ids.", "input")
    if len(inp) > MAX_INPUTS:
        raise BodyError("invalid_value", f"'input' may hold at most {MAX_INPUTS} inputs, got {len(inp)}.", "input")
    if all(isinstance(x, str) for x in inp):
        for i, x in enumerate(inp):
            if not x:
                raise BodyError("invalid_value", f"'input[{i}]' must not be an empty string.", f"input[{i}]")
        return EmbedInputs(inp, None, fmt)
    if all(_is_ids(x) for x in inp):
        for i, x in enumerate(inp):
            if min(x) < 0 or max(x) >= info.vocab_size:
                raise BodyError("invalid_value", f"'input[{i}]' holds a token id outside the model's vocabulary "
                                f"(0..{info.vocab_size - 1}).", f"input[{i}]")
        return EmbedInputs(None, [list(x) for x in inp], fmt)
    raise BodyError("invalid_value", "'input' must be a non-empty string, a list of strings, a list of token ids, "
                    "or a list of lists of token ids (not a mix).", "input")


def join(segments: list[list[int]]) -> list[int]:
    """One request's inputs as one array, SEGMENT between them."""
    out: list[int] = []
    for i, s in enumerate(segments):
        if i:
            out.append(SEGMENT)
        out.extend(s)
    return out


def split(ids: list[int] | np.ndarray) -> list[np.ndarray]:
    """The inputs of a joined array (join's inverse)."""
    arr = np.asarray(ids, dtype=np.int64)
    parts = np.split(arr, np.flatnonzero(arr == SEGMENT))
    return [parts[0]] + [p[1:] for p in parts[1:]]


def token_count(ids: list[int]) -> int:
    """Tokens of a request's array (its separators are no tokens)."""
    return len(ids) - ids.count(SEGMENT)


def tokenize(bodies: list[dict], info: ModelInfo) -> list[list[int]]:
    """Each checked body's inputs as one joined array: texts through the model's tokenizer (every body's texts in
    one batched call, as the scheduler tokenizes a thousand lines at a time), ids as given."""
    parsed = [check_embeddings(body, info) for body in bodies]
    texts = [t for p in parsed if p.ids is None for t in p.texts]
    encoded = iter(info.encode(texts) if texts else [])
    return [join(p.ids if p.ids is not None else [next(encoded) for _ in p.texts]) for p in parsed]


def context_error(ids: list[int], info: ModelInfo) -> BodyError | None:
    """The first input longer than the model takes (vLLM's rule too: refused, not cut short)."""
    for i, seg in enumerate(split(ids)):
        if len(seg) > info.context_length:
            return BodyError("context_length_exceeded", f"'input[{i}]' has {len(seg)} tokens; '{info.name}' takes at "
                             f"most {info.context_length} tokens an input.", f"input[{i}]")
    return None


def bound(inputs: EmbedInputs) -> int:
    """An upper bound of the longest input's tokens, without tokenizing (protocol.fields.SPECIAL_MARGIN's rule:
    a WordPiece token covers at least one byte of the text, plus [CLS] and [SEP])."""
    if inputs.ids is not None:
        return max(map(len, inputs.ids))
    return max(map(utf8_len, inputs.texts)) + SPECIAL_MARGIN


def float32_list(vectors: np.ndarray) -> list[list[float]]:
    """Rows of float32 values as JSON numbers in their shortest float32 form (0.0123456795, not
    0.012345679476857185): what OpenAI prints, and half the bytes of an output file's float64 repr."""
    return orjson.loads(orjson.dumps(np.ascontiguousarray(vectors, dtype=np.float32),
                                     option=orjson.OPT_SERIALIZE_NUMPY))


def response_body(model: str, vectors: np.ndarray, prompt_tokens: int, encoding_format: str) -> dict:
    """OpenAI's CreateEmbeddingResponse: base64 is the little-endian float32 bytes of each vector."""
    if encoding_format == "base64":
        data = [base64.b64encode(np.ascontiguousarray(v, dtype="<f4").tobytes()).decode() for v in vectors]
    else:
        data = float32_list(vectors)
    return {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(data)],
            "model": model, "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}
