"""The embedded engine on a device, fed one hidden-style mix in the orders of BlendServe, DFS and FCFS: one table.

For a GPU machine where only torch (and numpy, triton) is installed and nothing
can be installed or downloaded: no service (its web and database packages are
absent), no checkpoint. The engine (``blendserve/worker/engines/cpu``) runs on the device
with random weights of a real model's config.json (``BLENDSERVE_CPU_LOAD_FORMAT
=dummy``; Llama-3.1-8B's by default), token ids in and out, so every output
runs to its max_tokens. The planner (``blendserve/planner``, pure numpy) plans
the mix as the service does: BlendServe after a 1% warm-up sample whose output
lengths are observed (``blendserve/simulator/runner.py``), DFS, and FCFS (file
order). Each order runs on the same engine, its prefix cache emptied between
runs, after one untimed warm-up run (CUDA kernels and cuBLAS load on first use).

The mix is ``benchmarks/blind_mixes_abc.py``'s (token-level, written without
reading the planner): kinds drawn like BurstGPT, MMLU, OpenVid, WildChat,
ShareGPT and Azure traces, prefixes shared only where the real data shares
them. A request's output length is its max_tokens here (random weights emit no
end-of-sequence token), capped by ``--max-output``.

    scripts/device_check.sh                       # the GPU machine: cuda, Llama-3.1-8B's shapes
    DEVICE=cpu CONFIG=DIR REQUESTS=40 scripts/device_check.sh     # the same path on a CPU, a small config
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.blind_mixes_abc import MIXES, Shared, build_mix
from blendserve.planner import HARDWARE, ModelProfile, Workload, plan
from blendserve.simulator.engine import EngineConfig
from blendserve.simulator.runner import _blendserve_estimated
from blendserve.worker.engines.base import GenRequest, SamplingParams
from blendserve.worker.engines.cpu.engine import CpuEngine
from blendserve.worker.engines.speculative import SpecConfig
from tests.harness.device_engine import LLAMA_8B, engine_settings

POLICIES = ("blendserve", "dfs", "fcfs")


def mix(args: argparse.Namespace, vocab: int, context: int) -> tuple[list[list[int]], np.ndarray, np.ndarray]:
    """Prompts (ids folded into the vocabulary, cut to fit the context), output lengths and caps."""
    reqs = build_mix(args.mix, 0, args.seed, args.requests, Shared(args.seed))
    prompts, outs, caps = [], [], []
    for _, p, d, m in reqs:
        d = min(d, args.max_output)
        prompt = (np.asarray(p, dtype=np.int64) % vocab)[: max(1, context - d - 1)]
        prompts.append(prompt.tolist())
        outs.append(d)
        caps.append(max(d, min(m, args.max_output)))
    return prompts, np.array(outs), np.array(caps)


def orders(prompts: list[list[int]], outs: np.ndarray, caps: np.ndarray, engine: CpuEngine,
           profile: ModelProfile, hardware: str, seed: int) -> dict[str, np.ndarray]:
    """Each policy's admission order, planned with the engine's KV pool and step budget."""
    w = Workload.from_lists(prompts, caps, outs)
    hw = HARDWARE[hardware]
    kv_bytes = engine.kv_capacity_tokens() * profile.kv_bytes_per_token
    config = EngineConfig(step_tokens=engine.step_token_budget(), max_running=engine.max_running,
                          kv_capacity_tokens=engine.kv_capacity_tokens())
    blend, _ = _blendserve_estimated(w, profile, hw, kv_bytes, config, seed)
    dfs = plan(Workload(w.tokens, w.offsets, w.max_tokens), profile, hw, "dfs", kv_capacity_bytes=kv_bytes,
               step_tokens=engine.step_token_budget(), seed=seed).order
    return {"blendserve": blend, "dfs": dfs, "fcfs": np.arange(w.n)}


def run(engine: CpuEngine, prompts: list[list[int]], outs: np.ndarray, order: np.ndarray) -> dict:
    """One order through the engine on an empty prefix cache: seconds, tokens, cached prompt tokens."""
    engine.close()                      # a fresh KV pool and block table: no prefix left by the last run
    if engine.device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
    reqs = [GenRequest(int(i), prompts[i], SamplingParams(max_tokens=int(outs[i]), temperature=0.0)) for i in order]
    t = time.perf_counter()
    results = list(engine.generate(reqs))
    seconds = time.perf_counter() - t
    if len(results) != len(reqs):
        raise RuntimeError(f"{len(results)} results for {len(reqs)} requests")
    short = [r.key for r in results if len(r.output_ids) != outs[r.key]]
    if short:
        raise RuntimeError(f"{len(short)} outputs ended before max_tokens (request {short[0]})")
    prompt = sum(r.prompt_tokens for r in results)
    output = sum(len(r.output_ids) for r in results)
    return {"seconds": seconds, "prompt_tokens": prompt, "output_tokens": output,
            "cached_tokens": sum(r.cached_tokens for r in results), "tokens_per_s": (prompt + output) / seconds}


def table(res: dict[str, dict]) -> str:
    """One row a policy; the ratio is to the best of the baselines (DFS, FCFS)."""
    best = max(r["tokens_per_s"] for p, r in res.items() if p != "blendserve")
    lines = [f"{'policy':<11} {'seconds':>8} {'tokens/s':>10} {'output tok/s':>12} {'cached':>7} "
             f"{'vs best baseline':>17}"]
    for p, r in res.items():
        cached = r["cached_tokens"] / max(r["prompt_tokens"], 1)
        lines.append(f"{p:<11} {r['seconds']:>8.1f} {r['tokens_per_s']:>10.0f} "
                     f"{r['output_tokens'] / r['seconds']:>12.0f} {cached:>7.1%} {r['tokens_per_s'] / best:>16.3f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", type=Path, default=LLAMA_8B, help="a model directory holding its config.json")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--mix", default="mixA", choices=sorted(MIXES))
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--max-output", type=int, default=768, help="output tokens a request at most")
    ap.add_argument("--kv-gb", type=float, default=32.0, help="the KV pool in GiB (Llama-3.1-8B: 128 KiB a token)")
    ap.add_argument("--step-tokens", type=int, default=2048, help="tokens a step at most (SGLang's chunk)")
    ap.add_argument("--max-running", type=int, default=256)
    ap.add_argument("--seed", type=int, default=2121)
    ap.add_argument("--json", type=Path, help="write the results here as well")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    torch.manual_seed(args.seed)
    engine = CpuEngine(args.config, args.config.name + "-random", config=engine_settings(args),
                       speculative=SpecConfig())      # drafting off: the orders alone differ
    profile = ModelProfile.from_config(args.config)
    hardware = engine.hardware()
    if hardware not in HARDWARE:      # a GPU the planner has no profile of: plan as on an H200
        print(f"no planner profile for {torch.cuda.get_device_name(engine.device)!r}; planning with h200's")
        hardware = "h200"
    prompts, outs, caps = mix(args, int(engine.model.embed.shape[0]), engine.context)
    print(f"{args.mix}: {len(prompts)} requests, {sum(map(len, prompts))} prompt and {int(outs.sum())} output tokens; "
          f"{args.config.name} random weights on {engine.device} ({engine.model.dtype}), KV pool "
          f"{engine.kv_capacity_tokens()} tokens, {engine.step_token_budget()} tokens a step, "
          f"{engine.max_running} running; planner profile {hardware}", flush=True)
    t = time.perf_counter()
    planned = orders(prompts, outs, caps, engine, profile, hardware, args.seed)
    print(f"planned in {time.perf_counter() - t:.1f} s", flush=True)
    warm = np.arange(min(len(prompts), 8))
    run(engine, prompts, np.minimum(outs, 16), warm)
    res = {}
    for policy in POLICIES:
        res[policy] = run(engine, prompts, outs, planned[policy])
        print(f"{policy}: {res[policy]['seconds']:.1f} s", flush=True)
    print(table(res))
    print(f"total {time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": res}, indent=1))
    return res


if __name__ == "__main__":
    main()
