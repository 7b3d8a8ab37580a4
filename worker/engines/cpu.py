"""A continuous-batching CPU engine for Llama-architecture checkpoints (SmolLM2 by default).

The model runs in a small hand-written forward pass rather than through
transformers' ``generate`` so that the engine owns its KV cache, which it needs
for two things the service depends on:

* **per-sequence KV slots**: every running sequence has its own row in one
  padded buffer, so decode runs the whole batch in one forward pass with an
  attention mask, each sequence at its own position; a finished sequence's slot
  is refilled from the request stream at once (continuous batching);
* **prefix reuse**: the prompt KV of recent requests stays in a radix tree
  (least recently used leaves evicted first); a new request copies the KV of
  its longest cached prompt prefix into its slot, computes only the rest, and
  reports the copied tokens as ``cached_tokens``.
  So the order in which the planner feeds requests changes the engine's speed,
  exactly as it does on a GPU engine with a radix cache.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right
from safetensors.torch import load_file

from core.modelstore import context_length, eos_token_ids, load_tokenizer
from worker.engines.base import GenRequest, GenResult

# Measured on the 2-core build machines (benchmarks/results/engine*.md): on a
# CPU with AVX512-BF16, bfloat16 weights run prefill about 3x and decode about
# 2x faster than float32; on one with AVX2 only (an EPYC), torch emulates
# bfloat16 and the engine runs 1.6x slower than in float32. One torch
# thread beats two whenever anything else runs on the machine (two OpenMP
# threads on two busy cores stall each other), and the service runs its API
# and scheduler beside the worker.
DEFAULT_THREADS = 1


def default_dtype(cpuinfo: Path = Path("/proc/cpuinfo")) -> torch.dtype:
    """bfloat16 where the CPU multiplies it natively, else float32."""
    try:
        flags = set(cpuinfo.read_text().split())
    except OSError:
        return torch.float32
    return torch.bfloat16 if flags & {"avx512_bf16", "amx_bf16"} else torch.float32


class _Llama:
    """The Llama forward pass over the engine's KV slots (weights only, no cache of its own)."""

    def __init__(self, path: Path, dtype: torch.dtype) -> None:
        cfg = json.loads((path / "config.json").read_text())
        if cfg.get("model_type") != "llama":
            raise ValueError(f"{path}: the CPU engine runs Llama checkpoints, not {cfg.get('model_type')!r}")
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        if rope.get("rope_type", rope.get("type", "default")) != "default":
            raise ValueError(f"{path}: unsupported rope scaling {rope}")
        self.n_layers = cfg["num_hidden_layers"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv_heads = cfg.get("num_key_value_heads", self.n_heads)
        self.head_dim = cfg.get("head_dim") or cfg["hidden_size"] // self.n_heads
        self.eps = cfg["rms_norm_eps"]
        self.dtype = dtype

        w = {k: v.to(dtype) for k, v in load_file(str(path / "model.safetensors")).items()}
        self.embed = w["model.embed_tokens.weight"]
        self.lm_head = w.get("lm_head.weight", self.embed)
        self.norm = w["model.norm.weight"]
        self.layers = []
        for i in range(self.n_layers):
            p = f"model.layers.{i}."
            self.layers.append(
                (
                    w[p + "input_layernorm.weight"],
                    # q, k and v (and gate and up) in one matmul each: fewer, larger kernels.
                    torch.cat([w[p + f"self_attn.{n}_proj.weight"] for n in "qkv"]),
                    w[p + "self_attn.o_proj.weight"],
                    w[p + "post_attention_layernorm.weight"],
                    torch.cat([w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]]),
                    w[p + "mlp.down_proj.weight"],
                )
            )
        theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
        inv_freq = 1.0 / theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim)
        angles = torch.outer(torch.arange(cfg["max_position_embeddings"], dtype=torch.float32), inv_freq)
        # rotate_half(x) * sin == x.roll(D/2) * sin with the first half of sin negated.
        self.cos = torch.cat([angles.cos(), angles.cos()], dim=-1).to(dtype)
        self.sin = torch.cat([-angles.sin(), angles.sin()], dim=-1).to(dtype)

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RMSNorm computed in float32, as the reference Llama does: in bfloat16 greedy answers drift."""
        return F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).to(x.dtype) * weight

    def forward(self, ids: torch.Tensor, pos: torch.Tensor, attn: "_Attention") -> torch.Tensor:
        """Logits (float32) of the last position of each row; ``ids`` and ``pos`` are [B, T].

        Few, fused ops per layer: at decode time the matmuls are small, so the
        per-op overhead of eager torch is a large part of a step.
        """
        B, T = ids.shape
        H, KH, D = self.n_heads, self.n_kv_heads, self.head_dim
        x = self.embed[ids]
        cos, sin = self.cos[pos].unsqueeze(2), self.sin[pos].unsqueeze(2)  # [B, T, 1, D]
        for i, (ln1, wqkv, wo, ln2, wgu, wdown) in enumerate(self.layers):
            qkv = F.linear(self._norm(x, ln1), wqkv)
            qk = qkv[..., : (H + KH) * D].view(B, T, H + KH, D)
            qk = qk * cos + qk.roll(D // 2, dims=-1) * sin  # rotary embedding on q and k at once
            q, k = qk[:, :, :H].transpose(1, 2), qk[:, :, H:].transpose(1, 2)
            v = qkv[..., (H + KH) * D :].view(B, T, KH, D).transpose(1, 2)
            o = attn.attend(q, *attn.store(i, k, v))
            x = x + F.linear(o.transpose(1, 2).reshape(B, T, H * D), wo)
            gate, up = F.linear(self._norm(x, ln2), wgu).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, wdown)
        return F.linear(self._norm(x[:, -1], self.norm), self.lm_head).float()


class _KVSlots:
    """One padded K and V buffer per layer, [slots, kv_heads, length, head_dim].

    Running sequences occupy slots 0..n-1 in order (the engine keeps them
    compact), so a decode step attends over a plain slice of the buffer. Both
    the slot and the length axes grow on demand, and shrink when far larger
    than needed, so memory follows the running batch: its size times its
    longest sequence. K and V are kept in float32 whatever the weights' dtype:
    attention reads a strided slice of the buffer, which torch's CPU bmm
    multiplies in place in float32 but copies first in bfloat16 (a third of a
    decode step, measured).
    """

    GROW = 256

    def __init__(self, model: _Llama) -> None:
        self.layers, self.kv_heads, self.head_dim = model.n_layers, model.n_kv_heads, model.head_dim
        self.dtype = torch.float32
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        self._allocate(0, 0)

    def _allocate(self, slots: int, length: int) -> None:
        shape = (slots, self.kv_heads, length, self.head_dim)
        old_k, old_v = self.k, self.v
        self.k = [torch.zeros(shape, dtype=self.dtype) for _ in range(self.layers)]
        self.v = [torch.zeros(shape, dtype=self.dtype) for _ in range(self.layers)]
        for new, old in zip(self.k + self.v, old_k + old_v):
            s, n = min(slots, old.shape[0]), min(length, old.shape[2])
            new[:s, :, :n] = old[:s, :, :n]

    def reserve(self, slots: int, length: int) -> None:
        """Fit the buffer to ``slots`` sequences of up to ``length`` tokens, keeping their contents.

        ``length`` must cover every running sequence: the buffer shrinks to it
        when it is more than four times too long (after a long sequence ends).
        """
        have_slots, have_length = self.k[0].shape[0], self.k[0].shape[2]
        want = -(-length // self.GROW) * self.GROW
        new_length = want if length > have_length or have_length > 4 * want else have_length
        new_slots = max(slots, have_slots)
        if (new_slots, new_length) != (have_slots, have_length):
            self._allocate(new_slots, new_length)

    def move(self, src: int, dst: int, length: int) -> None:
        for bufs in (self.k, self.v):
            for buf in bufs:
                buf[dst, :, :length] = buf[src, :, :length]

    def read(self, slot: int, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A copy of a slot's positions start..end-1, [layers, kv_heads, end - start, head_dim]."""
        return (
            torch.stack([b[slot, :, start:end] for b in self.k]),
            torch.stack([b[slot, :, start:end] for b in self.v]),
        )

    def write(self, slot: int, start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Copy [layers, kv_heads, n, head_dim] K/V into a slot at positions start..start+n-1."""
        end = start + k.shape[2]
        for i in range(len(self.k)):
            self.k[i][slot, :, start:end] = k[i]
            self.v[i][slot, :, start:end] = v[i]


class _Attention:
    """Where one forward pass writes its new K/V, and how it attends to the cached ones."""

    def store(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write this pass's K/V ([B, kv_heads, T, head_dim]) into the slots; return what to attend to."""
        raise NotImplementedError

    def attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class _Prefill(_Attention):
    """One sequence in ``slot``: ``n`` new tokens after ``start`` already in the slot."""

    def __init__(self, kv: _KVSlots, slot: int, start: int, n: int) -> None:
        self.kv, self.slot, self.start, self.end = kv, slot, start, start + n
        # Causal, aligned to the last key: the new tokens see the cached prefix and each other in order.
        # As a CausalBias, not a boolean mask, it takes torch's fused CPU kernel: 800 new tokens, one
        # layer, 11 ms instead of 19 (same results).
        self.mask = None if n == 1 else causal_lower_right(n, self.end)

    def store(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.slot
        kb, vb = self.kv.k[layer], self.kv.v[layer]
        kb[s, :, self.start : self.end] = k[0]
        vb[s, :, self.start : self.end] = v[0]
        return kb[s : s + 1, :, : self.end], vb[s : s + 1, :, : self.end]

    def attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """In float32: the bfloat16 kernel is 2x faster still, but after a cached prefix it turned
        SmolLM2's greedy "The capital of France is Paris." into "L'Étoile, la Marseillaise"."""
        out = F.scaled_dot_product_attention(q.float(), keys, values, attn_mask=self.mask, enable_gqa=True)
        return out.to(q.dtype)


class _Decode(_Attention):
    """One new token for each of slots 0..n-1, written at each sequence's own length.

    Attention is spelt out as two grouped matmuls rather than calling
    scaled_dot_product_attention: for one query token per row, torch's CPU
    kernel is slower (measured at batch 8, 300 positions: 0.77 vs 0.60 ms a
    layer in float32, 5.5 vs 0.8 ms in bfloat16).
    """

    def __init__(self, kv: _KVSlots, lengths: torch.Tensor) -> None:
        self.kv, self.lengths = kv, lengths
        self.rows = torch.arange(len(lengths))
        self.end = int(lengths.max()) + 1
        padding = torch.arange(self.end) > lengths.unsqueeze(1)
        self.bias = torch.zeros(padding.shape).masked_fill_(padding, float("-inf")).view(-1, 1, 1, self.end)

    def store(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = len(self.rows)
        kb, vb = self.kv.k[layer], self.kv.v[layer]
        kb[self.rows, :, self.lengths] = k[:, :, 0].to(kb.dtype)
        vb[self.rows, :, self.lengths] = v[:, :, 0].to(vb.dtype)
        return kb[:n, :, : self.end], vb[:n, :, : self.end]

    def attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        n, heads, _, dim = q.shape
        kv_heads = keys.shape[1]
        grouped = q.float().view(n, kv_heads, heads // kv_heads, dim)  # query head h reads kv head h // group
        scores = grouped @ keys.transpose(-1, -2) * dim**-0.5 + self.bias
        out = torch.softmax(scores, dim=-1) @ values
        return out.view(n, heads, 1, dim).to(q.dtype)


class _Node:
    """A radix-tree node: a run of prompt tokens and their KV, [layers, kv_heads, len, head_dim]."""

    def __init__(self, ids: torch.Tensor, k: torch.Tensor, v: torch.Tensor, parent: "_Node | None") -> None:
        self.ids, self.k, self.v, self.parent = ids, k, v, parent
        self.children: dict[int, _Node] = {}
        self.used = 0

    def split(self, n: int) -> None:
        """Keep the first n tokens here and move the rest into a single child.

        Both halves are copies, so evicting one frees its memory.
        """
        tail = _Node(self.ids[n:].clone(), self.k[:, :, n:].clone(), self.v[:, :, n:].clone(), self)
        tail.children, tail.used = self.children, self.used
        for child in tail.children.values():
            child.parent = tail
        self.ids, self.k, self.v = self.ids[:n].clone(), self.k[:, :, :n].clone(), self.v[:, :, :n].clone()
        self.children = {int(tail.ids[0]): tail}


class _PrefixCache:
    """A radix tree of prompt KV with least-recently-used eviction of leaves.

    The KV of position i depends only on tokens 0..i, so the KV along a
    root-to-node path serves any prompt that starts with that path's tokens.
    A prefix shared by many prompts is stored once, so a few-shot prefix
    followed by many questions costs its length plus the questions' lengths.
    """

    def __init__(self, budget_tokens: int) -> None:
        self.budget = budget_tokens
        self.tokens = 0
        self.clock = 0
        empty = torch.empty(0)
        self.root = _Node(torch.empty(0, dtype=torch.long), empty, empty, None)

    def _walk(self, ids: torch.Tensor) -> Iterator[tuple[_Node, int]]:
        """Yield (node, tokens of it matched) along the longest cached prefix of ids."""
        node, pos = self.root, 0
        while pos < len(ids) and (child := node.children.get(int(ids[pos]))) is not None:
            n = _common_prefix(child.ids, ids[pos:])
            yield child, n
            if n < len(child.ids):
                return
            node, pos = child, pos + n

    def match(self, ids: torch.Tensor, limit: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """KV segments for the longest cached prefix of ids, at most ``limit`` tokens long."""
        self.clock += 1
        segments, pos = [], 0
        for node, n in self._walk(ids):
            n = min(n, limit - pos)
            if n <= 0:
                break
            node.used = self.clock
            segments.append((node.k[:, :, :n], node.v[:, :, :n]))
            pos += n
        return segments

    def insert(self, ids: torch.Tensor, read: Callable[[int], tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Cache a prompt; ``read(start)`` returns the prompt's KV from position start on."""
        if len(ids) > self.budget:
            return
        self.clock += 1
        node, pos = self.root, 0
        for child, n in self._walk(ids):
            if n < len(child.ids):
                child.split(n)
            child.used = self.clock
            node, pos = child, pos + n
        if pos < len(ids):
            k, v = read(pos)
            leaf = _Node(ids[pos:], k, v, node)
            leaf.used = self.clock
            node.children[int(ids[pos])] = leaf
            self.tokens += len(leaf.ids)
        while self.tokens > self.budget:
            self._evict()

    def _evict(self) -> None:
        leaves, stack = [], [self.root]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            if not node.children and node is not self.root:
                leaves.append(node)
        oldest = min(leaves, key=lambda leaf: leaf.used)
        del oldest.parent.children[int(oldest.ids[0])]
        self.tokens -= len(oldest.ids)


def _common_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    n = min(len(a), len(b))
    diff = (a[:n] != b[:n]).nonzero()
    return int(diff[0]) if len(diff) else n


def _draw(probs: torch.Tensor, top_p: float, generator: torch.Generator) -> int:
    """Draw a token from the smallest most-likely set whose mass reaches top_p.

    An inverse-CDF lookup with one uniform draw costs a tenth of
    torch.multinomial over a 49K vocabulary; and the nucleus is looked for among
    the 64 likeliest tokens first, sorting the whole vocabulary only when they
    fall short (rare: a model's next-token distribution is usually peaked).
    """
    if top_p >= 1.0:
        ids, cdf = None, probs.cumsum(0)
    else:
        for k in (min(64, len(probs)), len(probs)):
            top, ids = probs.topk(k)
            cdf = top.cumsum(0)
            if cdf[-1] >= top_p:
                break
        cdf = cdf[: int((cdf - top <= top_p).sum())]  # keep tokens whose preceding mass is within top_p
    u = torch.rand(1, generator=generator) * cdf[-1]
    i = min(int(torch.searchsorted(cdf, u, right=True)), len(cdf) - 1)
    return int(ids[i]) if ids is not None else i


@dataclass
class _Sequence:
    request: GenRequest
    generator: torch.Generator
    cached_tokens: int
    output: list[int] = field(default_factory=list)
    text: str | None = None  # set when a stop string cut the output
    finish_reason: str | None = None

    @property
    def length(self) -> int:
        """Tokens in the KV slot once the last sampled token has been fed back."""
        return len(self.request.input_ids) + len(self.output) - 1

    @property
    def tokens(self) -> int:
        """Prompt plus output tokens: the KV the sequence holds after its next step."""
        return len(self.request.input_ids) + len(self.output)


class CpuEngine:
    """The CPU engine: continuous batching over KV slots with prompt-prefix reuse."""

    def __init__(
        self,
        model_path: Path,
        model_name: str,
        *,
        max_batch: int = 16,
        threads: int | None = None,
        kv_capacity_tokens: int = 32768,
        prefix_cache_tokens: int = 8192,
        dtype: torch.dtype | None = None,
    ) -> None:
        self.model_name = model_name
        self.max_batch = max_batch
        self._capacity = kv_capacity_tokens
        torch.set_num_threads(threads or DEFAULT_THREADS)
        model_path = Path(model_path)
        self.tokenizer = load_tokenizer(model_path)
        self.eos = set(eos_token_ids(model_path))
        self.context = context_length(model_path)
        self.model = _Llama(model_path, dtype or default_dtype())
        self.kv = _KVSlots(self.model)
        self.prefix_cache = _PrefixCache(prefix_cache_tokens)

    def kv_capacity_tokens(self) -> int:
        """The admission budget, in padded tokens: a request is admitted while
        (running sequences + 1) x (the longest of them and its prompt) fits, since
        KV slots are padded to the longest sequence. max_tokens is not reserved
        up front (the worker fills in the whole context when a request omits it),
        so the budget bounds memory at admission, not as sequences grow."""
        return self._capacity

    def close(self) -> None:
        self.prefix_cache = _PrefixCache(0)
        self.kv = _KVSlots(self.model)

    @torch.inference_mode()
    def generate(self, requests: Iterable[GenRequest],
                 cancelled: Callable[[int], bool] | None = None) -> Iterator[GenResult]:
        stream = iter(requests)
        running: list[_Sequence] = []
        waiting: GenRequest | None = None  # pulled, but did not fit the KV budget yet
        exhausted = False
        while True:
            # Admit: pull only while a slot is free, so the caller can still
            # filter what has not been pulled.
            while len(running) < self.max_batch:
                if waiting is None and not exhausted:
                    waiting = next(stream, None)
                    exhausted = waiting is None
                if waiting is None:
                    break
                longest = max([len(waiting.input_ids), *(s.tokens for s in running)])
                if running and (len(running) + 1) * longest > self._capacity:
                    break
                self.kv.reserve(len(running) + 1, longest)
                seq = self._admit(waiting, len(running))
                waiting = None
                if seq.finish_reason:
                    yield self._result(seq)
                else:
                    running.append(seq)
            if cancelled is not None:
                for i in reversed(range(len(running))):
                    if cancelled(running[i].request.key):
                        self._remove(running, i)      # dropped without a result, as the interface says
                if not running and (waiting is not None or not exhausted):
                    continue
            if not running:
                return
            self._decode(running)
            finished = [self._remove(running, i) for i in reversed(range(len(running))) if running[i].finish_reason]
            for seq in reversed(finished):
                yield self._result(seq)

    def _admit(self, request: GenRequest, slot: int) -> _Sequence:
        """Prefill a request into ``slot`` (reusing cached prefix KV) and sample its first token."""
        ids = request.input_ids
        if not ids:
            raise ValueError(f"request {request.key} has an empty prompt")
        generator = torch.Generator()
        if request.params.seed is None:
            generator.seed()
        else:
            generator.manual_seed(request.params.seed)
        if request.params.max_tokens <= 0 or len(ids) >= self.context:
            return _Sequence(request, generator, 0, finish_reason="length")
        prompt = torch.tensor(ids, dtype=torch.long)
        # The last prompt token is always computed: its logits give the first output token.
        cached = 0
        for k, v in self.prefix_cache.match(prompt, limit=len(ids) - 1):
            self.kv.write(slot, cached, k, v)
            cached += k.shape[2]
        seq = _Sequence(request, generator, cached)
        new = prompt[cached:].unsqueeze(0)
        pos = torch.arange(cached, len(ids)).unsqueeze(0)
        logits = self.model.forward(new, pos, _Prefill(self.kv, slot, cached, new.shape[1]))
        self.prefix_cache.insert(prompt, lambda start: self.kv.read(slot, start, len(ids)))
        self._append(seq, self._sample([seq], logits)[0])
        return seq

    def _decode(self, running: list[_Sequence]) -> None:
        """One decode step for every running sequence, batched."""
        last = torch.tensor([[s.output[-1]] for s in running], dtype=torch.long)
        lengths = torch.tensor([s.length for s in running], dtype=torch.long)
        self.kv.reserve(len(running), int(lengths.max()) + 1)
        logits = self.model.forward(last, lengths.unsqueeze(1), _Decode(self.kv, lengths))
        for seq, token in zip(running, self._sample(running, logits)):
            self._append(seq, token)

    def _sample(self, seqs: list[_Sequence], logits: torch.Tensor) -> list[int]:
        """Greedy or temperature/top-p sampling, each row with its own generator."""
        greedy = logits.argmax(dim=-1).tolist()
        tokens = []
        for row, (seq, best) in enumerate(zip(seqs, greedy)):
            p = seq.request.params
            if p.temperature <= 0:
                tokens.append(best)
            else:
                tokens.append(_draw(torch.softmax(logits[row] / p.temperature, dim=-1), p.top_p, seq.generator))
        return tokens

    def _append(self, seq: _Sequence, token: int) -> None:
        """Record a sampled token and decide whether the sequence is done."""
        seq.output.append(token)
        params = seq.request.params
        if token in self.eos:
            seq.finish_reason = "stop"
            return
        if params.stop:
            text = self.tokenizer.decode(seq.output, skip_special_tokens=True)
            cut = min((i for i in (text.find(s) for s in params.stop if s) if i >= 0), default=-1)
            if cut >= 0:
                seq.text = text[:cut]
                seq.finish_reason = "stop"
                return
        if len(seq.output) >= params.max_tokens or len(seq.request.input_ids) + len(seq.output) >= self.context:
            seq.finish_reason = "length"

    def _remove(self, running: list[_Sequence], i: int) -> _Sequence:
        """Take sequence i out of the batch, moving the last one into its slot."""
        seq, last = running[i], len(running) - 1
        if i != last:
            self.kv.move(last, i, running[last].length)
            running[i] = running[last]
        running.pop()
        return seq

    def _result(self, seq: _Sequence) -> GenResult:
        text = seq.text
        if text is None:
            text = self.tokenizer.decode(seq.output, skip_special_tokens=True)
        return GenResult(
            key=seq.request.key,
            output_ids=seq.output,
            text=text,
            finish_reason=seq.finish_reason,
            prompt_tokens=len(seq.request.input_ids),
            cached_tokens=seq.cached_tokens,
        )
