"""The contract between the worker loop and an inference engine.

The worker hands an engine an *ordered* stream of tokenized requests (the plan
order) and consumes results as they finish. Engines pull from the stream only
when they have room (continuous batching), so the plan's admission order is
the engine's admission order, and the worker can drop requests that were
cancelled while they waited. CPU, SGLang and vLLM engines all implement this.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal, Protocol

from blendserve.protocol.sampling import SamplingParams, TokenLogprob  # noqa: F401  (the engines import them here)


@dataclass(frozen=True)
class GenRequest:
    key: int                      # opaque to the engine; echoed in the result
    input_ids: list[int]
    params: SamplingParams
    # Interactive requests only: called from the engine's thread with each run of newly sampled token ids,
    # in order, as they are committed (a stream's deltas). Batch requests leave it None. Where params ask for
    # n > 1 or logprobs, engines that can say pass `choice=` (the choice's index) and `logprobs=` (a
    # TokenLogprob per id) as keywords.
    on_tokens: Callable[[list[int]], None] | None = field(default=None, compare=False)
    # Interactive requests: the caller's tenant (the API's TENANT_HEADER), whose turn an engine that orders
    # interactive work keeps among other tenants' (the CPU engine's scheduler). "": none named.
    tenant: str = ""


@dataclass
class GenResult:
    key: int
    output_ids: list[int]
    text: str                     # decoded output, stop string removed
    finish_reason: Literal["stop", "length"]
    prompt_tokens: int
    cached_tokens: int            # prompt tokens served from the prefix cache
    # The engine refused this request alone (a parameter it cannot apply): the worker writes it as the
    # request's own error line and the rest of the stream runs on. None: a result.
    error: str | None = None
    # With `error`: the request's own input is at fault (a token id past the vocabulary, a parameter the engine
    # rejects), so an interactive caller gets a 400; False: the engine failed on it (a 500, not retried).
    refused: bool = False
    logprobs: list[TokenLogprob] | None = None     # per output token, when the request asked for them
    choices: list[GenResult] = field(default_factory=list)   # choices 1..n-1 of an n > 1 request; this is 0
    # OpenAI's system_fingerprint: what computed the result, where the engine can say (see fingerprint()).
    fingerprint: str | None = None
    completion_tokens: int = field(init=False)     # every choice's tokens together, as usage counts them

    def __post_init__(self) -> None:
        self.completion_tokens = len(self.output_ids) + sum(c.completion_tokens for c in self.choices)


@dataclass(frozen=True)
class EngineStats:
    """The engine's load now, pushed with the worker's heartbeat for /metrics and the dashboard.
    None: this engine cannot say."""
    running_sequences: int | None = None
    kv_used_tokens: int | None = None      # KV tokens held by running sequences (not the evictable prefix cache)


def engine_stats(engine: object) -> EngineStats:
    """`engine.stats()` where the engine has one, else unknown; never raises (it runs in the heartbeat thread,
    concurrently with the engine's own loop, so it reads counters without locks and may be a step stale)."""
    stats = getattr(engine, "stats", None)
    try:
        return stats() if stats is not None else EngineStats()
    except Exception:
        return EngineStats()


def fingerprint(*parts: object) -> str:
    """A system_fingerprint ("fp_" and 10 hex digits, OpenAI's shape) of the backend configuration in `parts`:
    equal fingerprints, equal configurations, so a caller can tell when outputs may change for that reason."""
    import hashlib

    return "fp_" + hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:10]


def engine_fingerprint(engine: object) -> str:
    """The engine's own fingerprint where it has one (the CPU engine's names its numerics), else one of its
    kind and model: what computed a result, on engines whose outputs a seed does not pin."""
    own = getattr(engine, "fingerprint", None)
    if isinstance(own, str) and own:
        return own
    kind = type(engine)
    return fingerprint(kind.__module__, kind.__qualname__, getattr(engine, "model_name", ""))


def device_profile() -> str | None:
    """The name of the planner's hardware profile (blendserve.planner.perf.HARDWARE) for the device torch
    computes on here: "cpu" without CUDA, the GPU's by its name where the planner has one, else None.
    The planner prices rounds on it; the roles share no code, so the names are matched as strings."""
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    name = torch.cuda.get_device_name(0).lower()
    return next((profile for key, profile in (("h200", "h200"), ("h100", "h100-sxm"), ("a100", "a100-80gb"))
                 if key in name), None)


class Engine(Protocol):
    """An inference engine for one model."""

    model_name: str

    def kv_capacity_tokens(self) -> int:
        """How many tokens of KV cache the engine can hold at once (for the planner)."""
        ...

    def step_token_budget(self) -> int | None:
        """Tokens one forward step carries at most, prefill chunks and decodes together (vLLM's
        max_num_batched_tokens); None when the engine cannot carry prefill and decode in one step.
        The planner reads it to size the blend of compute- and memory-dense requests."""
        ...

    def hardware(self) -> str | None:
        """The planner's hardware profile of the device the engine computes on (device_profile());
        None: unknown. Optional: an engine without it registers None."""
        ...

    def generate(self, requests: Iterable[GenRequest],
                 cancelled: Callable[[int], bool] | None = None,
                 urgent: Callable[[], list[GenRequest]] | None = None,
                 cancel_epoch: Callable[[], int] | None = None) -> Iterator[GenResult]:
        """Run requests, admitted in iteration order; yield each result as it finishes.

        The engine must not read ahead of what it can admit now, so that the
        caller can stop or filter the stream between admissions. `requests` may
        yield None for "nothing ready now": the stream ends there if nothing
        runs, else the engine asks again at its next admission. Between steps
        it drops running requests for which `cancelled(key)` is true, without a
        result (the batch was cancelled or expired, or the claim was lost).

        `cancel_epoch`, where given, is a number the caller changes
        whenever `cancelled` may have turned true for a request the engine
        already runs. An engine may skip a step's per-request `cancelled` calls
        when the number, read before those calls, equals the one read before
        its last full pass: at 256 running sequences a step, the calls were a
        worker's largest cost while nothing was ever cancelled.

        `urgent`, polled before every step, hands over interactive requests: they
        are admitted at that step, ahead of every waiting request and past the
        running cap, taking KV blocks from the newest batch requests if needed
        (those are recomputed later). The stream ends only once they finish too.
        """
        ...

    def close(self) -> None:
        ...

    # Optional: `stats() -> EngineStats`, read through engine_stats() (engines without it report unknown).
