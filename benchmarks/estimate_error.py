"""Error of `blendserve estimate` against real runs of the service on CPU (issue 12, item 5: goal within 25%).

Three files of different shapes, generated here with a fixed seed from
benchmarks/prefix_mix.py's lines: `fewshot` (exam questions behind a few
~900-token few-shot prefixes, 1-2 token answers: prefill-heavy, mostly cached),
`longgen` (short prompts, long stories: decode-heavy) and `chat` (shared
system prompts, medium replies). For each:

* predicted: `blendserve estimate FILE --model SmolLM2 --gpu cpu` (the same
  functions the command runs, in this process), the blendserve order's
  expected time, which is the order the service plans. Outputs are assumed
  `--output-tokens` (256) capped by max_tokens, as the command does; the
  prediction is repeated with the mean output length the run actually
  produced, to tell the length guess from the performance model.
* actual: the file through a real deployment (API, scheduler, one CPU worker
  with SmolLM2, SQLite; benchmarks/harness.py), create -> completed, and the
  run phase alone (first claim -> last result), which is what the estimate
  models (it has no validation, planning or finalizing).

The `cpu` hardware profile (scheduler/planner/perf.py) was measured on the
2-core build machine with torch: a 2048 x 2048 bf16 matmul for FLOP/s and a
1 GiB tensor copy for bytes/s. `--measure` re-measures this machine the same
way, with the CPU engine's dtype and thread count, prints the profile, and
predicts with it too (column `measured`).

    PYTHONPATH=. .venv/bin/python benchmarks/estimate_error.py --measure            # the figure run
    PYTHONPATH=. .venv/bin/python benchmarks/estimate_error.py --smoke              # 8 tiny requests, one shape
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from benchmarks.harness import run_service
from benchmarks.prefix_mix import workload
from core.config import SMOLLM2, Settings
from core.served import model_paths
from tests.live import jsonl

SHAPES = {
    # name: prefix_mix.workload() keywords
    "fewshot": dict(subjects=4, exams=1.0, long=0.0),
    "longgen": dict(exams=0.0, long=1.0, long_tokens=128),
    "chat": dict(exams=0.0, long=0.0, chat_tokens=64),
}
REQUESTS = {"fewshot": 150, "longgen": 60, "chat": 120}   # about 1-3 minutes each on a quiet 2-core machine


def measure_cpu(seconds: float = 2.0) -> tuple[float, float]:
    """FLOP/s of a 2048^2 matmul and bytes/s of a 1 GiB copy (read + write counted), as the CPU engine runs."""
    import torch

    from worker.engines.cpu.engine import DEFAULT_THREADS
    from worker.engines.cpu.model import default_dtype

    torch.set_num_threads(DEFAULT_THREADS)
    n = 2048
    a, b = torch.randn(n, n, dtype=default_dtype()), torch.randn(n, n, dtype=default_dtype())
    a @ b
    t0, k = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        a @ b
        k += 1
    flops = 2.0 * n ** 3 * k / (time.perf_counter() - t0)
    x = torch.ones(2 ** 28, dtype=torch.float32)             # 1 GiB
    y = torch.empty_like(x)
    y.copy_(x)
    t0, k = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        y.copy_(x)
        k += 1
    return flops, 2.0 * x.numel() * 4 * k / (time.perf_counter() - t0)


def predict(path: Path, model_dir: Path, gpu: str, output_tokens: float) -> float:
    from blendserve.estimate import estimate, load

    w, errors = load(path, "/v1/chat/completions", SMOLLM2, model_dir)
    assert not errors, errors[:3]
    return estimate(w, model_dir, gpu, 1, output_tokens, "sequential")["policies"]["blendserve"]["expected"]["seconds"]


def error(predicted: float, actual: float) -> float:
    return round((predicted - actual) / actual, 3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--requests", type=int, help="requests per file (default: per shape, 60-150)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output-tokens", type=float, default=256.0, help="as `blendserve estimate` (default 256)")
    ap.add_argument("--measure", action="store_true", help="re-measure this CPU and predict with that profile too")
    ap.add_argument("--smoke", action="store_true", help="8 short requests of one shape: checks the wiring only")
    args = ap.parse_args()
    from scheduler.planner import HARDWARE
    from scheduler.planner.perf import HardwareProfile

    model_dir = model_paths(Settings())[SMOLLM2]
    models = f"{SMOLLM2}={model_dir}"
    shapes = args.shapes.split(",")
    if args.smoke:
        shapes, SHAPES["chat"] = ["chat"], dict(exams=0.0, long=0.0, chat_tokens=8)
    if args.measure:
        flops, bandwidth = measure_cpu()
        HARDWARE["measured"] = HardwareProfile("measured", flops, bandwidth, HARDWARE["cpu"].memory_bytes)
        print(json.dumps({"measured_profile": {"flops": f"{flops:.3g}", "bandwidth": f"{bandwidth:.3g}"},
                          "stored_cpu_profile": {"flops": f"{HARDWARE['cpu'].flops:.3g}",
                                                 "bandwidth": f"{HARDWARE['cpu'].bandwidth:.3g}"}}), flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="bs-estimate-"))
    results = []
    for shape in shapes:
        n = 8 if args.smoke else args.requests or REQUESTS[shape]
        rows = workload(n, args.seed, model=SMOLLM2, **SHAPES[shape])
        path = tmp / f"{shape}.jsonl"
        path.write_bytes(jsonl(rows))
        predicted = predict(path, model_dir, "cpu", args.output_tokens)
        r = run_service(rows, models)
        mean_out = (r.tokens - r.prompt) / n
        one = {"shape": shape, "requests": n, "prompt_tokens": r.prompt, "mean_output_tokens": round(mean_out, 1),
               "cached_share": round(r.cached_share, 3),
               "predicted_s": round(predicted, 1), "actual_whole_s": round(r.whole_s, 1),
               "actual_run_s": round(r.run_s, 1),
               "error_whole": error(predicted, r.whole_s), "error_run": error(predicted, r.run_s)}
        with_lengths = predict(path, model_dir, "cpu", max(mean_out, 1.0))
        one.update(predicted_with_actual_lengths_s=round(with_lengths, 1),
                   error_whole_with_actual_lengths=error(with_lengths, r.whole_s))
        if args.measure:
            m = predict(path, model_dir, "measured", max(mean_out, 1.0))
            one.update(predicted_measured_s=round(m, 1), error_whole_measured=error(m, r.whole_s))
        results.append(one)
        print(json.dumps(one), flush=True)
    worst = max(abs(r["error_whole"]) for r in results)
    print(json.dumps({"worst_abs_error_whole": worst, "goal_within_25pct": worst <= 0.25}))


if __name__ == "__main__":
    main()
