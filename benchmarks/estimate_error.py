"""Error of `blendserve estimate` against real runs of the service on CPU (goal: within 25%).

Three files of different shapes, generated here with a fixed seed from
benchmarks/prefix_mix.py's lines: `fewshot` (exam questions behind a few
~900-token few-shot prefixes, 1-2 token answers: prefill-heavy, mostly cached),
`longgen` (short prompts, long stories: decode-heavy) and `chat` (shared
system prompts, medium replies). For each:

* predicted: `blendserve estimate FILE --model SmolLM2 --gpu cpu` (the same
  functions the command runs, in this process, before the service starts):
  the blendserve order's expected time, which is the order the service plans,
  with output lengths from the command's default sample (16 requests of the
  file run on the CPU engine, the rest estimated per prefix subtree). Beside
  it: the prediction with lengths assumed (`--sample 0`: `--output-tokens`
  capped by max_tokens) and with the run's true mean output length, which
  tell the length estimate's error from the performance model's.
* actual: the file through a real deployment (API, scheduler, one CPU worker
  with SmolLM2, SQLite; benchmarks/harness.py), create -> completed, and the
  run phase alone (first claim -> last result).

`--measure` measures the CPU engine's own rates on this machine, as
`blendserve estimate --gpu cpu` does on first use (synthetic decodes, prefills
and prefix-cached chunks, never the files judged here), prints that profile,
and predicts with it too (column `measured`); the stored `cpu` profile
(blendserve/planner/perf.py) is the planner's default for CPU workers.

    PYTHONPATH=. .venv/bin/python benchmarks/estimate_error.py --measure            # the figure run
    PYTHONPATH=. .venv/bin/python benchmarks/estimate_error.py --smoke              # 8 tiny requests, one shape
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from benchmarks.harness import run_service
from benchmarks.prefix_mix import workload
from blendserve.core.config import SMOLLM2, Settings
from blendserve.core.served import smollm2_checkpoint
from blendserve.planner.perf import HardwareProfile
from tests.harness.deployment import jsonl

SHAPES = {
    # name: prefix_mix.workload() keywords
    "fewshot": dict(subjects=4, exams=1.0, long=0.0),
    "longgen": dict(exams=0.0, long=1.0, long_tokens=128),
    "chat": dict(exams=0.0, long=0.0, chat_tokens=64),
}
REQUESTS = {"fewshot": 150, "longgen": 60, "chat": 120}   # about 1-3 minutes each on a quiet 2-core machine


def measure_cpu(model_dir: Path) -> HardwareProfile:
    """The CPU engine's own rates on this machine: what `blendserve estimate --gpu cpu` measures and caches
    (blendserve/worker/engines/cpu/calibrate.py), measured afresh."""
    from blendserve.core.engine_settings import CpuEngineSettings
    from blendserve.planner.perf import ModelProfile
    from blendserve.worker.engines.cpu import CpuEngine
    from blendserve.worker.engines.cpu.calibrate import measure

    return measure(CpuEngine(model_dir, SMOLLM2, config=CpuEngineSettings()), ModelProfile.from_config(model_dir))


def _profile(hw: HardwareProfile) -> dict:
    keys = ("flops", "bandwidth", "step_overhead", "seq_overhead", "chunk_overhead")
    return {k: f"{getattr(hw, k):.3g}" for k in keys}


def predict(path: Path, model_dir: Path, output_tokens: float | None, hw: HardwareProfile | None = None) -> float:
    """`blendserve estimate --gpu cpu`'s blendserve time: with output lengths from its default sample run
    (``output_tokens`` None) or assumed ``output_tokens``; ``hw`` in place of the stored profile."""
    from blendserve.estimate import CPU_SAMPLE, estimate, load, sampled_lengths

    w, bodies, errors = load(path, "/v1/chat/completions", SMOLLM2, model_dir)
    assert not errors, errors[:3]
    cpu = Settings().cpu
    lengths = sampled_lengths(w, bodies, model_dir, SMOLLM2, CPU_SAMPLE, cpu=cpu) if output_tokens is None else None
    e = estimate(w, model_dir, "cpu", 1, output_tokens or 0.0, "sequential", hw, lengths, cpu=cpu)
    return e["policies"]["blendserve"]["expected"]["seconds"]


def error(predicted: float, actual: float) -> float:
    return round((predicted - actual) / actual, 3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--requests", type=int, help="requests per file (default: per shape, 60-150)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output-tokens", type=float, default=256.0,
                    help="the assumed length of the no-sample column, as `blendserve estimate --sample 0` "
                         "(default 256)")
    ap.add_argument("--measure", action="store_true", help="re-measure this CPU and predict with that profile too")
    ap.add_argument("--smoke", action="store_true", help="8 short requests of one shape: checks the wiring only")
    args = ap.parse_args()
    from blendserve.planner import HARDWARE

    model_dir = smollm2_checkpoint(Settings())
    models = f"{SMOLLM2}={model_dir}"
    shapes = args.shapes.split(",")
    if args.smoke:
        shapes, SHAPES["chat"] = ["chat"], dict(exams=0.0, long=0.0, chat_tokens=8)
    if args.measure:
        measured = measure_cpu(model_dir)
        print(json.dumps({"measured_profile": _profile(measured), "stored_cpu_profile": _profile(HARDWARE["cpu"])}),
              flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="bs-estimate-"))
    results = []
    for shape in shapes:
        n = 8 if args.smoke else args.requests or REQUESTS[shape]
        rows = workload(n, args.seed, model=SMOLLM2, **SHAPES[shape])
        path = tmp / f"{shape}.jsonl"
        path.write_bytes(jsonl(rows))
        predicted = predict(path, model_dir, None)                 # what `blendserve estimate --gpu cpu` prints
        assumed = predict(path, model_dir, args.output_tokens)     # ... with --sample 0
        r = run_service(rows, models)
        mean_out = (r.tokens - r.prompt) / n
        one = {"shape": shape, "requests": n, "prompt_tokens": r.prompt, "mean_output_tokens": round(mean_out, 1),
               "cached_share": round(r.cached_share, 3),
               "predicted_s": round(predicted, 1), "actual_whole_s": round(r.whole_s, 1),
               "actual_run_s": round(r.run_s, 1),
               "error_whole": error(predicted, r.whole_s), "error_run": error(predicted, r.run_s)}
        with_lengths = predict(path, model_dir, max(mean_out, 1.0))
        one.update(predicted_assumed_lengths_s=round(assumed, 1), error_whole_assumed_lengths=error(assumed, r.whole_s),
                   predicted_with_actual_lengths_s=round(with_lengths, 1),
                   error_whole_with_actual_lengths=error(with_lengths, r.whole_s))
        if args.measure:
            m = predict(path, model_dir, max(mean_out, 1.0), measured)
            one.update(predicted_measured_s=round(m, 1), error_whole_measured=error(m, r.whole_s))
        results.append(one)
        print(json.dumps(one), flush=True)
    worst = max(abs(r["error_whole"]) for r in results)
    print(json.dumps({"worst_abs_error_whole": worst, "goal_within_25pct": worst <= 0.25}))


if __name__ == "__main__":
    main()
