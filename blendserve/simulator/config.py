"""The simulated engine's knobs, checked at construction: step budget, running cap, KV pool, overlap model,
prefix-cache block and step fill (what each means: blendserve/simulator/engine.py's docstring)."""
from __future__ import annotations

from dataclasses import dataclass

from blendserve.planner.perf import HardwareProfile, ModelProfile
from blendserve.planner.plan import STEP_FILLS

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
