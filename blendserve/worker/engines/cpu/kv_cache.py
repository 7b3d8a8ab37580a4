"""The paged KV pool and attention over it: one step's K/V written, each sequence attending to its blocks.

The pool holds, per layer, K and V as [kv_heads, blocks * block_size, head_dim]
in the model's dtype: K and V come out of the model's own matmuls (and the
rotary embedding) in that dtype, so a float32 pool behind bfloat16 weights
held the same values at twice the bytes, and decode attention is mostly the
reading of K/V. Attention itself runs in torch's fused kernel, which
accumulates in float32 whatever its inputs. With kv heads outermost, gathering a
batch of block tables (``index_select`` on the block axis) yields
[kv_heads, batch, positions, head_dim] directly, ready for attention with no
transpose copy.

The pool is one anonymous ``mmap``: the kernel maps zeroed 4 KiB pages on
first touch, so the process's memory grows with the blocks actually used
(a block of 16 tokens is one page per kv head), and blocks never written read
as zeros (padding positions are masked, and must not be NaN). numpy's zeros
would do the same but advise huge pages, and then touching one block maps
2 MiB per kv head and layer (measured: 514 MB resident for 768 tokens).
On a GPU (the engine's ``device``) the pool is one zeroed tensor in the
device's memory, and a step's block tables and masks go there once per step,
built before the first layer.
"""
from __future__ import annotations

import mmap
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F


class KVPool:
    def __init__(self, layers: int, kv_heads: int, head_dim: int, num_blocks: int, block_size: int,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> None:
        self.block_size, self.num_blocks = block_size, num_blocks
        shape = (layers, 2, kv_heads, num_blocks * block_size, head_dim)
        if torch.device(device).type == "cpu":
            self._memory = mmap.mmap(-1, dtype.itemsize * layers * 2 * kv_heads * num_blocks * block_size * head_dim)
            pool = torch.frombuffer(self._memory, dtype=dtype).view(shape)
        else:
            pool = torch.zeros(shape, dtype=dtype, device=device)
        self.k = [pool[i, 0] for i in range(layers)]
        self.v = [pool[i, 1] for i in range(layers)]

    @property
    def dtype(self) -> torch.dtype:
        return self.k[0].dtype

    @property
    def device(self) -> torch.device:
        return self.k[0].device

    def blocks(self, pool: torch.Tensor) -> torch.Tensor:
        """A layer's pool viewed as [kv_heads, blocks, block_size, head_dim]."""
        return pool.view(pool.shape[0], self.num_blocks, self.block_size, pool.shape[2])


@dataclass
class Chunk:
    """``n`` tokens of one sequence, positions start..start+n-1, at rows row..row+n-1 of the step."""

    row: int
    start: int
    n: int
    block_table: list[int]


@dataclass
class _DecodeGroup:
    rows: torch.Tensor        # [B * Q] step rows of the group's queries (a shorter chunk repeats its last row)
    tables: torch.Tensor      # [B * blocks] block ids, each table padded to the group's longest
    blocks: int
    bias: torch.Tensor        # [1, B, Q, 1, blocks * block_size]: 0 where a query may look, -inf elsewhere
    queries: int = 1          # Q: the group's longest chunk
    out_rows: torch.Tensor | None = None    # step rows of the real (not repeated) queries, when Q > 1
    out_index: torch.Tensor | None = None   # ... and their places among the B * Q
    mask: torch.Tensor | None = None        # Q == 1: the bias as [B, 1, 1, positions] in the pool's dtype (SDPA)


def _on(group: _DecodeGroup, device: torch.device) -> _DecodeGroup:
    """The group with its tensors on ``device`` (host-built, copied without waiting)."""
    def move(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.to(device, non_blocking=True)

    return _DecodeGroup(move(group.rows), move(group.tables), group.blocks, move(group.bias), group.queries,
                        move(group.out_rows), move(group.out_index), move(group.mask))


@dataclass
class _KernelDecodes:
    """Every one-token and short chunk of a step, for the C++ kernel: no padding, no grouping by length."""

    rows: torch.Tensor        # [B] step rows (a short chunk has one per token)
    tables: torch.Tensor      # [B, blocks] int32 block ids (each table padded to the longest)
    lengths: torch.Tensor     # [B] int32 positions each attends to, its own included


class PagedAttention:
    """Attention for one step: built once from the step's chunks, then called once per layer.

    One-token chunks (decodes, and the rare one-token prefill) are batched:
    their blocks gathered into a padded batch and attended in one SDPA call,
    the query heads of each kv head folded into that head's queries (no
    repeated K/V; in bfloat16 3x faster than two float32 matmuls at 128 x 320
    positions). They are grouped by length, so that a few long sequences do not pad every
    short one to their length. Short chunks of a few tokens (a decode and its
    speculative draft) are batched the same way in groups of their own, each
    query masked causally and padded to the group's longest chunk: one SDPA
    call per sequence and layer would cost more in op overhead than the
    attention itself. Longer chunks (prefills) each run one causal SDPA
    aligned to the last key, over the cached prefix and themselves.

    With ``decode_kernel`` (``native.paged_decode``) the one-token
    and short chunks instead all go to one call of the C++ kernel, which reads
    their blocks in place, one query token a row: 2-5x faster than gather +
    SDPA (BENCHMARKS.md, CPU engine). Prefill chunks keep SDPA, whose matmuls
    serve many queries per key read.
    """

    GROUP_RATIO = 0.6   # a decode group holds lengths within this ratio of its longest ...
    MIN_GROUP = 16      # ... unless it would be smaller than this (each group costs a few ops a layer)
    SHORT = 16          # chunks of up to this many tokens are batched, longer ones run SDPA alone

    def __init__(self, pool: KVPool, chunks: list[Chunk], scale: float,
                 decode_kernel: Callable[..., torch.Tensor] | None = None, exact: bool = False) -> None:
        """``exact`` (with ``decode_kernel``): every chunk, prefills too, goes to the kernel, one query token a
        row, so a token's attention is reduced the same way whatever chunk, cache hit or step it is in."""
        self.pool, self.scale, self.kernel = pool, scale, decode_kernel
        most = max(c.n for c in chunks) if exact and decode_kernel else self.SHORT   # longest chunk to batch
        bs = pool.block_size
        slots = []
        for c in chunks:
            pos = torch.arange(c.start, c.start + c.n)
            slots.append(torch.tensor(c.block_table, dtype=torch.long)[pos // bs] * bs + pos % bs)
        self.slots = torch.cat(slots)
        self.n_tokens = len(self.slots)
        self.prefills = [(c.row, c.n, c.start, torch.tensor(c.block_table[: -(-(c.start + c.n) // bs)]))
                         for c in chunks if c.n > most]
        decodes = [c for c in chunks if c.n == 1]
        short_chunks = [c for c in chunks if 1 < c.n <= most]
        self.kernel_decodes = None
        if decode_kernel and (decodes or short_chunks):
            self.kernel_decodes = self._kernel_group([c for c in chunks if c.n <= most])   # in row order
            decodes, short_chunks = [], []
        decodes.sort(key=lambda c: -c.start)
        short_chunks.sort(key=lambda c: -(c.start + c.n))
        self.decodes = [self._group(g) for g in self._split(decodes) + self._split(short_chunks)]
        self.all_decode = not self.prefills and (
            len(self.decodes) == 1 and self.decodes[0].queries == 1 and self.kernel_decodes is None
            or not self.decodes and self.kernel_decodes is not None)
        # The step's indices and masks, to the pool's device once (on a CPU, where they are, a no-op).
        device = pool.device
        self.slots = self.slots.to(device, non_blocking=True)
        self.prefills = [(row, n, start, table.to(device, non_blocking=True)) for row, n, start, table in self.prefills]
        self.decodes = [_on(g, device) for g in self.decodes]

    @staticmethod
    def _kernel_group(chunks: list[Chunk]) -> _KernelDecodes:
        """One kernel row per query token: token i of a chunk sees its table up to its own position."""
        width = max(len(c.block_table) for c in chunks)
        rows: list[int] = []
        lengths: list[int] = []
        tables: list[list[int]] = []
        for c in chunks:
            rows += range(c.row, c.row + c.n)
            lengths += range(c.start + 1, c.start + c.n + 1)
            tables += [c.block_table + [0] * (width - len(c.block_table))] * c.n
        return _KernelDecodes(torch.tensor(rows), torch.tensor(tables, dtype=torch.int32),
                              torch.tensor(lengths, dtype=torch.int32))

    def _split(self, decodes: list[Chunk]) -> list[list[Chunk]]:
        groups: list[list[Chunk]] = []
        for c in decodes:   # longest first
            first = groups[-1][0] if groups else None
            if first and (c.start + c.n >= self.GROUP_RATIO * (first.start + first.n)
                          or len(groups[-1]) < self.MIN_GROUP):
                groups[-1].append(c)
            else:
                groups.append([c])
        return groups

    def _group(self, chunks: list[Chunk]) -> _DecodeGroup:
        bs = self.pool.block_size
        chunks = sorted(chunks, key=lambda c: c.row)
        ends = torch.tensor([c.start + c.n for c in chunks])
        blocks = -(-int(ends.max()) // bs)
        tables = torch.zeros(len(chunks), blocks, dtype=torch.long)
        for i, c in enumerate(chunks):
            t = c.block_table[:blocks]
            tables[i, : len(t)] = torch.tensor(t)
        B, Q = len(chunks), max(c.n for c in chunks)
        n = torch.tensor([c.n for c in chunks]).unsqueeze(1)
        # [B, Q]: a short chunk repeats its last
        offset = torch.minimum(torch.arange(Q).unsqueeze(0), n - 1)
        last = torch.tensor([c.start for c in chunks]).unsqueeze(1) + offset      # the last position each query sees
        padding = torch.arange(blocks * bs).view(1, 1, -1) > last.unsqueeze(2)
        bias = torch.zeros(padding.shape).masked_fill_(padding, float("-inf")).view(1, B, Q, 1, -1)
        rows = (torch.tensor([c.row for c in chunks]).unsqueeze(1) + offset).flatten()
        if Q == 1:
            return _DecodeGroup(rows, tables.flatten(), blocks, bias, mask=bias.view(B, 1, 1, -1).to(self.pool.dtype))
        real = (torch.arange(Q).unsqueeze(0) < n).flatten()
        return _DecodeGroup(rows, tables.flatten(), blocks, bias, Q, rows[real], real.nonzero().squeeze(1))

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Store this step's K/V ([N, kv_heads, D]) in the pool; return [N, heads, D] attention outputs."""
        kp, vp = self.pool.k[layer], self.pool.v[layer]
        kp.index_copy_(1, self.slots, k.transpose(0, 1).to(kp.dtype))
        vp.index_copy_(1, self.slots, v.transpose(0, 1).to(vp.dtype))
        out = q.new_empty(q.shape)
        if (g := self.kernel_decodes) is not None:
            rows = slice(None) if self.all_decode else g.rows
            out[rows] = self.kernel(q[rows].to(kp.dtype), kp, vp, g.tables, g.lengths, self.pool.block_size,
                                    self.scale).to(q.dtype)
        for g in self.decodes:
            if g.queries > 1:
                out[g.out_rows] = self._decode(q[g.rows], g, kp, vp)[g.out_index].to(q.dtype)
                continue
            rows = slice(None) if self.all_decode else g.rows
            out[rows] = self._decode(q[rows], g, kp, vp).to(q.dtype)
        for row, n, start, table in self.prefills:
            out[row:row + n] = self._prefill(q[row:row + n], k[row:row + n], v[row:row + n], start, table,
                                             kp, vp).to(q.dtype)
        return out

    def _decode(self, q: torch.Tensor, g: _DecodeGroup, kp: torch.Tensor, vp: torch.Tensor) -> torch.Tensor:
        """[B * Q, H, D] queries of a group (B chunks of Q rows) -> their attention outputs."""
        _, H, D = q.shape
        KH, Q = kp.shape[0], g.queries
        B = q.shape[0] // Q
        keys = torch.index_select(self.pool.blocks(kp), 1, g.tables).view(KH, B, -1, D)
        values = torch.index_select(self.pool.blocks(vp), 1, g.tables).view(KH, B, -1, D)
        if Q == 1:       # query head h reads kv head h // group: a kv head's group are its queries
            grouped = q.view(B, KH, H // KH, D).to(kp.dtype)
            o = F.scaled_dot_product_attention(grouped, keys.transpose(0, 1), values.transpose(0, 1),
                                               attn_mask=g.mask, scale=self.scale)  # [B, KH, G, D]
            return o.reshape(B, H, D)
        G = H // KH
        keys, values = keys.float(), values.float()
        grouped = q.float().view(B, Q, KH, G, D).permute(2, 0, 1, 3, 4).reshape(KH, B, Q * G, D)
        scores = torch.matmul(grouped, keys.transpose(-1, -2)).mul_(self.scale)
        scores.view(KH, B, Q, G, -1).add_(g.bias)
        o = torch.matmul(torch.softmax(scores, dim=-1), values)              # [KH, B, Q * G, D]
        return o.view(KH, B, Q, G, D).permute(1, 2, 0, 3, 4).reshape(B * Q, H, D)

    def _prefill(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int, table: torch.Tensor,
                 kp: torch.Tensor, vp: torch.Tensor) -> torch.Tensor:
        """One chunk, in the pool's dtype (the fused kernel accumulates in float32).

        As a CausalBias, not a boolean mask, the mask takes torch's fused CPU
        kernel (800 new tokens, one layer: 11 ms instead of 19).
        """
        n, dt = q.shape[0], kp.dtype
        qt = q.to(dt).transpose(0, 1).unsqueeze(0)                        # [1, H, n, D]
        if start == 0:   # nothing cached before the chunk: its own K/V are all it attends to
            keys, values = k.to(dt).transpose(0, 1).unsqueeze(0), v.to(dt).transpose(0, 1).unsqueeze(0)
            out = F.scaled_dot_product_attention(qt, keys, values, is_causal=True, enable_gqa=True, scale=self.scale)
        else:
            end = start + n
            keys = torch.index_select(self.pool.blocks(kp), 1, table).flatten(1, 2)[:, :end].unsqueeze(0)
            values = torch.index_select(self.pool.blocks(vp), 1, table).flatten(1, 2)[:, :end].unsqueeze(0)
            out = F.scaled_dot_product_attention(qt, keys, values, **causal_lower_right(n, end),
                                                 enable_gqa=True, scale=self.scale)
        return out[0].transpose(0, 1)


def causal_lower_right(queries: int, keys: int) -> dict:
    """SDPA's mask arguments for ``queries`` tokens at the end of ``keys``: query i sees keys up to
    keys - queries + i. What torch.nn.attention.bias.causal_lower_right does on a CPU (is_causal when the
    two lengths are equal, else the boolean mask), without importing that module, which pulls in
    torch._dynamo: 2 s of every worker's start."""
    if queries == keys:
        return {"is_causal": True}
    return {"attn_mask": torch.ones(queries, keys, dtype=torch.bool).tril(diagonal=keys - queries)}
