"""The CPU engine: continuous batching with mixed prefill/decode steps over a paged, prefix-cached KV pool.

Each step (``Scheduler.schedule``) picks every running sequence's next
tokens and the first chunks of newly admitted ones, within a token budget;
the model runs them all in one forward pass; the sequences whose chunk
reached their end sample a token. Results are yielded as sequences finish
(``core.py`` runs one stream through the engines' one driver). So the order
in which the planner feeds requests changes the engine's speed the way it
does on a GPU engine: prefix order keeps the block cache hitting, and a
blend of long prompts and long outputs fills steps with both.

Unless speculation is off, in steps of few sequences a decoding sequence's
chunk carries a prompt-lookup draft, verified in the same step (``speculative.py``).

``BLENDSERVE_CPU_DEVICE`` puts the weights and the KV pool on another torch
device (a GPU): a step's inputs (token ids, positions, block tables) go there
once, sampled ids come back, and attention runs on torch's SDPA (the C++
decode kernel is CPU-only). With ``BLENDSERVE_CPU_LOAD_FORMAT=dummy`` the
weights are random, drawn on the device from config.json alone.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from blendserve.core.modelstore import context_length, eos_token_ids, load_tokenizer
from blendserve.worker.engines.base import EngineStats, GenRequest, GenResult, device_profile, fingerprint
from blendserve.worker.engines.cpu.block_manager import BlockManager
from blendserve.worker.engines.cpu.core import CpuCore
from blendserve.worker.engines.cpu.faults import check_ids, sample_each
from blendserve.worker.engines.cpu.grammar import Grammars
from blendserve.worker.engines.cpu.id_tokenizer import IdTokenizer
from blendserve.worker.engines.cpu.kv_cache import Chunk, KVPool, PagedAttention
from blendserve.worker.engines.cpu.model import ROW_BLOCK, Llama, default_dtype
from blendserve.worker.engines.cpu.native import paged_decode
from blendserve.worker.engines.cpu.results import Results
from blendserve.worker.engines.cpu.sampler import SamplingState, sample
from blendserve.worker.engines.cpu.scheduler import ScheduledChunk, Scheduler, Sequence, Step
from blendserve.worker.engines.cpu.speculative import PromptLookup, SpecConfig, SpecStats
from blendserve.worker.engines.cpu.stops import StopChecker
from blendserve.worker.engines.driver import drive, stream_tokens
from blendserve.worker.engines.logprobs import TokenNames
from blendserve.worker.engines.threads import DEFAULT_THREADS, one_thread

if TYPE_CHECKING:     # pydantic only where settings are read: the engine also runs where only torch is installed
    from blendserve.core.engine_settings import CpuEngineSettings
    from blendserve.core.grammar_settings import GrammarSettings

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
# Prompt lookup, on by default here, in steps of at most 4 sequences: measured faster on rewrite and chat
# alike there (BENCHMARKS.md, speculative decoding); vLLM and SGLang stay off unless set.
DEFAULT_SPEC = SpecConfig("ngram")


class CpuEngine:
    """Llama checkpoints (SmolLM2 by default) on CPU, behind blendserve.worker.engines.base.Engine."""

    def __init__(
        self,
        model_path: Path,
        model_name: str,
        *,
        max_running: int | None = None,
        threads: int | None = None,
        kv_gb: float | None = None,
        kv_capacity_tokens: int | None = None,
        block_size: int | None = None,
        step_tokens: int | None = None,
        dtype: torch.dtype | None = None,
        speculative: SpecConfig = DEFAULT_SPEC,
        config: CpuEngineSettings,
        grammar: GrammarSettings | None = None,
    ) -> None:
        """Knobs left unset come from ``config`` (the deployment's BLENDSERVE_CPU_* settings), speculation from
        ``speculative``; ``kv_capacity_tokens``, when given, sizes the pool in tokens instead of ``kv_gb``."""
        cfg = config
        self.model_name = model_name
        self.threads = threads or cfg.threads or DEFAULT_THREADS
        self.device = torch.device(cfg.device)
        model_path = Path(model_path)
        dummy = cfg.load_format == "dummy"
        # A random-weight model's directory may hold only config.json: then ids in, ids out.
        has_tokenizer = any((model_path / name).is_file() for name in TOKENIZER_FILES)
        self.tokenizer = load_tokenizer(model_path) if has_tokenizer or not dummy else None
        # Random weights give no token a meaning: none ends an output, each runs to max_tokens.
        self.eos = set() if dummy else set(eos_token_ids(model_path))
        self.context = context_length(model_path)
        if dtype is None:    # bfloat16 on a GPU; on a CPU where it multiplies natively
            dtype = default_dtype() if self.device.type == "cpu" else torch.bfloat16
        # Built here, once per machine, so the first step does not wait. CPU-only.
        self.decode_kernel = paged_decode() if cfg.native and self.device.type == "cpu" else None
        # Batch-invariant steps need the kernel: it reduces each query token alone (kv_cache.PagedAttention).
        self.exact = cfg.exact and self.decode_kernel is not None
        with one_thread():
            self.model = Llama(model_path, dtype, self.device, random_weights=dummy, exact=self.exact)
        if self.tokenizer is None:
            self.tokenizer = IdTokenizer(int(self.model.embed.shape[0]))
        # What decides the numbers: the same fingerprint and `exact`, the same greedy and seeded outputs.
        self.fingerprint = fingerprint("cpu", torch.__version__, dtype, self.device.type, f"exact={self.exact}",
                                       ROW_BLOCK if self.exact else self.threads)
        self.block_size = block_size or cfg.block_size
        self.max_running = max_running or cfg.max_batch
        self.step_tokens = step_tokens or cfg.max_batched_tokens
        self.rush_tokens = cfg.rush_tokens
        self.cut_in = cfg.cut_in   # interactive prompts run between layers
        if kv_capacity_tokens is None:
            gb = kv_gb if kv_gb is not None else cfg.kv_gb
            kv_capacity_tokens = int(gb * 2**30) // self.model.kv_bytes_per_token()
        self.num_blocks = max(1, kv_capacity_tokens // self.block_size)
        self._fresh_cache()
        self.step_log: list[Step] | None = None   # set to [] to record every step (benchmarks, tests)
        self.spec = speculative
        self.spec_stats = SpecStats()
        self.grammars: Grammars | None = None      # made at the first constrained request (xgrammar's vocab scan)
        self.grammar = grammar                     # compile threads and time budget (BLENDSERVE_GRAMMAR_*)
        self.names = TokenNames(self.tokenizer)
        self.results = Results(self.tokenizer, self.eos, self.names, self.fingerprint)

    def _fresh_cache(self) -> None:
        m = self.model
        self.pool = None     # a GPU pool's memory goes back before the next is allocated (no two at once)
        self.pool = KVPool(m.n_layers, m.n_kv_heads, m.head_dim, self.num_blocks, self.block_size, m.dtype,
                           self.device)
        self.blocks = BlockManager(self.num_blocks, self.block_size)

    def kv_capacity_tokens(self) -> int:
        """The KV pool in tokens. max_tokens is not reserved up front (the worker fills in the
        whole context when a request omits it): sequences grow block by block and the newest is
        preempted, to be recomputed later, when the pool runs out."""
        return self.num_blocks * self.block_size

    def step_token_budget(self) -> int:
        """Tokens one step carries at most, decodes and prefill chunks together."""
        return self.step_tokens

    def hardware(self) -> str | None:
        """"cpu" (the planner's profile of this engine on a CPU), or the GPU's profile on a GPU."""
        return "cpu" if self.device.type == "cpu" else device_profile()

    def close(self) -> None:
        self._fresh_cache()    # the pool's memory goes back at once (a GPU's especially)

    def stats(self) -> EngineStats:
        """Running sequences and KV tokens they hold (blocks not free), for the worker's heartbeat."""
        running = len(self._sched.running) if getattr(self, "_sched", None) else 0
        return EngineStats(running, (self.blocks.num_blocks - self.blocks.free_blocks) * self.block_size)

    @torch.inference_mode()
    def generate(self, requests: Iterable[GenRequest], cancelled: Callable[[int], bool] | None = None,
                 urgent: Callable[[], list[GenRequest]] | None = None,
                 cancel_epoch: Callable[[], int] | None = None) -> Iterator[GenResult]:
        torch.set_num_threads(self.threads)    # in the thread that runs the steps: see worker/engines/threads.py
        self.results.choices.clear()
        self.failed: dict[int, Exception] = {}     # requests whose own work raised in a step (cpu/faults.py)
        yield from drive(CpuCore(self), requests, cancelled, urgent, cancel_epoch)

    def _sequence(self, request: GenRequest) -> Sequence:
        """Choice 0 of the request; choices 1..n-1 wait in its ``forks`` (see ``_release``)."""
        ids = list(request.input_ids)
        check_ids(request.key, ids, int(self.model.embed.shape[0]))     # before it can reach a shared step
        p = request.params
        if p.json_schema is not None and self.grammars is None:
            self.grammars = Grammars.of_engine(self, request.key)

        def choice(i: int) -> Sequence:
            grammar = self.grammars.state(p.json_schema, p.strict_schema) if p.json_schema is not None else None
            return Sequence(request.key, list(ids), len(ids), choice=i, tenant=request.tenant,
                            state=(request, SamplingState(p, grammar, i), StopChecker(self.tokenizer, p.stop)))

        seq = choice(0)
        if p.n > 1:
            seq.forks = [choice(i) for i in range(1, p.n)]
            self.results.expect(request.key, p.n)
        if p.max_tokens <= 0 or len(ids) >= self.context:
            seq.finish_reason, seq.cached_tokens = "length", 0
        return seq

    def _release(self, seq: Sequence) -> None:
        """Choice 0 has its prompt's K/V (its first token was just sampled): the other choices join, each
        taking the prompt's cached full blocks, and draw their own first token from their own stream."""
        forks, seq.forks = seq.forks, None
        sched = self._sched
        for fork in forks:
            if seq.urgent:
                sched.admit_urgent(fork)
        if not seq.urgent:
            sched.waiting.extendleft(reversed(forks))

    def _draft(self, seq: Sequence, most: int) -> list[int]:
        """Prompt lookup's draft for ``seq``: never past max_tokens or the context (counting the bonus token)."""
        request = seq.state[0]
        if seq.state[1].grammar is not None:
            return []         # a draft's tokens would need the grammar's state after each: plain decoding only
        most = min(most, request.params.max_tokens - len(seq.output) - 1, self.context - len(seq.tokens))
        if most <= 0:
            return []
        if seq.lookup is None:
            seq.lookup = PromptLookup(self.spec.min_n, self.spec.max_n, self.spec.tokens)
        return seq.lookup.propose(seq.tokens, most)

    def _run(self, sched: Scheduler, step: Step, between: Callable[[], None] | None = None) -> list[Sequence]:
        """One forward pass over the step's chunks (``between`` runs between its layers); returns the
        sequences that finished."""
        ids: list[int] = []
        chunks: list[Chunk] = []
        positions: list[torch.Tensor] = []
        sample_rows: list[int] = []
        samplers: list[Sequence] = []
        plain: list[int] = []                              # the samplers' logits rows
        drafted: list[tuple[ScheduledChunk, int]] = []    # chunks with a draft, and their first logits row
        for c in step.chunks:
            row = len(ids)
            ids += c.seq.tokens[c.start:c.start + c.n - len(c.draft)] + c.draft
            positions.append(torch.arange(c.start, c.start + c.n))
            chunks.append(Chunk(row, c.start, c.n, c.seq.block_table))
            if c.draft:
                drafted.append((c, len(sample_rows)))
                sample_rows += range(row, row + c.n)
            elif c.samples:
                plain.append(len(sample_rows))
                sample_rows.append(row + c.n - 1)
                samplers.append(c.seq)
        masks = None          # the next token's grammar masks, filled while the forward pass runs
        if self.grammars is not None:
            masks = self.grammars.prepare([seq.state[1].grammar for seq in samplers])
        attn = PagedAttention(self.pool, chunks, self.model.head_dim ** -0.5, self.decode_kernel, self.exact)
        dev = self.device      # the step's inputs go to the device once; sampled ids come back (sampler)
        logits = self.model.forward(torch.tensor(ids).to(dev), torch.cat(positions).to(dev), attn,
                                    torch.tensor(sample_rows, dtype=torch.long).to(dev), between)
        for c in step.chunks:
            if not c.draft:
                sched.advance(c)
        if self.step_log is not None:
            self.step_log.append(step)
        picked = logits[plain] if drafted else logits
        tokens = sample_each(picked, [seq.state[1] for seq in samplers], masks) if samplers else []
        finished = []
        for seq, token in zip(samplers, tokens):
            if isinstance(token, Exception):       # this sequence's own sampling: it fails alone
                self.failed[seq.key], seq.finish_reason = token, "stop"
            else:
                self._append(seq, token)
            if seq.finish_reason:
                sched.finish(seq)
                finished.append(seq)
        for c, first in drafted:
            sched.advance(c, self._verify(c, logits[first:first + c.n]))
            if c.seq.finish_reason:
                sched.finish(c.seq)
                finished.append(c.seq)
        return finished

    def _verify(self, chunk: ScheduledChunk, logits: torch.Tensor) -> int:
        """Append the tokens plain decoding would pick, while they follow the draft; returns the
        chunk's tokens whose K/V now count (its last token and the accepted draft)."""
        seq, draft = chunk.seq, chunk.draft
        state = seq.state[1]
        fast = state.plain
        greedy = logits.argmax(dim=-1).tolist() if fast else None
        for j in range(len(draft) + 1):
            token = greedy[j] if fast else sample(logits[j:j + 1], [state])[0]
            self._append(seq, token)
            if seq.finish_reason or j == len(draft) or token != draft[j]:
                break
        accepted = j + (j < len(draft) and token == draft[j])
        if seq.lookup is not None:
            seq.lookup.feedback(len(draft), accepted)
        self.spec_stats.steps += 1
        self.spec_stats.drafted += len(draft)
        self.spec_stats.accepted += accepted
        return j + 1

    def _append(self, seq: Sequence, token: int) -> None:
        """Record a sampled token and decide whether the sequence is done."""
        request, sampling, stops = seq.state
        seq.tokens.append(token)
        sampling.record(token)
        if seq.forks:
            self._release(seq)
        if request.on_tokens is not None:     # at once, from inside the step: a cut-in's first token waits for nothing
            noted = sampling.logprobs[-1] if sampling.logprobs and token not in self.eos else None
            try:
                stream_tokens(request, [token], seq.choice, [self.names.entry(*noted)] if noted is not None else None)
            except Exception as e:            # the caller's callback: its request fails alone
                self.failed[seq.key], seq.finish_reason = e, "stop"
                return
        if token in self.eos:
            seq.finish_reason = "stop"
            return
        if stops.stops:
            cut = stops.add(token)
            if cut is not None:
                seq.text, seq.finish_reason = cut, "stop"
                return
        if len(seq.output) >= request.params.max_tokens or len(seq.tokens) >= self.context:
            seq.finish_reason = "length"
