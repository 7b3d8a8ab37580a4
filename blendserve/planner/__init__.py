"""The BlendServe planner: pure Python + numpy, no I/O (docs/design.md §3).

plan() turns the pending requests of one model into per-rank admission
orders; warmup_sample() and estimate_output_lengths() (or effective_output_lengths(),
whose lengths carry the expected KV reads of heavy-tailed subtrees) supply
the output lengths it needs; sharing_ratio() scores any order's prefix reuse.
"""
from .estimate import effective_output_lengths, estimate_output_lengths, loose_caps, tail_split_lengths, warmup_sample
from .perf import HARDWARE, MODELS, HardwareProfile, ModelProfile
from .plan import POLICIES, STEP_FILLS, Plan, plan, tail_threshold
from .sharing import sharing_ratio
from .tree import NodeTotals, PrefixTree
from .workload import Workload

__all__ = [
    "HARDWARE", "MODELS", "POLICIES", "STEP_FILLS", "HardwareProfile", "ModelProfile", "NodeTotals", "Plan",
    "PrefixTree", "Workload", "effective_output_lengths", "estimate_output_lengths", "loose_caps", "plan",
    "sharing_ratio", "tail_split_lengths", "tail_threshold", "warmup_sample",
]
