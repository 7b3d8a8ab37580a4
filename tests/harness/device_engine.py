"""The embedded engine as the device check builds it (benchmarks/device_check.py, scripts/device_check.sh).

That check runs on a GPU machine that has only torch and numpy, so nothing here imports more than the standard
library: tests/engine/test_device_check.py runs it with site-packages off and keeps these settings in step with
CpuEngineSettings.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
LLAMA_8B = ROOT / "scripts" / "models" / "llama-3.1-8b"


def engine_settings(args: argparse.Namespace) -> SimpleNamespace:
    """What CpuEngineSettings holds (blendserve/core/config.py), without pydantic, which that machine lacks: every
    field the engine reads."""
    return SimpleNamespace(threads=0, kv_gb=args.kv_gb, block_size=16, max_batch=args.max_running,
                           max_batched_tokens=args.step_tokens, rush_tokens=256, cut_in=False, native=True, exact=False,
                           device=args.device, load_format="dummy")
