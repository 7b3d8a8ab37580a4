"""Step-level simulator of a continuous-batching engine (docs/design.md §3.11).

What it models, and why each choice:

* **Admission strictly in the given order** (the plan is an admission order;
  a request is never skipped). A request is admitted when it fits: a running
  slot is free, the step still has token budget, and its uncached prompt
  tokens (plus any tokens to recompute after a preemption) fit in free KV
  memory above a watermark after LRU eviction of unpinned cache.
* **Chunked prefill** (vLLM v1 / SGLang / Sarathi): every step first decodes
  one token for every decoding request, then fills the rest of a token budget
  with prefill chunks, oldest admission first. The default budget of 2048
  tokens is NanoFlow's dense batch on an 8B model, the engine the paper built on.
* **Step fill** (EngineConfig.step_fill). `budget`, what vLLM, SGLang and
  NanoFlow do: a step takes prefill up to its token budget whenever the
  queue has it. `balanced` (nanoflow overlap only): a step takes no more
  tokens than its compute hides under its own reads of the weights and the
  KV, at most the budget. At 2048 tokens an 8B step on an A100 computes for
  105 ms and can read at most the weights and a full pool in 37 ms, so a
  budget-filled step is always compute-bound: the compute-dense requests
  run at full budget first and the long generations decode alone later
  (BENCHMARKS.md, Planner), and no admission order can make the
  two overlap. A balanced step computes as fast as a full one (its compute
  is never idle) while its decodes advance three times as often, so the
  two resources are used together; it is the step-level half of the blend,
  and the order decides whether there is KV to balance against.
* **Radix prefix cache with LRU eviction** sharing one KV pool with the
  running requests (SGLang): see cache.py.
* **Preemption by recompute** (vLLM): when decoding would overflow the KV
  pool even after evicting the cache, the most recently admitted request is
  preempted, its generated tokens' KV dropped, and it goes back to the head
  of the queue; on readmission it prefills its prompt and the tokens it had
  generated. Output tokens are never generated twice.
* **Per request**, p prompt tokens are prefilled and d decode iterations run,
  the i-th reading p + i KV entries (its own new token included): the same
  token counts as the performance model's Comp = 2 (p + d) P / F and
  Mem = (p d + d^2/2) H_kv L 4 / B (docs/design.md §3.1), so the simulator and the optimum price
  work identically and the optimum is a true upper bound.

**Step time.** comp = 2 P tokens / F; weights W / B; KV = bytes read by
every decoding sequence / B (prefill attention is neglected, as in the
model). Two overlap modes (EngineConfig.overlap; docs/design.md §3.11):
`nanoflow` (nano-batching hides the KV reads under compute too): a step
takes max(comp, (W + KV) / B) / efficiency; `sequential` (vLLM, SGLang
without NanoFlow: only the weight reads overlap the GEMMs, attention runs
after): max(comp, W / B) + KV / B, over the efficiency. A profile's fixed costs
(step_overhead per step, seq_overhead per decoding sequence, chunk_overhead per
prefill chunk after a cached prefix) are added as they are: they are measured,
not peak figures; a profile with prefill_attention counts a chunk's attention
over its context, 4 c (s + c/2) q_dim L FLOPs for c tokens from position s, at
its attention_flops rate where it has one. The efficiency is calibrated on the paper's
Table 1, whose roofline estimates of GEMM and attention times were within 6%
of measured kernels: we take the pessimistic end, 0.94, so a step is never
faster than the paper's kernels. Since every step scales by the same factor,
a result at efficiency e is exactly e / 0.94 times the default one.

**Speed.** Per-request state lives in scalars keyed to a global decode clock
(a request's context is a linear function of it), finishes sit in a heap,
and stretches of pure decode in which nothing can change (no prefill, the
queue head cannot be admitted) are advanced in one vectorised jump to the
next finish or memory overflow. No Python loop runs per token, and a
decode-only step costs a few scalar operations.
"""
from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from scheduler.planner.perf import HardwareProfile, ModelProfile
from scheduler.planner.plan import STEP_FILLS
from scheduler.planner.workload import Workload
from scheduler.simulator.cache import RadixCache
from scheduler.simulator.prefix import PrefixTrie, build_prefix_trie

TABLE1_EFFICIENCY = 0.94
OVERLAPS = ("nanoflow", "sequential")


@dataclass(frozen=True)
class EngineConfig:
    """Engine knobs. kv_capacity_tokens None: the device memory less weights and 5% buffers."""
    step_tokens: int = 2048
    max_running: int = 1024
    kv_capacity_tokens: int | None = None
    watermark: float = 0.01            # fraction of the KV pool kept free at admission (vLLM)
    efficiency: float = TABLE1_EFFICIENCY
    overlap: str = "nanoflow"          # see OVERLAPS and the module docstring
    # Prefix hits in whole blocks of this many tokens, at most the prompt less one (vLLM: a 32-token block
    # of the worker's engine serves from cache only when full); 1: token-exact, as SGLang's radix cache.
    cache_block_tokens: int = 1
    step_fill: str = "budget"          # see STEP_FILLS and the module docstring

    def __post_init__(self) -> None:
        if self.overlap not in OVERLAPS:
            raise ValueError(f"overlap must be one of {OVERLAPS}")
        if self.step_fill not in STEP_FILLS:
            raise ValueError(f"step_fill must be one of {STEP_FILLS}")
        if self.step_fill == "balanced" and self.overlap != "nanoflow":
            raise ValueError("step_fill 'balanced' needs overlap 'nanoflow': with sequential overlap no KV read "
                             "hides under compute, so there is nothing to balance")
        if self.step_tokens < 1 or self.max_running < 1 or self.cache_block_tokens < 1:
            raise ValueError("step_tokens, max_running and cache_block_tokens must be >= 1")
        if self.max_running > self.step_tokens:
            raise ValueError("max_running must not exceed step_tokens: every running request decodes each step")
        if not 0 < self.efficiency <= 1:
            raise ValueError("efficiency must be in (0, 1]")

    def capacity(self, model: ModelProfile, hw: HardwareProfile) -> int:
        if self.kv_capacity_tokens is not None:
            return int(self.kv_capacity_tokens)
        return int(default_kv_capacity_bytes(model, hw) // model.kv_bytes_per_token)


def default_kv_capacity_bytes(model: ModelProfile, hw: HardwareProfile) -> float:
    """Device memory less the weights and 5% for activations and buffers (docs/design.md §3.5: 80 -> 60 GB for 8B)."""
    return hw.memory_bytes * 0.95 - model.weight_bytes()


@dataclass
class Timeline:
    """Per step (or per jump of identical decode steps): start, duration, compute and memory seconds,
    KV tokens in use at its end and requests decoding in it."""
    start: np.ndarray
    duration: np.ndarray
    comp: np.ndarray
    mem: np.ndarray
    kv_tokens: np.ndarray
    decoding: np.ndarray

    def utilisation(self, bins: int = 200) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Bin centres (s) and the time-weighted compute and memory utilisation in each bin.

        Utilisation is the fraction of peak FLOP/s (resp. bandwidth) in use, so
        it cannot exceed the efficiency factor.
        """
        end = float(self.start[-1] + self.duration[-1]) if len(self.start) else 0.0
        edges = np.linspace(0.0, end, bins + 1)
        mid = self.start + self.duration / 2.0
        idx = np.clip(np.searchsorted(edges, mid, side="right") - 1, 0, bins - 1)
        dur = np.bincount(idx, self.duration, bins)
        with np.errstate(invalid="ignore", divide="ignore"):
            cu = np.bincount(idx, self.comp, bins) / dur
            mu = np.bincount(idx, self.mem, bins) / dur
        return (edges[:-1] + edges[1:]) / 2.0, np.nan_to_num(cu), np.nan_to_num(mu)


@dataclass
class SimResult:
    seconds: float
    prompt_tokens: int
    output_tokens: int            # generated, counted once each
    computed_prompt_tokens: int   # prompt tokens prefilled at each request's first admission (cache misses)
    recomputed_tokens: int        # prompt and generated tokens prefilled again after preemptions
    finished: int
    preemptions: int
    steps: int
    peak_kv_tokens: int
    kv_capacity_tokens: int
    comp_seconds: float           # sum over steps of pure compute time
    mem_seconds: float            # sum over steps of pure memory time
    timeline: Timeline = field(repr=False)

    @property
    def tokens_per_s(self) -> float:
        """(input + output tokens) / s, the paper's throughput."""
        return (self.prompt_tokens + self.output_tokens) / self.seconds if self.seconds > 0 else 0.0

    @property
    def sharing_ratio(self) -> float:
        """Fraction of prompt tokens the prefix cache saved at first admission.

        Re-prefills after a preemption are a cost of memory pressure, not of
        the cache, and are counted in recomputed_tokens instead.
        """
        return 1.0 - self.computed_prompt_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


class _Running:
    """One admitted request. Decode state is linear in the global decode clock."""
    __slots__ = ("req", "node", "prefill_left", "generated0", "start_clock", "seq")

    def __init__(self, req: int, node: int, prefill_left: int, generated0: int, seq: int) -> None:
        self.req = req
        self.node = node
        self.prefill_left = prefill_left
        self.generated0 = generated0      # tokens generated before this admission (recomputed in prefill)
        self.start_clock = -1             # decode clock at its first decode step; -1 while prefilling
        self.seq = seq                    # admission sequence number (preempt the largest first)


def output_lengths(w: Workload) -> np.ndarray:
    """True output lengths the simulator runs: output_len rounded, capped by max_tokens, at least 1."""
    if w.output_len is None:
        raise ValueError("the simulator needs true output lengths (Workload.output_len)")
    d = np.rint(w.output_len).astype(np.int64)
    return np.clip(d, 1, np.maximum(w.max_tokens.astype(np.int64), 1))


def simulate(
    w: Workload,
    order: np.ndarray,
    model: ModelProfile,
    hw: HardwareProfile,
    config: EngineConfig = EngineConfig(),
    *,
    trie: PrefixTrie | None = None,
    progress: Callable[[float], None] | None = None,
) -> SimResult:
    """Run the requests of w, admitted in `order`, to completion. See the module docstring."""
    return _Engine(w, order, model, hw, config, trie or build_prefix_trie(w), progress).run()


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

    def _chunk_cost(self, r: _Running, c: int) -> tuple[float, float]:
        """Seconds of attention, and of fixed cost, of a c-token prefill chunk of r."""
        start = self.p[r.req] + r.generated0 - r.prefill_left      # the chunk's first position
        return self.attn_s * c * (start + c / 2.0), self.chunk_o if start > 0 else 0.0

    def run(self) -> SimResult:
        cfg, cache = self.cfg, self.cache
        running: dict[int, _Running] = {}        # admission seq -> request, insertion-ordered
        prefilling: deque[_Running] = deque()    # admission order
        finish_heap: list[tuple[int, int]] = []  # (clock at which it finishes, seq)
        clock = 0                                # decode steps done
        n_dec = 0
        kv_a = 0         # sum over decoders of (p + generated0 - start_clock): KV read = kv_a + n_dec * (clock + 1)
        priv_a = 0       # sum over decoders of (generated0 - start_clock): private KV = priv_a + n_dec * clock
        priv_prefill = 0 # private KV (tokens to recompute) of requests still prefilling
        seq = 0
        now = 0.0
        finished = preemptions = steps = 0
        out_tokens = computed_prompt = recomputed = 0
        first_admission = [True] * self.n
        peak = 0
        t_start: list[float] = []
        t_dur: list[float] = []
        t_comp: list[float] = []
        t_mem: list[float] = []
        t_kv: list[int] = []
        t_dec: list[int] = []
        report_every = max(1, self.n // 200)
        watermark = self.watermark
        block = cfg.cache_block_tokens
        balanced = cfg.step_fill == "balanced"

        def used() -> int:
            return cache.resident_tokens + priv_a + n_dec * clock + priv_prefill

        while self.queue or running:
            # 1. make room for this step's decode tokens: evict cache, then preempt the newest
            overflow = used() + n_dec - self.cap
            if overflow > 0:
                overflow -= cache.evict(overflow)
            preempted_now = overflow > 0    # like vLLM, admit nothing in a step that preempts
            while overflow > 0:
                victim = running.pop(next(reversed(running)))
                preemptions += 1
                cache.release(victim.node, now)
                if victim.start_clock < 0:
                    prefilling.remove(victim)
                    priv_prefill -= victim.generated0
                    gen = victim.generated0
                    overflow -= victim.generated0
                else:
                    gen = victim.generated0 + clock - victim.start_clock
                    n_dec -= 1
                    kv_a -= self.p[victim.req] + victim.generated0 - victim.start_clock
                    priv_a -= victim.generated0 - victim.start_clock
                    overflow -= gen + 1
                self.queue.appendleft((victim.req, gen))
                overflow -= cache.evict(overflow) if overflow > 0 else 0

            # 2. prefill chunks for admitted requests, then admit from the queue head
            step_cap = cfg.step_tokens
            if balanced:     # no more tokens than hide under this step's reads of the weights and the KV
                step_cap = min(step_cap, int((self.w_s + self.kv_s * (kv_a + n_dec * (clock + 1))) / self.flop_s))
            budget = step_cap - n_dec
            chunk_tokens = 0
            done_prefill: list[_Running] = []
            attn = chunk_o = 0.0  # prefill attention and per-chunk seconds, for profiles that count them
            for r in prefilling:
                if budget <= 0:
                    break
                c = min(r.prefill_left, budget)
                if self.chunk_costs:
                    a, o = self._chunk_cost(r, c)
                    attn, chunk_o = attn + a, chunk_o + o
                r.prefill_left -= c
                budget -= c
                chunk_tokens += c
                if r.prefill_left == 0:
                    done_prefill.append(r)
            blocked = False
            while budget > 0 and self.queue and not preempted_now:
                if len(running) >= cfg.max_running:
                    blocked = True
                    break
                req, gen = self.queue[0]
                node = self.node[req]
                miss_tokens, miss, hit = cache.missing(node)
                if block > 1:       # the cache serves whole blocks only: the rest of the hit is recomputed
                    miss_tokens = self.p[req] - min(self.p[req] - miss_tokens, self.p[req] - 1) // block * block
                need = miss_tokens + gen
                free = self.cap - used() - n_dec - watermark
                if need > free:
                    cache.pin(hit)
                    free += cache.evict(need - free)
                    cache.unpin(hit)
                    if need > free:
                        blocked = True
                        break
                self.queue.popleft()
                cache.acquire(node, miss, now)
                if first_admission[req]:
                    first_admission[req] = False
                    computed_prompt += miss_tokens
                else:
                    recomputed += miss_tokens + gen
                r = _Running(req, node, max(miss_tokens + gen, 1), gen, seq)
                running[seq] = r
                seq += 1
                priv_prefill += gen
                prefilling.append(r)
                c = min(r.prefill_left, budget)
                if self.chunk_costs:
                    a, o = self._chunk_cost(r, c)
                    attn, chunk_o = attn + a, chunk_o + o
                r.prefill_left -= c
                budget -= c
                chunk_tokens += c
                if r.prefill_left == 0:
                    done_prefill.append(r)

            if not running:
                raise RuntimeError("simulator stalled: nothing running and the queue head cannot be admitted")

            # 3. time the step (or a jump of identical decode-only steps)
            k = 1
            if chunk_tokens == 0 and n_dec and (blocked or budget <= 0 or not self.queue):
                k_finish = finish_heap[0][0] - clock
                k_mem = (self.cap - used()) // n_dec
                k = max(1, min(k_finish, k_mem))
                if balanced and budget <= 0 and (prefilling or self.queue):
                    # jump only until the growing KV reads make room for a prefill token
                    room = (self.flop_s * (n_dec + 1) - self.w_s) / self.kv_s - kv_a
                    k = max(1, min(k, int(np.ceil(room / n_dec)) - clock - 1))
            comp = self.flop_s * (n_dec + chunk_tokens) + attn
            if k == 1:
                kv = self.kv_s * (kv_a + n_dec * (clock + 1))
                mem = self.w_s + kv
                dur = (max(comp, self.w_s) + kv if self.sequential else max(comp, mem)) / self.eff
            else:
                kvs = self.kv_s * (kv_a + n_dec * (clock + 1 + np.arange(k, dtype=np.float64)))
                mem = float(kvs.sum()) + k * self.w_s
                if self.sequential:
                    dur = (k * max(comp, self.w_s) + float(kvs.sum())) / self.eff
                else:
                    dur = float(np.maximum(comp, self.w_s + kvs).sum()) / self.eff
                comp *= k
            dur += k * (self.step_o + self.seq_o * n_dec) + chunk_o
            t_start.append(now)
            t_dur.append(dur)
            t_comp.append(comp)
            t_mem.append(mem)
            t_dec.append(n_dec)
            now += dur
            steps += k
            if n_dec:
                out_tokens += n_dec * k
                clock += k
            kv_now = used()
            t_kv.append(kv_now)
            peak = max(peak, kv_now)

            # 4. finishes, then requests whose prefill completed start decoding
            while finish_heap and finish_heap[0][0] <= clock:
                _, s = heapq.heappop(finish_heap)
                r = running.pop(s, None)
                if r is None:
                    continue                      # preempted since it was queued
                n_dec -= 1
                kv_a -= self.p[r.req] + r.generated0 - r.start_clock
                priv_a -= r.generated0 - r.start_clock
                cache.release(r.node, now)
                finished += 1
                if self.progress and finished % report_every == 0:
                    self.progress(finished / self.n)
            for r in done_prefill:
                prefilling.remove(r)
                priv_prefill -= r.generated0
                r.start_clock = clock
                n_dec += 1
                kv_a += self.p[r.req] + r.generated0 - clock
                priv_a += r.generated0 - clock
                heapq.heappush(finish_heap, (clock + self.d[r.req] - r.generated0, r.seq))

        if self.progress:
            self.progress(1.0)
        tl = Timeline(np.array(t_start), np.array(t_dur), np.array(t_comp), np.array(t_mem),
                      np.array(t_kv, dtype=np.int64), np.array(t_dec, dtype=np.int64))
        return SimResult(
            seconds=now, prompt_tokens=int(sum(self.p)), output_tokens=out_tokens,
            computed_prompt_tokens=computed_prompt, recomputed_tokens=recomputed,
            finished=finished, preemptions=preemptions, steps=steps, peak_kv_tokens=peak,
            kv_capacity_tokens=self.cap, comp_seconds=float(tl.comp.sum()), mem_seconds=float(tl.mem.sum()),
            timeline=tl,
        )
