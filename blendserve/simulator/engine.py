"""Step-level simulator of a continuous-batching engine (docs/design.md §3.11).

It models admission strictly in the given order (a request is never skipped; it is admitted when
a running slot, step budget and KV above a watermark after LRU eviction allow), chunked prefill
(every step decodes one token for every decoding request, then fills its budget with prefill
chunks, oldest admission first), a radix prefix cache sharing the KV pool (cache.py), and
preemption by recompute of the newest request. A request of p prompt tokens and d outputs costs
what the performance model prices (docs/design.md §3.1), so the optimum is a true upper bound.

**Step time.** comp = 2 P tokens / F; weights W / B; KV = bytes read by every decoding sequence
/ B. `nanoflow` overlap: max(comp, (W + KV) / B) / efficiency; `sequential`: (max(comp, W / B) +
KV / B) / efficiency. A profile's measured fixed costs (per step, decoding sequence and prefill
chunk, and prefill attention where it has a rate) are added as they are. The efficiency, 0.94,
is the pessimistic end of the paper's Table 1 roofline error, so a result at efficiency e is
exactly e / 0.94 times the default one. `balanced` step fill takes only the tokens whose compute
hides under the step's reads.

**Speed.** Per-request state lives in scalars keyed to a global decode clock (a request's
context is a linear function of it), finishes sit in a heap, and stretches of pure decode in
which nothing can change are advanced in one vectorised jump to the next finish or memory
overflow: no Python loop runs per token. Each step has four phases, as `run` shows.
"""
from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable

import numpy as np

from blendserve.planner.perf import HardwareProfile, ModelProfile
from blendserve.planner.workload import Workload
from blendserve.simulator.cache import RadixCache
from blendserve.simulator.config import OVERLAPS, STEP_FILLS, EngineConfig
from blendserve.simulator.prefix import PrefixTrie, build_prefix_trie
from blendserve.simulator.result import SimResult, Timeline
from blendserve.simulator.running import Running, StepBatch

__all__ = ["OVERLAPS", "STEP_FILLS", "EngineConfig", "SimResult", "Timeline", "output_lengths", "simulate"]

def output_lengths(w: Workload) -> np.ndarray:
    """True output lengths the simulator runs: output_len rounded, capped by max_tokens, at least 1."""
    if w.output_len is None:
        raise ValueError("the simulator needs true output lengths (Workload.output_len)")
    d = np.rint(w.output_len).astype(np.int64)
    return np.clip(d, 1, np.maximum(w.max_tokens.astype(np.int64), 1))


def simulate(w: Workload, order: np.ndarray, model: ModelProfile, hw: HardwareProfile,
             config: EngineConfig | None = None, *, trie: PrefixTrie | None = None,
             progress: Callable[[float], None] | None = None) -> SimResult:
    """Run the requests of w, admitted in `order`, to completion. See the module docstring."""
    return _Engine(w, order, model, hw, config or EngineConfig(), trie or build_prefix_trie(w), progress).run()


class _Engine:
    def __init__(self, w: Workload, order: np.ndarray, model: ModelProfile, hw: HardwareProfile,
                 config: EngineConfig, trie: PrefixTrie, progress: Callable[[float], None] | None) -> None:
        order = np.asarray(order, dtype=np.int64)
        if len(order) != w.n or not np.array_equal(np.sort(order), np.arange(w.n)):
            raise ValueError("order must be a permutation of the workload's requests")
        self.cfg = config
        self.cap = config.capacity(model, hw)
        self.p = w.prompt_lens().tolist()
        self.d = output_lengths(w).tolist()
        self.watermark = int(config.watermark * self.cap)
        need = w.prompt_lens() + np.asarray(self.d)
        if w.n and int(need.max()) > self.cap - self.watermark:
            raise ValueError(f"a request needs {int(need.max())} KV tokens, more than the "
                             f"{self.cap - self.watermark} a pool of {self.cap} admits")
        self.node = trie.request_node.tolist()
        self.cache = RadixCache(trie)
        self.queue: deque[tuple[int, int]] = deque((int(r), 0) for r in order)   # (request, generated so far)
        self.n = w.n
        self.progress = progress
        # step cost constants
        self.flop_s = 2.0 * model.params / hw.flops                  # seconds per token of compute
        self.w_s = model.weight_bytes() / (hw.weight_bandwidth or hw.bandwidth)   # seconds to read the weights
        self.kv_s = model.kv_bytes_per_token / hw.bandwidth            # seconds per KV token read
        self.eff = config.efficiency
        self.sequential = config.overlap == "sequential"
        self.step_o, self.seq_o, self.chunk_o = hw.step_overhead, hw.seq_overhead, hw.chunk_overhead
        self.attn_s = (4.0 * model.q_dim * model.layers / (hw.attention_flops or hw.flops)
                       if hw.prefill_attention else 0.0)
        self.chunk_costs = bool(self.attn_s or self.chunk_o)

    def _chunk_cost(self, r: Running, c: int) -> tuple[float, float]:
        """Seconds of attention, and of fixed cost, of a c-token prefill chunk of r."""
        start = self.p[r.req] + r.generated0 - r.prefill_left      # the chunk's first position
        return self.attn_s * c * (start + c / 2.0), self.chunk_o if start > 0 else 0.0

    def run(self) -> SimResult:
        """Step until every request finished: make room, schedule, time the step, post-process."""
        self._reset()
        while self.queue or self.running:
            preempted = self._make_room()
            batch = self._schedule(admit=not preempted)
            if not self.running:
                raise RuntimeError("simulator stalled: nothing running and the queue head cannot be admitted")
            self._time_step(batch)
            self._postprocess(batch)
        if self.progress:
            self.progress(1.0)
        return self._result()

    # -- state ---------------------------------------------------------------------------------

    def _reset(self) -> None:
        self.running: dict[int, Running] = {}        # admission seq -> request, insertion-ordered
        self.prefilling: deque[Running] = deque()    # admission order
        self.finish_heap: list[tuple[int, int]] = []  # (clock at which it finishes, seq)
        self.clock = 0                                # decode steps done
        self.n_dec = 0
        self.kv_a = 0         # sum over decoders of (p + generated0 - start_clock): KV read = kv_a + n_dec (clock + 1)
        self.priv_a = 0       # sum over decoders of (generated0 - start_clock): private KV = priv_a + n_dec clock
        self.priv_prefill = 0  # private KV (tokens to recompute) of requests still prefilling
        self.seq = 0
        self.now = 0.0
        self.finished = self.preemptions = self.steps = 0
        self.out_tokens = self.computed_prompt = self.recomputed = 0
        self.first_admission = [True] * self.n
        self.peak = 0
        self.timeline: tuple[list, ...] = ([], [], [], [], [], [])   # start, duration, comp, mem, kv, decoding
        self.report_every = max(1, self.n // 200)

    def _used(self) -> int:
        """KV tokens in use: the cache, the decoders' private tokens and the prefills' recomputed ones."""
        return self.cache.resident_tokens + self.priv_a + self.n_dec * self.clock + self.priv_prefill

    def _stop_decoding(self, r: Running) -> None:
        self.n_dec -= 1
        self.kv_a -= self.p[r.req] + r.generated0 - r.start_clock
        self.priv_a -= r.generated0 - r.start_clock

    # -- 1. make room for this step's decode tokens --------------------------------------------

    def _make_room(self) -> bool:
        """Evict cache, then preempt the newest requests until the decode tokens fit; True if any was
        preempted (like vLLM, a step that preempts admits nothing)."""
        cache = self.cache
        overflow = self._used() + self.n_dec - self.cap
        if overflow > 0:
            overflow -= cache.evict(overflow)
        preempted = overflow > 0
        while overflow > 0:
            victim = self.running.pop(next(reversed(self.running)))
            self.preemptions += 1
            cache.release(victim.node, self.now)
            if victim.start_clock < 0:
                self.prefilling.remove(victim)
                self.priv_prefill -= victim.generated0
                gen = victim.generated0
                overflow -= victim.generated0
            else:
                gen = victim.generated0 + self.clock - victim.start_clock
                self._stop_decoding(victim)
                overflow -= gen + 1
            self.queue.appendleft((victim.req, gen))
            overflow -= cache.evict(overflow) if overflow > 0 else 0
        return preempted

    # -- 2. prefill chunks for admitted requests, then admission from the queue head ------------

    def _schedule(self, admit: bool) -> StepBatch:
        cfg = self.cfg
        step_cap = cfg.step_tokens
        if cfg.step_fill == "balanced":   # no more tokens than hide under this step's reads of weights and KV
            reads = self.w_s + self.kv_s * (self.kv_a + self.n_dec * (self.clock + 1))
            step_cap = min(step_cap, int(reads / self.flop_s))
        batch = StepBatch(budget=step_cap - self.n_dec)
        for r in self.prefilling:
            if batch.budget <= 0:
                break
            self._prefill(r, batch)
        while admit and batch.budget > 0 and self.queue:
            r = self._admit()
            if r is None:
                batch.blocked = True
                break
            self._prefill(r, batch)
        return batch

    def _admit(self) -> Running | None:
        """The queue head, admitted, or None when no slot is free or its KV does not fit."""
        if len(self.running) >= self.cfg.max_running:
            return None
        cache, block = self.cache, self.cfg.cache_block_tokens
        req, gen = self.queue[0]
        node = self.node[req]
        miss_tokens, miss, hit = cache.missing(node)
        if block > 1:       # the cache serves whole blocks only: the rest of the hit is recomputed
            miss_tokens = self.p[req] - min(self.p[req] - miss_tokens, self.p[req] - 1) // block * block
        need = miss_tokens + gen
        free = self.cap - self._used() - self.n_dec - self.watermark
        if need > free:
            cache.pin(hit)
            free += cache.evict(need - free)
            cache.unpin(hit)
            if need > free:
                return None
        self.queue.popleft()
        cache.acquire(node, miss, self.now)
        if self.first_admission[req]:
            self.first_admission[req] = False
            self.computed_prompt += miss_tokens
        else:
            self.recomputed += miss_tokens + gen
        r = Running(req, node, max(miss_tokens + gen, 1), gen, self.seq)
        self.running[self.seq] = r
        self.seq += 1
        self.priv_prefill += gen
        self.prefilling.append(r)
        return r

    def _prefill(self, r: Running, batch: StepBatch) -> None:
        """r's next prefill chunk, as much as the step's budget allows."""
        c = min(r.prefill_left, batch.budget)
        if self.chunk_costs:
            a, o = self._chunk_cost(r, c)
            batch.attn, batch.chunk_o = batch.attn + a, batch.chunk_o + o
        r.prefill_left -= c
        batch.budget -= c
        batch.chunk_tokens += c
        if r.prefill_left == 0:
            batch.done.append(r)

    # -- 3. time the step, or a jump of identical decode-only steps ------------------------------

    def _time_step(self, batch: StepBatch) -> None:
        n_dec, clock = self.n_dec, self.clock
        k = 1
        if batch.chunk_tokens == 0 and n_dec and (batch.blocked or batch.budget <= 0 or not self.queue):
            k = max(1, min(self.finish_heap[0][0] - clock, (self.cap - self._used()) // n_dec))
            if self.cfg.step_fill == "balanced" and batch.budget <= 0 and (self.prefilling or self.queue):
                # jump only until the growing KV reads make room for a prefill token
                room = (self.flop_s * (n_dec + 1) - self.w_s) / self.kv_s - self.kv_a
                k = max(1, min(k, int(np.ceil(room / n_dec)) - clock - 1))
        comp = self.flop_s * (n_dec + batch.chunk_tokens) + batch.attn
        if k == 1:
            kv = self.kv_s * (self.kv_a + n_dec * (clock + 1))
            mem = self.w_s + kv
            dur = (max(comp, self.w_s) + kv if self.sequential else max(comp, mem)) / self.eff
        else:
            kvs = self.kv_s * (self.kv_a + n_dec * (clock + 1 + np.arange(k, dtype=np.float64)))
            mem = float(kvs.sum()) + k * self.w_s
            if self.sequential:
                dur = (k * max(comp, self.w_s) + float(kvs.sum())) / self.eff
            else:
                dur = float(np.maximum(comp, self.w_s + kvs).sum()) / self.eff
            comp *= k
        dur += k * (self.step_o + self.seq_o * n_dec) + batch.chunk_o
        start, self.now = self.now, self.now + dur
        self.steps += k
        if n_dec:
            self.out_tokens += n_dec * k
            self.clock += k
        kv_now = self._used()
        self.peak = max(self.peak, kv_now)
        for column, value in zip(self.timeline, (start, dur, comp, mem, kv_now, n_dec), strict=True):
            column.append(value)

    # -- 4. finishes, then requests whose prefill completed start decoding -----------------------

    def _postprocess(self, batch: StepBatch) -> None:
        while self.finish_heap and self.finish_heap[0][0] <= self.clock:
            _, s = heapq.heappop(self.finish_heap)
            r = self.running.pop(s, None)
            if r is None:
                continue                      # preempted since it was queued
            self._stop_decoding(r)
            self.cache.release(r.node, self.now)
            self.finished += 1
            if self.progress and self.finished % self.report_every == 0:
                self.progress(self.finished / self.n)
        for r in batch.done:
            self.prefilling.remove(r)
            self.priv_prefill -= r.generated0
            r.start_clock = self.clock
            self.n_dec += 1
            self.kv_a += self.p[r.req] + r.generated0 - self.clock
            self.priv_a += r.generated0 - self.clock
            heapq.heappush(self.finish_heap, (self.clock + self.d[r.req] - r.generated0, r.seq))

    def _result(self) -> SimResult:
        start, dur, comp, mem, kv, dec = self.timeline
        tl = Timeline(np.array(start), np.array(dur), np.array(comp), np.array(mem),
                      np.array(kv, dtype=np.int64), np.array(dec, dtype=np.int64))
        return SimResult(
            seconds=self.now, prompt_tokens=int(sum(self.p)), output_tokens=self.out_tokens,
            computed_prompt_tokens=self.computed_prompt, recomputed_tokens=self.recomputed,
            finished=self.finished, preemptions=self.preemptions, steps=self.steps, peak_kv_tokens=self.peak,
            kv_capacity_tokens=self.cap, comp_seconds=float(tl.comp.sum()), mem_seconds=float(tl.mem.sum()),
            timeline=tl,
        )
