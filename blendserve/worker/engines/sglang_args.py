"""What the SGLang engine hands SGLang: `sglang.Engine` keyword arguments and per-request sampling params.

Pure Python (no sglang import), so the rules are tested on any machine:

- SGLang's scheduler runs `schedule_policy="fcfs"` with priority scheduling on: every request carries a
  priority (`priority`), SGLang's queue sorts by it and then by arrival, higher first. Interactive requests
  get INTERACTIVE_PRIORITY, so a chat waits behind no queued batch work (and, past SGLang's preemption
  threshold, may retract running batch requests to start); batch requests get minus their place in the plan,
  so SGLang admits them in plan order, and a request SGLang retracts when its KV pool fills goes back to its
  place in the plan, not to the end of the queue (plain FCFS appends it). Without priority scheduling SGLang
  0.5.23 ignores a request's priority, or aborts it with a 503 under `--abort-on-priority-when-disabled`
  (`Scheduler._set_or_validate_priority`): a server not started with it is sent none.
- Mixed chunked prefill (`enable_mixed_chunk`) makes one step carry every running decode plus a prefill
  chunk, `chunked_prefill_size` tokens together: the step a blend is paced for. SGLang turns mixing off
  with speculative decoding (and caps running requests at 48): then the engine reports no step budget.
- `top_p: 0` (OpenAI: only the likeliest token) is `top_k: 1` for SGLang, which refuses a top_p of 0.
- A `logit_bias` id outside SGLang's vocabulary is refused for that request alone (SGLang would raise).
- Structured output is SGLang's `json_schema` (its grammar backend, xgrammar by default); n choices are its
  `n` (parallel sampling: the prompt is prefilled once and forked); logprobs are `return_logprob` with
  `top_logprobs_num` (`logprob_kwargs`).
- SGLang keeps the stop token that ended an output among its `output_ids` (and its logprobs); OpenAI's output,
  vLLM's and the CPU engine's have none: `without_stop_token` drops it on both SGLang paths.
- `seed` is honoured only under SGLang's deterministic inference (`sampling_seed` is ignored otherwise):
  BLENDSERVE_SGLANG_DETERMINISTIC turns it on, at a throughput cost; off, a seed is accepted and, as
  OpenAI says of seeds, determinism is not guaranteed.
"""
from __future__ import annotations

from pathlib import Path

from blendserve.core.engine_settings import SglangSettings
from blendserve.worker.engines.base import SamplingParams, TokenLogprob
from blendserve.worker.engines.speculative import SpecConfig

# SGLang's router takes a priority as a 32-bit integer (sglang-router 0.3.2 answers 422 past it).
I32_MAX = (1 << 31) - 1
INTERACTIVE_PRIORITY = I32_MAX     # above every batch request's; SGLang runs higher values first


def priority(seq: int) -> int:
    """SGLang's priority of the request at place `seq` in the plan (a negative seq: an interactive request),
    within the 32 bits SGLang's router accepts."""
    return INTERACTIVE_PRIORITY if seq < 0 else -min(seq, I32_MAX)


class Refused(ValueError):
    """A request SGLang cannot run as asked; it fails alone with this message."""


def engine_args(model_path: Path, options: SglangSettings, *, tp: int = 1, spec: SpecConfig | None = None) -> dict:
    """Keyword arguments for `sglang.Engine`."""
    args: dict = dict(model_path=str(model_path), tp_size=tp, schedule_policy="fcfs",
                      enable_priority_scheduling=True,
                      # compact JSON under a schema, as on the other engines: with free whitespace a small model
                      # writes blank lines until max_tokens
                      constrained_json_disable_any_whitespace=True,
                      chunked_prefill_size=options.chunked_prefill_size, log_level="warning")
    spec_args = (spec or SpecConfig()).sglang()
    if not spec_args:
        args["enable_mixed_chunk"] = True      # SGLang refuses to mix chunks while it speculates
    args.update(spec_args)
    optional = {"mem_fraction_static": options.mem_fraction_static, "max_total_tokens": options.max_total_tokens,
                "max_running_requests": options.max_running_requests, "device": options.device or None,
                "attention_backend": options.attention_backend or None, "dtype": options.dtype or None}
    args.update({k: v for k, v in optional.items() if v is not None})
    if options.disable_cuda_graph:
        args["disable_cuda_graph"] = True
    if options.deterministic:
        args["enable_deterministic_inference"] = True
    return args


def sampling_params(p: SamplingParams, vocab_size: int, *, deterministic: bool = False) -> dict:
    """SGLang's sampling params for one request; raises Refused for what SGLang would refuse."""
    params: dict = {"max_new_tokens": p.max_tokens, "temperature": p.temperature, "top_p": p.top_p,
                    "stop": list(p.stop) or None, "presence_penalty": p.presence_penalty,
                    "frequency_penalty": p.frequency_penalty}
    if p.top_p <= 0.0:
        params.update(top_p=1.0, top_k=1)
    if p.logit_bias:
        outside = [t for t, _ in p.logit_bias if not 0 <= t < vocab_size]
        if outside:
            raise Refused(f"logit_bias token id {outside[0]} is outside the model's vocabulary "
                          f"(ids 0 to {vocab_size - 1}).")
        params["logit_bias"] = {str(t): b for t, b in p.logit_bias}
    if deterministic and p.seed is not None:
        params["sampling_seed"] = p.seed
    if p.json_schema is not None:
        params["json_schema"] = p.json_schema
    if p.n > 1:
        params["n"] = p.n
    return params


def logprob_kwargs(p: SamplingParams) -> dict:
    """`async_generate` arguments for logprobs of the output tokens (none of the prompt's) with their text."""
    if p.logprobs is None:
        return {}
    return {"return_logprob": True, "logprob_start_len": -1, "top_logprobs_num": p.logprobs,
            "return_text_in_logprobs": True}


def logprob_entries(meta: dict, start: int = 0) -> list[TokenLogprob] | None:
    """SGLang's `output_token_logprobs` [(logprob, id, text)] and `output_top_logprobs` (one such list per
    position) from position `start` on, as OpenAI's entries (a token's bytes are its text's UTF-8)."""
    chosen = meta.get("output_token_logprobs")
    if chosen is None:
        return None
    tops = meta.get("output_top_logprobs") or [[] for _ in chosen]

    def entry(lp: float, text: str | None, top: tuple = ()) -> TokenLogprob:
        return TokenLogprob(text or "", list((text or "").encode()), float(lp), top)

    return [entry(lp, text, tuple(entry(tl, tt) for tl, _, tt in (top or ())))
            for (lp, _, text), top in zip(chosen[start:], tops[start:])]


def without_stop_token(ids: list[int], finish: dict | None) -> list[int]:
    """The output without the stop token that ended it (SGLang keeps it; OpenAI's output has none)."""
    matched = (finish or {}).get("matched")
    if (finish or {}).get("type") == "stop" and isinstance(matched, int) and ids and ids[-1] == matched:
        return ids[:-1]
    return ids


def positive(value: object) -> int | None:
    """`value` as a positive int; None for anything else (a missing, null or zero figure)."""
    try:
        n = int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def sglang_running_cap(info: dict) -> int | None:
    """The requests SGLang's schedulers run at once: each data-parallel rank's effective cap, summed (a rank
    not listed counts as the first); the launch argument only where no rank reports one (older servers)."""
    states = [s for s in info.get("internal_states") or [] if isinstance(s, dict)]
    effective = [n for n in (positive(s.get("effective_max_running_requests_per_dp")) for s in states) if n]
    if effective:
        ranks = positive(info.get("dp_size")) or 1
        return sum(effective) + effective[0] * max(0, ranks - len(effective))
    first = states[0] if states else {}
    return positive(info.get("max_running_requests") or first.get("max_running_requests"))
