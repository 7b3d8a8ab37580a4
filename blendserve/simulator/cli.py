"""`blendserve simulate`: plan a workload under each policy, simulate the orders, compare to the optimum.

main(argv) returns the exit status: 0 on success, 2 on bad arguments or input.
With --json, stdout carries exactly one JSON object (see runner.WorkloadRun.to_json).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from blendserve.planner import HARDWARE, MODELS, POLICIES, ModelProfile, Workload
from blendserve.simulator import workloads
from blendserve.simulator.engine import OVERLAPS, STEP_FILLS, EngineConfig
from blendserve.simulator.runner import LENGTH_MODES, WorkloadRun, run_workload


class _UsageError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="blendserve simulate",
        description="Plan a workload with each policy, simulate every order on a step-level engine model, "
                    "and report throughput against the optimum T* = max((1 - s_DFS) T_comp, T_mem + K W / B) "
                    "(docs/design.md §3.2) and the simulated engine's own bound.")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--workload", default="trace1",
                     help=f"preset: {', '.join(workloads.preset_names())}, or grid-r<rho>-s<sharing> (default trace1)")
    src.add_argument("--workload-file", type=Path,
                     help='JSONL, one request a line: {"input_ids": [...], "output_len": d, "max_tokens": m}')
    p.add_argument("--requests", type=int, default=50_000, help="requests per generated workload (default 50000)")
    p.add_argument("--model", default="llama-3.1-8b",
                   help=f"preset ({', '.join(MODELS)}) or a path to an HF config.json / model directory")
    p.add_argument("--gpu", default="a100-80gb", help=f"hardware preset: {', '.join(HARDWARE)}")
    p.add_argument("--policies", default=",".join(POLICIES), help=f"comma-separated subset of {','.join(POLICIES)}")
    p.add_argument("--plan-only", action="store_true", help="plan and time the planner; do not simulate")
    p.add_argument("--lengths", choices=LENGTH_MODES, default="estimate",
                   help="what BlendServe plans with: 1%% warm-up sample + estimates (default), or true lengths")
    p.add_argument("--step-tokens", type=int, default=EngineConfig.step_tokens,
                   help="engine token budget per step (decodes + prefill chunk); the planner paces to it "
                        f"(default {EngineConfig.step_tokens}: NanoFlow's dense batch, SGLang's chunk in our worker)")
    p.add_argument("--overlap", choices=OVERLAPS, default=EngineConfig.overlap,
                   help="nanoflow: step = max(compute, (W + KV) / B); sequential (vLLM, SGLang): "
                        "max(compute, W / B) + KV / B (default nanoflow)")
    p.add_argument("--step-fill", choices=STEP_FILLS, default=EngineConfig.step_fill,
                   help="budget (vLLM, SGLang, NanoFlow): a step takes prefill up to --step-tokens; balanced "
                        "(nanoflow only): only the tokens that hide under the step's weight and KV reads "
                        "(default budget)")
    p.add_argument("--lead-tokens", type=int, default=0,
                   help="tokens of a per-dataset marker opening every generated prompt (default 0: none, "
                        "as in the paper's datasets)")
    p.add_argument("--max-running", type=int,
                   help=f"engine running-request cap (default min({EngineConfig.max_running}, --step-tokens))")
    p.add_argument("--kv-capacity-gb", type=float, help="KV pool in GB (default: device memory x 0.95 - weights)")
    p.add_argument("--efficiency", type=float, default=EngineConfig.efficiency,
                   help="kernel efficiency vs roofline (default 0.94, the paper's Table 1 bound)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", type=Path, help="write utilisation over time per policy to this PNG")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    return p


def _model(spec: str) -> ModelProfile:
    if spec in MODELS:
        return MODELS[spec]
    path = Path(spec)
    if path.exists():
        return ModelProfile.from_config(path)
    raise _UsageError(f"unknown model {spec!r}: use one of {', '.join(MODELS)} or a config.json path")


def read_workload_file(path: Path) -> Workload:
    """One request a line: input_ids (list of ints), output_len (> 0), max_tokens (optional, >= 1)."""
    prompts: list[list[int]] = []
    outs: list[float] = []
    caps: list[int] = []
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise _UsageError(f"cannot read {path}: {e.strerror}") from None
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            ids, d = row["input_ids"], float(row["output_len"])
            m = int(row.get("max_tokens", max(int(np.ceil(d)), 1)))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise _UsageError(f"{path}:{no}: expected {{\"input_ids\": [...], \"output_len\": d, "
                              f"\"max_tokens\": m}} ({e})") from None
        if not isinstance(ids, list) or not all(isinstance(t, int) and t >= 0 for t in ids):
            raise _UsageError(f"{path}:{no}: input_ids must be a list of non-negative ints")
        if d <= 0 or m < 1:
            raise _UsageError(f"{path}:{no}: output_len must be > 0 and max_tokens >= 1")
        prompts.append(ids)
        outs.append(d)
        caps.append(m)
    if not prompts:
        raise _UsageError(f"{path}: no requests")
    return Workload.from_lists(prompts, caps, outs)


class _Progress:
    """A one-line progress bar on stderr (only when stderr is a terminal)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.last = -1

    def __call__(self, policy: str, fraction: float) -> None:
        pct = int(fraction * 100)
        if pct == self.last:
            return
        self.last = pct
        bar = "#" * (pct // 4)
        sys.stderr.write(f"\r{self.label} {policy:<10} [{bar:<25}] {pct:3d}%")
        if pct >= 100:
            sys.stderr.write("\n")
            self.last = -1
        sys.stderr.flush()


def _table(run: WorkloadRun) -> str:
    j = run.to_json()
    head = (f"{j['name']}: {j['requests']} requests, density {j['density']:.3f}, DFS sharing "
            f"{j['dfs_sharing_ratio']:.3f}, overlap {j['overlap']}, {j['step_tokens']}-token steps "
            f"({j['step_fill']} fill)\n"
            f"  optimum T* {j['optimal_tokens_per_s']:,.0f} tokens/s, engine bound "
            f"{j['engine_bound_tokens_per_s']:,.0f} tokens/s (T_o without weight reads "
            f"{j['ideal_tokens_per_s']:,.0f})")
    lines = [head, f"  {'policy':<11}{'tokens/s':>12}{'of T*':>9}{'of bound':>9}{'sharing':>9}{'vs DFS':>8}"
                   f"{'plan s':>8}"]

    def fmt(v, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    for name, p in j["policies"].items():
        lines.append(f"  {name:<11}{fmt(p['tokens_per_s'], ',.0f'):>12}{fmt(p['fraction_of_optimal'], '.1%'):>9}"
                     f"{fmt(p['fraction_of_engine_bound'], '.1%'):>9}"
                     f"{fmt(p['sharing_ratio'], '.3f'):>9}{fmt(p['sharing_vs_dfs'], '.3f'):>8}"
                     f"{fmt(p['plan_seconds'], '.2f'):>8}"
                     + (f"  ({p['dfs_direction']})" if 'dfs_direction' in p else ""))
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    bad = [p for p in policies if p not in POLICIES]
    if bad or not policies:
        raise _UsageError(f"unknown policies {bad}: choose from {', '.join(POLICIES)}")
    if args.gpu not in HARDWARE:
        raise _UsageError(f"unknown gpu {args.gpu!r}: use one of {', '.join(HARDWARE)}")
    if args.requests < 1:
        raise _UsageError("--requests must be at least 1")
    if args.plot and args.plan_only:
        raise _UsageError("--plot needs a simulation: drop --plan-only")
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise _UsageError("--plot needs matplotlib: pip install 'blendserve[plot]'") from None
    model, hw = _model(args.model), HARDWARE[args.gpu]
    kv_tokens = None if args.kv_capacity_gb is None else int(args.kv_capacity_gb * 1e9 / model.kv_bytes_per_token)
    max_running = args.max_running if args.max_running is not None else min(EngineConfig.max_running, args.step_tokens)
    config = EngineConfig(step_tokens=args.step_tokens, max_running=max_running,
                          kv_capacity_tokens=kv_tokens, efficiency=args.efficiency, overlap=args.overlap,
                          step_fill=args.step_fill)
    if config.capacity(model, hw) < 1:
        raise _UsageError(f"{model.name} leaves no KV memory on {hw.name}: pass --kv-capacity-gb")

    if args.workload_file:
        sources = [(args.workload_file.stem, None)]
    else:
        names = workloads.expand(args.workload)
        sources = [(name, name) for name in names]
    show = not args.json and sys.stderr.isatty()
    results: list[WorkloadRun] = []
    for i, (name, preset) in enumerate(sources):
        t0 = time.perf_counter()
        w = read_workload_file(args.workload_file) if preset is None else \
            workloads.generate(preset, args.requests, seed=args.seed, model=model, hw=hw, lead=args.lead_tokens)
        label = f"[{i + 1}/{len(sources)}] {name}" if len(sources) > 1 else name
        run = run_workload(name, w, model, hw, policies, config, seed=args.seed, plan_only=args.plan_only,
                           lengths=args.lengths, progress=_Progress(label) if show else None)
        results.append(run)
        if not args.json:
            print(_table(run))
            print(f"  ({time.perf_counter() - t0:.1f} s)", flush=True)
    if args.plot:
        from blendserve.simulator.plot import plot_utilisation
        plot_utilisation(results, args.plot)
        if not args.json:
            print(f"utilisation plot: {args.plot}")
    if args.json:
        print(json.dumps({"workloads": [r.to_json() for r in results]}))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of `blendserve simulate` and `python -m blendserve.simulator`."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except (_UsageError, ValueError) as e:
        print(f"blendserve simulate: error: {e}", file=sys.stderr)
        return 2
