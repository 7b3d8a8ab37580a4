"""`blendserve estimate FILE.jsonl`: how long a batch file will take, before it runs.

The file goes through the service's own validation and tokenizer (so a file
the service would refuse is refused here, with the same line errors, and a
request that would fail alone is listed and left out), then the
planner orders it under FCFS, DFS and BlendServe and the simulator runs each
order on a hardware profile. Output lengths are unknown before a run: each
request is assumed to produce ``--output-tokens`` (default 256) capped by its
max_tokens, and the bound where every request runs to max_tokens is printed
beside it. Data parallelism divides the time by ``--gpus`` (the planner cuts
ranks of equal estimated time; its imbalance is below 1%).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from blendserve.core.config import Settings
    from blendserve.core.engine_settings import CpuEngineSettings

POLICIES = ("fcfs", "dfs", "blendserve")
CPU_SAMPLE = 16     # a 1% sample of a small file is one request; 16 cost seconds on a CPU


def _parser() -> argparse.ArgumentParser:
    from blendserve.planner import HARDWARE

    p = argparse.ArgumentParser(prog="blendserve estimate", description=__doc__.split("\n")[0])
    p.add_argument("file", type=Path, help="an OpenAI batch input file (JSONL)")
    p.add_argument("--model", help="a served model name (BLENDSERVE_MODELS; default the first) or a checkpoint "
                                   "directory with config.json and a tokenizer")
    p.add_argument("--endpoint", default="/v1/chat/completions")
    p.add_argument("--gpu", default="h200", help=f"hardware profile: {', '.join(HARDWARE)}")
    p.add_argument("--gpus", type=int, default=1, help="data-parallel ranks (one per GPU)")
    p.add_argument("--output-tokens", type=float, default=256.0,
                   help="assumed mean output length per request, capped by its max_tokens (default 256), "
                        "where no sample is run")
    p.add_argument("--sample", type=int, default=None,
                   help="requests to run on this machine's CPU engine to learn output lengths "
                        f"(default {CPU_SAMPLE} with --gpu cpu, else 0: --output-tokens)")
    p.add_argument("--overlap", default="sequential", choices=("sequential", "nanoflow"),
                   help="engine overlap model: sequential for vLLM/SGLang (default), nanoflow for NanoFlow")
    p.add_argument("--remeasure", action="store_true",
                   help="with --gpu cpu: measure this machine's CPU engine again instead of its cached profile")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def _model(spec: str | None, settings: Settings) -> tuple[str, Path]:
    from blendserve.core.served import model_paths

    paths = model_paths(settings)
    if spec is None:
        return next(iter(paths.items()))
    if spec in paths:
        return spec, paths[spec]
    path = Path(spec)
    if (path / "config.json").exists():
        return path.name, path
    raise SystemExit(f"blendserve estimate: {spec!r} is neither a served model ({', '.join(paths)}) "
                     "nor a checkpoint directory with config.json")


def load(file: Path, endpoint: str, name: str, path: Path):
    """The file's requests as a planner Workload (prompt ids, max_tokens), their bodies, and the line errors:
    as the service does, a file-level error refuses the file (no workload) and a request's own error leaves
    that request out (its error listed) while the rest is estimated."""
    from blendserve.planner import Workload
    from blendserve.protocol.bodies import model_info
    from blendserve.scheduler.validation import LineError, context_error, tokenize_each, validate

    info = model_info(name, path)
    models = {name: info}
    with open(file, "rb") as f:
        found = list(validate(f, endpoint, models, max_lines=sys.maxsize))
    errors = [r for r in found if isinstance(r, LineError)]
    valid = [r for r in found if not isinstance(r, LineError)]
    if any(e.fails_file for e in errors):
        return None, [], [e for e in errors if e.fails_file]
    todo = [r for r in valid if r.prompt_ids is None]
    for i in range(0, len(todo), 256):
        group = todo[i:i + 256]
        for r, ids in zip(group, tokenize_each(endpoint, [r.body for r in group], info)):
            if isinstance(ids, Exception):
                errors.append(LineError(r.line, "tokenization_failed", f"The prompt could not be tokenized: {ids}",
                                        None, r.custom_id, r.model))
            else:
                r.prompt_ids = ids
    valid = [r for r in valid if r.prompt_ids is not None]
    errors += [e for e in (context_error(r, info) for r in valid) if e]
    failed = {e.line for e in errors}
    valid = [r for r in valid if r.line not in failed]
    errors.sort(key=lambda e: e.line)
    if not valid:
        return None, [], errors
    lens = np.array([len(r.prompt_ids) for r in valid], dtype=np.int64)
    return Workload(np.concatenate([np.asarray(r.prompt_ids, dtype=np.int32) for r in valid]),
                    np.concatenate([[0], np.cumsum(lens)]),
                    # n choices: n times the output of one (as completion_tokens and the service's planner count)
                    np.array([r.max_tokens * (r.body.get("n") or 1) for r in valid])), \
        [r.body for r in valid], errors


def sampled_lengths(w, bodies: list[dict], model_path: Path, name: str, count: int, seed: int = 0, *,
                    cpu: CpuEngineSettings, engine=None) -> np.ndarray:
    """Every request's output length: observed for a warm-up sample run on the CPU engine (``engine``, else
    one made with ``cpu``, its settings), the planner's per-subtree estimate for the rest. Each request runs
    with its own sampling parameters."""
    from blendserve.planner import PrefixTree, estimate_output_lengths, warmup_sample
    from blendserve.protocol.requests import sampling_params
    from blendserve.worker.engines.base import GenRequest

    tree = PrefixTree.build(w)
    sample = warmup_sample(w, min(1.0, count / w.n), seed=seed, tree=tree)
    engine = engine or _cpu_engine(model_path, name, cpu)
    requests = [GenRequest(int(i), w.tokens[w.offsets[i]:w.offsets[i + 1]].tolist(),
                           sampling_params(bodies[i], int(w.max_tokens[i]) // (bodies[i].get("n") or 1)))
                for i in sample]
    got = {r.key: r.completion_tokens for r in engine.generate(requests)}
    observed = np.array([got[int(i)] for i in sample], dtype=np.float64)
    return estimate_output_lengths(w, sample, observed, float(observed.mean()), tree=tree)


def _cpu_engine(model_path: Path, name: str, cpu: CpuEngineSettings):
    from blendserve.worker.engines.cpu import CpuEngine

    return CpuEngine(model_path, name, config=cpu)


def cpu_profile(settings: Settings, name: str, model_path: Path, engine=None, remeasure: bool = False):
    """This machine's CPU profile and where it came from: cached in the data dir under what it depends on
    (blendserve/worker/engines/cpu/calibrate.py), else measured now (seconds) and cached. ``engine``: a
    CpuEngine to measure on, else one is made."""
    from blendserve.planner import ModelProfile
    from blendserve.worker.engines.cpu import calibrate

    key = calibrate.machine_key(name, settings.cpu.threads, settings.cpu.native)
    path = calibrate.cache_path(settings.data_dir, key)
    cached = None if remeasure else calibrate.load(path)
    if cached is not None and cached[1].get("key") == key:
        profile, record = cached
        how = "cached"
    else:
        print(f"measuring the CPU engine's rates on this machine ({key['cpu']}, {key['threads']} threads), "
              "once; cached for the next estimate ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        profile = calibrate.measure(engine or _cpu_engine(model_path, name, settings.cpu),
                                    ModelProfile.from_config(model_path))
        record = calibrate.store(path, key, profile, time.perf_counter() - t0)
        how = "measured now"
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(record["measured_at"]))
    return profile, {"name": "cpu", "source": f"{how}: measured on this machine ({key['cpu']}, {key['threads']} "
                                              f"threads) at {when} in {record['seconds']} s", "path": str(path)}


def engine_config(gpu: str, model, overlap: str, cpu: CpuEngineSettings):
    """The simulated engine: a GPU engine's defaults, or for ``cpu`` the CPU engine's own settings
    (``CpuEngineSettings``: step budget, running cap, KV pool). The ``cpu`` profile's rates are measured on
    that engine, so no kernel efficiency is applied on top of them."""
    from blendserve.simulator.engine import EngineConfig

    if gpu != "cpu":
        return EngineConfig(overlap=overlap)
    from blendserve.worker.engines.cpu.model import default_dtype

    # The pool holds K/V in the weights' dtype (bfloat16 where the CPU has it); the profile counts bf16.
    kv_bytes = model.kv_bytes_per_token * (default_dtype().itemsize // 2)
    pool = int(cpu.kv_gb * 2**30 // kv_bytes) // cpu.block_size * cpu.block_size
    step = cpu.max_batched_tokens
    return EngineConfig(step_tokens=step, max_running=min(step, cpu.max_batch),
                        kv_capacity_tokens=pool, efficiency=1.0, overlap=overlap)


def estimate(w, model_path: Path, gpu: str, gpus: int, output_tokens: float, overlap: str, hw=None,
             lengths: np.ndarray | None = None, *, cpu: CpuEngineSettings) -> dict:
    """``hw``, when given, replaces the stored profile of ``gpu`` (a re-measured one, say); ``lengths``,
    when given, are the expected output lengths (sampled_lengths) in place of ``output_tokens``; ``cpu``:
    the CPU engine's settings, which the ``cpu`` profile simulates."""
    from blendserve.planner import HARDWARE, ModelProfile, Workload
    from blendserve.simulator.runner import run_workload

    model, hw = ModelProfile.from_config(model_path), hw or HARDWARE[gpu]
    config = engine_config(gpu, model, overlap, cpu)
    expected = np.minimum(w.max_tokens, output_tokens) if lengths is None else np.minimum(w.max_tokens, lengths)
    out: dict = {"requests": int(w.n), "prompt_tokens": int(w.offsets[-1]), "gpu": gpu, "gpus": gpus,
                 "assumed_output_tokens": round(float(expected.mean()), 1),
                 "output_tokens_from": "assumed" if lengths is None else "sample", "overlap": overlap, "policies": {}}
    cases = {"expected": expected, "all_to_max_tokens": w.max_tokens}
    for case, lengths in cases.items():
        lw = Workload(w.tokens, w.offsets, w.max_tokens, lengths.astype(np.float64))
        run = run_workload("file", lw, model, hw, list(POLICIES), config, lengths="oracle")
        for policy, r in run.runs.items():
            s = r.result.seconds / gpus
            out["policies"].setdefault(policy, {})[case] = {
                "seconds": s, "tokens_per_s": r.result.tokens_per_s * gpus, "gpu_hours": s * gpus / 3600}
    return out


def _duration(s: float) -> str:
    if s < 60:
        return f"{s:.2f} s"
    if s < 3600:
        return f"{s // 60:.0f} min {s % 60:.0f} s"
    return f"{s // 3600:.0f} h {s % 3600 / 60:.0f} min"


def _table(e: dict) -> str:
    rows = [f"{e['requests']:,} requests, {e['prompt_tokens']:,} prompt tokens on {e['gpus']} x {e['gpu']} "
            f"({e['overlap']} overlap); outputs {e['assumed_output_tokens']:.0f} tokens on average "
            f"({'from a sample run here' if e['output_tokens_from'] == 'sample' else 'assumed, capped by max_tokens'})",
            f"hardware profile {e['profile']['name']}: {e['profile']['source']}",
            f"{'order':<11} {'time':>14} {'tokens/s':>12} {'GPU-hours':>10}   if every request ran to max_tokens"]
    for policy, c in e["policies"].items():
        x, hi = c["expected"], c["all_to_max_tokens"]
        rows.append(f"{policy:<11} {_duration(x['seconds']):>14} {x['tokens_per_s']:>12,.0f} {x['gpu_hours']:>10.4g}"
                    f"   {_duration(hi['seconds'])}, {hi['gpu_hours']:.4g} GPU-h")
    return "\n".join(rows)


def main(argv: list[str], settings: Settings) -> int:
    """`blendserve estimate`: ``settings`` (served models, the CPU engine's) are parsed by blendserve/cli.py."""
    args = _parser().parse_args(argv)
    from blendserve.planner import HARDWARE

    if args.gpu not in HARDWARE or args.gpus < 1 or args.output_tokens <= 0 or (args.sample or 0) < 0:
        print(f"blendserve estimate: --gpu is one of {', '.join(HARDWARE)}; --gpus and --output-tokens > 0, "
              "--sample >= 0", file=sys.stderr)
        return 2
    name, path = _model(args.model, settings)
    w, bodies, errors = load(args.file, args.endpoint, name, path)
    for e in errors[:20]:
        alone = "" if e.fails_file or w is None else " (this request would fail alone; the rest is estimated)"
        print(f"line {e.line}: {e.code}: {e.message}{alone}", file=sys.stderr)
    if w is None:
        return 1
    count = args.sample if args.sample is not None else CPU_SAMPLE if args.gpu == "cpu" else 0
    engine = _cpu_engine(path, name, settings.cpu) if count > 0 or args.gpu == "cpu" else None
    hw, profile = None, {"name": args.gpu, "source": "stored (blendserve/planner/perf.py)"}
    if args.gpu == "cpu":
        hw, profile = cpu_profile(settings, name, path, engine, remeasure=args.remeasure)
    lengths = None
    if count > 0:
        print(f"running {min(count, w.n)} requests of the file on the CPU engine to learn output lengths ...",
              file=sys.stderr, flush=True)
        lengths = sampled_lengths(w, bodies, path, name, count, cpu=settings.cpu, engine=engine)
    e = estimate(w, path, args.gpu, args.gpus, args.output_tokens, args.overlap, hw, lengths=lengths,
                 cpu=settings.cpu)
    e["profile"] = profile
    print(json.dumps(e) if args.json else _table(e))
    return 0
