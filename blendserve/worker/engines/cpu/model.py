"""The Llama forward pass over one step's flattened tokens (weights only; the K/V live in ``kv_cache``).

A step mixes sequences: some decode one token, others prefill a chunk of
their prompt. Everything but attention is per token, so the dense layers run
once over all the step's tokens ([N, hidden] matmuls: one weight read for the
whole step); attention alone is per sequence, over its block table
(``kv_cache.PagedAttention``). Logits are computed only for the rows that
sample (the last token of each sequence whose chunk reaches its end).
"""
from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

# Measured on the 2-core build machines (BENCHMARKS.md, CPU engine): on a
# CPU with AVX512-BF16, bfloat16 weights run prefill about 3x and decode about
# 2x faster than float32; on one with AVX2 only (an EPYC), torch emulates
# bfloat16 and the engine runs 1.6x slower than in float32.


def default_dtype(cpuinfo: Path = Path("/proc/cpuinfo")) -> torch.dtype:
    """bfloat16 where the CPU multiplies it natively, else float32."""
    try:
        flags = set(cpuinfo.read_text().split())
    except OSError:
        return torch.float32
    return torch.bfloat16 if flags & {"avx512_bf16", "amx_bf16"} else torch.float32


def packed_linear(dtype: torch.dtype) -> Callable[[torch.Tensor], Callable[[torch.Tensor], torch.Tensor]] | None:
    """For bfloat16: pack(weight) -> x -> x @ weight.T with the weight stored once in oneDNN's own
    blocked layout. F.linear hands oneDNN the plain weight and it is re-laid out on every call;
    packed once, the step's matmuls ran 5-15% faster, and the output projection at small batches
    2x (benchmarks/results/packed_linear.txt), with bit-identical results. None where oneDNN is
    missing or the dtype is another (float32 goes to MKL, which needs no packing)."""
    if dtype != torch.bfloat16 or not torch.backends.mkldnn.is_available():
        return None
    ops = torch.ops.mkldnn

    def pack(weight: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
        packed = ops._reorder_linear_weight(weight, 128)    # the batch size is only a layout hint
        return lambda x: ops._linear_pointwise(x, packed, None, "none", [], "")

    try:
        probe = torch.ones(4, 8, dtype=dtype)
        if not torch.equal(pack(probe)(probe[:3]), F.linear(probe[:3], probe)):
            return None
    except (RuntimeError, AttributeError):
        return None
    return pack


ROW_BLOCK = 32      # rows per matmul call where a row's result must not depend on the rows beside it


def row_blocked(f: Callable[[torch.Tensor], torch.Tensor],
                block: int = ROW_BLOCK) -> Callable[[torch.Tensor], torch.Tensor]:
    """``f`` (x -> x @ W.T) called on fixed blocks of ``block`` rows, the last one zero-padded.

    Why: a GEMM library picks its kernel and its blocking of the reduction from the call's shape, so the
    same row can come out a few ulps apart in a call of 5 rows and in one of 40, and a greedy or seeded
    answer then changes with whatever else ran in its step. Every call of the same shape reduces each row
    the same way, so each row's result depends on that row alone."""
    def blocked(x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        if n == block or n == 0:        # no rows: a step whose chunks all continue a prefill samples none
            return f(x)
        pad = -n % block
        if pad:
            x = torch.cat([x, x.new_zeros(pad, x.shape[1])])
        return torch.cat([f(x[i:i + block]) for i in range(0, x.shape[0], block)])[:n]

    return blocked


def random_weights_of(cfg: dict, dtype: torch.dtype, device: torch.device, seed: int = 0) -> dict[str, torch.Tensor]:
    """A Llama checkpoint's tensors for ``cfg`` (a config.json), drawn on ``device`` in ``dtype``.

    Normal with the config's ``initializer_range`` (transformers' init), norms at one: with a 128K
    vocabulary the logits are near uniform, so an output rarely meets its end-of-sequence token and runs to
    max_tokens, as vLLM's dummy weights do; what a throughput check needs is the real shapes, not the
    values. Drawn on the device, so an 8B model costs no host memory and no copy.
    """
    hidden, inter = cfg["hidden_size"], cfg["intermediate_size"]
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads", heads)
    head_dim = cfg.get("head_dim") or hidden // heads
    std = float(cfg.get("initializer_range", 0.02))
    gen = torch.Generator(device).manual_seed(seed) if device.type != "meta" else None   # meta: shapes only

    def normal(*shape: int) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, device=device).normal_(0.0, std, generator=gen)

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, dtype=dtype, device=device)

    w = {"model.embed_tokens.weight": normal(cfg["vocab_size"], hidden), "model.norm.weight": ones(hidden)}
    if not cfg.get("tie_word_embeddings", False):
        w["lm_head.weight"] = normal(cfg["vocab_size"], hidden)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = ones(hidden)
        w[p + "post_attention_layernorm.weight"] = ones(hidden)
        for name, rows in (("q", heads * head_dim), ("k", kv_heads * head_dim), ("v", kv_heads * head_dim)):
            w[p + f"self_attn.{name}_proj.weight"] = normal(rows, hidden)
        w[p + "self_attn.o_proj.weight"] = normal(hidden, heads * head_dim)
        w[p + "mlp.gate_proj.weight"] = normal(inter, hidden)
        w[p + "mlp.up_proj.weight"] = normal(inter, hidden)
        w[p + "mlp.down_proj.weight"] = normal(hidden, inter)
    return w


def llama3_frequencies(inv_freq: torch.Tensor, rope: dict) -> torch.Tensor:
    """Llama 3.1's rope scaling (transformers' ``_compute_llama3_parameters``): wavelengths past the original
    context's low-frequency bound slowed by ``factor``, those under the high-frequency bound kept, and a
    smooth blend between the two."""
    factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    old = rope["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    return torch.where(medium, blended, scaled)


class Llama:
    """A Llama-architecture checkpoint (SmolLM2 and the tiny test model), loaded from safetensors, or random
    weights of its config.json's shapes (``random_weights``)."""

    def __init__(self, path: Path, dtype: torch.dtype, device: str | torch.device = "cpu",
                 random_weights: bool = False, exact: bool = False) -> None:
        """Weights and rotary tables on ``device``. With ``random_weights`` only config.json is read: the
        weights are drawn on the device (vLLM's dummy load format), so a GPU check needs no checkpoint.
        ``exact``: every row's logits independent of the other rows of its step (``row_blocked``), so greedy
        and seeded outputs repeat whatever they run beside."""
        cfg = json.loads((path / "config.json").read_text())
        if cfg.get("model_type") != "llama":
            raise ValueError(f"{path}: the CPU engine runs Llama checkpoints, not {cfg.get('model_type')!r}")
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        if rope.get("rope_type", rope.get("type", "default")) not in ("default", "llama3"):
            raise ValueError(f"{path}: unsupported rope scaling {rope}")
        self.n_layers = cfg["num_hidden_layers"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv_heads = cfg.get("num_key_value_heads", self.n_heads)
        self.head_dim = cfg.get("head_dim") or cfg["hidden_size"] // self.n_heads
        self.eps = cfg["rms_norm_eps"]
        self.dtype = dtype
        self.device = torch.device(device)

        w = random_weights_of(cfg, dtype, self.device) if random_weights else self._load(path, dtype, self.device)
        self.embed = w["model.embed_tokens.weight"]
        self.lm_head = w.get("lm_head.weight", self.embed)
        self.norm = w["model.norm.weight"]
        # oneDNN's packed layout is a CPU one; on a GPU the plain F.linear is cuBLAS's.
        packed = packed_linear(dtype) if self.device.type == "cpu" else None
        pack = packed or (lambda weight: functools.partial(F.linear, weight=weight))
        self.head = pack(self.lm_head)
        self.layers = []
        for i in range(self.n_layers):
            p = f"model.layers.{i}."
            self.layers.append(
                (
                    w[p + "input_layernorm.weight"],
                    # q, k and v (and gate and up) in one matmul each: fewer, larger kernels.
                    pack(torch.cat([w[p + f"self_attn.{n}_proj.weight"] for n in "qkv"])),
                    pack(w[p + "self_attn.o_proj.weight"]),
                    w[p + "post_attention_layernorm.weight"],
                    pack(torch.cat([w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]])),
                    pack(w[p + "mlp.down_proj.weight"]),
                )
            )
        if exact:
            self._make_exact()
        theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
        inv_freq = 1.0 / theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim)
        if rope.get("rope_type", rope.get("type")) == "llama3":
            inv_freq = llama3_frequencies(inv_freq, rope)
        angles = torch.outer(torch.arange(cfg["max_position_embeddings"], dtype=torch.float32), inv_freq)
        # rotate_half(x) * sin == x.roll(D/2) * sin with the first half of sin negated.
        self.cos = torch.cat([angles.cos(), angles.cos()], dim=-1).to(self.device, dtype)
        self.sin = torch.cat([-angles.sin(), angles.sin()], dim=-1).to(self.device, dtype)

    def _make_exact(self) -> None:
        """Every matmul on fixed blocks of rows (``row_blocked``). oneDNN and MKL split a call's rows among
        threads and tiles by its shape, so a row's result changes with its place in the call and the
        call's size: a 45-token prefill and the same prompt prefilled as 32 + 13 tokens gave another K
        from the first layer on."""
        self.head = row_blocked(self.head)
        self.layers = [(ln1, row_blocked(wqkv), row_blocked(wo), ln2, row_blocked(wgu), row_blocked(wdown))
                       for ln1, wqkv, wo, ln2, wgu, wdown in self.layers]

    @staticmethod
    def _load(path: Path, dtype: torch.dtype, device: torch.device) -> dict[str, torch.Tensor]:
        from safetensors.torch import load_file  # here: a random-weight model runs where safetensors is absent

        return {k: v.to(device, dtype) for k, v in load_file(str(path / "model.safetensors")).items()}

    def kv_bytes_per_token(self) -> int:
        """K and V of one token over all layers: what one token of the KV pool (in the model's dtype) costs."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.dtype.itemsize

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RMSNorm computed in float32, as the reference Llama does: in bfloat16 greedy answers drift."""
        return F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).to(x.dtype) * weight

    def forward(self, ids: torch.Tensor, pos: torch.Tensor, attn, sample_rows: torch.Tensor,
                between: Callable[[], None] | None = None) -> torch.Tensor:
        """Logits (float32, [len(sample_rows), vocab]) after one pass over the flattened tokens.

        ``ids`` and ``pos`` are [N]; ``attn(layer, q, k, v)`` stores this step's
        K/V and returns each token's attention output ([N, heads, head_dim]).
        ``between()``, when given, runs after every layer but the last: the
        engine runs a whole other step there (an interactive prompt cutting in),
        which touches neither this step's activations nor its K/V.
        Few, fused ops per layer: at decode time the matmuls are small, so the
        per-op overhead of eager torch is a large part of a step.
        """
        N = ids.shape[0]
        H, KH, D = self.n_heads, self.n_kv_heads, self.head_dim
        x = self.embed[ids]
        cos, sin = self.cos[pos].unsqueeze(1), self.sin[pos].unsqueeze(1)  # [N, 1, D]
        for i, (ln1, wqkv, wo, ln2, wgu, wdown) in enumerate(self.layers):
            qkv = wqkv(self._norm(x, ln1))
            qk = qkv[:, : (H + KH) * D].view(N, H + KH, D)
            qk = qk * cos + qk.roll(D // 2, dims=-1) * sin  # rotary embedding on q and k at once
            v = qkv[:, (H + KH) * D :].view(N, KH, D)
            o = attn(i, qk[:, :H], qk[:, H:], v)
            x = x + wo(o.reshape(N, H * D))
            gate, up = wgu(self._norm(x, ln2)).chunk(2, dim=-1)
            x = x + wdown(F.silu(gate) * up)
            if between is not None and i + 1 < self.n_layers:
                between()
        return self.head(self._norm(x[sample_rows], self.norm)).float()
