"""Performance model: what a request costs in compute and in memory bandwidth.

docs/design.md §3.1. Comp(r) = 2 (p + d) P / F, Mem(r) = (p d + d^2/2) H_kv L 4 / B,
rho = Comp / Mem. Everything is vectorised over numpy arrays because the planner
evaluates it for hundreds of thousands of requests and tree nodes at once.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    flops: float          # F, dense bf16 FLOP/s
    bandwidth: float      # B, bytes/s
    memory_bytes: float   # device memory
    # What the roofline (docs/design.md §3.1) leaves out, which a CPU engine pays and a GPU's kernels hide: seconds per
    # engine step (Python, dispatch), per decoding sequence in a step (sampling, stop checks, its
    # attention call) and per prefill chunk after a cached prefix (gathering that prefix's K/V), and
    # prefill's attention FLOPs over each chunk's context. Zero and off for the GPU profiles (the
    # paper's model); measured for "cpu" (benchmarks/estimate_error.py, measure_cpu).
    step_overhead: float = 0.0
    seq_overhead: float = 0.0
    chunk_overhead: float = 0.0
    prefill_attention: bool = False
    # Bandwidth of the per-step weight reads when it differs from the K/V reads' (None: the same).
    # The CPU profile folds the weight reads into step_overhead and sets inf here.
    weight_bandwidth: float | None = None
    # FLOP/s of prefill attention when it differs from the dense matmuls' (None: the same). On the CPU
    # engine a chunk's attention runs torch's SDPA over gathered blocks, several times slower per FLOP
    # than its GEMMs (benchmarks/sim_vs_engine.py's step fit), so one rate cannot price both.
    attention_flops: float | None = None

    @classmethod
    def from_step_costs(cls, name: str, model: ModelProfile, *, fixed: float, per_token: float,
                        per_position: float, per_pair: float = 0.0, per_sequence: float = 0.0,
                        per_cached_chunk: float = 0.0, memory_bytes: float = 24e9) -> HardwareProfile:
        """The profile whose simulated step (sequential overlap, efficiency 1) costs exactly
        fixed + per_token x tokens + per_position x KV positions decodes read + per_pair x prefill
        attention pairs (c (s + c/2) for a c-token chunk from position s) + per_sequence x decodes +
        per_cached_chunk x chunks after a cached prefix: a least-squares fit of a real engine's
        steps (benchmarks/sim_vs_engine.py) turned into the simulator's units."""
        return cls(name, flops=2.0 * model.params / per_token, bandwidth=model.kv_bytes_per_token / per_position,
                   memory_bytes=memory_bytes, step_overhead=fixed, seq_overhead=per_sequence,
                   chunk_overhead=per_cached_chunk, prefill_attention=per_pair > 0,
                   weight_bandwidth=float("inf"),
                   attention_flops=4.0 * model.q_dim * model.layers / per_pair if per_pair > 0 else None)


@dataclass(frozen=True)
class ModelProfile:
    name: str
    params: float         # P
    layers: int           # L
    kv_dim: int           # H_kv = num_kv_heads * head_dim
    q_dim: int = 0        # num_heads * head_dim: prefill attention FLOPs, where a profile counts them

    @property
    def kv_bytes_per_token(self) -> float:
        """K and V, bf16, all layers."""
        return self.kv_dim * self.layers * 4.0

    def weight_bytes(self) -> float:
        return self.params * 2.0

    @classmethod
    def from_config(cls, path: str | Path, name: str | None = None) -> ModelProfile:
        """Read an HF config.json (a file or a model directory)."""
        p = Path(path)
        if p.is_dir():
            p = p / "config.json"
        c = json.loads(p.read_text())
        h, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
        heads = c["num_attention_heads"]
        kv_heads = c.get("num_key_value_heads", heads)
        head_dim = c.get("head_dim") or h // heads
        inter = c["intermediate_size"]
        attn = h * heads * head_dim * 2 + h * kv_heads * head_dim * 2
        mlp = 3 * h * inter
        embed = vocab * h * (1 if c.get("tie_word_embeddings") else 2)
        params = layers * (attn + mlp) + embed
        return cls(name or c.get("_name_or_path") or p.parent.name, float(params), layers, kv_heads * head_dim,
                   heads * head_dim)


HARDWARE: dict[str, HardwareProfile] = {
    "a100-80gb": HardwareProfile("a100-80gb", 312e12, 2.039e12, 80e9),
    "h100-sxm": HardwareProfile("h100-sxm", 989e12, 3.35e12, 80e9),
    "h200": HardwareProfile("h200", 989e12, 4.8e12, 141e9),
    # The CPU engine (SmolLM2, bfloat16, 2 torch threads, the C++ decode kernel) on the 2-core AVX512-BF16
    # CI machine, measured by benchmarks/estimate_error.py's measure_cpu (synthetic decodes, prefills and
    # cached-prefix chunks); weight reads are inside the step cost. Measure another CPU and store it here.
    "cpu": HardwareProfile("cpu", 5.11e11, 2.13e10, 24e9, step_overhead=0.0108, seq_overhead=1.97e-5,
                           chunk_overhead=0.0152, prefill_attention=True, weight_bandwidth=float("inf")),
}

MODELS: dict[str, ModelProfile] = {
    "llama-3.1-8b": ModelProfile("llama-3.1-8b", 8.03e9, 32, 8 * 128, 4096),
    "llama-3.1-70b": ModelProfile("llama-3.1-70b", 70.6e9, 80, 8 * 128, 8192),
    "qwen-2.5-7b": ModelProfile("qwen-2.5-7b", 7.62e9, 28, 4 * 128, 3584),
    "qwen-2.5-72b": ModelProfile("qwen-2.5-72b", 72.7e9, 80, 8 * 128, 8192),
}


def comp_time(p: np.ndarray | float, d: np.ndarray | float, model: ModelProfile, hw: HardwareProfile):
    """Seconds of dense compute for prompt p and output d (attention FLOPs neglected)."""
    return 2.0 * (np.asarray(p, dtype=np.float64) + d) * model.params / hw.flops


def mem_time(p: np.ndarray | float, d: np.ndarray | float, model: ModelProfile, hw: HardwareProfile):
    """Seconds of KV-cache reads over the decode of d tokens after a p-token prompt."""
    p = np.asarray(p, dtype=np.float64)
    d = np.asarray(d, dtype=np.float64)
    return (p * d + d * d / 2.0) * model.kv_bytes_per_token / hw.bandwidth


def idle_step_tokens(model: ModelProfile, hw: HardwareProfile) -> float:
    """Tokens whose compute fits in the time every step pays however little it computes: the weight read and
    the step overhead. A lone long decode runs such steps; this many prompt tokens ride in each for free
    (Llama-3.1-8B on an A100: 153, the GPU's FLOP/s per byte/s of bandwidth for bf16 weights)."""
    floor = model.weight_bytes() / (hw.weight_bandwidth or hw.bandwidth) + hw.step_overhead
    return float(floor * hw.flops / (2.0 * model.params))


def density(comp: np.ndarray | float, mem: np.ndarray | float, sharing: np.ndarray | float = 0.0):
    """rho = (1 - s) Comp / Mem; infinite when nothing is decoded."""
    comp = np.asarray(comp, dtype=np.float64)
    mem = np.asarray(mem, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(mem > 0, (1.0 - np.asarray(sharing)) * comp / np.where(mem > 0, mem, 1.0), np.inf)


def kv_bytes_held(p: np.ndarray | float, d: np.ndarray | float, model: ModelProfile):
    """Average KV bytes a request holds over its life: (p + d/2) H_kv L 4."""
    return (np.asarray(p, dtype=np.float64) + np.asarray(d, dtype=np.float64) / 2.0) * model.kv_bytes_per_token


def memory_split(m: float, rho_t: float, rho_l: float, rho_r: float) -> tuple[float, float]:
    """Split KV memory M between the compute-dense (left) and memory-dense (right) cursors.

    M_L = M (rho_t - rho_R) / (rho_L - rho_R), clamped to [0, M] when both
    cursors lie on the same side of the target density.
    """
    if not np.isfinite(rho_l) or rho_l <= rho_r:
        frac = 1.0 if rho_l >= rho_t else 0.0
    else:
        frac = min(1.0, max(0.0, (rho_t - rho_r) / (rho_l - rho_r)))
    return m * frac, m * (1.0 - frac)
