"""vLLM's offline engine behind blendserve.worker.engines.base.Engine.

The worker, not vLLM, decides the order: requests reach vLLM's scheduler as
token ids, in plan order, and only while it has room (``max_num_seqs`` running
and ``queued`` more waiting in vLLM), so the plan's admission order is vLLM's
admission order and requests not yet handed over can still be filtered by the
worker. The queue inside vLLM lets its scheduler fill a slot in the same step
that freed it (short answers free slots every step), as run_batch's whole-file
queue does; interactive requests go in at a higher priority (vLLM's priority
policy: lower first, then arrival), so they wait behind no queued batch work. The
step loop of ``LLMEngine`` (rather than ``LLM.generate``, which takes the whole
list at once) is what makes that lazy admission possible, and it lets the
engine abort requests whose batch was cancelled between two steps.

Prefix caching is on: that is where the planner's prefix-aware order pays.
vLLM caches prefixes in whole KV blocks, so a smaller block size than the CPU
default (128) lets shorter shared prefixes hit.

Settings come from ``BLENDSERVE_VLLM_*`` variables (``blendserve.core.config.VllmSettings``), and
vLLM itself reads ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache on CPU). On CPU
the process must start with ``LD_PRELOAD=<venv>/lib/libiomp5.so``
(scripts/setup_vllm.sh sets it). vLLM runs its engine core in a spawned
process, as its own run_batch does (with the core in this process,
VLLM_ENABLE_V1_MULTIPROCESSING=0, the benchmark ran markedly slower).
Spawning re-imports the entry point's main
module unless it is a package's ``__main__`` (``python -m blendserve``,
``python -m pytest``), so a script that starts this engine needs a
``__main__`` guard.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blendserve.core.engine_settings import VLLM_CPU_DEFAULTS, SpeculativeSettings, VllmSettings
from blendserve.worker.engines.base import EngineStats, GenRequest, GenResult, TokenLogprob, device_profile
from blendserve.worker.engines.device import default_dtype, on_gpu
from blendserve.worker.engines.driver import CoreDefaults, Feed, Tokens, drive, failure
from blendserve.worker.engines.logprobs import TokenNames
from blendserve.worker.engines.speculative import SpecConfig
from blendserve.worker.engines.vllm_args import nucleus

log = logging.getLogger("blendserve.worker")
_D = VllmSettings.model_fields     # one set of defaults: the settings' own
URGENT = -1                        # vLLM's priority of interactive requests (batch work: 0; lower runs first)


@dataclass(frozen=True)
class VllmOptions:
    """Engine arguments the service sets (``VllmSettings``, BLENDSERVE_VLLM_*); every other vLLM argument
    keeps vLLM's default."""

    # None: not passed, vLLM's own choice (a GPU's defaults; from_settings fills the CPU's in on a CPU).
    max_num_seqs: int | None = VLLM_CPU_DEFAULTS["max_num_seqs"]
    block_size: int = _D["block_size"].default
    max_num_batched_tokens: int | None = VLLM_CPU_DEFAULTS["max_num_batched_tokens"]
    enforce_eager: bool | None = VLLM_CPU_DEFAULTS["enforce_eager"]
    dtype: str = _D["dtype"].default
    # KV blocks to allocate instead of what VLLM_CPU_KVCACHE_SPACE allows (whole GiB on CPU): a
    # benchmark scales the cache down with its workload, as a real batch is many times a GPU's cache.
    num_blocks: int | None = None
    queued: int = _D["queued"].default
    # BLENDSERVE_SPECULATIVE=ngram: vLLM's own n-gram (prompt lookup) speculation; off unless set.
    speculative: SpecConfig = SpecConfig()

    @classmethod
    def from_settings(cls, settings: VllmSettings, speculative: SpeculativeSettings | None = None,
                      gpu: bool | None = None) -> VllmOptions:
        """`speculative`: the deployment's speculation (None: off, as for the pooling runner); `gpu`: whether
        vLLM runs on a GPU (None: whether torch sees one)."""
        s = settings.on_device(on_gpu() if gpu is None else gpu)
        return cls(max_num_seqs=s.max_num_seqs, block_size=s.block_size,
                   max_num_batched_tokens=s.max_num_batched_tokens, enforce_eager=s.enforce_eager,
                   dtype=s.dtype, num_blocks=s.num_blocks, queued=s.queued,
                   speculative=SpecConfig.from_settings(speculative) if speculative is not None else SpecConfig())

    def engine_args(self, model_path: Path, model_name: str) -> dict:
        """Keyword arguments for vllm.EngineArgs (also the flags the benchmark gives run_batch)."""
        args = dict(model=str(model_path), served_model_name=[model_name], dtype=self.dtype or default_dtype(),
                    enable_prefix_caching=True, scheduling_policy="priority", block_size=self.block_size, seed=0,
                    # logprobs of the distribution sampled from (after temperature and penalties), as OpenAI
                    # reports them; vLLM's default is the raw logits'.
                    logprobs_mode="processed_logprobs",
                    # Compact JSON under a schema, as on the CPU engine: vLLM's grammar backends read this from
                    # the engine's config (a request's own disable_any_whitespace is not consulted), and a small
                    # model given free whitespace can spend its max_tokens on blank lines.
                    structured_outputs_config={"backend": "xgrammar", "disable_any_whitespace": True})
        device = {"max_num_seqs": self.max_num_seqs, "max_num_batched_tokens": self.max_num_batched_tokens,
                  "enforce_eager": self.enforce_eager}
        args.update({k: v for k, v in device.items() if v is not None})    # None: vLLM's own (a GPU's)
        if self.num_blocks:
            args["num_gpu_blocks_override"] = self.num_blocks
        if self.speculative.on:
            args["speculative_config"] = self.speculative.vllm()
        return args


def _less_eos(completion, entries: list[TokenLogprob] | None) -> list[TokenLogprob] | None:
    """vLLM keeps the EOS (or stop token) that ended a choice among its tokens; OpenAI's logprobs, and the CPU
    engine's, list only the answer's own tokens."""
    if entries and completion.finish_reason == "stop" and not isinstance(completion.stop_reason, str):
        return entries[:-1]
    return entries


def resolved(vllm_config) -> dict:
    """What vLLM settled on (its own choice where the worker passed nothing): the running cap the worker
    feeds to, the step tokens the planner paces a blend to, whether CUDA graphs run."""
    sched = vllm_config.scheduler_config
    return {"max_num_seqs": int(sched.max_num_seqs), "max_num_batched_tokens": int(sched.max_num_batched_tokens),
            "enforce_eager": bool(vllm_config.model_config.enforce_eager)}


class _VllmCore(CoreDefaults):
    """One stream on vLLM: requests by their vLLM id; the cap is vLLM's running cap plus a short queue."""

    def __init__(self, engine: VllmEngine) -> None:
        self.engine = engine
        self.running: dict[str, GenRequest] = {}
        engine._running = self.running
        self.sent: dict[str, dict[int, int]] = {}       # streamed request id -> choice -> tokens handed out
        self.cap = engine.resolved["max_num_seqs"] + engine.options.queued

    def room(self) -> bool:
        return len(self.running) < self.cap

    def add(self, request: GenRequest, urgent: bool) -> None:
        rid = self.engine._add(request, URGENT if urgent else 0)
        self.running[rid] = request
        if urgent:
            self.sent[rid] = {}

    def abort(self, keys: list[int]) -> None:
        gone = [rid for rid in map(str, keys) if rid in self.running]
        if gone:
            self.engine._engine.abort_request(gone)
            for rid in gone:
                del self.running[rid]
                self.sent.pop(rid, None)

    def busy(self) -> bool:
        return bool(self.running)

    def step(self, feed: Feed) -> Iterator[GenResult | Tokens]:
        """What vLLM's step produced; a request whose own deltas or result raise fails alone (design §12.1)."""
        for out in self.engine._engine.step():
            request = self.running.get(out.request_id)
            if request is None:
                continue
            try:
                if out.request_id in self.sent:
                    yield from self.engine._deltas(request, out, self.sent[out.request_id])
                if out.finished:
                    del self.running[out.request_id]
                    self.sent.pop(out.request_id, None)
                    yield self.engine._result(request, out)
            except Exception as e:
                self.abort([request.key])
                yield failure(request.key, e, len(request.input_ids))

    def close(self) -> None:
        if self.running and self.engine._engine is not None:
            self.engine._engine.abort_request(list(self.running))
        self.running.clear()


class VllmBase:
    """What vLLM's generation and pooling engines share: the engine core built from engine arguments, the
    device it runs on, and its shutdown."""

    _engine: Any

    def _start(self, args: dict) -> None:
        from vllm import EngineArgs, LLMEngine

        self._engine = LLMEngine.from_engine_args(EngineArgs(**args))

    def hardware(self) -> str | None:
        return device_profile()

    def close(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.engine_core.shutdown()


class VllmEngine(VllmBase):
    """One model on vLLM's LLMEngine, fed lazily in plan order."""

    def __init__(self, model_path: Path, model_name: str, options: VllmOptions) -> None:
        """`options`: the service's vLLM settings (VllmOptions.from_settings); the worker's entry point sets
        HF_HUB_OFFLINE, so vLLM never reaches for the Hub."""
        from vllm.config import StructuredOutputsConfig

        self.model_name = model_name
        self.options = options
        args = self.options.engine_args(Path(model_path), model_name)
        args["structured_outputs_config"] = StructuredOutputsConfig(**args["structured_outputs_config"])
        self._start(args)
        cache = self._engine.vllm_config.cache_config
        self._capacity = int(cache.num_gpu_blocks) * int(cache.block_size)
        self.resolved = resolved(self._engine.vllm_config)
        log.info("vLLM resolved for %s on %s: max_num_seqs=%d max_num_batched_tokens=%d enforce_eager=%s "
                 "kv_tokens=%d", model_name, device_profile() or "an unknown device", self.resolved["max_num_seqs"],
                 self.resolved["max_num_batched_tokens"], self.resolved["enforce_eager"], self._capacity)
        self._running: dict = {}
        self._names: TokenNames | None = None     # token texts and bytes for logprobs, made on first use
        self._model_path = Path(model_path)

    def kv_capacity_tokens(self) -> int:
        return self._capacity

    def stats(self) -> EngineStats:
        """Requests added to vLLM and not finished; KV use lives in vLLM's engine-core process: unknown here."""
        return EngineStats(len(self._running))

    def step_token_budget(self) -> int:
        """vLLM V1 always chunks prefills and schedules them beside the running decodes, up to
        max_num_batched_tokens a step."""
        return int(self._engine.vllm_config.scheduler_config.max_num_batched_tokens)

    def generate(self, requests: Iterable[GenRequest],
                 cancelled: Callable[[int], bool] | None = None,
                 urgent: Callable[[], list[GenRequest]] | None = None,
                 cancel_epoch: Callable[[], int] | None = None) -> Iterator[GenResult]:
        """Urgent requests are added at once, past max_num_seqs of our feeding (vLLM's own scheduler then
        runs them first-come among what it has, which the driver keeps short); their tokens stream out of
        cumulative outputs."""
        yield from drive(_VllmCore(self), requests, cancelled, urgent, cancel_epoch)

    def _add(self, request: GenRequest, priority: int = 0) -> str:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        p = request.params
        rid = str(request.key)
        # Structured output: vLLM's own grammar backend (xgrammar) under the same schema; compact JSON, as on
        # the CPU engine. n choices share the prompt's blocks in vLLM's prefix cache.
        structured = StructuredOutputsParams(json=p.json_schema, disable_any_whitespace=True,
                                             disable_additional_properties=p.strict_schema) \
            if p.json_schema is not None else None
        self._engine.add_request(rid, {"prompt_token_ids": list(request.input_ids)}, SamplingParams(
            max_tokens=p.max_tokens, temperature=p.temperature, **nucleus(p), stop=list(p.stop) or None,
            seed=p.seed, presence_penalty=p.presence_penalty, frequency_penalty=p.frequency_penalty,
            logit_bias=dict(p.logit_bias) or None, n=p.n, logprobs=p.logprobs, structured_outputs=structured,
            output_kind=RequestOutputKind.CUMULATIVE if request.on_tokens else RequestOutputKind.FINAL_ONLY),
            priority=priority)
        return rid

    def _entries(self, completion, k: int, start: int = 0) -> list[TokenLogprob] | None:
        """vLLM's per-position {token id: Logprob} maps (the chosen token and the k likeliest) to OpenAI's
        entries: the chosen token's logprob and the k likeliest by rank."""
        if completion.logprobs is None:
            return None
        if self._names is None:
            from blendserve.core.modelstore import load_tokenizer

            self._names = TokenNames(load_tokenizer(self._model_path))
        out = []
        for token, ranked in zip(completion.token_ids[start:], completion.logprobs[start:]):
            top = sorted(((t, lp) for t, lp in ranked.items() if lp.rank is not None and lp.rank <= k),
                         key=lambda x: x[1].rank)
            out.append(self._names.entry(token, ranked[token].logprob, [(t, lp.logprob) for t, lp in top]))
        return out

    def _deltas(self, request: GenRequest, out, sent: dict[int, int]) -> list[Tokens]:
        """New tokens of an urgent request's choices (cumulative outputs); `sent`: each choice's tokens
        already handed out."""
        deltas = []
        for completion in out.outputs:
            done = sent.get(completion.index, 0)
            entries = self._entries(completion, request.params.logprobs or 0, done)
            deltas.append(Tokens(request.key, list(completion.token_ids[done:]), completion.index, entries))
            sent[completion.index] = len(completion.token_ids)
        return deltas

    def _result(self, request: GenRequest, out) -> GenResult:
        first, *rest = [GenResult(
            key=request.key,
            output_ids=list(completion.token_ids),
            text=completion.text,
            # vLLM says "stop" for EOS and stop strings, "length" for max_tokens or the context's end.
            finish_reason="length" if completion.finish_reason == "length" else "stop",
            prompt_tokens=len(request.input_ids),
            cached_tokens=int(out.num_cached_tokens or 0),
            logprobs=_less_eos(completion, self._entries(completion, request.params.logprobs or 0)),
        ) for completion in sorted(out.outputs, key=lambda c: c.index)]
        first.choices = rest
        first.__post_init__()             # completion tokens of every choice
        return first

    def reset_cache(self) -> None:
        """Drop every cached prefix (idle engine only): benchmarks compare runs from an empty cache."""
        self._engine.reset_prefix_cache()
