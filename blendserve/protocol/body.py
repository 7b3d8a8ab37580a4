"""What every endpoint's typed request body shares (protocol/requests.py holds the endpoints' own): the one
parse, the stored form a row keeps, and the rules every generating endpoint applies to `stream`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError

from blendserve.protocol.fields import BodyError, ModelInfo
from blendserve.protocol.sampling import SamplingParams
from blendserve.protocol.structured import ToolCall

PROMPT_KEYS = ("messages", "prompt", "input")   # what a row does not store: it stays in the input file


@dataclass(frozen=True)
class Door:
    """What the rules check a body against: the served model, and whether the body came as an interactive
    call (`stream` allowed) or as a batch line (`stream` refused)."""
    info: ModelInfo
    interactive: bool = False


def or_default(value: Any, default: Any) -> Any:
    """OpenAI reads an explicit ``null`` as "use the default"."""
    return default if value is None else value


def stream_rules(body: dict, door: Door, options_rule: str, usage: bool) -> None:
    """`stream` and `stream_options`: a boolean and an object beside it on an interactive call (`usage`: one
    whose `include_usage` is a boolean, chat's and completions' option); a batch line may not stream (the
    endpoint's own rules refuse it there)."""
    if not door.interactive:
        return
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise BodyError("invalid_value", f"'stream' must be a boolean, got {stream!r}.", "stream")
    options = body.get("stream_options")
    if options is not None and (not stream or not isinstance(options, dict) or (
            usage and not isinstance(options.get("include_usage", False), bool))):
        raise BodyError("invalid_value", options_rule, "stream_options")


def _body_error(e: ValidationError) -> BodyError:
    """A value of a type the rules let through but the model's field does not take, in OpenAI's words."""
    err = e.errors()[0]
    param = ".".join(str(p) for p in err["loc"]) or None
    return BodyError("invalid_value", f"'{param}': {err['msg']}." if param else f"{err['msg']}.", param)


class RequestBody(BaseModel):
    """What every endpoint's body shares: its model, its extra fields, its one parse and its stored form."""
    model_config = ConfigDict(extra="allow")
    endpoint: ClassVar[str]

    model: str | None = None
    _derived: Any = PrivateAttr(default=None)     # what the rules derived; None on stored parameters

    @classmethod
    def parse(cls, body: Any, info: ModelInfo, interactive: bool = False) -> RequestBody:
        """The body checked against the served model `info` and typed; `interactive`: a call, which may
        stream, rather than a batch line. Raises BodyError (a 400, or a batch line's own error).

        The endpoint's rules run on the raw body first (`check`), so a refusal is in OpenAI's words, not
        pydantic's; the typed model then carries what they derived. Why not a pydantic model validator:
        a wrap validator costs as much as the rules themselves, on every line of a million-line file."""
        if not isinstance(body, dict):
            raise BodyError("invalid_value", "The request body must be a JSON object.")
        derived = cls.check(body, Door(info, interactive))
        try:
            out = cls.model_validate(body)
        except ValidationError as e:
            raise _body_error(e) from None
        out.__pydantic_private__["_derived"] = derived     # what pydantic's __setattr__ does, without its checks
        return out

    @classmethod
    def stored(cls, params: dict) -> RequestBody:
        """A row's stored parameters, typed again (no rule runs: they passed at the door)."""
        return cls.model_validate(params)

    @classmethod
    def check(cls, body: dict, door: Door) -> Any:
        """The endpoint's rules; returns what they derived (the checked chat, the max tokens, ...)."""
        raise NotImplementedError

    def params(self) -> dict:
        """The parameters a row stores: what the caller set (typed, plain JSON values), less the prompt. Read
        off the fields, not through model_dump, which costs as much as the rules on a million-line file."""
        given = self.model_fields_set
        out = {k: v for k, v in self.__dict__.items() if k in given and k not in PROMPT_KEYS}
        out.update((k, v) for k, v in (self.__pydantic_extra__ or {}).items() if k not in PROMPT_KEYS)
        return out

    def sampling_params(self, max_tokens: int) -> SamplingParams:
        """What the engine samples with; `max_tokens`: the row's, filled in once the prompt was counted."""
        raise NotImplementedError

    def tool_call(self) -> ToolCall | None:
        """How the output becomes a tool call (a forced call, or tool_choice "auto"), or None."""
        return None
