"""Request bodies to sampling params and engine results to the bodies chat and completions return, under the
names the worker calls: the protocol's typed requests and result bodies (blendserve/protocol/requests.py,
blendserve/protocol/results.py) do the work."""
from __future__ import annotations

from blendserve.protocol.requests import Sampling
from blendserve.protocol.results import (  # noqa: F401  (the worker's names for them)
    chat_logprobs,
    chat_message,
    completion_logprobs,
    logprob_entries,
    response_body,
    usage,
)
from blendserve.protocol.sampling import SamplingParams
from blendserve.protocol.structured import ToolCall


def sampling_params(body: dict, max_tokens: int) -> SamplingParams:
    """A row's stored parameters (or any body in chat's words) as the engine's SamplingParams."""
    return Sampling.stored(body).sampling_params(max_tokens)


def tool_call(body: dict) -> ToolCall | None:
    """How the output becomes `message.tool_calls` (a forced call), or None for a plain message."""
    return Sampling.stored(body).tool_call()
