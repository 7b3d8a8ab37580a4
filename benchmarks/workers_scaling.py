"""1, 2 and 3 CPU workers on PostgreSQL on the same batch: run-phase tokens/s and imbalance.

Imbalance is max/mean - 1, of the tokens each worker processed and of the time
each took (batch's first claim to the worker's last result: the batch ends
when its slowest rank does). On the 2-core
build machine the workers share two cores, so this shows the claim protocol
and balance, not hardware scaling.

    PYTHONPATH=. .venv/bin/python benchmarks/workers_scaling.py --requests 96
"""
from __future__ import annotations

import argparse
import json

from benchmarks.deployment import pg_schema_url
from benchmarks.harness import run_service
from benchmarks.prefix_mix import workload
from blendserve.core.config import SMOLLM2, Settings
from blendserve.core.served import smollm2_checkpoint


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=96)
    ap.add_argument("--planner", default="blendserve")
    args = ap.parse_args()
    models = f"{SMOLLM2}={smollm2_checkpoint(Settings())}"
    rows = workload(args.requests, seed=1, subjects=24)
    for n in (1, 2, 3):
        r = run_service(rows, models, workers=n, db_url=pg_schema_url(), BLENDSERVE_PLANNER=args.planner,
                        BLENDSERVE_CHUNK_REQUESTS="8", BLENDSERVE_CPU_THREADS="1")
        loads = sorted(r.per_worker_tokens.values()) + [0] * (n - len(r.per_worker_tokens))
        ends = sorted(r.per_worker_finish_s.values()) + [0.0] * (n - len(r.per_worker_finish_s))
        print(json.dumps({"workers": n, "run_tok_s": round(r.run_tok_s, 1), "per_worker_tokens": loads,
                          "token_imbalance": round(max(loads) / (sum(loads) / n) - 1, 3),
                          "per_worker_s": [round(e, 1) for e in ends],
                          "time_imbalance": round(max(ends) / (sum(ends) / n) - 1, 3),
                          "cached_share": round(r.cached_share, 3)}), flush=True)


if __name__ == "__main__":
    main()
