"""The CPU engine's own rates on the machine it runs on, as a planner hardware profile.

A CPU's rates differ by vendor, generation, core count and threads far more than one GPU model's do:
the profile measured on one machine was 15% off on another of the same vendor and 37% off on another
vendor's. So `blendserve estimate --gpu cpu` prices a file on this machine's own figures, measured here
once (seconds) and cached in the data dir under a key of what they depend on (the CPU, the threads,
the model, the engine's kernels).

Synthetic prompts only, never the file being judged. Each figure is a difference of two runs, so
prefill and start-up cancel: decode steps of 1, 8 and 32 short sequences (a line gives the step's
fixed cost and one more sequence's), prefill steps of fresh 512-token chunks (the FLOP rate), chunks
behind a cached 896-token prefix (what gathering the prefix's K/V costs beyond its FLOPs), and
4 decodes over 1,024 cached tokens each (the K/V read bandwidth). The simulator's step is then
o + n s + k g + FLOPs / F + KV / B (docs/design.md §3.1).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import random
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from blendserve.planner.perf import HardwareProfile, ModelProfile
from blendserve.worker.engines.base import GenRequest, SamplingParams

DECODE_SIZES = (1, 8, 32)
PROFILE_VERSION = 1          # bumped when what is measured changes: older cached profiles are measured again


def cpu_name() -> str:
    """The CPU's model name (Linux /proc/cpuinfo; elsewhere the platform's processor string)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def machine_key(model_name: str, threads: int, native: bool) -> dict[str, object]:
    """What a measured profile depends on: a cached one is used only where all of it matches."""
    return {"version": PROFILE_VERSION, "cpu": cpu_name(), "cpus": usable_cpus(),
            "threads": threads or usable_cpus(), "model": model_name, "native": native}


def cache_path(data_dir: Path, key: dict[str, object]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return Path(data_dir) / "profiles" / f"cpu-{digest}.json"


def load(path: Path) -> tuple[HardwareProfile, dict] | None:
    """A cached profile and its record (key, when measured, how long it took); None where absent or unreadable."""
    try:
        record = json.loads(path.read_text())
        return HardwareProfile(**record["profile"]), record
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(path: Path, key: dict[str, object], profile: HardwareProfile, seconds: float) -> dict:
    record = {"key": key, "measured_at": int(time.time()), "seconds": round(seconds, 1), "profile": asdict(profile)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(path)                      # a reader never sees half a profile
    return record


def measure(engine, model: ModelProfile, memory_bytes: float = 24e9) -> HardwareProfile:
    """This machine's profile, from runs of `engine` (a CpuEngine) on synthetic prompts; see the module doc."""
    rng = random.Random(0)
    no_eos = tuple((t, -100.0) for t in sorted(engine.eos))
    keys = iter(range(10**9))
    attention = 4.0 * model.q_dim * model.layers           # FLOPs per (query token x context token)

    def prompt(n: int) -> list[int]:
        return [rng.randrange(1000, 20000) for _ in range(n)]

    def timed(prompts: list[list[int]], out: int) -> float:
        params = SamplingParams(max_tokens=out, temperature=0.0, logit_bias=no_eos)
        t0 = time.perf_counter()
        list(engine.generate([GenRequest(next(keys), p, params) for p in prompts]))
        return time.perf_counter() - t0

    def decode_step(prompts: list[list[int]]) -> float:
        timed(prompts, 1)                                   # warm the prefix cache: both runs below hit it
        return (timed(prompts, 17) - timed(prompts, 9)) / 8

    timed([prompt(64)], 2)                                  # warm-up
    steps = [decode_step([prompt(16) for _ in range(n)]) for n in DECODE_SIZES]
    per_seq, step_o = (float(x) for x in np.polyfit(DECODE_SIZES, steps, 1))
    step_o = max(step_o, 0.0)
    prefill = timed([prompt(512) for _ in range(4)], 1) / 2  # 2 steps of two fresh 512-token chunks
    flops = (2.0 * model.params * 1024 + 2 * attention * 512 * 256) / max(prefill - step_o, 1e-9)
    token_s = 2.0 * model.params / flops
    prefix = prompt(896)
    timed([prefix + prompt(8)], 1)                          # cache the prefix
    behind = timed([prefix + prompt(64) for _ in range(16)], 1)      # a step of 16 chunks from position 896
    chunk_o = (behind - step_o - 1024 * token_s - 16 * attention * 64 * (896 + 32) / flops) / 16
    long4 = decode_step([prompt(1024) for _ in range(4)])
    kv_bytes = 4 * (1024 + 13) * model.kv_bytes_per_token   # the profile counts bf16 K/V, as the planner does
    bandwidth = kv_bytes / max(long4 - (step_o + 4 * per_seq), 1e-9)
    return HardwareProfile("cpu", flops, bandwidth, memory_bytes, weight_bandwidth=math.inf,
                           step_overhead=step_o, seq_overhead=max(0.0, per_seq - token_s),
                           chunk_overhead=max(0.0, chunk_o), prefill_attention=True)
