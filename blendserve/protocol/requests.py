"""One typed model per endpoint's request body: each body is parsed once, into the model of its endpoint.

`parse` checks a raw body with OpenAI's rules (blendserve/protocol/sampling_rules.py,
fields.py, structured.py, responses_api.py, embeddings.py: the messages and
`param` paths of the 400s are theirs) and returns the model, which carries
what the checks derived: the chat the model sees, the tokens it may write, the
inputs to embed, the constraint and the tool call a body forces. The scheduler
parses a batch line this way and a worker's interactive lane a call's body,
so a body one path accepts the other accepts too (as vLLM's run_batch reads a
line into a typed request once).

A row stores `params()`: the parameters the caller set (explicit nulls
included, values typed), less the prompt, which stays in the input file. A
worker reads them back with `stored(endpoint, params)`, types only: the rules
ran once, at the door.

Fields the service does not read (`user`, `metadata`, refused parameters sent
at their defaults, ...) are kept as extra fields: the rules refuse the unknown
ones with OpenAI's "Unrecognized request argument" before a model is built.
"""
from __future__ import annotations

import functools
from typing import Any, ClassVar

from blendserve.protocol import embeddings, responses_api, structured
from blendserve.protocol.body import Door, RequestBody, or_default, stream_rules
from blendserve.protocol.fields import (
    BodyError,
    ModelInfo,
    check_int,
    check_messages,
    is_token_ids,
    token_id_error,
    token_ids_rule,
)
from blendserve.protocol.grammar_limits import PASSED
from blendserve.protocol.sampling import SamplingParams
from blendserve.protocol.sampling_rules import check_sampling
from blendserve.protocol.structured import Constraint, ToolCall

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
COMPLETIONS_MAX_TOKENS = 16                     # the completions endpoint's documented default


class Sampling(RequestBody):
    """The sampling settings of a generating body, in chat's words (a Responses body translates to them)."""
    endpoint: ClassVar[str] = CHAT

    temperature: float | None = None
    top_p: float | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | int | None = None      # chat: a boolean (top_logprobs beside it); completions: 0-5
    top_logprobs: int | None = None
    n: int | None = None
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None

    @functools.cached_property
    def constraint(self) -> tuple[Constraint | None, ToolCall | None]:
        """The output's constraint and the tool call (blendserve/protocol/structured.py's reading). The body met
        the deployment's grammar limits at its door (`check`): read again here, its schema is not held to them."""
        return structured.constraint({"tools": self.tools, "tool_choice": self.tool_choice,
                           "response_format": self.response_format}, PASSED)

    def sampling_params(self, max_tokens: int) -> SamplingParams:
        schema = self.constraint[0]
        lp = self.logprobs
        # Chat: `logprobs: true` and `top_logprobs` k; completions: `logprobs` k (an integer).
        logprobs = (or_default(self.top_logprobs, 0) if lp else None) if isinstance(lp, bool) or lp is None else int(lp)
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=float(or_default(self.temperature, 1.0)),
            top_p=float(or_default(self.top_p, 1.0)),
            stop=tuple([self.stop] if isinstance(self.stop, str) else self.stop or ()),
            seed=self.seed,
            presence_penalty=float(or_default(self.presence_penalty, 0.0)),
            frequency_penalty=float(or_default(self.frequency_penalty, 0.0)),
            # JSON object keys are strings: {"50256": -100} bans token 50256.
            logit_bias=tuple(sorted((int(t), float(b)) for t, b in (self.logit_bias or {}).items())),
            json_schema=schema.schema if schema is not None else None,
            strict_schema=schema.strict if schema is not None else False,
            logprobs=logprobs,
            n=int(or_default(self.n, 1)),
        )

    def tool_call(self) -> ToolCall | None:
        return self.constraint[1]


_STREAM_OPTIONS = ("'stream_options' must be an object such as {\"include_usage\": true}, and only with "
                   "'stream': true.")


class _ChatShaped:
    """A body the model reads as a chat (chat completions, and Responses in other words): what its rules derived."""
    _derived: Any

    @property
    def chat(self) -> list[dict]:
        """The chat the model sees, in the chat template's shape (developer read as system, text parts joined;
        a Responses body's instructions, then its input's turns)."""
        return self._derived[0]

    @property
    def max_output(self) -> int | None:
        """The tokens it may write (max_completion_tokens, else max_tokens; a Responses body's
        max_output_tokens); None: the rest of the context."""
        return self._derived[1]


class ChatCompletionRequest(_ChatShaped, Sampling):
    """A /v1/chat/completions body."""
    endpoint: ClassVar[str] = CHAT

    messages: Any = None        # the rules checked it; `chat` holds it in the template's shape
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stream: Any = None
    stream_options: Any = None

    @classmethod
    def check(cls, body: dict, door: Door) -> tuple[list[dict], int | None]:
        stream_rules(body, door, _STREAM_OPTIONS, usage=True)
        sampled = {k: v for k, v in body.items() if k not in ("stream", "stream_options")} if door.interactive \
            else body
        check_sampling(sampled, CHAT, door.info.tool_calls, door.info.grammar, door.info.vocab_size)
        messages = check_messages(body.get("messages"))
        mt = check_int(body, "max_completion_tokens", 1)
        return messages, mt if mt is not None else check_int(body, "max_tokens", 1)


class CompletionRequest(Sampling):
    """A /v1/completions body: one prompt, a string or token ids."""
    endpoint: ClassVar[str] = COMPLETIONS

    prompt: str | list[str] | list[int] | None = None
    max_tokens: int | None = None
    stream: Any = None
    stream_options: Any = None

    @classmethod
    def check(cls, body: dict, door: Door) -> tuple[str | list[int], int]:
        stream_rules(body, door, _STREAM_OPTIONS, usage=True)
        sampled = {k: v for k, v in body.items() if k not in ("stream", "stream_options")} if door.interactive \
            else body
        check_sampling(sampled, COMPLETIONS, door.info.tool_calls, door.info.grammar, door.info.vocab_size)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        mt = check_int(body, "max_tokens", 1)
        mt = COMPLETIONS_MAX_TOKENS if mt is None else mt
        vocab = door.info.vocab_size
        if isinstance(prompt, str) and prompt:
            return prompt, mt
        if is_token_ids(prompt, vocab):
            return list(prompt), mt
        bad = token_id_error(prompt, vocab)       # named first: the caller sees which id is out of range
        raise BodyError("invalid_value", (f"{bad} " if bad else "") + f"'prompt' must be a non-empty string or "
                        f"{token_ids_rule(vocab)}"
                        + ("." if door.interactive else " (one prompt per line)."), "prompt")

    @property
    def text(self) -> str | None:
        """The prompt's text; None where it came as token ids."""
        return self._derived[0] if isinstance(self._derived[0], str) else None

    @property
    def prompt_ids(self) -> list[int] | None:
        """The prompt's token ids where it came as ids (run as given); None for a text prompt."""
        return None if isinstance(self._derived[0], str) else self._derived[0]

    @property
    def max_output(self) -> int:
        return self._derived[1]


class EmbeddingRequest(RequestBody):
    """A /v1/embeddings body: its inputs, texts or token ids, and how the vectors are written."""
    endpoint: ClassVar[str] = embeddings.ENDPOINT

    input: Any = None
    encoding_format: str | None = None
    dimensions: int | None = None

    @classmethod
    def check(cls, body: dict, door: Door) -> embeddings.EmbedInputs:
        return embeddings.check_embeddings(body, door.info)

    @property
    def inputs(self) -> embeddings.EmbedInputs:
        return self._derived

    def sampling_params(self, max_tokens: int = 0) -> SamplingParams:
        """Prefill only: an embedding decodes nothing."""
        return SamplingParams(max_tokens=0)


class ResponsesRequest(_ChatShaped, RequestBody):
    """A /v1/responses body: a chat in other words (blendserve/protocol/responses_api.py translates it)."""
    endpoint: ClassVar[str] = responses_api.ENDPOINT

    input: Any = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    text: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    include: list[str] | None = None
    top_logprobs: int | None = None
    stream: Any = None
    stream_options: Any = None

    @classmethod
    def check(cls, body: dict, door: Door) -> tuple[list[dict], int | None]:
        if not door.interactive and body.get("stream"):
            raise BodyError("stream_unsupported", "'stream': true is not allowed in a batch.", "stream")
        stream_rules(body, door, "'stream_options' must be an object, and only with 'stream': true.", usage=False)
        return responses_api.check_responses(body, door.info.grammar)

    @functools.cached_property
    def sampling(self) -> Sampling:
        """Its sampling settings in chat's words (`text.format` is chat's `response_format`)."""
        return Sampling.model_validate(responses_api.chat_params(self.params()))

    def sampling_params(self, max_tokens: int) -> SamplingParams:
        return self.sampling.sampling_params(max_tokens)

    def tool_call(self) -> ToolCall | None:
        return self.sampling.tool_call()


REQUESTS: dict[str, type[RequestBody]] = {m.endpoint: m for m in (
    ChatCompletionRequest, CompletionRequest, EmbeddingRequest, ResponsesRequest)}


def parse(endpoint: str, body: Any, info: ModelInfo, interactive: bool = False) -> RequestBody:
    """`body` checked and typed as `endpoint`'s request. Raises BodyError."""
    return REQUESTS[endpoint].parse(body, info, interactive)


def stored(endpoint: str, params: dict) -> RequestBody:
    """A row's stored parameters as `endpoint`'s request (see RequestBody.stored)."""
    return REQUESTS[endpoint].stored(params)


def sampling_params(params: dict, max_tokens: int) -> SamplingParams:
    """Stored parameters (or any body in chat's words) as the engine's SamplingParams."""
    return Sampling.stored(params).sampling_params(max_tokens)
